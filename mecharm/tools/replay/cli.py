"""`mecharm replay TRACE.jsonl [...]` (registered by mecharm.tools.cli).

Exit codes: 0 every trace replays to identical decisions; 1 a decision differs
(the diff starts at the first differing one and names the stage and fields); 2 a
trace is malformed or a flag is wrong (the message names the line or the flag);
3 a trace cannot be replayed here (its FK table checksum differs from the table
found, or an arc file is missing). With several traces the worst code wins.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import yaml

from mecharm.common.config import ConfigError, load_settings
from mecharm.common.defaults import REPLAY_CONFIG, shipped_arc
from mecharm.common.layout import FK_DIR, FK_TABLE
from mecharm.common.logging import configure_logging
from mecharm.runtime.config import recorded_constant
from mecharm.runtime.lookup import TableError, ensure_table, load_arc, load_table
from mecharm.runtime.lookup.j0 import ArcPose
from mecharm.runtime.lookup.table import FkTable
from mecharm.tools.replay.compare import render_diff
from mecharm.tools.replay.config import ReplaySettings
from mecharm.tools.replay.runner import ReplayResult, replay, replay_settings
from mecharm.tools.replay.tracefile import NotATrace, TraceFormatError, read_recorded

__all__ = [
    "EXIT_CANNOT",
    "EXIT_DIFFERENT",
    "EXIT_IDENTICAL",
    "EXIT_MALFORMED",
    "CannotReplay",
    "parse_sets",
    "register",
    "render_result",
    "replay_one",
    "run",
]

EXIT_IDENTICAL, EXIT_DIFFERENT, EXIT_MALFORMED, EXIT_CANNOT = 0, 1, 2, 3
_DEFAULT_CONFIG = REPLAY_CONFIG  # shipped in the package (docs/setup.md)
#: a replay takes milliseconds; this only guards against code that now waits forever
REPLAY_TIMEOUT_S = 60.0


class CannotReplay(RuntimeError):
    """The trace is fine but something it refers to is not available here."""


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Re-run the decisions of recorded trial traces (no arm, no camera) and compare them."
    )
    parser.add_argument(
        "traces", nargs="+", type=Path, metavar="TRACE.jsonl", help="trial trace(s) to replay"
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help=f"YAML settings (default {_DEFAULT_CONFIG} when it exists)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help=f"FK data dir: table at DIR/{FK_DIR}/{FK_TABLE}, the default table is built when missing",
    )
    parser.add_argument(
        "--table", type=Path, default=None, help="FK table CSV to use instead of the data dir's"
    )
    parser.add_argument(
        "--arc-pick",
        type=Path,
        default=None,
        help="approach_pick arc file (default: recorded path)",
    )
    parser.add_argument(
        "--arc-place",
        type=Path,
        default=None,
        help="approach_place arc file (default: recorded path)",
    )
    parser.add_argument(
        "--allow-table-mismatch",
        action="store_true",
        default=None,
        help="replay even when the table checksum differs from the recorded one",
    )
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change one recorded runtime constant for this replay (YAML value), e.g. pick_place.dist_max_m=0.02",
    )
    parser.add_argument(
        "--max-shown",
        type=int,
        default=None,
        help="differing decisions to print after the first (default 10)",
    )
    parser.set_defaults(func=run)


def parse_sets(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs (VALUE read as YAML: numbers, lists, booleans); ValueError names the bad one."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        try:
            out[key] = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise ValueError(f"--set {item!r}: value is not valid YAML: {exc}") from None
    return out


class _Resources:
    """Tables and arcs loaded once for all traces of one invocation."""

    def __init__(self, settings: ReplaySettings) -> None:
        self.settings = settings
        self._table: tuple[Path, FkTable] | None = None
        self._arcs: dict[Path, ArcPose] = {}

    def table(self) -> tuple[Path, FkTable]:
        if self._table is None:
            s = self.settings
            try:
                path = Path(s.table) if s.table is not None else ensure_table(Path(s.data_dir))
                self._table = (path, load_table(path))
            except (TableError, OSError) as exc:
                raise CannotReplay(f"FK table: {exc}") from None
        return self._table

    def arc(self, flag: Path | None, recorded: Any, name: str) -> ArcPose:
        path = Path(flag) if flag is not None else Path(str(recorded)) if recorded else None
        if path is None:
            raise CannotReplay(
                f"the trace records no {name} arc path; pass --{name.replace('_', '-')}"
            )
        if flag is None and not path.is_file():
            # the default arc of an older checkout or of another installation: the shipped one
            path = shipped_arc(path) or path
        if path not in self._arcs:
            try:
                self._arcs[path] = load_arc(path)
            except ValueError as exc:
                raise CannotReplay(
                    f"{exc} (pass --{name.replace('_', '-')} to use another file)"
                ) from None
        return self._arcs[path]


def replay_one(
    path: Path, res: _Resources, overrides: dict[str, Any]
) -> tuple[int, str, ReplayResult | None]:
    """(exit code, text to print, result) for one trace."""
    try:
        recorded = read_recorded(path)
    except NotATrace as exc:  # the run log or folder given: name the trace (docs/setup.md)
        return EXIT_MALFORMED, str(exc), None
    except TraceFormatError as exc:
        return EXIT_MALFORMED, f"{path}: malformed trace: {exc}", None
    try:
        settings, notes = replay_settings(recorded, overrides)
    except ConfigError as exc:
        return EXIT_MALFORMED, f"{path}: {exc}", None
    try:
        table_path, table = res.table()
        table = table.with_j1_max(
            settings.arm.j1_max
        )  # the limit this trial ran with (docs/lookup.md)
        consts = recorded.constants
        arc_pick = res.arc(
            res.settings.arc_pick,
            recorded_constant(consts, "pick_place.approach_pick_arc"),
            "arc_pick",
        )
        arc_place = res.arc(
            res.settings.arc_place,
            recorded_constant(consts, "pick_place.approach_place_arc"),
            "arc_place",
        )
    except CannotReplay as exc:
        return EXIT_CANNOT, f"{path}: cannot replay: {exc}", None
    if table.checksum != recorded.table_checksum:
        msg = (
            f"FK table differs: the trace was recorded with table {recorded.table_checksum[:16]}..., "
            f"{table_path} has {table.checksum[:16]}..."
        )
        if not res.settings.allow_table_mismatch:
            return (
                EXIT_CANNOT,
                (
                    f"{path}: cannot replay: {msg}; every lookup depends on the table — pass --table or "
                    "--data-dir with the table the trial used, or --allow-table-mismatch to compare "
                    "anyway"
                ),
                None,
            )
        notes = [f"{msg} (replayed anyway: --allow-table-mismatch)", *notes]
    try:

        async def bounded() -> ReplayResult:
            with anyio.fail_after(REPLAY_TIMEOUT_S):
                return await replay(recorded, settings, table, arc_pick, arc_place, notes)

        result = anyio.run(bounded)
    except TimeoutError:
        return (
            EXIT_DIFFERENT,
            (
                f"{path}: different: the replay did not finish within {REPLAY_TIMEOUT_S:.0f} s "
                "(the code now waits for something the trace never delivered)"
            ),
            None,
        )
    except (
        Exception
    ) as exc:  # the code under replay crashed outside a stage (e.g. in the exit path)
        return (
            EXIT_DIFFERENT,
            f"{path}: different: the replay raised {type(exc).__name__}: {exc}",
            None,
        )
    text = render_result(path, result, res.settings.max_shown, n_inputs=len(recorded.inputs))
    return (EXIT_IDENTICAL if result.identical else EXIT_DIFFERENT), text, result


def render_result(
    path: Path, r: ReplayResult, max_shown: int = 10, n_inputs: int | None = None
) -> str:
    lines = [f"note: {n}" for n in r.notes]
    if r.identical:
        extra = f", {n_inputs} inputs" if n_inputs is not None else ""
        lines.append(
            f"{path}: identical ({r.diff.total_recorded} decisions{extra}; {r.status}"
            f"{': ' + r.reason if r.reason else ''})"
        )
        return "\n".join(lines)
    lines.append(f"{path}: different")
    if not r.diff.identical:
        lines.append(render_diff(r.diff, max_shown=max_shown))
    if r.divergence:
        lines.append(f"input divergence: {r.divergence}")
    if r.skipped_inputs:
        first = r.skipped_inputs[0]
        lines.append(
            f"{len(r.skipped_inputs)} recorded input(s) were never asked for, first: {first.kind} in "
            f"{first.stage} (line {first.line})"
        )
    if r.unused_inputs:
        first = r.unused_inputs[0]
        lines.append(
            f"{len(r.unused_inputs)} recorded input(s) left over at the end, first: {first.kind} in "
            f"{first.stage} (line {first.line})"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    config = (
        args.config
        if args.config is not None
        else (_DEFAULT_CONFIG if _DEFAULT_CONFIG.is_file() else None)
    )
    try:
        settings = load_settings(ReplaySettings, config, {
            "data_dir": args.data_dir, "table": args.table, "arc_pick": args.arc_pick, "arc_place": args.arc_place,
            "allow_table_mismatch": args.allow_table_mismatch, "max_shown": args.max_shown,
        })  # fmt: skip
        overrides = parse_sets(args.sets)
    except (ConfigError, ValueError) as exc:
        print(f"mecharm replay: {exc}", file=sys.stderr)
        return EXIT_MALFORMED
    configure_logging(settings.log_level)
    res = _Resources(settings)
    worst = EXIT_IDENTICAL
    t0 = time.perf_counter()
    for path in args.traces:
        code, text, _result = replay_one(path, res, overrides)
        print(
            text,
            file=sys.stdout if code in (EXIT_IDENTICAL, EXIT_DIFFERENT) else sys.stderr,
            flush=True,
        )
        worst = max(worst, code)
    if len(args.traces) > 1:
        print(f"{len(args.traces)} traces replayed in {time.perf_counter() - t0:.2f} s", flush=True)
    return worst
