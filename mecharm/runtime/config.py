"""Typed runtime settings: the reference rig's constants (docs/runtime.md) plus where things are.

Loaded with ``mecharm.common.config.load_settings(RuntimeSettings, "configs/runtime.yaml",
overrides)``; environment variables use the ``MECHARM_RUNTIME_`` prefix, a group's key
with ``__`` (``MECHARM_RUNTIME_ARM__SPEED``). Keys sit in one group per concern (the
daemon link, the recorder link, viewing, the judge, perception, the arm, motion, the
pick-and-place task); the session's own keys stay at the top (docs/settings.md). The time
scale divides every sleep and every arrival timeout so the simulated rig (which can run its
motions K times faster) and the tests can run whole trials in seconds; it never
changes a decision. It comes from the daemon's hello (docs/setup.md, "Time scale"): the
``time_scale`` key is only a check (None: take the daemon's).

One concern: the runtime's settings model, its groups and their one translation from the
flat layout of older files and traces (``MOVED_SETTINGS``); the keys' words are the
settings reference, generated from this file.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from mecharm.common.config import RigSettings
from mecharm.common.defaults import APPROACH_PICK_ARC, APPROACH_PLACE_ARC
from mecharm.common.gripper import GRIPPER_CLOSE_VALUE, GRIPPER_MAX, GRIPPER_MIN, GRIPPER_SETTLE_S
from mecharm.common.keyfile import default_recorder_key_file
from mecharm.common.kinematics import JOINT_MAX, JOINT_MIN
from mecharm.common.layout import DEFAULT_TASK, default_data_root
from mecharm.common.rerun_viewer import viewer_url_problem
from mecharm.common.rigid import check_rig_id, rig_id_from
from mecharm.runtime.memories import CORRECTION_LIMIT_MM, HEIGHT_LIMIT_MM
from mecharm.runtime.perception.config import CameraCalibration

__all__ = [
    "MOVED_SETTINGS",
    "NOT_CONSTANTS",
    "REMOVED_SETTINGS",
    "TAGS_MAX",
    "TAG_RE",
    "RuntimeSettings",
    "dotted",
    "is_constant",
    "nest_flat",
    "recorded_constant",
    "setting_paths",
]

Angles6 = tuple[float, float, float, float, float, float]


#: Settings that chose between today's behaviour and an older one, removed with the older
#: code path (docs/replay.md, "Traces older than the code"): what each does now. A file or
#: variable that still sets one is refused with this sentence; a trace that recorded one
#: replays with today's behaviour and reports where its decisions differ.
REMOVED_SETTINGS: dict[str, str] = {
    "height_rule": "the height memory always learns from the release margin it measured",
    "height_new_cell": "a new place cell always starts from the highest learnt cell",
    "servo_drop_check": "the place servo always stops steering a block that does not move "
    "with the tip",
    "retry_open_at": "a missed pick always opens the gripper lowered to the pick pose",
    "path_check": "every move's joint-space path is always checked (docs/safety.md)",
    "place_at_untrusted_box": "detect always stops when the box detection doubts itself",
    "correction_learn": "the pick correction always learns from every measured tip",
    "pick_servo_fine_fallback": "a pick servo step with no table row is always solved "
    "from the arm's pose",
    "pick_height_retry": "a pick missed in height always retries in pick_retry_band",
    "depth_step": "a depth step is always solved from the arm's pose",
    "lost_block": "a block that left the jaws is always judged where it went",
    "learn_failed_places": "places that did not happen always teach the height memory",
    "retry_never_lifted": "a pick found never lifted is always tried again",
    "height_lost_floor": "a block lost on the box always raises every lower place cell",
}


#: a session tag (``tags``): a short word, safe in HTML, CSS and file names
TAG_RE = re.compile(r"[A-Za-z0-9._-]{1,32}")
#: tags a session may carry
TAGS_MAX = 8

#: settings that shape no decision, left out of a trace's constants (secrets' paths, the
#: session's length, what is shown and how the top camera is recorded: it only observes;
#: the rig's name and the session's tags)
NOT_CONSTANTS = frozenset({
    "daemon.token_file", "recorder.key_file", "trials", "confirm", "log_level", "viewing",
    "rig_id", "tags",
    # the trace's header names the task on its own line (trial.py)
    "task",
})  # fmt: skip

#: Where each setting of the flat layout (before the groups, docs/settings.md) lives now.
#: Settings files and variables must use the new place (a flat key is refused with it);
#: a trace's or run log's constants and keyword arguments in code are translated.
MOVED_SETTINGS: dict[str, str] = {
    "daemon_host": "daemon.host",
    "daemon_port": "daemon.port",
    "daemon_token_file": "daemon.token_file",
    "request_timeout_s": "daemon.request_timeout_s",
    "connect_timeout_s": "daemon.connect_timeout_s",
    "daemon_busy_wait_s": "daemon.busy_wait_s",
    "daemon_keepalive_s": "daemon.keepalive_s",
    "recorder_enabled": "recorder.enabled",
    "recorder_host": "recorder.host",
    "recorder_port": "recorder.port",
    "recorder_key_file": "recorder.key_file",
    "require_recorder": "recorder.required",
    "recorder_probe_timeout_s": "recorder.probe_timeout_s",
    "frame_timeout_s": "recorder.frame_timeout_s",
    "recording_wait_s": "recorder.recording_wait_s",
    "recording_poll_s": "recorder.recording_poll_s",
    "rerun_after_trial": "viewing.rerun_after_trial",
    "display": "viewing.display",
    "display_url": "viewing.display_url",
    "top_video": "viewing.top_video",
    "top_video_fps": "viewing.top_video_fps",
    "top_video_queue": "viewing.top_video_queue",
    "judge": "judge.by",
    "human_judge_timeout_s": "judge.human_timeout_s",
    "vlm_model": "judge.vlm_model",
    "vlm_base_url": "judge.vlm_base_url",
    "vlm_timeout_s": "judge.vlm_timeout_s",
    "vlm_max_calls": "judge.vlm_max_calls",
    "vlm_max_images": "judge.vlm_max_images",
    "vlm_max_tokens": "judge.vlm_max_tokens",
    "vlm_confidence_min": "judge.vlm_confidence_min",
    "vlm_ask_human": "judge.vlm_ask_human",
    "vlm_still_mm": "judge.vlm_still_mm",
    "vlm_outside_mm": "judge.vlm_outside_mm",
    "top_camera": "perception.top_camera",
    "top_camera_calibration": "perception.top_camera_calibration",
    "detect_repeat": "perception.detect_repeat",
    "homography_frames": "perception.homography_frames",
    "camera_frozen_frames": "perception.camera_frozen_frames",
    "box_score_thresh": "perception.box_score_thresh",
    "home": "arm.home",
    "speed": "arm.speed",
    "j1_max": "arm.j1_max",
    "joint_step_max_deg": "arm.joint_step_max_deg",
    "path_mat_margin_m": "arm.path_mat_margin_m",
    "path_box_margin_m": "arm.path_box_margin_m",
    "path_sample_deg": "arm.path_sample_deg",
    "gripper_settle_s": "arm.gripper_settle_s",
    "gripper_speed": "arm.gripper_speed",
    "gripper_close_value": "arm.gripper_close_value",
    "tol_approach": "motion.tol_approach",
    "tol_pick_place": "motion.tol_pick_place",
    "tol_home": "motion.tol_home",
    "tol_lift_to_arc": "motion.tol_lift_to_arc",
    "send_wait_s": "motion.send_wait_s",
    "arrival_min_s": "motion.arrival_min_s",
    "arrival_base_s": "motion.arrival_base_s",
    "arrival_per_deg_s": "motion.arrival_per_deg_s",
    "ignored_move_deg": "motion.ignored_move_deg",
    "poll_interval_s": "motion.poll_interval_s",
    "rest_eps_deg": "motion.rest_eps_deg",
    "rest_poll_s": "motion.rest_poll_s",
    "rest_max_polls": "motion.rest_max_polls",
    "approach_pick_arc": "pick_place.approach_pick_arc",
    "approach_place_arc": "pick_place.approach_place_arc",
    "max_pick_attempts": "pick_place.max_pick_attempts",
    "x_resid_thresh_m": "pick_place.x_resid_thresh_m",
    "box_xz_fallback": "pick_place.box_xz_fallback",
    "swept_j0": "pick_place.swept_j0",
    "dist_max_m": "pick_place.dist_max_m",
    "pick_band": "pick_place.pick_band",
    "place_band": "pick_place.place_band",
    "place_joint_tol": "pick_place.place_joint_tol",
    "place_floor_m": "pick_place.place_floor_m",
    "place_target_m": "pick_place.place_target_m",
    "place_band_depth_m": "pick_place.place_band_depth_m",
    "place_approach_above_band_mm": "pick_place.place_approach_above_band_mm",
    "z_resid_warn_m": "pick_place.z_resid_warn_m",
    "pick_hover_band": "pick_place.pick_hover_band",
    "pick_hover_dist_m": "pick_place.pick_hover_dist_m",
    "pick_resid_max_m": "pick_place.pick_resid_max_m",
    "servo_gain_deg_per_mm": "pick_place.servo_gain_deg_per_mm",
    "servo_tol_mm": "pick_place.servo_tol_mm",
    "servo_step_clamp_deg": "pick_place.servo_step_clamp_deg",
    "servo_max_iter": "pick_place.servo_max_iter",
    "depth_steps": "pick_place.depth_steps",
    "depth_tol_mm": "pick_place.depth_tol_mm",
    "pick_servo_max_iter": "pick_place.pick_servo_max_iter",
    "pick_servo_tol_mm": "pick_place.pick_servo_tol_mm",
    "pick_servo_step_mm": "pick_place.pick_servo_step_mm",
    "pick_redescend_mm": "pick_place.pick_redescend_mm",
    "pick_tip_height_mm": "pick_place.pick_tip_height_mm",
    "pick_retry_band": "pick_place.pick_retry_band",
    "cell_mm": "pick_place.cell_mm",
    "max_correction_mm": "pick_place.max_correction_mm",
    "ema_alpha": "pick_place.ema_alpha",
    "height_step_mm": "pick_place.height_step_mm",
    "height_max_mm": "pick_place.height_max_mm",
    "height_raise_margin_mm": "pick_place.height_raise_margin_mm",
    "height_start_mm": "pick_place.height_start_mm",
    "servo_drop_tip_mm": "pick_place.servo_drop_tip_mm",
    "servo_drop_still_mm": "pick_place.servo_drop_still_mm",
    "release_check": "pick_place.release_check",
    "release_margin_mm": "pick_place.release_margin_mm",
    "release_side_check": "pick_place.release_side_check",
    "release_reaim_max": "pick_place.release_reaim_max",
    "release_refused": "pick_place.release_refused",
    "pick_recheck_mm": "pick_place.pick_recheck_mm",
    "height_lost_step_mm": "pick_place.height_lost_step_mm",
    "height_lost_max_mm": "pick_place.height_lost_max_mm",
    "release_confirm_timeout_s": "pick_place.release_confirm_timeout_s",
}

#: the groups' shared rules: unknown keys refused, no NaN or infinity, defaults validated
_GROUP = ConfigDict(extra="forbid", allow_inf_nan=False, validate_default=True)


def nest_flat(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with every flat-layout key moved into its group (``speed`` → ``arm.speed``):
    how older constants and keyword arguments are read. A group given as a mapping and a
    flat key of it merge; the flat key wins."""
    out = dict(data)
    judge = out.get("judge")
    if isinstance(judge, str):  # the flat layout's ``judge: vlm`` is the judge group's ``by``
        out["judge"] = {"by": judge}
    for old, new in MOVED_SETTINGS.items():
        if old in out and old != "judge":
            group, leaf = new.split(".")
            value = out.pop(old)
            target = out.get(group)
            if isinstance(target, BaseModel):
                target = target.model_dump()
            out[group] = {**(target if isinstance(target, Mapping) else {}), leaf: value}
    return out


