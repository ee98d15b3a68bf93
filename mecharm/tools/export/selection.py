"""Choose the trials to export from the ledger, and say why every other trial was skipped.

The ledger is the runtime task's (``trials_of``; docs/tasks.md). ``--select`` is a preset
name or comma-separated conditions on its columns: ``column=value`` (``|`` separates
alternatives, an empty value matches an empty cell) or ``column!=value``. Presets:
``success`` (default: recording ok and the task's success rule, pick_place: both verdicts
yes), ``recorded`` (recording ok, any verdict), ``all`` (every row; broken recordings are
still refused when read).

``--include-crashed`` (docs/lerobot.md, "Crashed recordings") widens a condition that
accepts ``recording_status=ok`` to ``crashed`` too, and reads a ledger ``none`` as
``crashed`` when the trial's folder now holds a repaired (``crashed``) meta — the rows
written before the runtime linked crashed recordings.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mecharm.common.fsutil import UnsafeNameError, safe_join, validate_name
from mecharm.common.layout import DEFAULT_TASK, DataRoot, RecordingFiles
from mecharm.common.logging import get_logger
from mecharm.recorder.events import EventError, parse_recording_meta
from mecharm.runtime.records.ledger import default_records, unknown_column
from mecharm.runtime.records.outcome import TaskRecords

log = get_logger("mecharm.tools.export.selection")

__all__ = [
    "PRESETS",
    "Candidate",
    "Condition",
    "LedgerReadError",
    "Skipped",
    "parse_select",
    "presets",
    "read_ledger",
    "resolve_crashed",
    "select_trials",
    "with_crashed",
]

#: the presets' names; what ``success`` means is the task's (``presets``)
PRESETS: tuple[str, ...] = ("success", "recorded", "all")


def presets(records: TaskRecords) -> dict[str, str]:
    """The presets for the task ``records`` describes, as conditions."""
    rule = ",".join(f"{c}={v}" for c, v in records.success.items())
    return {"success": "recording_status=ok" + (f",{rule}" if rule else ""),
            "recorded": "recording_status=ok", "all": ""}  # fmt: skip


_REQUIRED = ("run_stem", "recording_path", "recording_status")


class LedgerReadError(ValueError):
    """The ledger cannot be read or the selection is invalid; the message says why."""


@dataclass(frozen=True)
class Condition:
    column: str
    values: frozenset[str]
    negate: bool = False

    def check(self, row: dict[str, str]) -> str | None:
        """None when ``row`` passes, else the reason it does not."""
        cell = row.get(self.column, "")
        if (cell in self.values) != self.negate:
            return None
        want = "|".join(sorted(self.values)) or "<empty>"
        return (
            f"{self.column} is {cell or '<empty>'!s} (want {'not ' if self.negate else ''}{want})"
        )


@dataclass(frozen=True)
class Candidate:
    run_stem: str
    recording_dir: Path
    recording_status: str
    line: int
    #: the ledger row: the episode's outcome comes from it (docs/lerobot-outcomes.md)
    row: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Skipped:
    run_stem: str
    reason: str


def parse_select(text: str, records: TaskRecords | None = None) -> list[Condition]:
    """Parse a preset name or ``col=a|b,col!=c`` on the ledger of the task ``records``
    describes (default: the default task's); raise LedgerReadError naming the bad part."""
    records = records or default_records()
    text = presets(records).get(text.strip(), text.strip())
    conds: list[Condition] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        negate = "!=" in part
        col, sep, value = part.partition("!=" if negate else "=")
        col = col.strip()
        if not sep:
            raise LedgerReadError(
                f"--select: {part!r} is neither a preset ({', '.join(PRESETS)}) nor column=value"
            )
        if col not in records.ledger_columns:
            raise LedgerReadError(f"--select: {unknown_column(col, records.ledger_columns)}")
        conds.append(Condition(col, frozenset(v.strip() for v in value.split("|")), negate))
    return conds


def with_crashed(conditions: list[Condition]) -> list[Condition]:
    """The conditions with ``crashed`` accepted wherever ``recording_status=ok`` is."""
    return [
        Condition(c.column, c.values | {"crashed"}, c.negate)
        if c.column == "recording_status" and not c.negate and "ok" in c.values
        else c
        for c in conditions
    ]


def resolve_crashed(
    root: Path, rows: list[tuple[int, dict[str, str]]], task: str = DEFAULT_TASK
) -> list[tuple[int, dict[str, str]]]:
    """Rows whose ledger says ``none`` but whose recording now has a crashed meta (repaired
    after the row was written) read as ``crashed``; the ledger file is not changed."""
    out = []
    for lineno, row in rows:
        if row.get("recording_status") == "none":
            try:
                rec_dir = _recording_dir(
                    root, row.get("run_stem", ""), row.get("recording_path", ""), task
                )
                meta = parse_recording_meta(RecordingFiles(rec_dir).meta.read_bytes())
            except (UnsafeNameError, OSError, EventError):
                meta = None
            if meta is not None and meta.status == "crashed":
                row = {**row, "recording_status": "crashed"}
        out.append((lineno, row))
    return out


def read_ledger(root: Path, task: str = DEFAULT_TASK) -> list[tuple[int, dict[str, str]]]:
    """(line number, row) of every record of ``task``'s ledger; raise LedgerReadError when
    unusable."""
    path = DataRoot(root, task).ledger
    try:
        fh = open(path, encoding="utf-8", newline="")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise LedgerReadError(f"cannot read the ledger {path}: {exc.strerror or exc}") from None
    with fh:
        try:
            text = fh.read()
        except UnicodeDecodeError as exc:
            raise LedgerReadError(f"ledger {path} is not UTF-8 (byte {exc.start})") from None
    if text and not text.endswith("\n"):
        # a crash or a full disk cut the last append short: that row is not a trial's record
        cut = text[text.rfind("\n") + 1 :]
        log.warning("ledger_truncated_tail", path=str(path), dropped=cut[:80])
        text = text[: len(text) - len(cut)]
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    if header is None:
        raise LedgerReadError(f"ledger {path} is empty")
    missing = [c for c in _REQUIRED if c not in header]
    if missing:
        raise LedgerReadError(f"ledger {path} lacks the columns {missing}")
    rows = []
    for lineno, rec in enumerate(reader, 2):
        if not rec:
            continue
        rows.append((lineno, dict(zip(header, rec, strict=False))))
    return rows


def _recording_dir(root: Path, run_stem: str, rel: str, task: str = DEFAULT_TASK) -> Path:
    rel = rel.strip() or str(DataRoot.recording_rel(run_stem, task))
    parts = [p for p in rel.replace("\\", "/").split("/") if p not in ("", ".")]
    return safe_join(root, *parts)


def select_trials(
    root: Path,
    rows: list[tuple[int, dict[str, str]]],
    conditions: list[Condition],
    runs: set[str] | None = None,
    task: str = DEFAULT_TASK,
) -> tuple[list[Candidate], list[Skipped]]:
    """Split ledger rows into candidates (in ledger order) and skipped trials with reasons."""
    chosen: list[Candidate] = []
    skipped: list[Skipped] = []
    seen: dict[str, int] = {}
    for lineno, row in rows:
        stem = row.get("run_stem", "")
        try:
            validate_name(stem, "run_stem")
        except UnsafeNameError as exc:
            skipped.append(Skipped(stem or f"<line {lineno}>", f"ledger line {lineno}: {exc}"))
            continue
        if stem in seen:
            skipped.append(Skipped(stem, f"ledger line {lineno} repeats line {seen[stem]}"))
            continue
        seen[stem] = lineno
        if runs is not None and stem not in runs:
            skipped.append(Skipped(stem, "not requested (--run)"))
            continue
        reason = next((r for c in conditions if (r := c.check(row)) is not None), None)
        if reason:
            skipped.append(Skipped(stem, f"not selected: {reason}"))
            continue
        try:
            rec_dir = _recording_dir(root, stem, row.get("recording_path", ""), task)
        except UnsafeNameError as exc:
            skipped.append(Skipped(stem, f"recording_path refused: {exc}"))
            continue
        chosen.append(
            Candidate(
                stem,
                rec_dir,
                row.get("recording_status", ""),
                lineno,
                row,
            )
        )
    if runs:
        for stem in sorted(runs - set(seen)):
            skipped.append(Skipped(stem, "requested with --run but not in the ledger"))
    return chosen, skipped
