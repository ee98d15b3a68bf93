"""`mecharm report ROOT [--out FILE]`: write the run report page.

Exit 0 when the page is written (trials whose files cannot be read are marked on it and
counted on stderr), 1 when it cannot be written, 2 for a folder that is not a data root
with trials (one line saying what to give instead).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from mecharm.common.fsutil import atomic_write_bytes
from mecharm.common.layout import DEFAULT_TASK, REPORT, DataRoot
from mecharm.common.logging import configure_logging
from mecharm.tools.report.collect import BadRootError, collect
from mecharm.tools.report.episodes import exportable
from mecharm.tools.report.render import render

__all__ = ["register", "run"]


def run(root: Path, out: Path | None = None, task: str = DEFAULT_TASK) -> int:
    try:
        data = collect(root, task)
    except BadRootError as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 2
    out = out if out is not None else DataRoot(root, task).report
    try:
        # the exporter's own verdict per trial (a dry run: nothing written)
        page = render(data, out, exportable=exportable(data, task))
        atomic_write_bytes(out, page.encode("utf-8"))
        # the temp file was private (0600); a page is for anyone who may read the root
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(out, 0o666 & ~mask)
    except OSError as exc:
        print(f"report: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    bad = [t for t in data.trials if t.problems]
    if bad:
        print(
            f"report: {len(bad)} trial(s) with unreadable files, marked on the page: "
            + ", ".join(t.stem for t in bad[:5])
            + (" ..." if len(bad) > 5 else ""),
            file=sys.stderr,
        )
    ok = sum(t.success for t in data.trials)
    print(f"report: {out} ({len(data.trials)} trials, {ok} succeeded)")
    return 0


def _main(args: argparse.Namespace) -> int:
    # stdout is the page's one line; the exporter's dry run says each refusal on the page
    # itself, so its warnings stay off the console (errors still reach stderr)
    configure_logging("error")
    return run(Path(args.root), Path(args.out) if args.out else None, args.task)


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("root", metavar="ROOT", help="the data root the trials were written to")
    parser.add_argument(
        "--out",
        metavar="FILE",
        help=f"where to write the page (default: {REPORT} at the data root; "
        f"<task>_{REPORT} for another task)",
    )
    parser.add_argument(
        "--task",
        default=DEFAULT_TASK,
        help="the runtime task whose trials the page shows (default pick_place; docs/tasks.md)",
    )
    parser.set_defaults(func=_main)