def setting_paths() -> dict[str, Any]:
    """Every setting's dotted path (``arm.speed``; top-level ones bare) and its annotation."""
    out: dict[str, Any] = {}
    for name, f in RuntimeSettings.model_fields.items():
        ann = f.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.update({f"{name}.{leaf}": g.annotation for leaf, g in ann.model_fields.items()})
        else:
            out[name] = ann
    return out


def dotted(nested: Mapping[str, Any]) -> dict[str, Any]:
    """A nested settings mapping as ``{dotted path: value}`` (one level of groups)."""
    out: dict[str, Any] = {}
    for k, v in nested.items():
        if k in _GROUP_NAMES and isinstance(v, Mapping):
            out.update({f"{k}.{leaf}": x for leaf, x in v.items()})
        else:
            out[k] = v
    return out


def is_constant(path: str) -> bool:
    """Whether the setting at ``path`` is recorded in a trace's constants (``NOT_CONSTANTS``)."""
    return path not in NOT_CONSTANTS and path.split(".", 1)[0] not in NOT_CONSTANTS


def recorded_constant(constants: Mapping[str, Any], path: str, default: Any = None) -> Any:
    """The value at ``path`` (``"judge.by"``) of a run log's or trace's constants, of either
    layout (flat from before the groups, or nested)."""
    node: Any = nest_flat(constants)
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def default_rig_id() -> str:
    """This computer's host name, made a valid ``rig_id`` (other characters become '-')."""
    return rig_id_from(socket.gethostname())


