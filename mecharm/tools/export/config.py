"""Export settings (``MECHARM_EXPORT_`` env prefix, ``configs/export.yaml``, CLI flags)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from mecharm.common.config import RigSettings
from mecharm.common.framegaps import MAX_FRAME_OFFSET_S, ROW_FPS
from mecharm.common.gripper import GRIPPER_SETTLE_S
from mecharm.common.layout import DEFAULT_TASK as LAYOUT_DEFAULT_TASK
from mecharm.common.rigid import check_rig_id

if TYPE_CHECKING:
    from mecharm.runtime.records.outcome import TaskRecords

__all__ = ["CAMERAS", "DEFAULT_TASK", "ExportSettings"]

#: pick-and-place's words (its ``TaskRecords.instruction``): the dataset's task string when
#: neither ``task`` nor a task of its own is given
DEFAULT_TASK = "put the red block in the white box"
#: the cameras a dataset can carry, in the order their features are written; the side
#: camera's frame log sets the rows, so it is always one of them
CAMERAS: tuple[Literal["side", "top"], ...] = ("side", "top")


class ExportSettings(RigSettings):
    """How recordings become LeRobot episodes; defaults follow docs/lerobot.md and lerobot 0.4.4."""

    model_config = SettingsConfigDict(env_prefix="MECHARM_EXPORT_")

    #: dataset rate; 10 Hz because the side camera's p95 frame gap is 94 ms (docs/recorder.md)
    fps: int = Field(ROW_FPS, ge=1, le=60)
    #: the runtime task whose trials are exported: its ledger, run folders, selection
    #: columns and per-episode verdicts (docs/tasks.md); fixed by a dataset's first export
    trials_of: str = LAYOUT_DEFAULT_TASK
    #: the dataset's task string (what a language-conditioned policy is told); "" = the
    #: runtime task's own words (pick_place: "put the red block in the white box")
    task: str = Field("", max_length=500)
    robot_type: str = Field("mecharm270", min_length=1, max_length=64)
    #: ledger selection (see docs/lerobot.md): a preset name or column=value conditions
    select: str = "success"
    #: also export recordings whose recorder died (meta status crashed, written by the
    #: repair): only the rows their decodable frames cover (docs/lerobot.md, "Crashed recordings")
    include_crashed: bool = False
    #: also export recordings of a generated test card (``mecharm-recorder --camera
    #: synthetic``): refused by default, they are no demonstration (docs/lerobot.md)
    allow_synthetic: bool = False
    #: also export trials recorded faster than real time (a simulated rig's time scale above
    #: 1, its run log says): refused by default, their rows have the arm's path but not its
    #: timing (docs/lerobot.md, "The pace of a recording")
    allow_time_scaled: bool = False
    #: rig id of trials whose run log names none (recorded before the runtime wrote it);
    #: "" = the data root folder's name (made a valid rig id: mecharm/common/rigid.py).
    #: Episodes are identified by (rig id, run stem), so
    #: several rigs' datasets can go into one (docs/lerobot-outcomes.md)
    rig_id: str = ""

    # --- state / action definitions ---
    #: linear interpolation between two measured rows at most this far apart; beyond
    #: that the arm was at rest (no move, no polling) and the earlier reading is held
    max_interp_gap_s: float = Field(0.25, gt=0, le=10)
    #: the jaws take this long to follow a gripper command (the runtime waits as long,
    #: mecharm/common/gripper.py); the observed gripper switches after it, the action at
    #: the command. The values themselves come from the recording (what was sent).
    gripper_settle_s: float = Field(GRIPPER_SETTLE_S, ge=0, le=10)
    #: a row whose nearest recorded frame is farther than this refuses the trial
    max_frame_offset_s: float = Field(MAX_FRAME_OFFSET_S, gt=0, le=5)

    #: what ``action``'s joints are: ``command``, the target the daemon sent, in force since
    #: that send (point-to-point moves: jumps of tens of degrees); ``measured``, the measured
    #: joints one row later (the path the arm took, in steps ``lerobot-replay`` can send).
    #: The gripper is the command either way. Fixed by a dataset's first export
    #: (docs/lerobot.md, "Action")
    action: Literal["command", "measured"] = "command"

    # --- cameras (docs/lerobot-top-camera.md) ---
    #: the video features: ``side`` (the recorder's episode.mp4) and ``top`` (the runtime's
    #: top_camera.mkv); fixed by a dataset's first export, like fps
    cameras: Annotated[list[Literal["side", "top"]], NoDecode] = Field(
        default_factory=lambda: list(CAMERAS)
    )
    #: width of the top camera's video in the dataset (height keeps the aspect, both even);
    #: 0 = as recorded. Encoding the sim's 1920x1080 at full size halves the export speed.
    top_width: int = Field(640, ge=0, le=7680)
    #: width of the side camera's video in the dataset, the same way; 0 = as recorded (the
    #: default). ``--side-width 640 --top-width 640`` gives both cameras 640x360: equal
    #: shapes, which diffusion and VQ-BeT policies require (docs/lerobot.md, "Image sizes")
    side_width: int = Field(0, ge=0, le=7680)
    #: ``all``: lerobot's columns plus the outcome (``next.*``) and per-episode
    #: (``mecharm.*``) columns; ``lerobot``: only the columns ``lerobot-record`` writes on
    #: this robot, so lerobot's merge takes the dataset with one it recorded as it is (the
    #: outcomes stay in the manifest). Fixed by a dataset's first export (docs/lerobot.md,
    #: "Columns")
    columns: Literal["all", "lerobot"] = "all"

    # --- video (H.264 via PyAV) ---
    preset: Literal["ultrafast", "superfast", "veryfast", "faster", "fast", "medium"] = "ultrafast"
    crf: int = Field(30, ge=0, le=51)
    #: keyframe interval in frames; lerobot uses 2 so random access decodes little
    gop: int = Field(2, ge=1, le=600)

    # --- lerobot file layout (its defaults) ---
    chunks_size: int = Field(1000, ge=1)
    data_files_size_in_mb: int = Field(100, ge=1)
    video_files_size_in_mb: int = Field(200, ge=1)

    progress: bool = True
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_json: bool | None = None

    @field_validator("cameras", mode="before")
    @classmethod
    def _camera_list(cls, v: object) -> object:
        """``side,top`` (flag, env) or a list; the side camera is required (it sets the rows)."""
        names = v
        if isinstance(v, str):
            text = v.strip()
            names = json.loads(text) if text.startswith("[") else text.split(",")
            names = [str(c).strip() for c in names if str(c).strip()]
        if isinstance(names, list):
            if "side" not in names:
                raise ValueError(
                    "must include side: the side camera's frame log sets the dataset's rows"
                )
            if len(set(names)) != len(names):
                raise ValueError(f"{names} names a camera twice")
            names = sorted(names, key=lambda c: CAMERAS.index(c) if c in CAMERAS else len(CAMERAS))
        return names

    @field_validator("rig_id")
    @classmethod
    def _rig_id(cls, v: str) -> str:
        v = v.strip()
        return check_rig_id(v) if v else v  # "" = the data root's folder name

    @field_validator("robot_type")
    @classmethod
    def _printable(cls, v: str) -> str:
        v = v.strip()
        if not v or not v.isprintable():
            raise ValueError("must be non-empty printable text")
        return v

    @field_validator("task")
    @classmethod
    def _task_words(cls, v: str) -> str:
        v = v.strip()
        if not v.isprintable():
            raise ValueError("must be printable text")
        return v

    @field_validator("trials_of")
    @classmethod
    def _trials_of(cls, v: str) -> str:
        from mecharm.runtime.tasks import get_task  # the registry imports the runtime's tasks

        return get_task(v).name

    @property
    def records(self) -> TaskRecords:
        """The records of the task whose trials are exported."""
        from mecharm.runtime.tasks import task_records

        return task_records(self.trials_of)

    @property
    def task_words(self) -> str:
        """The dataset's task string: ``task``, else the runtime task's instruction."""
        return self.task or self.records.instruction
