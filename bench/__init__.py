"""Benchmarks: `make bench` runs every bench/bench_*.py module.

Each module defines ``run(quick: bool = False) -> dict`` returning its figures
(each target compared against a baseline measured in the same run, with the
ratio). Results are printed and written to bench/results/<name>.json.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any, NamedTuple


class Row(NamedTuple):
    """One line of the docs' benchmark table, built by a bench module's ``rows(result)``."""

    area: str
    figure: str
    result: str
    target: str
    baseline: str


def median_ms(fn: Callable[[], Any], n: int) -> float:
    """Median wall time of ``n`` calls of ``fn``, in milliseconds (the benches' one timer)."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000.0
