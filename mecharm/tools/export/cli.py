"""`mecharm export lerobot` and `mecharm export verify` (registered by mecharm.tools.cli)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mecharm.common.config import ConfigError, load_settings
from mecharm.common.layout import LEDGER_SUFFIX, RUNS_DIR
from mecharm.common.logging import configure_logging
from mecharm.tools.export.config import ExportSettings
from mecharm.tools.export.lerobot import DatasetError, ExportReport, export_lerobot
from mecharm.tools.export.recording import RecordingError
from mecharm.tools.export.selection import PRESETS, LedgerReadError
from mecharm.tools.export.verify import verify_dataset

__all__ = ["register"]


def _print_report(rep: ExportReport, dry_run: bool) -> None:
    out = sys.stdout
    verb = "would export" if dry_run else "exported"
    for ep in rep.exported:
        print(
            f"{verb} {ep.run_stem} as episode {ep.episode_index}: {ep.length} frames (from {ep.source_frames} recorded), "
            f"rig {ep.rig_id}, {'success' if ep.success else 'no success'}"
            + (f" [{ep.note}]" if ep.note else ""),
            file=out,
        )
    for s in rep.already:
        print(f"kept    {s.run_stem}: {s.reason}", file=out)
    for s in rep.skipped:
        print(f"skipped {s.run_stem}: {s.reason}", file=out)
    for s in rep.refused:
        print(f"REFUSED {s.run_stem}: {s.reason}", file=out)
    for item in rep.recovered:
        print(f"cleaned {item} (left by an interrupted export)", file=out)
    speed = (
        f", {rep.source_seconds / rep.seconds:.1f}x real time"
        if rep.seconds > 0 and rep.source_seconds > 0
        else ""
    )
    print(
        f"{verb} {len(rep.exported)} episode(s), kept {len(rep.already)}, skipped {len(rep.skipped)}, refused {len(rep.refused)}; "
        f"dataset {rep.out}: {rep.total_episodes} episodes, {rep.total_frames} frames ({rep.seconds:.1f} s{speed})",
        file=out,
    )


def _lerobot(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(
            ExportSettings,
            args.config,
            {
                "fps": args.fps,
                "select": args.select,
                "task": args.task,
                "trials_of": args.trials_of,
                "include_crashed": True if args.include_crashed else None,
                "allow_synthetic": True if args.allow_synthetic else None,
                "allow_time_scaled": True if args.allow_time_scaled else None,
                "cameras": args.cameras,
                "top_width": args.top_width,
                "side_width": args.side_width,
                "columns": args.columns,
                "action": args.action,
                "rig_id": args.rig_id,
                # a bar only on a terminal: not in logs, pipes or CI
                "progress": False if args.no_progress or not sys.stderr.isatty() else None,
            },
        )
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_json)
    try:
        rep = export_lerobot(
            Path(args.root),
            Path(args.out),
            settings,
            runs=set(args.run) if args.run else None,
            dry_run=args.dry_run,
        )
    except (DatasetError, LedgerReadError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RecordingError as exc:
        print(f"error: export aborted, nothing written: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # disk full, a folder that vanished, no permission: one line
        where = f": {exc.filename}" if exc.filename else ""
        print(
            f"error: export stopped, {exc.strerror or exc}{where}; the dataset keeps its last "
            'complete state (docs/lerobot.md, "Incremental, idempotent, atomic"): free space or fix the '
            "folder and run the same command again",
            file=sys.stderr,
        )
        return 3
    _print_report(rep, args.dry_run)
    return 0


def _verify(args: argparse.Namespace) -> int:
    if not Path(args.dir).is_dir():
        print(
            f"error: {args.dir}: no such folder (give a dataset folder holding meta/info.json)",
            file=sys.stderr,
        )
        return 2
    rep = verify_dataset(
        Path(args.dir),
        check_video=not args.no_video,
        progress=not args.no_progress and sys.stderr.isatty(),  # no bar in logs and pipes
    )
    for line in rep.notes:
        print(f"{rep.path}: note: {line}")
    if rep.ok:
        print(
            f"{rep.path}: ok, {rep.episodes} episodes, {rep.frames} frames, {rep.videos_checked} video file(s) decoded"
        )
        return 0
    for line in rep.errors:
        print(f"{rep.path}: {line}")
    print(f"{rep.path}: {rep.problems} problem(s)")
    return 1


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="export_cmd", required=True)
    lr = sub.add_parser(
        "lerobot", help="export recorded trials as a LeRobot v3.0 dataset (incremental)"
    )
    lr.add_argument(
        "--root", required=True, help=f"data root holding {RUNS_DIR}/<task>{LEDGER_SUFFIX}"
    )
    lr.add_argument(
        "--trials-of",
        dest="trials_of",
        metavar="TASK",
        help="the runtime task whose trials are exported: its ledger, success rule and "
        "verdicts (default pick_place; docs/tasks.md)",
    )
    lr.add_argument(
        "--out", required=True, help="dataset folder (created, or extended with new trials)"
    )
    lr.add_argument("--fps", type=int, help="dataset rate (default 10)")
    lr.add_argument(
        "--select",
        help=f"ledger selection: a preset ({', '.join(PRESETS)}) or col=value[|value],col!=value",
    )
    lr.add_argument(
        "--run", action="append", metavar="RUN_STEM", help="only this trial (repeatable)"
    )
    lr.add_argument(
        "--task", help="task text for the new episodes (default: the runtime task's words)"
    )
    lr.add_argument(
        "--include-crashed",
        action="store_true",
        help="also export recordings whose recorder died (status crashed, repaired): "
        "the rows their decodable frames cover",
    )
    lr.add_argument(
        "--allow-synthetic",
        action="store_true",
        help="also export recordings whose side camera was a synthetic test card "
        "(mecharm-recorder --camera synthetic); refused by default",
    )
    lr.add_argument(
        "--allow-time-scaled",
        action="store_true",
        help="also export trials recorded faster than real time (the simulated rig's time "
        "scale, e.g. make run's 5x); refused by default: the arm's path, not its timing",
    )
    lr.add_argument(
        "--cameras",
        metavar="side,top",
        help="video features: side,top (default) or side; fixed by the dataset's first export",
    )
    lr.add_argument(
        "--top-width",
        type=int,
        metavar="PX",
        help="top camera video width in the dataset (default 640, aspect kept; 0 = as recorded)",
    )
    lr.add_argument(
        "--side-width",
        type=int,
        metavar="PX",
        help="side camera video width in the dataset (default 0 = as recorded, aspect kept)",
    )
    lr.add_argument(
        "--columns",
        choices=("all", "lerobot"),
        help="all (default): also the outcome (next.*) and mecharm.* columns; lerobot: only "
        "the columns lerobot-record writes on this robot, so lerobot's merge takes the dataset "
        "with one it recorded; fixed by the dataset's first export",
    )
    lr.add_argument(
        "--action",
        choices=("command", "measured"),
        help="the action's joints: command (default), the target sent, in force since; "
        "measured, the measured joints one row later (the path the arm took, which "
        "lerobot-replay can follow step by step); fixed by the dataset's first export",
    )
    lr.add_argument(
        "--rig-id",
        help="rig id of trials whose run log names none (default: the data root's folder "
        "name); run once per data root to merge several rigs into one dataset",
    )
    lr.add_argument("--config", help="YAML settings file (e.g. configs/export.yaml)")
    lr.add_argument(
        "--dry-run",
        action="store_true",
        help="list what would be exported, skipped and refused; write nothing",
    )
    lr.add_argument("--no-progress", action="store_true", help="no progress bar")
    lr.set_defaults(func=_lerobot)
    ve = sub.add_parser(
        "verify",
        help="check a LeRobot v3.0 dataset without torch (schema, indices, ranges, stats, video "
        "timestamps; docs/lerobot-verify.md); exit 0 clean, 1 problems, 2 no such folder",
    )
    ve.add_argument("dir", help="dataset folder")
    ve.add_argument("--no-video", action="store_true", help="skip decoding the videos")
    ve.add_argument("--no-progress", action="store_true", help="no progress bar")
    ve.set_defaults(func=_verify)