class DaemonLink(BaseModel):
    """The arm daemon: where it is, its secret, and how long to wait for it (docs/daemon.md)."""

    model_config = _GROUP

    #: the arm daemon's address
    host: str = "127.0.0.1"
    #: the arm daemon's TCP port
    port: int = Field(5555, ge=1, le=65535)
    #: the daemon's shared secret (default ~/.config/mecharm/daemon.token when it exists)
    token_file: Path | None = None
    #: one daemon request's deadline (real seconds)
    request_timeout_s: float = Field(4.0, gt=0)
    #: the daemon connection's deadline
    connect_timeout_s: float = Field(3.0, gt=0)
    # the daemon's client slot (docs/daemon.md, "Client slot"): wait this long for a busy
    # daemon (a stale client is dropped after its idle timeout) and ping it every
    # daemon_keepalive_s when nothing else is sent (0 = a third of the idle timeout it announces)
    busy_wait_s: float = Field(15.0, ge=0)
    #: ping the daemon this often when nothing else is sent; 0 = a third of the idle timeout it announces
    keepalive_s: float = Field(0.0, ge=0)


class RecorderLink(BaseModel):
    """The recorder: where its events go and how long the runtime waits for it (docs/recorder.md)."""

    model_config = _GROUP

    #: send the recorder its events (off: no recording, no side frames)
    enabled: bool = True
    #: where the recorder listens (UDP)
    host: str = "127.0.0.1"
    #: the recorder's UDP port
    port: int = Field(5556, ge=1, le=65535)
    #: the secret shared with the recorder (docs/recorder.md, "The key file")
    key_file: Path = Field(default_factory=default_recorder_key_file)
    #: refuse to start (exit 8) when no recorder answers on recorder_port or it writes to
    #: another data root; off: a loud warning and flagged trial lines (docs/recorder.md,
    #: "Ping: proving the data root")
    required: bool = False
    #: how long the start-up ping waits for the recorder's answer
    probe_timeout_s: float = Field(1.0, gt=0, le=30)
    #: how long a side frame from the recorder may take
    frame_timeout_s: float = Field(2.0, gt=0)
    #: after a trial, how long to wait for the recorder's meta.json
    recording_wait_s: float = Field(2.0, ge=0)
    #: how often to look for it meanwhile
    recording_poll_s: float = Field(0.1, gt=0)


