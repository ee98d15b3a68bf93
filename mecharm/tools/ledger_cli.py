"""`mecharm ledger verify|migrate` — check a ledger, add columns by archive-and-pad."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mecharm.common.layout import LEDGER_ARCHIVE, LEDGER_SUFFIX
from mecharm.runtime.records.ledger import (
    LedgerError,
    migrate_ledger,
    verify_ledger,
)
from mecharm.runtime.tasks import records_for_ledger

__all__ = ["register"]


def _verify(args: argparse.Namespace) -> int:
    records = records_for_ledger(Path(args.ledger))  # its task, by its name
    rep = verify_ledger(Path(args.ledger), records)
    for err in rep.errors:
        print(f"{rep.path}: {err}", file=sys.stderr)
    if rep.ok:
        print(
            f"{rep.path}: ok, {rep.rows} rows, {len(records.ledger_columns)} columns "
            f"(task {records.task})"
        )
        return 0
    print(f"{rep.path}: {len(rep.errors)} problem(s) in {rep.rows} rows", file=sys.stderr)
    return 1


def _migrate(args: argparse.Namespace) -> int:
    try:
        rep = migrate_ledger(
            Path(args.ledger),
            records_for_ledger(Path(args.ledger)).ledger_columns,
            archive_dir=Path(args.archive_dir) if args.archive_dir else None,
        )
    except LedgerError as exc:
        print(f"migrate failed: {exc}", file=sys.stderr)
        return 1
    if not rep.added_columns:
        print(f"{rep.path}: already has the current columns; nothing to do")
    else:
        print(
            f"{rep.path}: added {', '.join(rep.added_columns)} to {rep.rows} rows; "
            f"old file archived at {rep.archive}"
        )
    return 0


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="ledger_cmd", required=True)
    v = sub.add_parser("verify", help="check header, cells, vocabularies and run stems of a ledger")
    v.add_argument("ledger", help=f"path to a task's ledger (runs/<task>{LEDGER_SUFFIX})")
    v.set_defaults(func=_verify)
    m = sub.add_parser("migrate", help="add missing columns (archive, pad old rows, check)")
    m.add_argument("ledger", help=f"path to a task's ledger (runs/<task>{LEDGER_SUFFIX})")
    m.add_argument(
        "--archive-dir",
        help=f"where the old generation goes (default: {LEDGER_ARCHIVE}/ beside it)",
    )
    m.set_defaults(func=_migrate)
