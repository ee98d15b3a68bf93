"""The trial ledger (``DataRoot.ledger``, docs/data-root.md): one row per trial, append-only.

The column list is a contract with the LeRobot exporter (docs/architecture.md).
Existing rows are never rewritten: a row is appended and fsynced; a file whose
header is not the current column list is refused (``mecharm ledger migrate`` first),
because appending under another header would silently misalign every cell.
Migration archives the old file, verifies the archive, pads every old row with
empty cells for the new columns and checks that each old row survived byte for byte
(docs/runtime.md: rebuilding a ledger from zero once lost 393 trials).

One concern: the ledger file: its columns, the append, the read and the migration, which
must agree on one header.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import re
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from mecharm.common.config import closest, did_you_mean
from mecharm.common.dirlock import dir_held
from mecharm.common.fsutil import LineFile, atomic_write_bytes
from mecharm.common.layout import (
    DEFAULT_TASK,
    LEDGER,
    LEDGER_ARCHIVE,
    META,
    RUN_STEM_FORMAT,
    RUN_STEM_RE,
    DataRoot,
    RecordingFiles,
)
from mecharm.recorder.events import RECORDING_STATUSES, EventError, parse_recording_meta
from mecharm.runtime.records.outcome import VERDICTS, TaskRecords

__all__ = [
    "LEDGER_NAME",
    "RECORDING_STATUSES",
    "LedgerError",
    "MigrationReport",
    "RecordingInfo",
    "VerifyReport",
    "append_row",
    "check_ledger_ready",
    "check_ledger_row",
    "default_records",
    "header_problem",
    "ledger_path",
    "ledger_stems",
    "migrate_ledger",
    "read_header",
    "run_stems",
    "verify_ledger",
    "wait_recording_meta",
]

LEDGER_NAME = LEDGER
#: ``interrupted``: the process ended before the trial's result (records/reconcile.py)
STATUSES = ("completed", "stopped", "interrupted")


def default_records() -> TaskRecords:
    """The records of the root's default task (``DEFAULT_TASK``), for a caller that names
    no task. The columns are the task's (records/outcome.py); this module knows none."""
    from mecharm.runtime.tasks import task_records  # the registry imports every task

    return task_records(DEFAULT_TASK)


def _columns(columns: Sequence[str] | None) -> Sequence[str]:
    return default_records().ledger_columns if columns is None else columns


class LedgerError(ValueError):
    """The ledger cannot be appended to / migrated as asked; the message says why."""


def ledger_path(data_root: Path) -> Path:
    return DataRoot(data_root).ledger


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return f"{value:.6g}"
    # one record = one line: newlines would break line-based migration and readers
    return str(value).replace("\r", " ").replace("\n", " ")


def _encode_row(cells: Sequence[str]) -> bytes:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(cells)
    return buf.getvalue().encode("utf-8")


def unknown_column(name: str, columns: Sequence[str] | None = None) -> str:
    """``unknown ledger column 'x'; did you mean 'y'?`` (else the column list): the one
    message for a column name that is not one of ``columns`` (docs/setup.md, "Traps")."""
    columns = _columns(columns)
    return f"unknown ledger column {name!r}" + did_you_mean(name, columns, "columns")


def read_header(path: Path) -> list[str] | None:
    """The header row of a ledger, or None when the file does not exist or is empty."""
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            first = fh.readline()
    except FileNotFoundError:
        return None
    if not first.strip():
        return None
    return next(csv.reader([first]))


