"""The recorder's wire contract (docs/recorder.md): UDP events, the frame reply, CSV columns, meta.

Defined once here, as typed models, and imported by the runtime (sender side) and
the LeRobot exporter (reader side) so both ends agree on every name. Parsing is
strict: a datagram that is not one valid JSON event raises ``EventError`` with a
message naming what was wrong; the recorder logs it and keeps serving.

Names that become paths (``run_stem``, ``tag``) are validated here with
``mecharm.common.fsutil.validate_name``: nothing that reaches the recorder's
file code can contain a separator, ``..``, NUL or be empty or overlong.

On the wire each event travels signed, inside ``mecharm.recorder.envelope``; ``parse_event``
reads the JSON inside, after the MAC has been checked.

One concern: the recorder's wire contract, one typed model per event and reply, kept in one
place so sender and reader agree on every name.
"""

from __future__ import annotations

import json
import math
import os
import stat
import time
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from mecharm.common.fsutil import UnsafeNameError, validate_name
from mecharm.common.gripper import GRIPPER_MAX, GRIPPER_MIN
from mecharm.common.layout import DEFAULT_TASK, check_task_name

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "DROP_PING_RATE",
    "DROP_PING_SOURCE",
    "EVENT_TYPES",
    "FRAME_LOG_COLUMNS",
    "MAX_EVENT_BYTES",
    "MAX_PONG_BYTES",
    "PINGS_PER_SEC",
    "REASONS",
    "REASON_IMWRITE_FAILED",
    "REASON_MALFORMED_REPLY",
    "REASON_MOUNT_LOST",
    "REASON_NO_FRAME",
    "REASON_OK",
    "REASON_OK_ORPHAN",
    "REASON_ORPHAN_SAVE_FAILED",
    "REASON_QUOTA_EXCEEDED",
    "REASON_STALE_FRAME",
    "REASON_TIMEOUT",
    "RECORDING_STATUSES",
    "STATES_COLUMNS",
    "Arrival",
    "Commanded",
    "Event",
    "EventError",
    "FrameReply",
    "FrameRequest",
    "Gripper",
    "Measured",
    "Ping",
    "Pong",
    "RecordingMeta",
    "RecordingStatus",
    "Stage",
    "TrialEnd",
    "TrialStart",
    "exception_reason",
    "is_known_reason",
    "parse_event",
    "parse_frame_reply",
    "parse_pong",
    "parse_recording_meta",
    "root_identity",
]

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 5556
#: Largest datagram the recorder accepts; real events are a few hundred bytes.
MAX_EVENT_BYTES: Final = 16_384
NOTE_MAX: Final = 512
STAGE_MAX: Final = 64

# --- frame_request reasons (docs/recorder.md) ----------------------------------------
REASON_OK: Final = "ok"
REASON_OK_ORPHAN: Final = "ok_orphan"
REASON_TIMEOUT: Final = "timeout"
REASON_NO_FRAME: Final = "no_frame_available"
REASON_STALE_FRAME: Final = "stale_frame"
REASON_MOUNT_LOST: Final = "mount_lost"
REASON_IMWRITE_FAILED: Final = "imwrite_failed"
REASON_ORPHAN_SAVE_FAILED: Final = "orphan_save_failed"
REASON_MALFORMED_REPLY: Final = "malformed_reply"
#: an hourly quota (orphan frames) is used up; nothing was written (docs/recorder.md, "Quotas")
REASON_QUOTA_EXCEEDED: Final = "quota_exceeded"
#: Fixed reasons; ``exception:{Type}`` is the one open-ended form.
REASONS: Final = (
    REASON_OK,
    REASON_OK_ORPHAN,
    REASON_TIMEOUT,
    REASON_NO_FRAME,
    REASON_STALE_FRAME,
    REASON_MOUNT_LOST,
    REASON_IMWRITE_FAILED,
    REASON_ORPHAN_SAVE_FAILED,
    REASON_MALFORMED_REPLY,
    REASON_QUOTA_EXCEEDED,
)


def exception_reason(exc: BaseException | type[BaseException]) -> str:
    """The ``exception:{Type}`` reason for an unexpected failure."""
    cls = exc if isinstance(exc, type) else type(exc)
    return f"exception:{cls.__name__}"


def is_known_reason(reason: object) -> bool:
    """True for a reason of the recorder's vocabulary (including ``exception:{Type}``)."""
    if not isinstance(reason, str):
        return False
    if reason in REASONS:
        return True
    name = reason.removeprefix("exception:")
    return reason.startswith("exception:") and name.isidentifier() and len(name) <= 64