class ViewingSettings(BaseModel):
    """What the operator sees and the top camera's video; none of these changes a decision
    or a trial's timing (docs/console.md, docs/top-camera.md)."""

    model_config = _GROUP

    #: after each trial, build its Rerun file in a niced background process (docs/console.md)
    rerun_after_trial: bool = True
    #: stream the trials live to a Rerun viewer while they run (``--display``)
    display: bool = False
    #: ``--display`` into a running viewer at this gRPC URL instead of spawning one
    display_url: str | None = None
    #: record the top camera into the run folder (top_camera.mkv + top_frame_log.csv)
    top_video: bool = True
    #: at most this many frames per second are kept (a frame at least 0.8/fps s after the
    #: last kept one); 0 = every frame the camera delivers
    top_video_fps: float = Field(10.0, ge=0, le=120)
    #: frames waiting for the writer; when full the newest is dropped (and counted), the
    #: camera never waits
    top_video_queue: int = Field(30, ge=1, le=1000)

    @field_validator("display_url")
    @classmethod
    def _viewer_url(cls, v: str | None) -> str | None:
        # refused at start, not after the first trial in the follower's log (docs/viewing.md)
        problem = viewer_url_problem(v) if v is not None else None
        if problem:
            raise ValueError(problem)
        return v


class JudgeSettings(BaseModel):
    """Who judges the pick and the place, and the VLM judge's limits (docs/perception.md)."""

    model_config = _GROUP

    #: who judges the pick and the place: geometric, human (the terminal) or vlm (docs/perception.md)
    by: Literal["geometric", "human", "vlm"] = "geometric"
    #: how long the human judge waits for an answer (then the fallback judge)
    human_timeout_s: float = Field(30.0, gt=0)
    # the VLM judge (docs/perception.md, "VLM judge"); key from ANTHROPIC_API_KEY. Real seconds:
    # time_scale does not shorten a remote call
    vlm_model: str = Field("claude-sonnet-4-6", min_length=1)
    vlm_base_url: str | None = None  # None: ANTHROPIC_BASE_URL, else the vendor's API
    #: the VLM judge: one call's deadline (real seconds)
    vlm_timeout_s: float = Field(20.0, gt=0, le=300)
    vlm_max_calls: int = Field(4, ge=0)  # per trial; then the geometric judge
    #: the VLM judge: images per call
    vlm_max_images: int = Field(3, ge=1, le=20)
    #: the VLM judge: answer length
    vlm_max_tokens: int = Field(300, ge=16, le=4096)
    #: the VLM judge's verdict is adopted at this confidence or above
    vlm_confidence_min: float = Field(0.7, ge=0, le=1)
    vlm_ask_human: bool = False  # also ask the operator (human_judge_timeout_s); an answer wins
    vlm_still_mm: float = Field(5.0, ge=0)  # distance override, pick
    vlm_outside_mm: float = Field(20.0, ge=0)  # distance override, place


class PerceptionSettings(BaseModel):
    """The top camera and how detect looks through it (docs/perception.md)."""

    model_config = _GROUP

    #: the top camera: an index, name:..., an MJPEG URL or a file
    top_camera: str = "http://127.0.0.1:8081/top.mjpg"
    #: the top camera's checkerboard calibration {fx, fy, cx, cy, dist: [k1, k2, p1, p2, k3]};
    #: None = a pinhole self-calibrated from the mat (docs/simulation-optics.md)
    top_camera_calibration: CameraCalibration | None = None
    #: detect runs this many times and combines them
    detect_repeat: int = Field(3, ge=1)
    #: top-camera frames averaged for the mat homography
    homography_frames: int = Field(10, ge=1)
    #: this many identical top-camera frames in a row = a frozen feed: the stage stops with
    #: that reason instead of judging from it (docs/perception.md, "Frozen feed"); 0 = off
    camera_frozen_frames: int = Field(10, ge=0)
    #: the box's template score below this makes the detection untrusted
    box_score_thresh: float = Field(0.5, ge=0, le=1)


class ArmSettings(BaseModel):
    """The arm the safe arm guards: HOME, speed, limits, the path check, the gripper
    (docs/safety.md)."""

    model_config = _GROUP

    #: the HOME pose (degrees, j0..j5)
    home: Angles6 = (0.0, 0.0, 0.0, 0.0, 0.0, -30.0)
    #: send_angles speed (1-100)
    speed: int = Field(20, ge=1, le=100)
    #: send_angles speed of a streamed step (the control loop, the lerobot robot): the
    #: firmware starts each command from rest, so a stream of small bounded steps at the
    #: point-to-point speed moves at a fraction of it (docs/control-loop.md, "Stream speed")
    stream_speed: int = Field(50, ge=1, le=100)
    #: the gripper's settle time after each command (real seconds)
    gripper_settle_s: float = Field(GRIPPER_SETTLE_S, ge=0)
    #: set_gripper_value speed when closing
    gripper_speed: int = Field(100, ge=1, le=100)
    #: the gripper value that closes on the block
    gripper_close_value: int = Field(GRIPPER_CLOSE_VALUE, ge=GRIPPER_MIN, le=GRIPPER_MAX)
    #: the largest j1 any pose may have (the rig's limit; the daemon's envelope may narrow it)
    j1_max: float = Field(88.0, le=90.7)
    # joint continuity (docs/safety.md): near the work no joint moves more than this per move
    # (descents, lifts, servo and depth steps); 0 = no bound
    joint_step_max_deg: float = Field(15.0, ge=0)
    #: the path check keeps tip and wrist this far above the mat
    path_mat_margin_m: float = Field(0.005, ge=0)
    #: ... and this far outside the box's walls
    path_box_margin_m: float = Field(0.005, ge=0)
    # at least 0.1° (a finer step only costs memory: 3,600 samples for a half turn), at most 5°
    path_sample_deg: float = Field(1.0, ge=0.1, le=5.0)

    @model_validator(mode="after")
    def _home_is_safe(self) -> ArmSettings:
        if self.home[1] > self.j1_max:
            raise ValueError(f"home j1 = {self.home[1]} exceeds j1_max {self.j1_max}")
        for i, v in enumerate(self.home):
            if not JOINT_MIN[i] <= v <= JOINT_MAX[i]:
                raise ValueError(
                    f"home j{i} = {v} is outside the SDK limits [{JOINT_MIN[i]}, {JOINT_MAX[i]}]"
                )
        return self