def header_problem(
    path: Path, header: Sequence[str], columns: Sequence[str] | None = None
) -> str | None:
    """What is wrong with a ledger ``header`` and what to do about it; None when it is ``columns``.

    An older generation (a prefix of ``columns``) is migrated; any other header cannot
    be padded, so the file has to be moved aside (docs/runtime.md, "Start-up checks").
    """
    header, columns = list(header), list(_columns(columns))
    if header == columns:
        return None
    if columns[: len(header)] == header:
        missing = columns[len(header) :]
        return (
            f"{path} has an older {len(header)}-column header (missing {', '.join(missing)}); "
            f"run `mecharm ledger migrate {path}` (it archives the file and pads the old rows), "
            "then start again"
        )
    missing = [c for c in columns if c not in header]
    extra = [c for c in header if c not in columns]
    repeated = sorted({c for c in header if header.count(c) > 1})
    parts = []
    if missing:
        parts.append(f"missing {', '.join(missing)}")
    if extra:
        named = [(c, closest(c, missing)) for c in extra]  # a renamed column: say which
        parts.append(
            "extra "
            + ", ".join(f"{c!r}" + (f" (did you mean {m!r}?)" if m else "") for c, m in named)
        )
    if repeated:
        parts.append(f"repeated {', '.join(repeated)}")
    if not parts:
        i = next(i for i, (a, b) in enumerate(zip(header, columns, strict=True)) if a != b)
        parts.append(
            f"same columns in another order (column {i + 1} is {header[i]!r}, expected {columns[i]!r})"
        )
    aside = path.parent / LEDGER_ARCHIVE / f"{path.stem}_unknown_header{path.suffix}"
    return (
        f"{path} header differs from the ledger columns: {'; '.join(parts)}. "
        "It is not an older ledger generation, so `mecharm ledger migrate` cannot pad it, "
        "and appending under it would misalign every cell. Move it aside "
        f"(e.g. `mkdir -p {aside.parent} && mv {path} {aside}`); the next trial starts a new "
        f"ledger. The expected header is: {','.join(columns)}"
    )


def _read_records(path: Path) -> list[list[str]] | None:
    """The ledger's CSV records (header first); None when the file does not exist.
    Raises LedgerError when it cannot be read or is not UTF-8."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise LedgerError(
            f"{path} is a directory, not a ledger file; move it aside so a ledger can be written there"
        ) from None
    except OSError as exc:
        raise LedgerError(
            f"cannot read the ledger {path}: {exc.strerror or exc}; fix its permissions"
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise LedgerError(
            f"{path} is not UTF-8 (byte {exc.start}, line {line}): it was edited or damaged; "
            "move it aside and check it with `mecharm ledger verify`"
        ) from None
    return list(csv.reader(io.StringIO(text, newline="")))


def ledger_stems(path: Path) -> set[str]:
    """The run stems the ledger at ``path`` has a row for (empty when there is no ledger).
    Raises LedgerError when it cannot be read."""
    return set(run_stems(_read_records(Path(path)) or []))


def run_stems(records: Sequence[Sequence[str]]) -> dict[str, list[int]]:
    """Line numbers (1 = header) of each run stem in a ledger's records."""
    seen: dict[str, list[int]] = {}
    for lineno, rec in enumerate(records[1:], 2):
        if rec and rec[0]:
            seen.setdefault(rec[0], []).append(lineno)
    return seen


def _duplicates_problem(path: Path, stems: Mapping[str, list[int]]) -> str | None:
    dups = {s: lines for s, lines in stems.items() if len(lines) > 1}
    if not dups:
        return None
    shown = "; ".join(
        f"{s} (lines {', '.join(map(str, lines))})" for s, lines in list(dups.items())[:5]
    )
    more = f" and {len(dups) - 5} more" if len(dups) > 5 else ""
    return (
        f"{path} holds {len(dups)} run stem(s) more than once: {shown}{more}. "
        "A run stem names one trial, so the exporter could not tell those rows apart. "
        f"List every problem with `mecharm ledger verify {path}`, keep one row per run "
        "(the run folder's run log says which is right), then start again"
    )


def check_ledger_ready(path: Path, columns: Sequence[str] | None = None) -> None:
    """Refuse, before any trial, a ledger that the trials could not append to.

    A missing or empty file is fine (the first row creates it). Raises LedgerError
    naming the problem and the command that fixes it: a header that differs from
    ``columns`` (older generation: ``mecharm ledger migrate``; anything else: move it
    aside), run stems present more than once (``mecharm ledger verify`` lists them),
    a file that cannot be read or is not UTF-8 (docs/runtime.md, "Start-up checks").
    """
    path = Path(path)
    records = _read_records(path)
    if not records or not any(c.strip() for c in records[0]):
        return
    columns = _columns(columns)
    problem = header_problem(path, records[0], columns) or _duplicates_problem(
        path, run_stems(records)
    )
    if problem is not None:
        raise LedgerError(problem)