# --- recording status (docs/recorder.md) ---------------------------------------------
#: ``stalled``: every frame written, but a gap the exporter refuses (mecharm/common/framegaps.py)
RecordingStatus = Literal["ok", "stalled", "truncated", "camera_lost", "mount_lost", "crashed"]
RECORDING_STATUSES: Final = (
    "ok", "stalled", "truncated", "camera_lost", "mount_lost", "crashed", "none",
)  # fmt: skip
"""Statuses found in a meta or a ledger. The recorder writes the first four when it closes a
trial. ``crashed``: the recorder ended without its meta (killed, crashed, disk lost) but
left media — written into the meta by the repair (recorder start-up or ``mecharm
recording repair``), and into the ledger by the runtime when its bounded wait found
media and no meta (the meta, when it comes, decides). ``none``: no recording at all
(runtime only). docs/recorder.md, "Crashed recordings"."""

# --- CSV columns (docs/recorder.md) --------------------------------------------------
STATES_COLUMNS: Final = (
    "ts", "event_type", "stage", "j0", "j1", "j2", "j3", "j4", "j5", "speed",
    "gripper_state", "ts_send", "ts_arrival", "attempt", "arrived", "note",
)  # fmt: skip
#: ``frame_idx, capture_ts`` first as the reference rig; ``capture_mono_ns`` added.
FRAME_LOG_COLUMNS: Final = ("frame_idx", "capture_ts", "capture_mono_ns")


class EventError(ValueError):
    """A datagram is not a valid recorder event; the message says what was wrong."""


# --- field types ---------------------------------------------------------------------
Finite = Annotated[float, Field(allow_inf_nan=False)]
Angles = Annotated[list[Finite], Field(min_length=6, max_length=6)]
Note = Annotated[str, Field(max_length=NOTE_MAX)]


def _now() -> float:
    return time.time()


class _Event(BaseModel):
    """Common base: unknown extra fields ignored (forward compatible).

    Constructing a model in Python is lax (numpy numbers, 20.0 for 20 are accepted,
    so a sender is not tripped up by its own number types); parsing a datagram
    with ``parse_event`` is strict (JSON "20" is not a port, true is not 1).
    """

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    #: sender's wall clock (time.time()); filled at construction when not given.
    ts: Finite = Field(default_factory=_now)

    @field_validator("ts")
    @classmethod
    def _ts_plausible(cls, v: float) -> float:
        if not (0.0 <= float(v) < 1e11):
            raise ValueError("ts must be a wall-clock time in seconds since the epoch")
        return float(v)


def _safe_name(v: str, what: str) -> str:
    try:
        return validate_name(v, what)
    except UnsafeNameError as exc:
        raise ValueError(str(exc)) from None


class _RunStemEvent(_Event):
    """An event naming a trial folder: the name comes from the network, so it is checked."""

    run_stem: str

    @field_validator("run_stem")
    @classmethod
    def _stem(cls, v: str) -> str:
        return _safe_name(v, "run_stem")


class TrialStart(_RunStemEvent):
    type: Literal["trial_start"] = "trial_start"
    #: the trial a restarted runtime found cut (killed, power lost) and put on its books as
    #: ``interrupted``: a recording of it still open is handed over at once, whoever's
    #: session opened it (docs/recorder.md, "Sessions")
    supersedes: str | None = None
    #: the task the trial runs: its recording goes to ``runs/run_<task>/<run_stem>/``
    #: (a runtime from before tasks had names sends none: the first task)
    task: str = DEFAULT_TASK

    @field_validator("task")
    @classmethod
    def _task(cls, v: str) -> str:
        return check_task_name(v)

    @field_validator("supersedes")
    @classmethod
    def _superseded(cls, v: str | None) -> str | None:
        return None if v is None else _safe_name(v, "supersedes")


class TrialEnd(_RunStemEvent):
    type: Literal["trial_end"] = "trial_end"


class Stage(_Event):
    type: Literal["stage"] = "stage"
    stage: Annotated[str, Field(min_length=1, max_length=STAGE_MAX)]

    @field_validator("stage")
    @classmethod
    def _printable(cls, v: str) -> str:
        if not v.isprintable():
            raise ValueError("stage must be printable text")
        return v


class Commanded(_Event):
    """One pose send, emitted the moment it went on the wire: ``angles`` are what the
    daemon says it sent (the dataset's action), ``ts_send`` when the send began.
    ``ts_arrival``/``arrived`` stay empty here; the ``arrival`` event carries them."""

    type: Literal["commanded"] = "commanded"
    angles: Angles
    speed: Annotated[int, Field(ge=1, le=100)] | None = None
    ts_send: Finite | None = None
    ts_arrival: Finite | None = None
    attempt: Annotated[int, Field(ge=0, le=1000)] = 1
    arrived: bool | None = None
    note: Note = ""


class Arrival(_Event):
    """The end of the wait after one send: arrived (at ``ts_arrival``) or not."""

    type: Literal["arrival"] = "arrival"
    ts_send: Finite
    ts_arrival: Finite | None = None
    attempt: Annotated[int, Field(ge=0, le=1000)] = 1
    arrived: bool
    note: Note = ""


