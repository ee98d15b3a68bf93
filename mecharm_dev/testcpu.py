"""Where the suite's CPU goes, per test file (docs/testing.md, "Where the CPU goes").

A pytest plugin and its report. With ``-p mecharm_dev.testcpu`` each pytest process (each
xdist worker) appends one JSON line per test to ``$MECHARM_TESTCPU_DIR/<worker>.jsonl``:
the CPU the worker itself used during the test (setup, call, teardown) and the CPU of
the child processes it reaped meanwhile, with the wall time and the wall-clock time it
started (``start``: lines the run up with a CPU sampler's timeline). With ``--dist loadfile`` a
file runs on one worker, so a module fixture's processes (a simulated rig, reaped at the
module's end) land on that file's last test but still in that file. Processes nobody
reaps (a demo's detached view builders) are not counted.

    MECHARM_TESTCPU_DIR=$PWD/testcpu-out PYTEST_PLUGINS=mecharm_dev.testcpu make test
    python -m mecharm_dev.testcpu testcpu-out
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path
from typing import Any, TextIO

import pytest

_ENV = "MECHARM_TESTCPU_DIR"
_out: TextIO | None = None


def _now() -> tuple[float, float, float]:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime, time.monotonic()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None]:
    global _out
    folder = os.environ.get(_ENV)
    if not folder:
        yield
        return
    if _out is None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        _out = open(Path(folder) / f"{worker}.jsonl", "a", encoding="utf-8")  # noqa: SIM115
    before, started = _now(), time.time()
    yield
    after = _now()
    row = {
        "id": item.nodeid,
        "start": round(started, 3),
        "self_s": round(after[0] - before[0], 3),
        "children_s": round(after[1] - before[1], 3),
        "wall_s": round(after[2] - before[2], 3),
    }
    _out.write(json.dumps(row) + "\n")
    _out.flush()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Close this process's rows file (left open, Python warns about it at exit)."""
    global _out
    if _out is not None:
        _out.close()
        _out = None


def report(folder: Path, top: int = 20) -> str:
    """The files that used the most CPU, then the tests."""
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    tests: list[tuple[float, float, str]] = []
    for path in sorted(folder.glob("*.jsonl")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            try:
                row: dict[str, Any] = json.loads(line)
                cpu_self, cpu_kids = float(row["self_s"]), float(row["children_s"])
                wall, test = float(row["wall_s"]), str(row["id"])
            except (ValueError, KeyError, TypeError) as exc:
                raise SystemExit(
                    f"{path}:{n}: not a testcpu line ({exc}); remove the file"
                ) from None
            acc = files[test.split("::")[0]]
            acc[0] += cpu_self
            acc[1] += cpu_kids
            acc[2] += wall
            tests.append((cpu_self + cpu_kids, wall, test))
    if not tests:
        raise SystemExit(f"{folder}: no *.jsonl lines; run pytest with -p mecharm_dev.testcpu")
    total = sum(a + b for a, b, _ in files.values())
    lines = [f"{len(tests)} tests, {total:.0f} s of CPU counted", "", "| CPU s | worker | children | wall s | file |", "|---:|---:|---:|---:|---|"]  # fmt: skip
    for name, (a, b, w) in sorted(files.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:top]:
        lines.append(f"| {a + b:.1f} | {a:.1f} | {b:.1f} | {w:.1f} | `{name}` |")
    lines += ["", "| CPU s | wall s | test |", "|---:|---:|---|"]
    for cpu, wall, test in sorted(tests, reverse=True)[:top]:
        lines.append(f"| {cpu:.1f} | {wall:.1f} | `{test}` |")
    return "\n".join(lines)


def _rows(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of rows >= 1, got {text!r}")
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mecharm_dev.testcpu", description=__doc__.split("\n\n")[0])  # fmt: skip
    ap.add_argument("folder", type=Path, help="the MECHARM_TESTCPU_DIR of a run")
    ap.add_argument("--top", type=_rows, default=20, help="rows per table (default 20)")
    args = ap.parse_args(argv)
    if not args.folder.is_dir():
        print(f"{args.folder}: no such folder", file=sys.stderr)
        return 2
    print(report(args.folder, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