def check_ledger_row(path: Path, run_stem: str) -> None:
    """Raise LedgerError when the trial ``run_stem`` has no row in the ledger: its append
    failed (the run log's ``ledger_error`` says why), and the service stops rather than
    run more trials that would be missing from the ledger too."""
    path = Path(path)
    try:
        records = _read_records(path)
    except LedgerError as exc:
        raise LedgerError(f"the row of trial {run_stem} could not be checked: {exc}") from None
    if records is None or run_stem not in run_stems(records):
        raise LedgerError(
            f"the row of trial {run_stem} is not in {path} (the append failed; the trial's "
            "run log says why under ledger_error; its run folder keeps the trace). Stopping "
            f"before the next trial: fix the ledger (`mecharm ledger verify {path}` lists "
            "its problems), then start again"
        )


def append_row(path: Path, row: Mapping[str, Any], columns: Sequence[str] | None = None) -> None:
    """Append one trial's row (creating the file with its header when absent).

    Raises LedgerError when ``row`` has keys outside ``columns``, the file's header
    is not ``columns`` (run ``mecharm ledger migrate``) or the row's run stem is
    already in the file (one row per trial).
    """
    columns = _columns(columns)
    unknown = set(row) - set(columns)
    if unknown:
        raise LedgerError(
            f"ledger row has unknown columns {sorted(unknown)}"
            + "".join(did_you_mean(c, columns) for c in sorted(unknown))
        )
    path = Path(path)
    records = _read_records(path)
    header = records[0] if records and any(c.strip() for c in records[0]) else None
    if header is not None:
        problem = header_problem(path, header, columns)
        if problem is not None:
            raise LedgerError(problem)
        stem = _cell(row.get(columns[0]))
        lines = run_stems(records or []).get(stem)
        if lines:
            raise LedgerError(
                f"run stem {stem} is already in {path} (line {lines[0]}); "
                "not appending a second row for the same trial"
            )
    data = _encode_row([_cell(row.get(c)) for c in columns])
    if header is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _encode_row(list(columns)) + data
    out = LineFile(path)  # a failed write (disk full) is cut back: never half a row
    if header is not None and out.size > 0:
        # a crash mid-append may have left a partial last line: never glue onto it
        with open(path, "rb") as rd:
            rd.seek(-1, os.SEEK_END)
            if rd.read(1) != b"\n":
                data = b"\n" + data
    out.write(data.decode("utf-8"))
    out.close()


# ---------------------------------------------------------------- recording columns


@dataclass
class RecordingInfo:
    status: str = "none"
    path: str = ""
    fps: float | None = None
    frames: int | None = None
    waited_s: float = 0.0
    note: str = ""


async def wait_recording_meta(
    recording_dir: Path,
    data_root: Path,
    *,
    timeout_s: float = 2.0,
    poll_s: float = 0.1,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[object]] = anyio.sleep,
) -> RecordingInfo:
    """Wait for the recording's meta file at most ``timeout_s``, polling every ``poll_s``
    and never sleeping past the deadline (docs/runtime.md). A meta that is not a valid
    ``RecordingMeta`` gives status ``none`` with a note saying what was wrong. No meta by
    the deadline: status ``crashed`` with the recording's path when the recorder left
    media (``episode.mp4`` or ``frame_log.csv``), so the ledger row links it; ``none`` when
    there is no recording at all (docs/recorder.md, "Crashed recordings"). Looking costs a
    few stats and a lock probe, never a decode: the trial's timing is the wait's alone.
    ``clock`` and ``sleep`` are injectable so tests can check the poll schedule."""
    meta_path = Path(recording_dir) / META
    t0 = clock()
    deadline = t0 + timeout_s
    while True:
        info = _read_meta(meta_path, data_root)
        if info is not None:
            info.waited_s = clock() - t0
            return info
        now = clock()
        if now >= deadline:
            info = _without_meta(Path(recording_dir), data_root)
            info.waited_s = now - t0
            return info
        await sleep(min(poll_s, deadline - now))