class Gripper(_Event):
    """A gripper command, with the value it drives the jaws to (SDK units, 0 closed .. 100
    open): the dataset's gripper action. ``note`` says which command it was."""

    type: Literal["gripper"] = "gripper"
    state: Annotated[int, Field(ge=GRIPPER_MIN, le=GRIPPER_MAX, strict=True)]
    note: Note = ""


class Measured(_Event):
    """Joint angles the runtime read anyway while waiting for arrival (~50 Hz)."""

    type: Literal["measured"] = "measured"
    angles: Angles


class FrameRequest(_Event):
    type: Literal["frame_request"] = "frame_request"
    tag: str
    #: >= 1024: replies never go to a privileged local service (reflection)
    reply_port: Annotated[int, Field(ge=1024, le=65535)]

    @field_validator("tag")
    @classmethod
    def _tag(cls, v: str) -> str:
        return _safe_name(v, "tag")


class Ping(_Event):
    """ "Are you there, and where do you write?" (docs/recorder.md, "Ping: proving the data
    root"). Answered with a signed ``Pong`` to the datagram's source, bound to this ping's
    session and sequence number; ``nonce`` is echoed so the asker can match it too."""

    type: Literal["ping"] = "ping"
    nonce: Annotated[str, Field(pattern=r"^[0-9a-f]{16,64}$")]


Event = Annotated[
    TrialStart | TrialEnd | Stage | Commanded | Arrival | Gripper | Measured | FrameRequest | Ping,
    Field(discriminator="type"),
]
EVENT_TYPES: Final = (
    "trial_start", "trial_end", "stage", "commanded", "arrival", "gripper", "measured",
    "frame_request", "ping",
)  # fmt: skip

_EVENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(Event)


def _describe(exc: ValidationError, prefix: str) -> str:
    parts = []
    for err in exc.errors(include_url=False)[:5]:
        loc = ".".join(str(p) for p in err["loc"][1:] or err["loc"]) or "<event>"
        parts.append(f"{loc}: {err['msg']}")
    return f"{prefix}: " + "; ".join(parts)


def parse_event(data: bytes | str) -> Event:
    """Parse one datagram into an event model; raise EventError saying what was wrong."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    if len(data) > MAX_EVENT_BYTES:
        raise EventError(f"datagram of {len(data)} bytes exceeds {MAX_EVENT_BYTES}")
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EventError(f"not valid JSON: {str(exc)[:120]}") from None
    if not isinstance(obj, dict):
        raise EventError(f"event must be a JSON object, got {type(obj).__name__}")
    etype = obj.get("type")
    if not isinstance(etype, str):
        raise EventError("event has no string field 'type'")
    if etype not in EVENT_TYPES:
        raise EventError(f"unknown event type {etype[:40]!r}")
    try:
        return _EVENT_ADAPTER.validate_python(obj, strict=True)  # type: ignore[no-any-return]
    except ValidationError as exc:
        raise EventError(_describe(exc, f"invalid {etype} event")) from None


class FrameReply(BaseModel):
    """The recorder's answer to a frame_request (sent to 127.0.0.1:reply_port)."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    path: str | None = None
    capture_ts: float | None = None
    frame_age_ms: float | None = None
    reason: str
    camera_frozen: bool = False
    #: echo of the request's tag, so a client can match the reply.
    tag: str | None = None

    @field_validator("reason")
    @classmethod
    def _reason(cls, v: str) -> str:
        if not is_known_reason(v):
            raise ValueError(f"unknown reason {v[:60]!r}")
        return v

    @property
    def ok(self) -> bool:
        return self.reason in (REASON_OK, REASON_OK_ORPHAN) and self.path is not None


def parse_frame_reply(data: bytes) -> FrameReply:
    """Parse a reply datagram; raise EventError (the caller maps it to malformed_reply)."""
    try:
        reply = FrameReply.model_validate_json(data)
    except ValidationError as exc:
        raise EventError(_describe(exc, "malformed frame reply")) from None
    if reply.capture_ts is not None and not math.isfinite(reply.capture_ts):
        raise EventError("malformed frame reply: capture_ts not finite")
    return reply


