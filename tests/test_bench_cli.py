"""`python -m bench`: burners that start with a bench and never outlive it; a full run's
two passes and the run's identity in every result."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import bench
import bench.__main__ as bench_main
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


# --- a full run, on fake benches in a test-only package path (no real, slow bench) ---

FAKE_FAST = """
UNDER_LOAD = True


def run(quick=False):
    return {"figure": 1.5, "quick": quick}
"""
FAKE_QUIET_ONLY = """
def run(quick=False):
    return {"figure": 2}
"""
FAKE_BROKEN = """
def run(quick=False):
    raise ValueError("the arm went away")
"""
FAKE_BY_NAME = """
IN_FULL_RUN = False


def run(quick=False):
    return {"figure": 3}
"""


@pytest.fixture
def fake_benches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """``bench`` sees only three fake modules; burners are recorded, not started."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    fakes = (
        ("fast", FAKE_FAST),
        ("quietonly", FAKE_QUIET_ONLY),
        ("broken", FAKE_BROKEN),
        ("byname", FAKE_BY_NAME),
    )
    for name, src in fakes:
        (pkg / f"bench_{name}.py").write_text(src)
        sys.modules.pop(f"bench.bench_{name}", None)
    monkeypatch.setattr(bench, "__path__", [str(pkg)])
    seen: list[int] = []

    @contextlib.contextmanager
    def burners(n: int) -> Iterator[list[Any]]:
        seen.append(n)
        yield []

    monkeypatch.setattr(bench_main, "cpu_burners", burners)
    yield {"results": tmp_path / "results", "burners": seen}
    for name, _src in fakes:
        sys.modules.pop(f"bench.bench_{name}", None)


def _read(results: Path) -> dict[str, dict[str, Any]]:
    return {p.name.removesuffix(".json"): json.loads(p.read_text()) for p in results.glob("*.json")}


def test_a_full_run_is_quiet_then_under_load_for_the_under_load_benches(
    fake_benches: dict[str, Any],
) -> None:
    results = fake_benches["results"]
    rc = bench_main.main(["--results", str(results)])
    assert rc == 1  # one bench failed: the run says so
    got = _read(results)
    # byname says IN_FULL_RUN = False: only when named
    assert sorted(got) == ["broken", "fast", "fast.under_load", "quietonly"]
    n = os.cpu_count() or 2
    assert fake_benches["burners"] == [0, 0, 0, n]  # quiet pass, then the one UNDER_LOAD bench
    assert got["fast"]["figure"] == 1.5 and got["fast"]["_cpu_burners"] == 0
    assert got["fast.under_load"]["_cpu_burners"] == n
    assert "ValueError: the arm went away" in got["broken"]["_failed"]
    run_ids = {r["_run_id"] for r in got.values()}
    assert len(run_ids) == 1  # one invocation, one id in every result
    rid = run_ids.pop()
    assert re.fullmatch(r"\d{8}T\d{6}Z-([0-9a-f]{4,}(-dirty)?|unknown)", rid), rid
    for r in got.values():
        assert r["_command"] == f"python -m bench --results {results}"
        assert rid.endswith(r["_git_rev"])
        assert r["_date_utc"].endswith("+00:00")
        assert r["_under_load_pass"] is True
        assert len(r["_loadavg_1m"]) == 2


def test_no_under_load_skips_the_second_pass(fake_benches: dict[str, Any]) -> None:
    results = fake_benches["results"]
    assert bench_main.main(["fast", "quietonly", "--no-under-load", "--results", str(results)]) == 0
    got = _read(results)
    assert sorted(got) == ["fast", "quietonly"]
    assert fake_benches["burners"] == [0, 0]
    assert got["fast"]["_under_load_pass"] is False


def test_named_benches_run_quiet_only_and_under_load_explicitly(
    fake_benches: dict[str, Any],
) -> None:
    results = fake_benches["results"]
    assert bench_main.main(["fast", "--quick", "--results", str(results)]) == 0
    assert sorted(_read(results)) == ["fast"]  # names given: no second pass
    assert _read(results)["fast"]["quick"] is True and _read(results)["fast"]["_quick"] is True
    assert bench_main.main(["quietonly", "--under-load", "3", "--results", str(results)]) == 0
    got = _read(results)
    assert sorted(got) == ["fast", "quietonly.under_load"]
    assert got["quietonly.under_load"]["_cpu_burners"] == 3
    assert fake_benches["burners"] == [0, 3]
    assert bench_main.main(["byname", "--results", str(results)]) == 0
    assert _read(results)["byname"]["figure"] == 3


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (an orphan's exit is reaped by init, later)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_burner_ends_by_itself_when_its_bench_dies_without_cleaning_up() -> None:
    """Burners live in sessions of their own (programs beside the rig), so no signal to the
    bench's group reaches them: they watch their parent instead."""
    code = (
        "import os\n"
        "from bench.__main__ import cpu_burners\n"
        "with cpu_burners(1) as procs:\n"
        "    print(procs[0].pid, flush=True)\n"
        "    os._exit(0)  # killed: the block's cleanup never runs\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO, timeout=120
    )
    pid = int(out.stdout.split()[0])
    for _ in range(1200):  # bounded: it checks its parent every few million iterations
        if not _running(pid):
            break
        time.sleep(0.05)
    assert not _running(pid), f"burner {pid} outlived its bench"


@pytest.mark.slow
def test_the_observer_bench_refuses_an_unknown_observer_before_running_anything() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.bench_observer", "--only", "camera"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "invalid choice: 'camera'" in proc.stderr and "recorder" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "bench.bench_observer", "--only"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and "expected one argument" in proc.stderr
