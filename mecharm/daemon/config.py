"""Typed settings of the Pi daemon: defaults < configs/daemon.yaml < MECHARM_DAEMON_* < CLI flags."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, model_validator
from pydantic_settings import SettingsConfigDict

from mecharm.common.config import ConfigError, RigSettings
from mecharm.common.envelope import Envelope
from mecharm.common.keyfile import KeyFileError, read_secret_file
from mecharm.daemon.protocol import DEFAULT_PORT
from mecharm.sim.arm import SimArmConfig

__all__ = ["DaemonSettings", "EnvelopeSettings", "is_loopback", "read_token"]

_DEFAULT_ENVELOPE = Envelope()
#: a number as written (no "88" string, no true/false read as 1/0)
_Degrees = Annotated[float, Strict()]


class EnvelopeSettings(BaseModel):
    """The safety envelope (docs/daemon.md, "Safety envelope"): validated by ``Envelope``,
    so a limit wider than the SDK's, a min not below its max or a non-number is a config
    error naming the joint."""

    model_config = ConfigDict(extra="forbid")

    joint_min: list[_Degrees] = Field(
        default_factory=lambda: list(_DEFAULT_ENVELOPE.joint_min),
        description="lowest angle of j0..j5 (default: the SDK's)",
    )
    joint_max: list[_Degrees] = Field(
        default_factory=lambda: list(_DEFAULT_ENVELOPE.joint_max),
        description="highest angle of j0..j5 (default: the SDK's, j1 88)",
    )
    max_step_deg: _Degrees | None = Field(
        default=None,
        description="largest |target - current| of any joint per send_angles (null = off); "
        "costs one get_angles before each send",
    )

    @model_validator(mode="after")
    def _valid(self) -> EnvelopeSettings:
        self.envelope()  # raises ValueError naming the joint
        return self

    def envelope(self) -> Envelope:
        return Envelope(tuple(self.joint_min), tuple(self.joint_max), self.max_step_deg)


class DaemonSettings(RigSettings):
    """Every key can be set in the YAML file, as ``MECHARM_DAEMON_<KEY>`` (nested: ``SIM__TIME_SCALE``) or by a flag."""

    model_config = SettingsConfigDict(env_prefix="MECHARM_DAEMON_")

    backend: Literal["sim", "mycobot"] = "sim"
    host: str | None = Field(
        default=None, description="listen address; default 127.0.0.1 for sim, 0.0.0.0 for mycobot"
    )
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    serial_port: str = Field(default="/dev/ttyAMA0", min_length=1)
    baud: int = Field(default=1_000_000, gt=0)
    token_file: Path | None = Field(
        default=None, description="shared secret for LAN use; hello must carry it"
    )
    # the client slot (docs/daemon.md, "Client slot")
    auth_timeout_s: float = Field(
        default=2.0,
        gt=0,
        le=60,
        description="a connection that has not proved itself (hello with the token; without a "
        "token its first request) within this is dropped",
    )
    idle_timeout_s: float = Field(
        default=10.0,
        ge=0,
        description="the slot's holder is dropped after this long without a complete request "
        "(0 = never: a stale client then holds the arm until it disconnects)",
    )
    max_connections: int = Field(
        default=8,
        ge=1,
        le=1024,
        description="connections kept open at once (the holder, or those waiting to prove "
        "themselves); when full, those whose peers have closed them leave first, then the "
        "oldest waiting one is dropped",
    )
    auth_backoff_s: float = Field(
        default=0.25, ge=0, description="first delay of a failed hello's reply, per address"
    )
    auth_backoff_max_s: float = Field(
        default=4.0, ge=0, description="the delay doubles per failure from an address up to this"
    )
    # the serial link (mycobot backend; docs/daemon.md, "Serial link recovery")
    serial_reopen_backoff_s: float = Field(
        default=0.5, gt=0, description="first reopen attempt this long after a serial error"
    )
    serial_reopen_backoff_max_s: float = Field(
        default=5.0, gt=0, description="attempts double their spacing up to this"
    )
    serial_reopen_attempts: int = Field(
        default=30, ge=1, description="scheduled attempts; then each command makes one"
    )
    shutdown_grace_s: float = Field(
        default=5.0, ge=0, description="how long the command in flight may finish"
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    envelope: EnvelopeSettings = Field(
        default_factory=EnvelopeSettings,
        description="joint limits every client's send_angles must keep to",
    )
    sim: SimArmConfig = Field(default_factory=SimArmConfig)
    scene: str | None = Field(
        default=None, description="sim workcell scene: 'random' or a scene file"
    )
    seed: int | None = Field(default=None, description="seed of the sim arm and the scene")
    sim_profile: str = Field(
        default="ideal",
        description="how the simulated world disagrees with the runtime: ideal, rig, harsh "
        "or a profile YAML file (docs/simulation.md)",
    )
    camera_port: int = Field(default=8080, ge=0, le=65535)

    def listen_host(self) -> str:
        if self.host:
            return self.host
        return "127.0.0.1" if self.backend == "sim" else "0.0.0.0"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


#: a shorter token is refused: guessable (``openssl rand -hex 16`` gives 32 characters)
TOKEN_MIN_CHARS = 16


def read_token(path: Path) -> str:
    """Read the shared secret the daemon requires (docs/daemon.md, "The token").

    Raises ConfigError naming the file and the fix when it is missing, unreadable, empty,
    shorter than ``TOKEN_MIN_CHARS``, readable by others or in a folder others may write.
    """
    path = Path(path).expanduser()  # "~/..." in daemon.yaml, as the runtime reads its own
    try:
        data = read_secret_file(path, "token_file", 8192, cannot="cannot read")
    except KeyFileError as exc:
        raise ConfigError(str(exc)) from None
    try:
        token = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"token_file {path}: not UTF-8 text") from None
    if not token:
        raise ConfigError(f"token_file {path}: is empty")
    if len(token) > 4096 or any(c.isspace() for c in token):
        raise ConfigError(
            f"token_file {path}: token must be one line without spaces, at most 4096 characters"
        )
    if len(token) < TOKEN_MIN_CHARS:
        raise ConfigError(
            f"token_file {path}: the token has {len(token)} characters, fewer than "
            f"{TOKEN_MIN_CHARS}: anyone could guess it; make one with `openssl rand -hex 16`"
        )
    return token
