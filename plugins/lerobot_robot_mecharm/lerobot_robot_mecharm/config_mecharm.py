"""``--robot.type=mecharm270``: where the daemon is, which cameras, how far one step goes."""

from __future__ import annotations

from dataclasses import dataclass, field

from lerobot.robots.config import RobotConfig


@dataclass
class MecharmCameraConfig:
    """A camera the robot reads itself: an MJPEG/HTTP URL (the simulated cameras, a network
    camera), a USB index (``0``), ``name:<device name>`` or a video file; its frames are
    resized to ``width`` × ``height`` (the feature's shape)."""

    source: str
    width: int = 640
    height: int = 360
    #: the rate the camera delivers (lerobot's robot config requires one per camera); a
    #: tick that reads the camera waits for its next frame, so it runs at most this fast
    fps: int = 30


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
    cameras: dict[str, MecharmCameraConfig] = field(default_factory=dict)
