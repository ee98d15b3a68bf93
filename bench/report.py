"""Render docs/benchmarks.md from one `make bench` run: ``python -m bench.report [--check]``.

Every figure in the page comes from bench/results/*.json of one invocation of
``python -m bench`` (one ``_run_id``), so a reader knows when, on what machine, under what
load and with which command each figure and its baseline were measured. Results of
another run, a bench that failed or is missing, or a module whose ``rows()`` cannot read
its result stop the rendering with a message naming the files: a page of mixed runs is
what this replaces. The hand-written notes under the table are bench/benchmarks_notes.md,
copied verbatim.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench import Row
from bench.__main__ import RESULTS, full_run_names

REPO = Path(__file__).resolve().parents[1]
NOTES = Path(__file__).resolve().parent / "benchmarks_notes.md"
OUT = REPO / "docs" / "benchmarks.md"


class ReportError(Exception):
    """The results cannot make one honest page; the message says which files and why."""


def load_results(results: Path) -> dict[str, dict[str, Any]]:
    """Every ``*.json`` under ``results`` by file stem (``lookup``, ``lookup.under_load``)."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(results.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ReportError(f"{path}: not a readable result ({exc}); run `make bench`") from exc
        if not isinstance(data, dict):
            raise ReportError(f"{path}: not a result object; run `make bench`")
        out[path.name.removesuffix(".json")] = data
    return out


def expected(modules: Mapping[str, object], quiet: Mapping[str, dict[str, Any]]) -> list[str]:
    """The result stems one full run writes: every bench, and its ``.under_load`` when the
    module asks for it and the run had its under-load pass."""
    stems = sorted(modules)
    with_load = any(r.get("_under_load_pass") for r in quiet.values())
    if with_load:
        stems += [
            f"{n}.under_load" for n in sorted(modules) if getattr(modules[n], "UNDER_LOAD", False)
        ]
    return stems


def check(modules: Mapping[str, object], results: Mapping[str, dict[str, Any]]) -> list[str]:
    """The stems to render, in order; ReportError naming every file that is missing, failed
    or from another run."""
    quiet = {n: results[n] for n in modules if n in results}
    stems = expected(modules, quiet)
    problems: list[str] = []
    missing = [s for s in stems if s not in results]
    if missing:
        problems.append("missing: " + ", ".join(f"{s}.json" for s in missing))
    failed = [
        f"{s}.json ({results[s]['_failed']})" for s in stems if results.get(s, {}).get("_failed")
    ]
    if failed:
        problems.append("failed: " + "; ".join(failed))
    no_id = [f"{s}.json" for s in stems if s in results and not results[s].get("_run_id")]
    if no_id:
        problems.append("written before results had a run id (no _run_id): " + ", ".join(no_id))
    runs: dict[str, list[str]] = {}
    for s in stems:
        if s in results and results[s].get("_run_id"):
            runs.setdefault(str(results[s]["_run_id"]), []).append(f"{s}.json")
    if len(runs) > 1:
        problems.append(
            "results of different runs: "
            + "; ".join(f"{rid}: {', '.join(files)}" for rid, files in sorted(runs.items()))
        )
    no_rows = [f"bench/bench_{n}.py" for n in sorted(modules) if not hasattr(modules[n], "rows")]
    if no_rows:
        problems.append("no rows(result) to put in the table: " + ", ".join(no_rows))
    if problems:
        raise ReportError(
            "cannot render docs/benchmarks.md from one run — "
            + " | ".join(problems)
            + " — run `make bench` (all benches, one invocation; a module without rows() needs them)"
        )
    return stems


