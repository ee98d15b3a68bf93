"""`mecharm recording repair` — account for recordings a killed recorder left without a meta.

The repair itself is the recorder's (``mecharm.recorder.repair``; the recorder also runs it at
start-up): cut ``frame_log.csv`` to the frames the mp4 really decodes to, keep the
original aside, write the meta with status ``crashed`` (docs/recorder.md, "Crashed
recordings"). Exit 0 when every folder asked for is accounted for, 1 when one could not
be repaired (busy, unwritable), 2 for a refused argument (outside the root, not a recording).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mecharm.common.layout import DataRoot
from mecharm.recorder.repair import (
    RecordingBusyError,
    RepairError,
    RepairResult,
    find_recording,
    repair_recording,
    unrepaired_recordings,
)

__all__ = ["register"]

BY = "mecharm recording repair"


def _describe(res: RepairResult) -> str:
    rel = DataRoot.recording_rel(res.run_stem)
    m = res.meta
    if res.action == "repaired" and m is not None:
        return (
            f"repaired {rel}: status crashed, {m.frames_written} of {m.frames_captured} logged "
            f"frames decode, {m.frame_log_rows_removed} frame log row(s) cut, "
            f"{m.seconds_lost:.3f} s lost"
        )
    if res.action == "already" and m is not None:
        return (
            f"already repaired {rel}: {m.frames_written} frames, {m.seconds_lost or 0:.3f} s lost"
        )
    return f"complete {rel}: {res.note}, nothing to repair"


def _repair(args: argparse.Namespace) -> int:
    root = Path(args.root)
    if args.all == bool(args.targets):
        print("error: name RUN_STEM_OR_PATH ... or --all (not both)", file=sys.stderr)
        return 2
    if not root.is_dir():
        print(f"error: data root {root} is not a folder", file=sys.stderr)
        return 2
    if args.all:
        folders = unrepaired_recordings(root)
        if not folders:
            print(f"nothing to repair: every recording under {root} has its meta")
            return 0
    else:
        folders = []
        for target in args.targets:
            try:
                folders.append(find_recording(root, target))
            except RepairError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
    failed = 0
    for folder in folders:
        try:
            res = repair_recording(root, folder, by=BY)
        except RecordingBusyError as exc:
            print(f"NOT REPAIRED {exc}", file=sys.stderr)
            failed += 1
            continue
        except (RepairError, OSError) as exc:
            print(f"NOT REPAIRED {folder}: {exc}", file=sys.stderr)
            failed += 1
            continue
        print(_describe(res))
    if failed:
        print(f"{failed} of {len(folders)} recording(s) not repaired", file=sys.stderr)
        return 1
    return 0


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="recording_cmd", required=True)
    r = sub.add_parser(
        "repair",
        help="cut frame_log to the frames the mp4 decodes to and write the meta (status crashed) "
        "of recordings a killed recorder left",
    )
    r.add_argument("--root", required=True, help="data root holding the recordings")
    r.add_argument(
        "targets",
        nargs="*",
        metavar="RUN_STEM_OR_PATH",
        help="a run stem, or a run or recording folder inside the root",
    )
    r.add_argument(
        "--all", action="store_true", help="every recording under the root that has no meta"
    )
    r.set_defaults(func=_repair)