class MotionSettings(BaseModel):
    """Arrival and rest: when a move has arrived, stalled or been ignored (docs/runtime.md,
    "Motion")."""

    model_config = _GROUP

    #: arrival tolerance (degrees) of the approaches and of moves up from the mat with the
    #: gripper empty
    tol_approach: float = Field(2.0, gt=0)
    #: arrival tolerance of the descents, servo steps and the moves that carry the block
    #: (the lift from the mat included: on harsh it stalled 2.03° short under the load)
    tol_pick_place: float = Field(3.0, gt=0)
    #: arrival tolerance at HOME
    tol_home: float = Field(2.5, gt=0)
    #: the lift's move on from the hover to the approach arc's pose, at height, holding the
    #: block: a carrying move like approach_place (tol_pick_place's 3°). On harsh this move
    #: stalled 2.22-2.50° short under the block's load in 6 of 418 measured trials, each
    #: a stop with the block held (docs/safety.md, "Joint continuity")
    tol_lift_to_arc: float = Field(3.0, gt=0)
    #: after an ignored send: wait this long, read again, send once more
    send_wait_s: float = Field(1.0, ge=0)
    #: the shortest arrival timeout
    arrival_min_s: float = Field(8.0, gt=0)
    #: arrival timeout = max(arrival_min_s, arrival_base_s + arrival_per_deg_s x the largest joint change)
    arrival_base_s: float = Field(2.0, ge=0)
    #: seconds per degree of the largest joint change (see arrival_base_s)
    arrival_per_deg_s: float = Field(0.15, ge=0)
    #: a send after which the arm moved less than this was ignored: re-sent once
    ignored_move_deg: float = Field(1.0, gt=0)
    #: pause between arrival polls (0: poll as fast as the daemon answers)
    poll_interval_s: float = Field(0.0, ge=0)
    # at rest before a camera measurement (docs/runtime.md, "Motion"): two readings rest_poll_s apart within rest_eps_deg
    rest_eps_deg: float = Field(0.5, gt=0)
    #: two readings this far apart must agree for the arm to be at rest
    rest_poll_s: float = Field(0.1, ge=0)
    #: at most this many readings while waiting for rest (a count, so a replay decides the same)
    rest_max_polls: int = Field(15, ge=2)


