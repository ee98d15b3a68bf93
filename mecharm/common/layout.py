"""The data root's layout: every folder and file name the processes share, spelled once.

The runtime, the recorder and the offline tools meet only through files under one
data root, so a name spelled twice is a contract that can drift. Every process
builds its paths from here; ``tests/common/test_data_root.py`` fails when one of
these names appears as a string anywhere else. The layout is described in
docs/data-root.md.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from mecharm.common.fsutil import OutsideRootError, inside_root, validate_name

__all__ = [
    "CORRECTION_MEMORY",
    "DATA_ROOT_ENV",
    "DEFAULT_TASK",
    "EXPORT_MANIFEST",
    "FK_ARCHIVE",
    "FK_DIR",
    "FK_TABLE",
    "FRAME_LOG",
    "FRAME_LOG_BEFORE_REPAIR",
    "HEIGHT_MEMORY",
    "HELD_BLOCK",
    "LEDGER",
    "LEDGER_ARCHIVE",
    "LEDGER_SUFFIX",
    "LOGS_DIR",
    "MEMORIES",
    "META",
    "ORPHAN_FRAMES",
    "RECORDING",
    "REPORT",
    "RERUN_SUFFIX",
    "RUNLOG_SUFFIX",
    "RUNS_DIR",
    "RUN_FOLDERS",
    "RUN_FOLDER_PREFIX",
    "RUN_STEM_FORMAT",
    "RUN_STEM_RE",
    "SNAPSHOTS",
    "STAGE_RAW",
    "STATES",
    "TASK_NAME_RE",
    "TOP_FRAME_LOG",
    "TOP_FRAME_LOG_BEFORE_REPAIR",
    "TOP_VIDEO",
    "TRACE_SUFFIX",
    "VIDEO",
    "DataRoot",
    "FkTableFiles",
    "RecordingFiles",
    "check_task_name",
    "default_data_root",
    "default_demo_root",
    "format_run_stem",
    "ledger_name",
    "run_folders_name",
    "run_number",
]

# --- names (one spelling each) ------------------------------------------------------------
RUNS_DIR = "runs"
#: each task has its folder of run folders, ``runs/run_<task>/``, and its ledger,
#: ``runs/<task>_ledger.csv`` (docs/data-root.md, "One folder and one ledger per task")
RUN_FOLDER_PREFIX = "run_"
LEDGER_SUFFIX = "_ledger.csv"
#: an exported LeRobot dataset's provenance sidecar (run stems, time scales; docs/lerobot.md),
#: beside lerobot's own meta files, which lerobot ignores
EXPORT_MANIFEST = "meta/mecharm_export.json"
#: the task of a root, a recorder event or a command that names none: the first task, so
#: every root written before tasks had names is already in this layout
DEFAULT_TASK = "pick_place"
#: a task's name becomes a folder and a file name: lower case, digits and underscores
TASK_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


def check_task_name(task: str) -> str:
    """``task`` when it can name a task's folder and ledger; else ValueError saying why."""
    if not isinstance(task, str) or not TASK_NAME_RE.fullmatch(task):
        raise ValueError(
            f"task name {task!r} is not lower-case letters, digits and underscores "
            "(at most 40, starting with a letter)"
        )
    return task


def run_folders_name(task: str) -> str:
    """``run_<task>``: the folder of a task's run folders."""
    return RUN_FOLDER_PREFIX + check_task_name(task)


def ledger_name(task: str) -> str:
    """``<task>_ledger.csv``: the task's ledger."""
    return check_task_name(task) + LEDGER_SUFFIX


RUN_FOLDERS = run_folders_name(DEFAULT_TASK)
LEDGER = ledger_name(DEFAULT_TASK)
LEDGER_ARCHIVE = "ledger_archive"
RECORDING = "recording"
VIDEO = "episode.mp4"
FRAME_LOG = "frame_log.csv"
FRAME_LOG_BEFORE_REPAIR = "frame_log.before_repair.csv"
STATES = "states.csv"
META = "recording_meta.json"
SNAPSHOTS = "extracted"
MEMORIES = "memories"
CORRECTION_MEMORY = "correction_memory.json"
HEIGHT_MEMORY = "height_memory.json"
#: a session that ended with the block in the gripper (the next one asks before it opens)
HELD_BLOCK = "held_block.json"
FK_DIR = "fk"
FK_TABLE = "fk_table.csv"
FK_ARCHIVE = "archive"
ORPHAN_FRAMES = ("diag", "recorder_orphan_frames")
TRACE_SUFFIX = ".trace.jsonl"
RUNLOG_SUFFIX = ".json"
#: the trial's Rerun recording (docs/viewing.md), next to its trace
RERUN_SUFFIX = ".rrd"
#: the processes' log files (the console shows the operator what matters, the file the rest)
LOGS_DIR = "logs"
#: ``mecharm report ROOT`` writes this page at the root
REPORT = "report.html"
#: the stage images' raw frames, in a folder of the run folder (docs/stage-images.md)
STAGE_RAW = "raw"
#: the top camera's video of the whole trial and its frame log, in the run folder
#: (written by the runtime; docs/top-camera.md)
TOP_VIDEO = "top_camera.mkv"
TOP_FRAME_LOG = "top_frame_log.csv"
#: the top frame log as a killed runtime left it, before the start-up reconciliation cut it
TOP_FRAME_LOG_BEFORE_REPAIR = "top_frame_log.before_repair.csv"

