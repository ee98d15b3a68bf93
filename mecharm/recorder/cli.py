"""``mecharm-recorder``: the long-running side-camera recorder (docs/recorder.md)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio

from mecharm.common.config import ConfigError, cannot_listen, load_settings
from mecharm.common.keyfile import KeyFileError, load_or_create_key
from mecharm.common.logging import configure_logging, get_logger
from mecharm.common.shutdown import capture_signals
from mecharm.recorder.config import RecorderSettings
from mecharm.recorder.service import RecorderService, encoder_nice

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mecharm-recorder",
        description="Record the side camera and the runtime's UDP events, one folder per trial.",
    )
    p.add_argument("--config", type=Path, help="YAML settings file (e.g. configs/recorder.yaml)")
    p.add_argument(
        "--data-root",
        type=Path,
        help="data root (default $MECHARM_DATA_ROOT, else ~/.local/share/mecharm/data, the runtime's too; must exist)",
    )
    p.add_argument(
        "--camera",
        help="side camera source (required): 0, name:Iriun, http://.../side.mjpg, rtsp://..., "
        "a video file, or synthetic[?fps=..] for a test card (recordings marked synthetic)",
    )
    p.add_argument("--udp-port", type=int, help="UDP port for events (default 5556)")
    p.add_argument(
        "--key-file",
        type=Path,
        help="secret shared with the runtime (default $XDG_CONFIG_HOME/mecharm/recorder.key, "
        "created 0600 when missing)",
    )
    p.add_argument(
        "--require-mount",
        action="store_true",
        default=None,
        help="refuse to record unless the data root is a mount point",
    )
    p.add_argument(
        "--status-interval",
        type=float,
        dest="status_interval_sec",
        help="seconds between status log lines (0 = off)",
    )
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    return p


def own_session() -> str:
    """Start a session of our own unless started at a terminal; returns what was done.

    Linux's autogroup (on by default on desktop kernels) shares the CPU between sessions
    first, then between the tasks of each one: a recorder in the session of the
    program that started it queues behind every busy process of that session (the
    operator's shell, CPU-bound tools), and a frame_request waits tens of ms for a
    core. In a session of its own it gets a group share and its reply runs at once
    (docs/recorder.md, "Under CPU contention"). At a terminal prompt the recorder keeps
    the terminal's session, so Ctrl-C still reaches it.
    """
    if not hasattr(os, "setsid"):
        return "unsupported"
    if sys.stdin is not None and sys.stdin.isatty():
        return "terminal"
    if os.getsid(0) == os.getpid():
        return "already"
    try:
        os.setsid()
    except OSError as exc:  # a process group leader cannot; harmless, logged
        return f"failed: {exc}"
    return "new"


async def _run(settings: RecorderSettings) -> int:
    log = get_logger("mecharm.recorder")
    if settings.own_session:
        session = own_session()
        log.info(
            "recorder_session",
            session=session,
            encoder_nice=encoder_nice(settings.video.encoder_nice),
        )
    # the event loop shares the GIL with the camera and writer threads: hand it over
    # sooner (default 5 ms) so a frame_request is not kept waiting behind them
    sys.setswitchinterval(0.001)
    service = RecorderService(settings)
    forced = False
    with capture_signals() as sigs:
        async with anyio.create_task_group() as tg:
            try:
                await tg.start(service.run)
            except OSError as exc:
                why = (
                    cannot_listen("UDP port", settings.host, settings.udp_port, "--udp-port", exc)
                    + " (and the runtime's --recorder-port alike)"
                )
                log.error("recorder_start_failed", reason=why)
                print(f"mecharm-recorder: {why}", file=sys.stderr)  # the operator's line
                return 2
            await sigs.stop.wait()
            log.info("shutdown_requested", signals=sigs.received)

            async def force_on_second_signal() -> None:
                nonlocal forced
                await sigs.force.wait()
                forced = True
                tg.cancel_scope.cancel()

            tg.start_soon(force_on_second_signal)
            await service.stop("shutdown")
            tg.cancel_scope.cancel()  # the watcher
    if forced:
        log.error("shutdown_forced", reason="second signal")
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if k != "config"}
    try:
        settings = load_settings(RecorderSettings, args.config, overrides)
    except ConfigError as exc:
        print(f"mecharm-recorder: {exc}", file=sys.stderr)
        return 2
    if settings.camera is None:
        print(
            "mecharm-recorder: no side camera given: pass --camera SOURCE (a device index, "
            "name:Iriun, an MJPEG URL, rtsp://..., a video file), or --camera synthetic for a "
            "generated test card (its recordings are marked synthetic; export refuses them "
            "unless --allow-synthetic)",
            file=sys.stderr,
        )
        return 2
    try:  # created here if missing; refused if too open (docs/recorder.md, "The key file")
        load_or_create_key(settings.key_file)
    except KeyFileError as exc:
        print(f"mecharm-recorder: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, json=settings.log_json)
    return anyio.run(_run, settings)


if __name__ == "__main__":
    sys.exit(main())