def table_rows(
    modules: Mapping[str, object], results: Mapping[str, dict[str, Any]], stems: list[str]
) -> list[Row]:
    """Each module's ``rows(result)``, quiet stems first, then the under-load ones with the
    number of burners in the area."""
    out: list[Row] = []
    for stem in sorted(stems, key=lambda s: (s.endswith(".under_load"), s)):
        name = stem.removesuffix(".under_load")
        make = modules[name].rows  # type: ignore[attr-defined]  # check() made sure
        try:
            got = list(make(results[stem]))
        except Exception as exc:  # a module's bug: say which one, and what
            raise ReportError(
                f"bench/bench_{name}.py rows() failed on {stem}.json: {type(exc).__name__}: {exc}"
            ) from exc
        if not all(isinstance(r, Row) for r in got):
            raise ReportError(f"bench/bench_{name}.py rows() must return bench.Row values")
        burners = results[stem].get("_cpu_burners", 0)
        if burners:
            got = [r._replace(area=f"{r.area} ({burners} CPU burners)") for r in got]
        out.extend(got)
    return out


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ") or "—"


def header(results: Mapping[str, dict[str, Any]], stems: list[str]) -> str:
    """Date, load average range, command, revision, machine and burners of the run."""
    first = results[stems[0]]
    loads = [float(x) for s in stems for x in results[s].get("_loadavg_1m", [])]
    burners = sorted({results[s].get("_cpu_burners", 0) for s in stems} - {0})
    under = [s.removesuffix(".under_load") for s in stems if s.endswith(".under_load")]
    load = f"{min(loads):.2f}-{max(loads):.2f}" if loads else "not recorded"
    lines = [
        f"- date: {first.get('_date_utc', '?')} (run `{first.get('_run_id', '?')}`)",
        f"- command: `{first.get('_command', '?')}`{' (quick: shorter, noisier runs)' if first.get('_quick') else ''}",
        f"- git revision: `{first.get('_git_rev', '?')}`",
        f"- machine: {first.get('_cpu_count', '?')} CPUs, {first.get('_platform', '?')}",
        f"- load average (1 min, at each bench's start and end): {load}",
        (
            f"- under load: {', '.join(under)} again beside {', '.join(map(str, burners))} CPU burners"
            if under
            else "- under load: no second pass in this run"
        ),
    ]
    return "\n".join(lines)


def render(modules: Mapping[str, object], results: Mapping[str, dict[str, Any]], notes: str) -> str:
    """docs/benchmarks.md: the run's header, one table, the notes."""
    intro, marker, after = notes.partition("\n<!-- table -->\n")
    if not marker:
        raise ReportError(f"{NOTES.name} has no `<!-- table -->` line to put the table under")
    stems = check(modules, results)
    rows = table_rows(modules, results, stems)
    table = [
        "| area | figure | result | target | baseline in the same run |",
        "|---|---|---|---|---|",
    ]
    table += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    return (
        "# Benchmarks\n\n"
        "<!-- generated by `python -m bench.report` from bench/results/*.json; edit "
        "bench/benchmarks_notes.md or the bench modules' rows(), not this file -->\n\n"
        + intro.strip()
        + "\n\n## The run\n\n"
        + header(results, stems)
        + "\n\n"
        + "\n".join(table)
        + "\n\n"
        + after.lstrip()
    )


def bench_modules() -> dict[str, object]:
    """Every bench module a full run runs, imported."""
    return {n: importlib.import_module(f"bench.bench_{n}") for n in full_run_names()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report")
    parser.add_argument("--results", type=Path, default=RESULTS, help=f"default {RESULTS}")
    parser.add_argument("--out", type=Path, default=OUT, help=f"default {OUT}")
    parser.add_argument("--check", action="store_true", help="only validate the results")
    args = parser.parse_args(argv)
    try:
        page = render(
            bench_modules(), load_results(args.results), NOTES.read_text(encoding="utf-8")
        )
    except ReportError as exc:
        print(f"bench.report: {exc}", file=sys.stderr)
        return 1
    if args.check:
        print(f"bench.report: {args.results} holds one complete run")
        return 0
    args.out.write_text(page, encoding="utf-8")
    print(f"bench.report: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
