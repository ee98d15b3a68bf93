"""Run the benchmarks: ``python -m bench [name ...] [--quick]``."""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
import time
from pathlib import Path

import bench

RESULTS = Path(__file__).resolve().parent / "results"


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
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in args.names or names:
        mod = importlib.import_module(f"bench.bench_{name}")
        t0 = time.perf_counter()
        print(f"== bench {name}", flush=True)
        try:
            result = mod.run(quick=args.quick)
        except Exception as exc:  # report and go on with the others
            failed += 1
            print(f"   FAILED: {type(exc).__name__}: {exc}", flush=True)
            continue
        result["_elapsed_s"] = round(time.perf_counter() - t0, 2)
        (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
        for key, value in result.items():
            print(f"   {key}: {value}")
    print(f"results in {RESULTS}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