class PickPlaceSettings(BaseModel):
    """The pick-and-place task's constants: lookups, servos, memories, release (docs/stages.md)."""

    model_config = _GROUP

    approach_pick_arc: Path = APPROACH_PICK_ARC  # shipped in the package (docs/setup.md)
    #: the place approach arc's poses (shipped in the package, docs/setup.md)
    approach_place_arc: Path = APPROACH_PLACE_ARC
    #: pick attempts before the trial stops (retry_pick between them)
    max_pick_attempts: int = Field(3, ge=1)
    #: an approach arc pose farther than this from the target in x is refused
    x_resid_thresh_m: float = Field(0.02, gt=0)
    #: where the box is taken to be when no box is found (x, z in metres)
    box_xz_fallback: tuple[float, float] = (-0.01, 0.108)
    #: j0 of the swept-aside pose (the retreat after the place)
    swept_j0: float = 85.0
    # ---- lookups
    #: a lookup row must be within this (x-z) of its target
    dist_max_m: float = Field(0.030, gt=0)
    #: the pick descent's tip height band [low, high) in metres
    pick_band: tuple[float, float] = (0.010, 0.040)
    #: the place descent's tip height band [low, high) in metres
    place_band: tuple[float, float] = (0.070, 0.100)
    #: the place descent keeps every joint within this (degrees) of the approach pose
    place_joint_tol: float = Field(15.0, gt=0)
    #: no place row's tip below this height (the box is 43 mm tall)
    place_floor_m: float = 0.070
    #: the place lookup's preferred tip height
    place_target_m: float = 0.100
    #: depth of the place band a height memory cell moves
    place_band_depth_m: float = Field(0.030, gt=0)
    #: approach_place raises the arc's pose (same x-z) so that its tip is at least this far
    #: above the place band's top: the held block crosses the box's wall no lower than it
    #: will descend to; 20 mm from the first trial on: an arm that holds the block lower
    #: than the model says meets the rim before the memory has learnt it (docs/stages.md,
    #: "approach_place")
    place_approach_above_band_mm: float = Field(20.0, ge=0.0, le=50.0)
    #: an approach arc pose farther than this from the target in z is logged
    z_resid_warn_m: float = Field(0.05, gt=0)
    # when no pick row within reach keeps the bound from the approach pose: first stand above
    # the block (a row in this ee_y band within pick_hover_dist_m in x-z), then descend
    pick_hover_band: tuple[float, float] = (0.080, 0.140)
    #: the hover row must be within this (x-z) of the block
    pick_hover_dist_m: float = Field(0.015, gt=0)
    # a bounded descent that lands farther than this from the aim tries the hover first
    pick_resid_max_m: float = Field(0.005, gt=0)
    # ---- place servo (servo_place)
    servo_gain_deg_per_mm: float = Field(0.151, gt=0)  # magnitude; direction from the FK model
    #: the place servo stops when the block is within this of the box centre (x-z)
    servo_tol_mm: float = Field(8.0, gt=0)
    #: the largest j0 step of the place servo
    servo_step_clamp_deg: float = Field(5.0, gt=0)
    #: place servo steps at most
    servo_max_iter: int = Field(5, ge=0)
    #: depth steps at most after the j0 servo
    depth_steps: int = Field(3, ge=0)
    #: a depth step stops within this of the target depth
    depth_tol_mm: float = Field(8.0, gt=0)
    # ---- pick servo (descend_pick; docs/stages.md, "The pick servo"): while the top camera sees
    # the tip farther than pick_servo_tol_mm from the block in x-z, re-aim by the measured
    # offset (each step at most pick_servo_step_mm; the aim never farther than
    # max_correction_mm per axis from the detected block) and measure again; 0 = no servo
    pick_servo_max_iter: int = Field(3, ge=0, le=10)
    #: the pick servo stops when the tip is within this of the block (x-z)
    pick_servo_tol_mm: float = Field(8.0, gt=0)
    #: the largest pick servo re-aim per step
    pick_servo_step_mm: float = Field(15.0, gt=0, le=CORRECTION_LIMIT_MM)
    #: the servo ended (no step within the joint bound reaches the aim, or its iterations
    #: spent) with the tip still measured farther than this from the block in x-z: go up the
    #: way the arm came and descend again at the aim moved by the measured offset, then servo
    #: again, once (docs/stages.md, "The pick servo"); on harsh 39 of 42 grasps closed
    #: farther than 16 mm off missed, 10 of 10 closed 8-12 mm off held
    pick_redescend_mm: float = Field(12.0, gt=0, le=100)
    #: the arm's tip height at the pick, true minus the model's (mm), when calibrated (e.g. by
    #: touching the mat); the tip measurement projects the marker at the true height and the
    #: pick lookups choose rows whose true tip is in the band. 0: the model's height
    pick_tip_height_mm: float = Field(0.0, ge=-40.0, le=40.0)
    #: the pick band after a miss in height (the middle of pick_band)
    pick_retry_band: tuple[float, float] = (0.0175, 0.0325)
    # ---- memories (docs/runtime.md, "Memories")
    #: the memories' cell size (the mat in squares of this side)
    cell_mm: int = Field(20, ge=1)
    # at most the memories' plausibility bounds, or learned entries would be rejected at load
    max_correction_mm: float = Field(20.0, ge=0, le=CORRECTION_LIMIT_MM)
    #: how much one new measurement moves a correction cell (exponential average)
    ema_alpha: float = Field(0.5, gt=0, le=1)
    #: how far one place moves its height cell
    height_step_mm: float = Field(5.0, ge=0)
    #: the highest a height cell goes from places and refusals
    height_max_mm: float = Field(30.0, ge=0, le=HEIGHT_LIMIT_MM[1])
    #: a place judged yes with a release margin at or above this raises nothing
    height_raise_margin_mm: float = Field(10.0, ge=0)
    #: where a place cell starts when nothing is learnt yet (an empty memory). The reference
    #: rig's memory settled at +15..+25 mm: its arm holds the block lower than the model says,
    #: and at +0 a fresh rig drags the low-hanging block along the box's walls while it
    #: servos (docs/release.md, "Every trial teaches"); 0 = the plain band
    height_start_mm: float = Field(15.0, ge=0, le=HEIGHT_LIMIT_MM[1])
    #: the held-block watch compares sightings only after the tip moved this far
    servo_drop_tip_mm: float = Field(10.0, gt=0, le=200)
    #: ... and only when the block moved less than this, i.e. lay still: blocks that really
    #: left the jaws moved 0-4 mm between sightings on harsh; held blocks the wrist partly hid
    #: moved 6-14 mm while the tip moved 18-41 mm, and were carried HOME as lost (docs/release.md,
    #: "A block that left the jaws")
    servo_drop_still_mm: float = Field(5.0, gt=0, le=50)
    # ---- never release blind, safe pick retry (docs/stages.md, "release", "retry_pick")
    #: before opening over the box the block must be seen above the opening; an abort while
    #: holding the block stays in the hover instead of going HOME
    release_check: bool = True
    #: how far (mm) the held block's farthest corner must lie inside the box's inner footprint
    release_margin_mm: float = Field(3.0, ge=0)
    #: a side frame that does not show the block above the box refuses the release. Off (the
    #: default): the side view is advisory, traced and shown, as the reference rig kept it: a
    #: side view cannot tell a block inside the box below the rim from one in front of it
    #: (docs/release.md, "What each camera can see")
    release_side_check: bool = False
    #: a release not confirmed is re-aimed at the box as found again (servo steps within the
    #: place's bounds) and looked at again, at most this many times (docs/release.md)
    release_reaim_max: int = Field(2, ge=0, le=5)
    #: after a refused release (not released anyway): put_back carries the block back to where
    #: it was picked, opens there and goes HOME, so an unattended session goes on; hold stays
    #: in the hover holding it, and the session stops (docs/release.md)
    release_refused: Literal["put_back", "hold"] = "put_back"
    #: a block found lost that lies (on the mat) within this distance of where the top camera
    #: saw it right after the lift never left the mat: the pick judgement is revised to "no"
    #: (docs/release.md, "A pick that never lifted the block"); on harsh such blocks lay
    #: 1.7-9.1 mm from it, blocks that slipped out on the way 260 mm or more
    pick_recheck_mm: float = Field(25.0, gt=0, le=100)
    #: how far a block lost in the box raises its cell (it hung low enough to catch on the
    #: box: a height error of the arm's size, not of the memory's usual 5 mm step)
    height_lost_step_mm: float = Field(15.0, ge=0)
    #: how high blocks lost on the box may raise a cell: a loss is evidence that the block
    #: hung too low, so it may take the cell past height_max_mm, which bounds only the
    #: raises after good places (docs/release.md)
    height_lost_max_mm: float = Field(60.0, ge=0, le=HEIGHT_LIMIT_MM[1])
    #: --confirm: how long the "release anyway / abort" prompt waits (no answer: abort holding)
    release_confirm_timeout_s: float = Field(60.0, gt=0)

    @field_validator("pick_band", "place_band", "pick_hover_band", "pick_retry_band")
    @classmethod
    def _band_ordered(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not v[0] < v[1]:
            raise ValueError(f"band must be (min, max) with min < max, got {v}")
        return v

    @model_validator(mode="after")
    def _swept_in_limits(self) -> PickPlaceSettings:
        if not JOINT_MIN[0] <= self.swept_j0 <= JOINT_MAX[0]:
            raise ValueError(
                f"swept_j0 = {self.swept_j0} is outside j0's SDK limits [{JOINT_MIN[0]}, {JOINT_MAX[0]}]"
            )
        return self


class RolloutSettings(BaseModel):
    """A policy's rollouts, the ``rollout`` task: which policy, how fast, how long
    (docs/rollouts.md)."""

    model_config = _GROUP

    #: the policy that drives the arm: ``episode:DATASET[#N]`` (play back episode N of a
    #: LeRobot dataset's actions), ``lerobot:PATH`` (a trained LeRobot policy; needs lerobot
    #: installed) or ``python:MODULE:NAME`` (a factory of the caller's); None: the task
    #: cannot start
    policy: str | None = None
    #: the policy's ticks per real-rig second (a time-scaled simulator ticks faster alike)
    rate_hz: float = Field(10.0, ge=1, le=50)
    #: an episode ends after this many real-rig seconds of ticks, if the policy has not ended
    #: it (a scripted pick-and-place takes 60-90 s on the rig; a played-back episode takes
    #: about as long as it was recorded, plus the waits for the arm)
    max_s: float = Field(180.0, gt=0, le=3600)
    #: the place judge looks this many real-rig seconds of the policy's ticks after the
    #: policy lets go (the gripper opened after it had closed; the block falls and settles
    #: meanwhile), once the arm is out of the top camera's way over the box, and as often
    #: again while it says no, three looks per release: the block in the box ends the
    #: episode, a miss lets the policy go on (it may grasp again). None: the judge looks
    #: only at the end, at HOME
    after_release_s: float | None = Field(2.0, ge=0, le=60)
    #: each joint moves at most this far from its reading per tick (lerobot's
    #: ``max_relative_target``); never more than ``arm.joint_step_max_deg``
    max_step_deg: float = Field(5.0, gt=0, le=30)
    #: ``lerobot:`` policies: the torch device (cpu, cuda, mps)
    device: str = "cpu"
    #: ``episode:`` playback: the next recorded frame is sent once its time is up and every
    #: joint is within this of the present one (degrees), or after ``playback_wait_s`` of trying
    playback_tol_deg: float = Field(3.0, gt=0, le=20)
    playback_wait_s: float = Field(3.0, gt=0, le=60)
    #: ``episode:`` playback follows the joints the arm was measured at (``state``: the
    #: recorded motion at its recorded speed) or the ones commanded (``action``: a scripted
    #: trial's point-to-point targets, jumps the step bound cuts up); the gripper is always
    #: the commanded one
    playback_path: Literal["state", "action"] = "state"

    @field_validator("policy")
    @classmethod
    def _policy(cls, v: str | None) -> str | None:
        from mecharm.runtime.rollout.policies import policy_spec_problem

        problem = None if v is None else policy_spec_problem(v)
        if problem:
            raise ValueError(problem)
        return v


class RuntimeSettings(RigSettings):
    """Every knob of the runtime, one group per concern (docs/settings.md); defaults are the
    reference run's values."""

    # no NaN or infinity in any number: a NaN pose would pass every comparison it meets
    model_config = SettingsConfigDict(env_prefix="MECHARM_RUNTIME_", allow_inf_nan=False)
    removed_settings: ClassVar[Mapping[str, str]] = REMOVED_SETTINGS
    moved_settings: ClassVar[Mapping[str, str]] = MOVED_SETTINGS

    #: the task the trials run: its stages, its run folders and its ledger (mecharm/runtime/tasks.py
    #: lists them; docs/tasks.md)
    task: str = DEFAULT_TASK
    #: where every record goes (runs, ledger, logs, memories); must exist (docs/setup.md)
    data_root: Path = Field(default_factory=default_data_root)
    #: the data root must be a mount point (the rig's SSD), checked before each file is created
    require_mount: bool = False
    #: how long the next trial waits for an unwritable data root to come back (docs/reliability.md)
    storage_wait_s: float = Field(600.0, ge=0)
    sim_control_url: str | None = None  # simulated rig: POST {url}/scene/next between trials
    #: the FK table lives in {fk_data_dir}/fk/fk_table.csv; default the data root
    fk_data_dir: Path | None = (
        None  # the FK table lives in {fk_data_dir}/fk/fk_table.csv; default data_root
    )
    #: trials to run (None: until Ctrl-C)
    trials: int | None = Field(None, ge=1)
    #: ask before each trial, when a release is refused, and after a stop holding the block
    confirm: bool = False
    #: detect, look up and decide without moving the arm (what would be sent is traced)
    dry_run: bool = False
    #: None: the daemon's (its hello); set: the daemon must announce this one, or the runtime
    #: refuses to start (docs/setup.md, "Time scale"). A dry run talks to no daemon: this, else 1.0
    time_scale: float | None = Field(None, gt=0, le=1000)
    #: detail of the session's log file
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    #: this rig's name, written into every run log (datasets of several rigs keep it apart)
    rig_id: str = Field(default_factory=lambda: default_rig_id())
    #: the operator's labels for this session's trials (``--tag``: the lighting, a new gripper
    #: pad, who ran it), written into every run log; the report filters its episodes by them
    tags: list[str] = Field(default_factory=list, max_length=TAGS_MAX)

    daemon: DaemonLink = Field(default_factory=lambda: DaemonLink.model_validate({}))
    recorder: RecorderLink = Field(default_factory=lambda: RecorderLink.model_validate({}))
    viewing: ViewingSettings = Field(default_factory=lambda: ViewingSettings.model_validate({}))
    judge: JudgeSettings = Field(default_factory=lambda: JudgeSettings.model_validate({}))
    perception: PerceptionSettings = Field(
        default_factory=lambda: PerceptionSettings.model_validate({})
    )
    arm: ArmSettings = Field(default_factory=lambda: ArmSettings.model_validate({}))
    motion: MotionSettings = Field(default_factory=lambda: MotionSettings.model_validate({}))
    pick_place: PickPlaceSettings = Field(
        default_factory=lambda: PickPlaceSettings.model_validate({})
    )
    rollout: RolloutSettings = Field(default_factory=lambda: RolloutSettings.model_validate({}))

    @field_validator("task")
    @classmethod
    def _task(cls, v: str) -> str:
        from mecharm.runtime.tasks import get_task  # the registry imports the tasks, and they this

        return get_task(v).name

    @field_validator("rig_id")
    @classmethod
    def _rig_id(cls, v: str) -> str:
        return check_rig_id(v)

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: list[str]) -> list[str]:
        for tag in v:
            if not TAG_RE.fullmatch(tag):
                raise ValueError(
                    f"tag {tag[:40]!r} must be 1-32 characters of letters, digits, '.', '_' or "
                    "'-' (it is a CSS class and a file-safe word in the report); e.g. --tag dusk"
                )
        return list(dict.fromkeys(v))  # once each, in the order given

    @model_validator(mode="before")
    @classmethod
    def _nest_flat_keys(cls, data: Any) -> Any:
        return nest_flat(data) if isinstance(data, dict) else data

    # ---- derived
    @property
    def scale(self) -> float:
        """The time scale in force: the daemon's once connected (``at_time_scale``), before
        that the ``time_scale`` setting, else 1.0 (real time)."""
        return self.time_scale if self.time_scale is not None else 1.0

    def at_time_scale(self, scale: float) -> RuntimeSettings:
        """These settings at the session's effective time scale (recorded in the constants)."""
        return self.model_copy(update={"time_scale": float(scale)})

    def scaled(self, seconds: float) -> float:
        """A real-rig duration in this run's time (divided by the time scale)."""
        return seconds / self.scale

    @property
    def fk_dir(self) -> Path:
        return self.fk_data_dir if self.fk_data_dir is not None else self.data_root

    def updated(self, changes: Mapping[str, Any]) -> RuntimeSettings:
        """These settings with ``changes`` (``{"viewing.top_video": False}``: dotted paths),
        validated like a file's values (``model_copy`` would not validate them)."""
        data = self.model_dump()
        for path, value in changes.items():
            *groups, leaf = path.split(".")
            node = data
            for g in groups:
                node = node[g]
            node[leaf] = value
        return type(self).model_validate(data)

    def model_copy(
        self, *, update: Mapping[str, Any] | None = None, deep: bool = False
    ) -> RuntimeSettings:
        """pydantic's copy, refusing a key that is no top-level setting: ``update`` is not
        validated, so a group's key given flat (``{"speed": 5}``) would be set beside the
        groups and read by nothing. A group's key: ``updated({"arm.speed": 5})``."""
        unknown = sorted(set(update or {}) - set(type(self).model_fields))
        if unknown:
            raise ValueError(
                f"{unknown} are no top-level settings: change a group's key with "
                "updated({'group.key': value})"
            )
        return super().model_copy(update=update, deep=deep)

    def constants(self) -> dict[str, object]:
        """The constants block of the run log (everything that shapes a decision), nested
        like the settings."""
        out: dict[str, Any] = {}
        for k, v in self.model_dump(mode="json").items():
            if not is_constant(k):
                continue
            if k in _GROUP_NAMES:
                v = {leaf: x for leaf, x in v.items() if is_constant(f"{k}.{leaf}")}
            out[k] = v
        return out


_GROUP_NAMES = frozenset(
    name
    for name, f in RuntimeSettings.model_fields.items()
    if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel)
)
