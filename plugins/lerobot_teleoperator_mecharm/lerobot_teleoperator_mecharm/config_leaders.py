"""``--teleop.type=mecharm_leader`` (a second mechArm moved by hand) and
``--teleop.type=mecharm_keyboard`` (keys in the terminal): where each reads from."""

from __future__ import annotations

from dataclasses import dataclass

from lerobot.teleoperators.config import TeleoperatorConfig


@TeleoperatorConfig.register_subclass("mecharm_leader")
@dataclass
class MecharmLeaderConfig(TeleoperatorConfig):
    #: the leader arm's own ``mecharm-daemon`` (not the follower's: two arms, two daemons)
    daemon_port: int = 5556
    daemon_host: str = "127.0.0.1"
    #: its token file (None: the runtime's default, ~/.config/mecharm/daemon.token)
    token_file: str | None = None
    #: the runtime's settings file for the link's waits (None: the shipped one)
    runtime_config: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.daemon_port <= 65535:
            raise ValueError(f"daemon_port {self.daemon_port!r}: give 1-65535")


@TeleoperatorConfig.register_subclass("mecharm_keyboard")
@dataclass
class MecharmKeyboardConfig(TeleoperatorConfig):
    #: degrees one key press moves its joint
    step_deg: float = 2.0
    #: the runtime's settings file: HOME (where the keys start) and the gripper's close value
    runtime_config: str | None = None

    def __post_init__(self) -> None:
        if not 0 < self.step_deg <= 15:
            raise ValueError(f"step_deg {self.step_deg!r}: give more than 0 and at most 15")
