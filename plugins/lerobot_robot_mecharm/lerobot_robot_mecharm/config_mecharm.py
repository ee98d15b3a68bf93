"""``--robot.type=mecharm270``: where the daemon is, which cameras, how far one step goes."""

from __future__ import annotations

from dataclasses import dataclass, field

from lerobot.cameras.configs import CameraConfig
from lerobot.robots.config import RobotConfig


@RobotConfig.register_subclass("mecharm270")
@dataclass
class MecharmConfig(RobotConfig):
    #: the runtime's settings file (None: the shipped configs/runtime.yaml): the arm limits,
    #: the daemon's waits; the fields below override its daemon keys
    runtime_config: str | None = None
    daemon_host: str | None = None
    daemon_port: int | None = None
    #: the daemon's token file (None: the runtime's default, ~/.config/mecharm/daemon.token)
    token_file: str | None = None
    #: lerobot's name for the per-step bound: each joint moves at most this many degrees
    #: from its present reading per send_action (the safe arm's stream step)
    max_relative_target: float = 5.0
    #: lerobot cameras: ``{type: mjpeg_http, url: ...}`` for the rig's and the simulator's
    #: HTTP cameras (the lerobot_camera_mecharm plugin), ``{type: opencv, ...}`` for a USB one
    cameras: dict[str, CameraConfig] = field(default_factory=dict)
    #: a file for the trace of every step (``stream_step`` decisions: asked, sent, refused;
    #: docs/replay.md); None: no trace
    trace_path: str | None = None
