"""Recorder settings (``MECHARM_RECORDER_`` env prefix, ``configs/recorder.yaml``, CLI flags)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import SettingsConfigDict

from mecharm.common.config import RigSettings
from mecharm.common.keyfile import default_recorder_key_file
from mecharm.common.layout import default_data_root

__all__ = ["RecorderSettings", "VideoSettings"]


class VideoSettings(BaseModel):
    """H.264 via PyAV into fragmented MP4 (docs/recorder.md; OpenCV's Linux wheels cannot encode H.264)."""

    model_config = ConfigDict(extra="forbid")

    codec: str = "libx264"
    pix_fmt: Literal["yuv420p"] = "yuv420p"
    #: ultrafast: half superfast's CPU per frame on a noisy sensor's 720p (and a smaller file),
    #: a third less on clean frames (a larger file); the observer's share of a busy machine
    #: is what counts (docs/recorder.md, "Encoder cost")
    preset: Literal["ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow"] = (
        "ultrafast"
    )
    crf: int = Field(default=23, ge=0, le=51)
    #: zerolatency: no B-frames, no lookahead: the encoder holds no frame back, so a killed
    #: recorder loses only the open mp4 fragment (fragment_sec)
    tune: Literal["zerolatency", "none"] = "zerolatency"
    #: a keyframe at least every gop_sec of capture time (and every gop_sec * container_fps frames)
    gop_sec: float = Field(default=1.0, gt=0, le=10)
    #: the mp4 is cut into fragments this long (capture time), each written to disk when
    #: closed: a SIGKILL loses at most the open one (docs/recorder.md, "Crashed recordings")
    fragment_sec: float = Field(default=0.25, ge=0.02, le=1.0)
    #: nominal container rate; the PTS carry the real capture times
    container_fps: float = Field(default=30.0, gt=0, le=240)
    time_base_hz: int = Field(default=90_000, ge=1_000, le=1_000_000)
    threads: int = Field(default=0, ge=0, le=16)
    #: Linux: nice value of the encoder threads, so frame_request and the camera read win
    #: under CPU contention (0 = same priority as the rest). None: 10 when the recorder
    #: leads a session of its own (``own_session``), where the nice value only orders its
    #: own threads; else 0, since beside busy processes of the same session a niced encoder
    #: drops frames (docs/recorder.md, "Under CPU contention")
    encoder_nice: int | None = Field(default=None, ge=0, le=19)


class RecorderSettings(RigSettings):
    """Everything the recorder can be told; defaults match the reference rig (docs/recorder.md)."""

    model_config = SettingsConfigDict(env_prefix="MECHARM_RECORDER_")

    data_root: Path = Field(
        default_factory=default_data_root
    )  # the runtime's default too (docs/setup.md)
    #: refuse to write unless data_root is a real mount point (the rig's external SSD)
    require_mount: bool = False
    #: the side camera's source; required: a test card only when asked for by name
    #: (``synthetic``), and its recordings are then marked so (docs/recorder.md)
    camera: str | None = None
    host: str = "127.0.0.1"
    udp_port: int = Field(default=5556, ge=1, le=65535)
    #: the secret shared with the runtime: every datagram is signed with it; created
    #: (0600) if missing, refused if group/others may read it (docs/recorder.md, "The key file")
    key_file: Path = Field(default_factory=default_recorder_key_file)
    #: a trial_start from another session is refused while the open trial's session was
    #: heard within this many seconds; after that silence it takes over (a restarted runtime)
    session_takeover_sec: float = Field(default=10.0, ge=0)

    #: datagrams buffered between the UDP receiver and the dispatcher; when full, new
    #: ones are dropped and counted (the sender is never slowed: docs/concurrency.md)
    event_buffer: int = Field(default=4096, ge=16, le=1_000_000)

    stale_frame_sec: float = Field(default=0.5, gt=0)
    camera_lost_after: int = Field(default=30, ge=1, description="consecutive failed reads")
    camera_retry_sec: float = Field(default=2.0, gt=0)
    frozen_after_sec: float = Field(default=2.0, gt=0)
    #: states.csv is flushed this often (a kill loses about this much of it); frame_log.csv
    #: is flushed with every row (docs/recorder.md, "Crashed recordings")
    csv_flush_sec: float = Field(default=1.0, gt=0, le=1.0)
    mount_check_sec: float = Field(default=1.0, gt=0)
    status_interval_sec: float = Field(default=10.0, ge=0, description="0 disables the status line")
    #: frames queued for the encoder before drops are counted (2 s at 30 fps)
    max_pending_frames: int = Field(default=60, ge=1, le=600)
    #: at trial_end, frames still queued are encoded for at most this long and the
    #: rest counted as dropped, so the meta appears within the runtime's 2.0 s wait
    close_budget_sec: float = Field(default=1.0, gt=0, le=30)
    jpeg_quality: int = Field(default=90, ge=10, le=100)
    #: frame_request budget (token bucket, burst = one second's worth); beyond it the
    #: request is answered "exception:RateLimited" and nothing is written
    max_frame_requests_per_sec: float = Field(default=20.0, gt=0)
    #: hourly quotas (sliding hour; docs/recorder.md, "Quotas"): frame requests outside a
    #: trial, and trial folders; beyond them nothing is written and the refusal is logged
    orphan_frames_per_hour: int = Field(default=600, ge=0)
    orphan_bytes_per_hour: int = Field(default=256 * 2**20, ge=0)
    trials_per_hour: int = Field(default=600, ge=0)
    trial_bytes_per_hour: int = Field(default=4 * 2**30, ge=0)
    #: a trial whose trial_end never comes (runtime crashed) is closed "truncated" after this
    max_trial_sec: float = Field(default=1800.0, gt=0)
    video: VideoSettings = Field(default_factory=VideoSettings)

    #: POSIX: when started by another program (stdin not a terminal), start a session of its
    #: own, so Linux's autogroup schedules the recorder as its own group beside busy programs
    #: of the session that started it (docs/recorder.md, "Under CPU contention")
    own_session: bool = True

    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_json: bool | None = None

    @field_validator("camera")
    @classmethod
    def _camera(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("camera spec is empty")
        return None if v is None else v.strip()

    @field_validator("host")
    @classmethod
    def _host(cls, v: str) -> str:
        if v not in ("127.0.0.1", "localhost"):
            # events are signed, but the port is a local interface: keep it on loopback
            raise ValueError("host must be a loopback address (127.0.0.1)")
        return "127.0.0.1" if v == "localhost" else v
