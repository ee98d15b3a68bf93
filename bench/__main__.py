"""Run the benchmarks: ``python -m bench [name ...] [--quick] [--under-load [N]]``.

``--under-load`` runs N CPU-bound processes (default: one per core) beside every bench,
so each figure and its baseline are measured with the cores busy, as on an operator's
computer that is never idle; results go to ``{name}.under_load.json`` beside the quiet
ones (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import pkgutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import bench

RESULTS = Path(__file__).resolve().parent / "results"


#: a CPU-bound process: a pure-Python busy loop, like a browser tab or a viewer at full tilt
BURNER = "while True: pass"


@contextlib.contextmanager
def cpu_burners(n: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``n`` busy-loop processes for the duration of the block; always stopped after it."""
    procs = [subprocess.Popen([sys.executable, "-c", BURNER]) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def main() -> int:
    names = sorted(
        m.name[len("bench_") :]
        for m in pkgutil.iter_modules(bench.__path__)
        if m.name.startswith("bench_")
    )
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
        default=0,
        metavar="N",
        help="run N CPU-bound processes beside every bench (default N: one per core)",
    )
    args = parser.parse_args()
    if args.under_load < 0:
        parser.error(f"--under-load takes a number of processes >= 0, got {args.under_load}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in args.names or names:
        mod = importlib.import_module(f"bench.bench_{name}")
        t0 = time.perf_counter()
        print(f"== bench {name}", flush=True)
        try:
            with cpu_burners(args.under_load):
                load_at_start = os.getloadavg()[0]
                result = mod.run(quick=args.quick)
                load_at_end = os.getloadavg()[0]
        except Exception as exc:  # report and go on with the others
            failed += 1
            print(f"   FAILED: {type(exc).__name__}: {exc}", flush=True)
            continue
        result["_elapsed_s"] = round(time.perf_counter() - t0, 2)
        result["_cpu_burners"] = args.under_load
        result["_loadavg_1m"] = [round(load_at_start, 2), round(load_at_end, 2)]
        stem = f"{name}.under_load" if args.under_load else name
        (RESULTS / f"{stem}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
        for key, value in result.items():
            print(f"   {key}: {value}")
    print(f"results in {RESULTS}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