def _without_meta(recording_dir: Path, data_root: Path) -> RecordingInfo:
    """What the deadline found: a recording left without its meta (``crashed``, linked), or none."""
    files = RecordingFiles(recording_dir)
    left = [p.name for p in (files.video, files.frame_log) if p.is_file()]
    if not left:
        where = "an empty recording folder" if recording_dir.is_dir() else "no recording folder"
        return RecordingInfo(
            status="none",
            note=f"no {META} within the wait and {where}: the recorder was absent "
            "or did not record this trial",
        )
    if dir_held(recording_dir):
        who = "the recorder still holds the folder (late or hung): its meta, if it comes, decides"
    else:
        who = "nobody holds the folder: the recorder died during the trial"
    return RecordingInfo(
        status="crashed",
        path=_rel(recording_dir, data_root),
        note=f"no {META} within the wait but {' and '.join(left)} left; {who}; "
        f"`mecharm recording repair {recording_dir.parent.name}` or the recorder's next "
        "start writes its meta",
    )


def _rel(path: Path, data_root: Path) -> str:
    try:
        return os.path.relpath(path, data_root)
    except ValueError:
        return str(path)


def _read_meta(meta_path: Path, data_root: Path) -> RecordingInfo | None:
    """The meta as ledger columns; None while it does not exist (the recorder writes it
    atomically, so a file that exists is complete and a bad one is not retried)."""
    try:
        data = meta_path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return RecordingInfo(status="none", note=f"unreadable {META}: {exc.strerror or exc}")
    try:
        meta = parse_recording_meta(data)
    except EventError as exc:
        return RecordingInfo(status="none", note=f"{META}: {exc}")
    return RecordingInfo(
        status=meta.status,
        path=_rel(meta_path.parent, data_root),
        fps=meta.effective_fps,
        frames=meta.frames_written,
        # why a recording is not ok (a stall the exporter refuses, a lost camera): the trial line
        note=meta.status_reason if meta.status != "ok" else "",
    )


# ---------------------------------------------------------------- verify


@dataclass
class VerifyReport:
    path: Path
    rows: int = 0
    errors: list[str] = field(default_factory=list)
    needs_migration: bool = False

    @property
    def ok(self) -> bool:
        return not self.errors


