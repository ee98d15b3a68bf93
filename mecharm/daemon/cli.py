"""``mecharm-daemon``: serve the arm (real or simulated) over TCP until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from mecharm.common.config import ConfigError, cannot_listen, load_settings
from mecharm.common.defaults import DAEMON_CONFIG
from mecharm.common.logging import configure_logging, get_logger
from mecharm.common.shutdown import ShutdownSignals, capture_signals
from mecharm.daemon.backends.base import ArmBackend, BackendError
from mecharm.daemon.config import DaemonSettings, is_loopback, read_token
from mecharm.daemon.server import ArmServer

if TYPE_CHECKING:
    from mecharm.sim.arm import SimArmConfig
    from mecharm.sim.profile import SimProfile

__all__ = ["build_parser", "main", "serve", "settings_from_args"]

log = get_logger("mecharm.daemon.cli")

#: shipped in the package: the same from any directory (docs/setup.md)
DEFAULT_CONFIG = DAEMON_CONFIG


class StartupError(RuntimeError):
    """The daemon cannot start; the message says why."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mecharm-daemon",
        description="Serve the mechArm 270 over TCP (newline-delimited JSON, one control client at a time).",
    )
    p.add_argument(
        "--config",
        type=Path,
        help="YAML settings file (default: the shipped daemon.yaml, docs/setup.md)",
    )
    p.add_argument("--backend", choices=["sim", "mycobot"], help="arm backend (default sim)")
    p.add_argument("--host", help="listen address (default 127.0.0.1 for sim, 0.0.0.0 for mycobot)")
    p.add_argument("--port", type=int, help="TCP port (default 5555)")
    p.add_argument(
        "--serial-port", dest="serial_port", help="mycobot: serial device (default /dev/ttyAMA0)"
    )
    p.add_argument("--baud", type=int, help="mycobot: baud rate (default 1000000)")
    p.add_argument(
        "--token-file",
        dest="token_file",
        type=Path,
        help="shared-secret file; enables authentication",
    )
    p.add_argument(
        "--auth-timeout",
        dest="auth_timeout_s",
        type=float,
        help="s a connection has to prove itself (hello with the token, or its first request) "
        "before it is dropped (default 2)",
    )
    p.add_argument(
        "--idle-timeout",
        dest="idle_timeout_s",
        type=float,
        help="s without a complete request after which the client loses the slot "
        "(default 10; 0 = never)",
    )
    p.add_argument("--log-level", dest="log_level", choices=["debug", "info", "warning", "error"])
    env = p.add_argument_group("safety envelope (docs/daemon.md, 'Safety envelope')")
    env.add_argument(
        "--envelope-min",
        dest="envelope_min",
        type=_six_degrees,
        metavar="J0,J1,J2,J3,J4,J5",
        help="lowest angle of each joint (default: the SDK limits)",
    )
    env.add_argument(
        "--envelope-max",
        dest="envelope_max",
        type=_six_degrees,
        metavar="J0,J1,J2,J3,J4,J5",
        help="highest angle of each joint (default: the SDK limits with j1 88)",
    )
    env.add_argument(
        "--envelope-step-max",
        dest="envelope_step_max",
        type=float,
        metavar="DEG",
        help="refuse a send_angles moving any joint more than this from where the arm is "
        "(one get_angles before each send; default off)",
    )
    sim = p.add_argument_group("sim backend")
    sim.add_argument(
        "--time-scale",
        dest="time_scale",
        type=float,
        help="sim speed-up (1.0 = real time); announced in hello, the runtime follows it",
    )
    sim.add_argument(
        "--read-latency",
        dest="read_latency",
        type=float,
        help="sim get_angles cost in s (default 0.020)",
    )
    sim.add_argument(
        "--scene", help="start the simulated workcell with this scene: 'random' or a scene file"
    )
    sim.add_argument("--seed", type=int, help="seed of the sim arm and the scene")
    sim.add_argument(
        "--sim-profile",
        dest="sim_profile",
        help="how the simulated world disagrees with the runtime: ideal (default), rig, harsh, "
        "or a profile YAML file (docs/simulation.md)",
    )
    sim.add_argument(
        "--camera-port",
        dest="camera_port",
        type=int,
        help="workcell camera server port (default 8080)",
    )
    return p


