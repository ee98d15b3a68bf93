"""Run the benchmarks: ``python -m bench [name ...] [--quick] [--under-load [N]] [--no-under-load]``.

A full run (no names, no ``--under-load``) runs every bench quiet, then once more each bench
whose module says ``UNDER_LOAD = True`` with one CPU-bound process per core beside it, so
the hot paths' figures and their baselines are also measured with the cores busy, as on an
operator's computer that is never idle; those results go to ``{name}.under_load.json``.
``--under-load [N]`` runs the named benches (or all) under load only. Every result carries
the invocation's run id, date, git revision and command line, so that bench/report.py can
render docs/benchmarks.md from one run and refuse a mix (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import pkgutil
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import bench

RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parents[1]


#: a CPU-bound process: a pure-Python busy loop, like a browser tab or a viewer at full tilt;
#: it ends by itself once the bench that started it is gone (killed before its cleanup ran)
BURNER = (
    "import os, sys\n"
    "parent, n = int(sys.argv[1]), 0\n"
    "while n != -1:\n"
    "    n += 1\n"
    "    if n % 5_000_000 == 0 and os.getppid() != parent:\n"
    "        break\n"
)


@contextlib.contextmanager
def cpu_burners(n: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``n`` busy-loop processes for the duration of the block; always stopped after it."""
    # each in a session of its own, as programs beside the rig are (a browser, a viewer)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BURNER, str(os.getpid())],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # holds no pipe of the caller's open
        )
        for _ in range(n)
    ]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def git_rev() -> str:
    """The checkout's short revision, ``-dirty`` when the tree has changes; ``unknown``
    outside a git checkout."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        rev = git("rev-parse", "--short", "HEAD")
        dirty = bool(git("status", "--porcelain"))
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{rev}-dirty" if dirty else rev


def run_meta(argv: list[str]) -> dict[str, Any]:
    """What every result of one invocation shares: its id, date, revision, command, machine."""
    now = datetime.now(UTC)
    rev = git_rev()
    return {
        "_run_id": f"{now:%Y%m%dT%H%M%SZ}-{rev}",
        "_date_utc": now.isoformat(timespec="seconds"),
        "_git_rev": rev,
        "_command": shlex.join(["python", "-m", "bench", *argv]),
        "_cpu_count": os.cpu_count(),
        "_platform": platform.platform(),
    }


def bench_names() -> list[str]:
    """Every ``bench_*`` module of the package, without the prefix."""
    return sorted(
        m.name[len("bench_") :]
        for m in pkgutil.iter_modules(bench.__path__)
        if m.name.startswith("bench_")
    )


def full_run_names() -> list[str]:
    """The benches a full run (no names given) runs: all but those whose module says
    ``IN_FULL_RUN = False`` (run by name only; their figure is another bench's too)."""
    return [
        n
        for n in bench_names()
        if getattr(importlib.import_module(f"bench.bench_{n}"), "IN_FULL_RUN", True)
    ]


def run_one(name: str, quick: bool, burners: int, meta: dict[str, Any], results: Path) -> bool:
    """Run one bench beside ``burners`` CPU burners and write its result (or its failure)."""
    mod = importlib.import_module(f"bench.bench_{name}")
    label = f"{name} beside {burners} CPU burners" if burners else name
    print(f"== bench {label}", flush=True)
    t0 = time.perf_counter()
    try:
        with cpu_burners(burners):
            load_at_start = os.getloadavg()[0]
            result = mod.run(quick=quick)
            load_at_end = os.getloadavg()[0]
    except Exception as exc:  # report and go on with the others
        print(f"   FAILED: {type(exc).__name__}: {exc}", flush=True)
        result = {"_failed": f"{type(exc).__name__}: {exc}"}
        load_at_start = load_at_end = os.getloadavg()[0]
    ok = "_failed" not in result
    if ok:
        for key, value in result.items():
            print(f"   {key}: {value}")
    result["_elapsed_s"] = round(time.perf_counter() - t0, 2)
    result["_cpu_burners"] = burners
    result["_loadavg_1m"] = [round(load_at_start, 2), round(load_at_end, 2)]
    result["_quick"] = quick
    result.update(meta)
    print(f"   ({result['_elapsed_s']} s, load average {result['_loadavg_1m']})", flush=True)
    stem = f"{name}.under_load" if burners else name
    (results / f"{stem}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    return ok


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    names = bench_names()
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument(
        "names", nargs="*", choices=[*names, []], help="benchmarks to run (default all)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="shorter runs (smoke check, figures noisier)"
    )
    parser.add_argument(
        "--under-load",
        nargs="?",
        type=int,
        const=os.cpu_count() or 2,
        default=None,
        metavar="N",
        help="run the benches only beside N CPU-bound processes (default N: one per core)",
    )
    parser.add_argument(
        "--no-under-load",
        action="store_true",
        help="a full run without its second pass beside CPU burners",
    )
    parser.add_argument(
        "--results", type=Path, default=RESULTS, help=f"where the JSON goes (default {RESULTS})"
    )
    args = parser.parse_args(argv)
    if args.under_load is not None and args.under_load < 0:
        parser.error(f"--under-load takes a number of processes >= 0, got {args.under_load}")
    args.results.mkdir(parents=True, exist_ok=True)
    meta = run_meta(argv)
    plan: list[tuple[str, int]]
    chosen = args.names or full_run_names()
    if args.under_load is not None:  # an explicit run: these benches, beside N burners
        plan = [(name, args.under_load) for name in chosen]
    else:
        plan = [(name, 0) for name in chosen]
        if not args.names and not args.no_under_load:  # the full run's second pass
            burners = os.cpu_count() or 2
            plan += [
                (name, burners)
                for name in chosen
                if getattr(importlib.import_module(f"bench.bench_{name}"), "UNDER_LOAD", False)
            ]
    meta["_under_load_pass"] = any(burners for _, burners in plan)
    ok = [run_one(name, args.quick, burners, meta, args.results) for name, burners in plan]
    print(f"results in {args.results} (run {meta['_run_id']})")
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
