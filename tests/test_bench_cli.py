"""`python -m bench --under-load`: burners that start with a bench and never outlive it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.__main__ import cpu_burners

REPO = Path(__file__).resolve().parents[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_burners_run_during_the_block_and_are_gone_after_it_even_on_an_error() -> None:
    pids: list[int] = []
    try:
        with cpu_burners(2) as procs:
            pids = [p.pid for p in procs]
            assert all(p.poll() is None for p in procs)  # busy, not exited
            raise RuntimeError("a bench failed")
    except RuntimeError:
        pass
    assert len(pids) == 2
    assert not any(_alive(pid) for pid in pids)


def test_a_negative_under_load_is_a_clear_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "lookup", "--under-load", "-1"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "--under-load takes a number of processes >= 0, got -1" in proc.stderr
    assert "Traceback" not in proc.stderr