def _six_degrees(text: str) -> list[float]:
    """``--envelope-min/-max``: six comma-separated numbers (j0..j5)."""
    parts = [p.strip() for p in text.split(",")]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give six comma-separated numbers in degrees, j0..j5"
        ) from None
    if len(values) != 6:
        raise argparse.ArgumentTypeError(f"{text!r}: {len(values)} values, need 6 (j0..j5)")
    return values


def settings_from_args(args: argparse.Namespace) -> tuple[DaemonSettings, Path | None]:
    """Merge flags over env over the YAML file. Raises ConfigError naming the bad key."""
    config = args.config
    if config is None and DEFAULT_CONFIG.is_file():
        config = DEFAULT_CONFIG
    sim: dict[str, Any] = {}
    if args.time_scale is not None:
        sim["time_scale"] = args.time_scale
    if args.read_latency is not None:
        sim["read_latency_s"] = args.read_latency
    if args.seed is not None:
        sim["seed"] = args.seed
    overrides: dict[str, Any] = {
        k: getattr(args, k)
        for k in (
            "backend",
            "host",
            "port",
            "serial_port",
            "baud",
            "token_file",
            "auth_timeout_s",
            "idle_timeout_s",
            "log_level",
            "scene",
            "seed",
            "camera_port",
            "sim_profile",
        )
    }
    overrides["sim"] = sim or None
    envelope: dict[str, Any] = {}
    for flag, key in (
        ("envelope_min", "joint_min"),
        ("envelope_max", "joint_max"),
        ("envelope_step_max", "max_step_deg"),
    ):
        if getattr(args, flag) is not None:
            envelope[key] = getattr(args, flag)
    overrides["envelope"] = envelope or None
    return load_settings(DaemonSettings, config, overrides), config


def load_sim_profile(settings: DaemonSettings) -> SimProfile | None:
    """The world of ``--sim-profile``, loaded once for the arm and the workcell (None for the
    real arm). A bad name or file is a bad flag: ConfigError, exit 2 (README)."""
    if settings.backend != "sim":
        return None
    from mecharm.sim.profile import ProfileError, load_profile

    try:
        return load_profile(settings.sim_profile)
    except ProfileError as exc:
        raise ConfigError(str(exc)) from None


def _make_backend(
    settings: DaemonSettings, profile: SimProfile | None = None
) -> tuple[ArmBackend, Any]:
    if settings.backend == "mycobot":
        from mecharm.daemon.backends.mycobot import MyCobotBackend

        return MyCobotBackend(
            settings.serial_port,
            settings.baud,
            reopen_backoff_s=settings.serial_reopen_backoff_s,
            reopen_backoff_max_s=settings.serial_reopen_backoff_max_s,
            reopen_attempts=settings.serial_reopen_attempts,
        ), None
    from mecharm.daemon.backends.sim import SimBackend
    from mecharm.sim.arm import SimArm

    arm = SimArm(_sim_arm_config(settings, profile))
    return SimBackend(arm), arm


def _sim_arm_config(settings: DaemonSettings, profile: SimProfile | None) -> SimArmConfig:
    """``settings.sim`` with the profile's timing (docs/simulation-timing.md); a key set in
    the daemon's config or flags keeps its value."""
    if profile is None:
        return settings.sim
    given = settings.sim.model_fields_set
    update = {k: v for k, v in profile.timing.arm_overrides().items() if k not in given}
    return settings.sim.model_copy(update=update) if update else settings.sim