def verify_ledger(path: Path, schema: TaskRecords | None = None) -> VerifyReport:
    """Check a ledger of the task whose records (``schema``) are given (default: the
    default task's): header, cell counts, vocabularies, numbers, unique run stems."""
    path = Path(path)
    task = schema or default_records()
    columns = task.ledger_columns
    rep = VerifyReport(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        rep.errors.append(f"cannot read {path}: {exc.strerror or exc}")
        return rep
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        rep.errors.append(f"not UTF-8 at byte {exc.start}")
        return rep
    if text and not text.endswith("\n"):
        rep.errors.append("last line is not terminated (partial append?)")
    records = list(csv.reader(io.StringIO(text, newline="")))
    if not records:
        rep.errors.append("empty file (no header)")
        return rep
    header = records[0]
    if header != list(columns):
        if list(columns[: len(header)]) == header:
            rep.needs_migration = True
            rep.errors.append(
                f"old header with {len(header)} columns: run `mecharm ledger migrate`"
            )
        else:
            rep.errors.append(f"header is not the ledger column list: {header}")
            return rep
    n_lines = text.count("\n")
    if n_lines != len(records):
        rep.errors.append(f"{len(records)} records on {n_lines} lines: a record spans lines")
    seen: dict[str, int] = {}
    for lineno, rec in enumerate(records[1:], 2):
        rep.rows += 1
        if len(rec) != len(header):
            rep.errors.append(f"line {lineno}: {len(rec)} cells, header has {len(header)}")
            continue
        row = dict(zip(header, rec, strict=True))
        stem = row["run_stem"]
        if not RUN_STEM_RE.fullmatch(stem):
            rep.errors.append(f"line {lineno}: run_stem {stem!r} is not {RUN_STEM_FORMAT}")
        elif stem in seen:
            rep.errors.append(f"line {lineno}: run_stem {stem} repeats line {seen[stem]}")
        else:
            seen[stem] = lineno
        if row["status"] not in STATUSES:
            rep.errors.append(f"line {lineno}: status {row['status']!r} not in {STATUSES}")
        if row["status"] in ("stopped", "interrupted") and not row["reason"]:
            rep.errors.append(f"line {lineno}: {row['status']} without a reason")
        for key in task.verdicts:
            if row[key] not in VERDICTS:
                rep.errors.append(f"line {lineno}: {key} {row[key]!r} not yes/no/empty")
        # empty = a row migrated from before the column existed (padded, never rewritten)
        if row.get("recording_status", "") not in (*RECORDING_STATUSES, ""):
            rep.errors.append(
                f"line {lineno}: recording_status {row['recording_status']!r} not in {RECORDING_STATUSES}"
            )
        if row.get("dry_run", "") not in ("0", "1"):
            rep.errors.append(f"line {lineno}: dry_run {row.get('dry_run')!r} not 0/1")
        for key in task.all_numeric:
            if key in row and row[key] != "":
                try:
                    float(row[key])
                except ValueError:
                    rep.errors.append(f"line {lineno}: {key} {row[key]!r} is not a number")
        for key in task.all_integer:
            if key in row and row[key] != "" and not re.fullmatch(r"-?\d+", row[key]):
                rep.errors.append(f"line {lineno}: {key} {row[key]!r} is not an integer")
    return rep


# ---------------------------------------------------------------- migrate


@dataclass
class MigrationReport:
    path: Path
    archive: Path | None
    rows: int
    added_columns: list[str]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def migrate_ledger(
    path: Path,
    columns: Sequence[str] | None = None,
    *,
    archive_dir: Path | None = None,
    now: Callable[[], float] = time.time,
) -> MigrationReport:
    """Add the missing trailing columns by archive-and-pad (docs/runtime.md, "Records").

    1. the old header must be a prefix of ``columns`` and every record one line;
    2. the old file is copied to ``archive_dir`` and the copy's checksum verified;
    3. the new file = new header + each old line + one empty cell per new column;
    4. each new line minus the padding is checked byte-identical to the old line,
       then the new file replaces the old one atomically.
    Raises LedgerError (the original file is then untouched).
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise LedgerError(f"cannot read {path}: {exc.strerror or exc}") from None
    header = read_header(path)
    if header is None:
        raise LedgerError(f"{path} is empty: nothing to migrate")
    columns = list(_columns(columns))
    if header == columns:
        return MigrationReport(path, None, raw.count(b"\n") - 1, [])
    if columns[: len(header)] != header:
        raise LedgerError(f"{path} header {header} is not a prefix of the new columns; cannot pad")
    if not raw.endswith(b"\n"):
        raise LedgerError(f"{path} ends with a partial line; repair it before migrating")
    lines = raw.split(b"\n")[:-1]
    records = list(csv.reader(io.StringIO(raw.decode("utf-8"), newline="")))
    if len(records) != len(lines):
        raise LedgerError(
            f"{path}: {len(records)} records on {len(lines)} lines (a record spans lines)"
        )
    for n, rec in enumerate(records[1:], 2):
        if len(rec) != len(header):
            raise LedgerError(f"{path} line {n}: {len(rec)} cells, header has {len(header)}")
    added = columns[len(header) :]
    pad = b"," * len(added)
    new = _encode_row(columns) + b"".join(line + pad + b"\n" for line in lines[1:])
    # check: every old row survives byte for byte, followed only by the padding
    new_lines = new.split(b"\n")[:-1]
    if len(new_lines) != len(lines):
        raise LedgerError("migration check failed: row count changed")
    for old, got in zip(lines[1:], new_lines[1:], strict=True):
        if got[: len(old)] != old or got[len(old) :] != pad:
            raise LedgerError("migration check failed: an old row changed")
    check = list(csv.reader(io.StringIO(new.decode("utf-8"), newline="")))
    if any(len(r) != len(columns) for r in check):
        raise LedgerError("migration check failed: a padded row has the wrong cell count")
    archive_dir = Path(archive_dir) if archive_dir is not None else path.parent / LEDGER_ARCHIVE
    archive_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d_%H%M%S", time.localtime(now()))
    archive = archive_dir / f"{path.stem}_{stamp}_{len(header)}cols{path.suffix}"
    if archive.exists():
        raise LedgerError(f"archive {archive} already exists; not overwriting it")
    shutil.copy2(path, archive)
    if _sha256(archive.read_bytes()) != _sha256(raw):
        raise LedgerError(f"archive {archive} does not match {path}; migration abandoned")
    atomic_write_bytes(path, new)
    return MigrationReport(path, archive, len(lines) - 1, added)