#: the variable that names the one data root every process defaults to (the rig's SSD on the
#: control computer, e.g. ``MECHARM_DATA_ROOT=/Volumes/RigSSD``; docs/setup.md, "Defaults")
DATA_ROOT_ENV = "MECHARM_DATA_ROOT"


def _user_data_dir() -> Path:
    """``$XDG_DATA_HOME/mecharm`` (``~/.local/share/mecharm``): the user's, whatever the cwd."""
    base = os.environ.get("XDG_DATA_HOME", "").strip()
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".local" / "share"
    return root / "mecharm"


def default_data_root() -> Path:
    """The data root of the runtime, the recorder, ``mecharm fk`` and ``mecharm replay``
    without ``--data-root``: ``$MECHARM_DATA_ROOT`` when set (set it once on the rig: the
    processes then agree), else ``$XDG_DATA_HOME/mecharm/data``. Never created."""
    given = os.environ.get(DATA_ROOT_ENV, "").strip()
    return Path(given).expanduser() if given else _user_data_dir() / "data"


def default_demo_root() -> Path:
    """Where ``python -m mecharm.tools.demo`` writes without ``--data-root``, whatever the
    working directory: ``$XDG_DATA_HOME/mecharm/demo`` (``make run``: the checkout's data/demo)."""
    return _user_data_dir() / "demo"


#: ``run_NNNN_YYYYmmdd_HHMMSS``; NNNN counts up from 0001 and may grow past four digits.
RUN_STEM_RE = re.compile(r"^run_(\d{4,})_\d{8}_\d{6}$")
RUN_STEM_FORMAT = "run_NNNN_YYYYmmdd_HHMMSS"


def format_run_stem(number: int, now: float | None = None) -> str:
    """The stem of run ``number`` started at ``now`` (local time, default the current time)."""
    stamp = time.strftime("%Y%m%d_%H%M%S", time.localtime(time.time() if now is None else now))
    return f"run_{number:04d}_{stamp}"


def run_number(name: str) -> int | None:
    """The run number of a stem, or None when ``name`` is not a run stem."""
    m = RUN_STEM_RE.fullmatch(name)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class RecordingFiles:
    """One trial's recording folder (written by the recorder, read by runtime and exporter)."""

    dir: Path

    @property
    def video(self) -> Path:
        return self.dir / VIDEO

    @property
    def frame_log(self) -> Path:
        return self.dir / FRAME_LOG

    @property
    def frame_log_before_repair(self) -> Path:
        """The frame log as a crashed recorder left it, kept when a repair cut rows."""
        return self.dir / FRAME_LOG_BEFORE_REPAIR

    @property
    def states(self) -> Path:
        return self.dir / STATES

    @property
    def meta(self) -> Path:
        """Written last, atomically: its absence means the recording ended abnormally."""
        return self.dir / META

    @property
    def snapshots(self) -> Path:
        """Side-camera frames saved on ``frame_request`` during the trial."""
        return self.dir / SNAPSHOTS


@dataclass(frozen=True)
class FkTableFiles:
    """The FK table CSV and what lives next to it (it may sit outside a data root)."""

    csv: Path

    @property
    def record(self) -> Path:
        """The CSV's checksum, size and mtime (``{stem}.sha256``)."""
        return self.csv.with_name(self.csv.stem + ".sha256")

    def cache(self, checksum: str) -> Path:
        """The binary copy for one checksum: ``.{name}.{sha256[:16]}.npz``."""
        return self.csv.with_name(f".{self.csv.name}.{checksum[:16]}.npz")

    @property
    def cache_glob(self) -> str:
        """Matches every binary copy of this table (for removing stale ones)."""
        return f".{self.csv.name}.*.npz"

    @property
    def archive_dir(self) -> Path:
        return self.csv.parent / FK_ARCHIVE

    @property
    def lock(self) -> Path:
        """Held while the default table is built (two processes starting on one root)."""
        return self.csv.with_name(f".{self.csv.stem}.lock")