def _start_workcell(
    settings: DaemonSettings, arm: Any, host: str, profile: SimProfile | None
) -> Any:
    if settings.scene is None:
        return None
    if settings.backend != "sim":
        raise ConfigError(  # a bad combination of flags: exit 2 as any bad flag
            "--scene needs --backend sim (the workcell simulates cameras around the sim arm)"
        )
    try:
        from mecharm.sim.workcell import start_workcell
    except ImportError as exc:
        # the Pi profile ('.[pi]') has no OpenCV, so the workcell cannot import there
        raise StartupError(
            f"--scene given but the simulated workcell is not available "
            f"(mecharm.sim.workcell: {exc}; install '.[sim]')"
        ) from exc
    from mecharm.sim.scene import SceneError

    seed = settings.seed if settings.seed is not None else settings.sim.seed
    try:
        workcell = start_workcell(
            arm,
            scene=settings.scene,
            seed=seed,
            host=host,
            camera_port=settings.camera_port,
            profile=profile,
        )
    except SceneError as exc:  # a bad scene flag or file (or its faults:): exit 2, no traceback
        raise ConfigError(str(exc)) from None
    except OSError as exc:  # the camera server cannot listen (a port in use): say which flag
        raise StartupError(
            cannot_listen("camera port", host, settings.camera_port, "--camera-port", exc)
        ) from None
    log.info(
        "workcell_started",
        scene=settings.scene,
        seed=seed,
        profile=profile.name if profile is not None else "ideal",
        urls=dict(workcell.urls),
    )
    return workcell


async def serve(settings: DaemonSettings, profile: SimProfile | None = None) -> int:
    """Run the daemon until SIGINT/SIGTERM. Returns the exit code. ``profile``: the loaded
    ``load_sim_profile(settings)`` (None: no profile, the ideal world)."""
    host = settings.listen_host()
    token = None
    if settings.token_file is not None:
        token = read_token(settings.token_file)  # ConfigError: refused before listening
    elif not is_loopback(host):
        log.warning(
            "no_authentication",
            host=host,
            reason="listening beyond loopback without --token-file: anyone on the network can move the arm",
        )
    backend, arm = _make_backend(settings, profile)
    server = ArmServer(
        backend,
        host,
        settings.port,
        token,
        auth_timeout_s=settings.auth_timeout_s,
        idle_timeout_s=settings.idle_timeout_s,
        shutdown_grace_s=settings.shutdown_grace_s,
        max_connections=settings.max_connections,
        auth_backoff_s=settings.auth_backoff_s,
        auth_backoff_max_s=settings.auth_backoff_max_s,
        envelope=settings.envelope.envelope(),
    )
    workcell = None
    try:
        # handlers first: a SIGTERM right after "daemon_listening" must still stop us gracefully
        with capture_signals() as sigs:
            workcell = _start_workcell(
                settings, arm, host, profile
            )  # fails before the port is opened
            return await _serve_until_signal(server, sigs, host, settings.port)
    finally:
        if workcell is not None:
            workcell.close()
            log.info("workcell_closed")


async def _serve_until_signal(
    server: ArmServer, sigs: ShutdownSignals, host: str, port: int
) -> int:
    """The server runs in this task group until the first signal; a second one cancels it."""
    forced = False
    async with anyio.create_task_group() as tg:
        try:
            await tg.start(server.run)
        except BackendError as exc:
            failed: StartupError | None = StartupError(
                f"backend {server.backend.name} failed to open: {exc.message}"
            )
        except OSError as exc:
            failed = StartupError(cannot_listen("arm port", host, port, "--port", exc))
        else:
            failed = None
        if failed is None:
            await sigs.stop.wait()

            async def force_on_second_signal() -> None:
                nonlocal forced
                await sigs.force.wait()
                forced = True
                tg.cancel_scope.cancel()

            tg.start_soon(force_on_second_signal)
            await server.stop(f"signal {sigs.received[0]}")
            tg.cancel_scope.cancel()  # the watcher
    if failed is not None:
        raise failed
    if forced:
        log.warning(
            "daemon_forced_exit", reason=f"second signal {sigs.received[-1]} during shutdown"
        )
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings, config = settings_from_args(args)
        profile = load_sim_profile(settings)
    except ConfigError as exc:
        print(f"mecharm-daemon: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    log.info(
        "daemon_config",
        config_file=str(config) if config else None,
        backend=settings.backend,
        host=settings.listen_host(),
        port=settings.port,
        envelope=settings.envelope.envelope().to_wire(),
    )
    try:
        return anyio.run(serve, settings, profile)
    except ConfigError as exc:  # a bad scene: bad input, as a bad flag (README: exit 2)
        log.error("daemon_start_failed", reason=str(exc))
        print(f"mecharm-daemon: {exc}", file=sys.stderr)  # the operator's line (docs/setup.md)
        return 2
    except StartupError as exc:
        log.error("daemon_start_failed", reason=str(exc))
        print(f"mecharm-daemon: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
