"""Benchmarks: `make bench` runs every bench/bench_*.py module, then renders docs/benchmarks.md.

Each module defines ``run(quick: bool = False) -> dict`` returning its figures
(each target compared against a baseline measured in the same run, with the
ratio) and ``rows(result) -> list[Row]``, the lines of the docs' table built from
that dict; ``UNDER_LOAD = True`` has it run a second time beside CPU burners.
Results are printed and written to bench/results/<name>.json (bench/report.py
reads them back).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple


class Row(NamedTuple):
    """One line of docs/benchmarks.md's table: short human strings from one result dict."""

    area: str
    figure: str
    result: str
    target: str
    baseline: str


def has(result: dict[str, Any], *keys: str) -> bool:
    """Whether every key is in ``result`` and not None: a row whose figures a quick run
    left out is skipped, never a KeyError."""
    return all(result.get(k) is not None for k in keys)


def median_ms(fn: Callable[[], Any], n: int) -> float:
    """Median wall time of ``n`` calls of ``fn``, in milliseconds (the benches' one timer)."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000.0


def process_cpu_s(pid: int) -> float:
    """utime + stime of a process (all its threads) from /proc; NaN where there is no /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