@dataclass(frozen=True)
class DataRoot:
    """Paths under one data root, for one task (``task``: its run folders and ledger). Run
    stems are checked with ``validate_name`` (they may come from the network), so a path
    built here never leaves the root."""

    root: Path
    task: str = DEFAULT_TASK

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))
        check_task_name(self.task)

    def for_task(self, task: str) -> DataRoot:
        """The same root, for ``task``."""
        return DataRoot(self.root, task)

    def task_folders(self) -> list[Path]:
        """Every task's folder of run folders under ``runs/`` (``run_<task>``), by name."""
        try:
            return sorted(
                p for p in self.runs.iterdir()
                if p.is_dir() and p.name.startswith(RUN_FOLDER_PREFIX)
                and TASK_NAME_RE.fullmatch(p.name[len(RUN_FOLDER_PREFIX):])
            )  # fmt: skip
        except OSError:
            return []

    def tasks(self) -> list[str]:
        """The tasks this root holds run folders of."""
        return [p.name[len(RUN_FOLDER_PREFIX) :] for p in self.task_folders()]

    def links_out(self) -> list[str]:
        """What of the root's fixed folders and files resolves outside the root (a symlink
        out of it), one reason each: a process refuses to start on such a root rather than
        write through the link (docs/data-root.md, "Nothing outside the root")."""
        out = []
        for path in (self.runs, *self.task_folders(), self.run_folders, self.logs, self.memories,
                     self.correction_memory, self.height_memory):  # fmt: skip
            if not os.path.lexists(path):
                continue
            try:
                inside_root(self.root, path)
            except OutsideRootError as exc:
                out.append(str(exc))
        return out

    # --- runs --------------------------------------------------------------------------
    @property
    def runs(self) -> Path:
        return self.root / RUNS_DIR

    @property
    def run_folders(self) -> Path:
        """Holds one folder per trial of the task, named by its run stem."""
        return self.runs / run_folders_name(self.task)

    @property
    def ledger(self) -> Path:
        """The task's ledger: one row per trial (records/ledger.py)."""
        return self.runs / ledger_name(self.task)

    @property
    def ledger_archive(self) -> Path:
        """Where ``mecharm ledger migrate`` keeps the ledger it replaced."""
        return self.runs / LEDGER_ARCHIVE

    def run_dir(self, run_stem: str) -> Path:
        return self.run_folders / validate_name(run_stem, "run_stem")

    def trace(self, run_stem: str) -> Path:
        return self.run_dir(run_stem) / f"{run_stem}{TRACE_SUFFIX}"

    def runlog(self, run_stem: str) -> Path:
        return self.run_dir(run_stem) / f"{run_stem}{RUNLOG_SUFFIX}"

    def top_video(self, run_stem: str) -> Path:
        """The top camera's MJPEG-in-Matroska video of the trial (docs/top-camera.md)."""
        return self.run_dir(run_stem) / TOP_VIDEO

    def top_frame_log(self, run_stem: str) -> Path:
        """``frame_idx,capture_ts,mono_ns``: one row per packet of ``top_video``."""
        return self.run_dir(run_stem) / TOP_FRAME_LOG

    def top_frame_log_before_repair(self, run_stem: str) -> Path:
        """The top frame log as a killed runtime left it (kept by the reconciliation)."""
        return self.run_dir(run_stem) / TOP_FRAME_LOG_BEFORE_REPAIR

    def rerun(self, run_stem: str) -> Path:
        """The trial's Rerun recording, built after the trial from its files."""
        return self.run_dir(run_stem) / f"{run_stem}{RERUN_SUFFIX}"

    @staticmethod
    def recording_rel(run_stem: str, task: str = DEFAULT_TASK) -> PurePosixPath:
        """The recording folder relative to the root (as written in the meta and the ledger)."""
        return PurePosixPath(
            RUNS_DIR, run_folders_name(task), validate_name(run_stem, "run_stem"), RECORDING
        )

    def recording(self, run_stem: str) -> RecordingFiles:
        rel = self.recording_rel(run_stem, self.task)
        return RecordingFiles(self.root.joinpath(*rel.parts))

    def next_run_stem(self, now: float | None = None) -> str:
        """``run_NNNN_YYYYmmdd_HHMMSS`` with NNNN one above the highest run folder of any
        task: a run stem names one trial in the whole root."""
        n = 0
        for folder in self.task_folders():
            with contextlib.suppress(OSError):
                for p in folder.iterdir():
                    n = max(n, run_number(p.name) or 0)
        return format_run_stem(n + 1, now)

    # --- memories, FK table, diagnostics ------------------------------------------------
    @property
    def memories(self) -> Path:
        return self.root / MEMORIES

    @property
    def correction_memory(self) -> Path:
        return self.memories / CORRECTION_MEMORY

    @property
    def height_memory(self) -> Path:
        return self.memories / HEIGHT_MEMORY

    @property
    def held_block(self) -> Path:
        """Set while a session ended holding the block (docs/runtime.md, "A block held across sessions")."""
        return self.memories / HELD_BLOCK

    @property
    def fk_table(self) -> Path:
        """The default FK table of a data directory (the runtime's ``fk_data_dir``)."""
        return self.root / FK_DIR / FK_TABLE

    @property
    def logs(self) -> Path:
        """Log files of the processes writing to this root (one per process and session)."""
        return self.root / LOGS_DIR

    @property
    def report(self) -> Path:
        """``report.html`` for the default task (every root's page before tasks had names),
        ``<task>_report.html`` for another."""
        name = REPORT if self.task == DEFAULT_TASK else f"{self.task}_{REPORT}"
        return self.root / name

    @property
    def orphan_frames(self) -> Path:
        """Side-camera frames requested while no trial was open."""
        return self.root.joinpath(*ORPHAN_FRAMES)
