"""What a task puts in the records, declared by the task and read by every reader.

The ledger, the run log, the trial summary, the console, the export and the report know
no task: each task hands them a ``TaskRecords`` (pick_place/records.py is the first). Its
``columns`` sit in the task's ledger between the columns every task has (``LEDGER_HEAD``)
and the recording's (``LEDGER_TAIL``); ``from_trace`` fills them from the trial's trace,
the same way at the end of a trial and at the next start after a crash (records/reconcile.py);
``success`` says which values make a trial a success (docs/tasks.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mecharm.common.layout import check_task_name

__all__ = [
    "INTEGER_COMMON",
    "LEDGER_HEAD",
    "LEDGER_TAIL",
    "NUMERIC_COMMON",
    "VERDICTS",
    "TaskRecords",
]

#: every task's ledger starts with these ...
LEDGER_HEAD: tuple[str, ...] = (
    "run_stem", "started_at", "ended_at", "duration_s", "status", "reason", "dry_run", "scene_seed",
)  # fmt: skip
#: ... and ends with the recording's
LEDGER_TAIL: tuple[str, ...] = (
    "recording_path", "recording_fps", "recording_frames", "recording_status",
)  # fmt: skip
NUMERIC_COMMON: tuple[str, ...] = ("duration_s", "recording_fps")
INTEGER_COMMON: tuple[str, ...] = ("recording_frames", "scene_seed")
#: what a verdict column may hold ("": never judged)
VERDICTS: tuple[str, ...] = ("yes", "no", "")

TraceLines = Iterable[Mapping[str, Any]]


@dataclass(frozen=True)
class TaskRecords:
    """A task's part of the records.

    ``task``: its name (its folder ``runs/run_<task>/`` and ledger ``runs/<task>_ledger.csv``);
    ``instruction``: the task in words (a LeRobot dataset's task string); ``columns``: its
    ledger columns, in order; ``verdicts``, ``numeric``, ``integer``: which of them hold
    yes/no/"", numbers and whole numbers (``mecharm ledger verify`` checks them);
    ``success``: column → value, all of which a successful trial has; ``from_trace``:
    the columns' values from a trial's trace lines (missing ones are empty).
    """

    task: str
    instruction: str
    columns: tuple[str, ...]
    from_trace: Callable[[TraceLines], dict[str, Any]]
    verdicts: tuple[str, ...] = ()
    numeric: tuple[str, ...] = ()
    integer: tuple[str, ...] = ()
    success: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_task_name(self.task)
        common = set(LEDGER_HEAD) | set(LEDGER_TAIL)
        clash = [c for c in self.columns if c in common]
        if clash:
            raise ValueError(f"task {self.task}: columns {clash} are every task's already")
        for what, names in (("verdicts", self.verdicts), ("numeric", self.numeric),
                            ("integer", self.integer), ("success", tuple(self.success))):  # fmt: skip
            stray = [c for c in names if c not in self.columns]
            if stray:
                raise ValueError(f"task {self.task}: {what} names {stray}, not its columns")

    @property
    def ledger_columns(self) -> tuple[str, ...]:
        """The task's ledger header."""
        return LEDGER_HEAD + self.columns + LEDGER_TAIL

    @property
    def all_numeric(self) -> tuple[str, ...]:
        return NUMERIC_COMMON + self.numeric

    @property
    def all_integer(self) -> tuple[str, ...]:
        return INTEGER_COMMON + self.integer

    def outcome(self, lines: TraceLines) -> dict[str, Any]:
        """The task's columns of one trial, from its trace (every column present)."""
        found = self.from_trace(lines)
        return {c: found.get(c) for c in self.columns}

    def succeeded(self, row: Mapping[str, Any]) -> bool:
        """Whether a ledger row (or an outcome) is a success by the task's rule."""
        return bool(self.success) and all(
            str(row.get(c) or "") == v for c, v in self.success.items()
        )

    def describe(self, row: Mapping[str, Any]) -> str:
        """The verdicts in a few words, for a trial line: ``pick yes place no``."""
        return " ".join(f"{c.removesuffix('_verdict')} {row.get(c) or '-'}" for c in self.verdicts)
