"""Benchmarks: `make bench` runs every bench/bench_*.py module.

Each module defines ``run(quick: bool = False) -> dict`` returning its figures
(each target compared against a baseline measured in the same run, with the
ratio). Results are printed and written to bench/results/<name>.json.
"""