class RecordingMeta(BaseModel):
    """``recording_meta.json`` (the reference rig's fields first, then this recorder's additions).

    Written atomically (tmp + rename) when a trial closes; its absence means the
    recording ended abnormally. ``recording_path`` is relative to the data root.
    """

    model_config = ConfigDict(extra="ignore")

    run_stem: str
    started_ts: float
    ended_ts: float
    elapsed_sec: float
    frames_captured: int
    frames_written: int
    effective_fps: float
    container_fps: float
    width: int
    height: int
    codec: str
    status: RecordingStatus
    recording_path: str
    # --- additions ---
    status_reason: str = ""
    pix_fmt: str = "yuv420p"
    gop: int = 0
    time_base: str = "1/90000"
    pts_clock: str = "capture_mono_ns - anchor_mono_ns"
    #: one instant read on both clocks: wall = anchor_wall_ts + (mono_ns - anchor_mono_ns)/1e9
    anchor_wall_ts: float = 0.0
    anchor_mono_ns: int = 0
    frames_dropped: int = 0
    camera_frozen: bool = False
    frozen_sec: float = 0.0
    camera_lost_count: int = 0
    camera_source: str = ""
    states_rows: int = 0
    frame_requests: int = 0
    #: datagrams dropped while the trial was open, by reason (docs/recorder.md, "Authenticated events")
    events_refused: dict[str, int] = Field(default_factory=dict)
    first_capture_ts: float | None = None
    last_capture_ts: float | None = None
    # --- crashed recordings, set by the repair (docs/recorder.md, "Crashed recordings") ---
    #: frames the mp4 really decodes to (frames_written = frame_log rows kept <= this)
    frames_decodable: int | None = None
    #: capture time between the last frame the recorder logged and the last decodable one
    seconds_lost: float | None = None
    #: frame_log rows beyond the decodable frames, cut by the repair
    frame_log_rows_removed: int = 0


def parse_recording_meta(data: bytes | str) -> RecordingMeta:
    """Parse a recording's meta file; raise EventError naming what is wrong (the runtime
    records it as status ``none`` with that note, the exporter refuses the trial)."""
    try:
        return RecordingMeta.model_validate_json(data)
    except ValidationError as exc:
        parts = []
        for err in exc.errors(include_url=False)[:5]:
            loc = ".".join(str(p) for p in err["loc"])
            parts.append(f"{loc}: {err['msg']}" if loc else str(err["msg"]))
        raise EventError("not a valid recording meta: " + "; ".join(parts)) from None


# --- ping / pong (docs/recorder.md, "Ping: proving the data root") --------------------------
#: the largest pong the recorder sends (envelope included): an answer never grows with input
MAX_PONG_BYTES: Final = 1024
#: pongs a second, whoever asks (burst: one second's worth); beyond, pings are dropped, counted
PINGS_PER_SEC: Final = 10
#: drop reasons of a ping the recorder did not answer (counted like the envelope's)
DROP_PING_RATE: Final = "ping_rate"
DROP_PING_SOURCE: Final = "ping_source"
_ROOT_MAX: Final = 512
_PROBLEM_MAX: Final = 200


def root_identity(path: Path | str) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the folder at ``path`` (symlinks followed), None when it cannot be
    read. Two processes of one computer write to the same data root exactly when their roots'
    identities are equal, however the paths are spelled (symlinks, ``..``, relative paths)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


class Pong(BaseModel):
    """The recorder's answer to a ``Ping``: where it writes and whether it can record now."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    type: Literal["pong"] = "pong"
    nonce: Annotated[str, Field(max_length=64)]
    #: the data root, resolved (cut to 512 characters; the identity below decides)
    root: Annotated[str, Field(max_length=_ROOT_MAX)]
    root_dev: int | None = None
    root_ino: int | None = None
    #: the root takes writes now (the recorder's mount guard); else ``root_problem`` says why
    root_ok: bool
    root_problem: Annotated[str, Field(max_length=_PROBLEM_MAX)] = ""
    udp_port: Annotated[int, Field(ge=1, le=65535)]
    #: the side camera's state: starting, open, lost, stopped
    camera: Annotated[str, Field(max_length=16)]
    camera_frozen: bool = False
    #: age of the newest side frame (None: no frame)
    frame_age_ms: Finite | None = None
    #: a trial is open and being recorded
    recording: bool = False
    trial: Annotated[str, Field(max_length=128)] | None = None
    #: the side camera is a generated test card (``--camera synthetic``): every report says so
    synthetic: bool = False

    @property
    def identity(self) -> tuple[int, int] | None:
        if self.root_dev is None or self.root_ino is None:
            return None
        return (self.root_dev, self.root_ino)

    @classmethod
    def describe(cls, nonce: str, root: str, problem: str = "", **fields: Any) -> Pong:
        """A pong whose free-text fields are cut to their bounds (the reply size is bounded)."""
        return cls(
            nonce=nonce,
            root=root if len(root) <= _ROOT_MAX else root[: _ROOT_MAX - 3] + "...",
            root_problem=problem[:_PROBLEM_MAX],
            **fields,
        )


def parse_pong(data: bytes) -> Pong:
    """Parse a pong's JSON (after its MAC held); raise EventError naming what is wrong."""
    try:
        return Pong.model_validate_json(data)
    except ValidationError as exc:
        raise EventError(_describe(exc, "malformed pong")) from None
