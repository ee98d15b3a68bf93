"""Start the simulated rig and the recorder as real background processes (demo, bench, e2e tests).

The runtime then talks to them exactly as on the real rig: TCP to the daemon,
MJPEG for the top camera, UDP to the recorder. Children are stopped with SIGINT
(their graceful path) and killed only if they do not exit in time.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from mecharm.common.keyfile import KeyFileError
from mecharm.recorder.sender import RecorderSender

__all__ = ["Child", "SimRig", "free_port", "start_recorder", "start_sim_daemon"]


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    _log: IO[bytes] | None = field(default=None, repr=False)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGINT (graceful), then SIGKILL after ``timeout``; returns the exit code."""
        if self.alive():
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._log is not None:
            self._log.close()
            self._log = None
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL at once (tests: a crashed process)."""
        if self.alive():
            self.proc.kill()
            self.proc.wait(5)
        if self._log is not None:
            self._log.close()
            self._log = None

    def tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def _spawn(name: str, args: list[str], log_dir: Path, python: str | None = None) -> Child:
    """``python args`` (default this interpreter) with its output in ``{log_dir}/{name}.log``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    fh = open(log_path, "ab")  # noqa: SIM115 - owned by the Child
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [python or sys.executable, *args],
        stdout=fh,
        stderr=subprocess.STDOUT,
        env=env,
        stdin=subprocess.DEVNULL,
        # a session of its own: the simulated rig stands in for the Pi and the devices, which
        # never share the control computer's CPU; with the kernel's group scheduling
        # (autogroup, on by default) a session gets its own share (docs/observer.md)
        start_new_session=True,
    )
    return Child(name, proc, log_path, fh)


def _wait(check: object, child: Child, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not child.alive():
            child.stop()  # closes its log file
            raise RuntimeError(
                f"{child.name} exited (code {child.proc.returncode}) before {what}:\n{child.tail()}"
            )
        try:
            if check():  # type: ignore[operator]
                return
        except OSError:
            pass
        time.sleep(0.1)
    child.stop(2)
    raise RuntimeError(f"{child.name}: {what} not ready within {timeout}s:\n{child.tail()}")


@dataclass
class SimRig:
    daemon: Child
    daemon_port: int
    camera_port: int
    #: the daemon's token file, when it was started with a token
    token_file: Path | None = None

    @property
    def top_url(self) -> str:
        return f"http://127.0.0.1:{self.camera_port}/top.mjpg"

    @property
    def side_url(self) -> str:
        return f"http://127.0.0.1:{self.camera_port}/side.mjpg"

    @property
    def control_url(self) -> str:
        return f"http://127.0.0.1:{self.camera_port}"

    def runtime_overrides(
        self, data_root: Path, time_scale: float, recorder_port: int | None = None, **more: Any
    ) -> dict[str, Any]:
        """The runtime settings that point a runtime at this rig: its daemon and top camera,
        the recorder on ``recorder_port`` (None: no recorder), the time scale; ``more`` adds
        any other key (load them with ``load_settings(RuntimeSettings, ..., overrides)``)."""
        return {
            "data_root": data_root,
            "daemon.port": self.daemon_port,
            "perception.top_camera": self.top_url,
            "recorder.port": recorder_port,
            "recorder.enabled": recorder_port is not None,
            "time_scale": time_scale,
            **more,
        }


def start_sim_daemon(
    log_dir: Path,
    *,
    seed: int = 7,
    time_scale: float = 5.0,
    scene: str | None = "random",
    timeout: float = 60.0,
    extra_args: Sequence[str] = (),
    token: str | None = None,
    python: str | None = None,
) -> SimRig:
    """``mecharm-daemon --backend sim --scene random`` on free ports; returns once both the arm
    port and the cameras answer. ``scene=None``: the arm alone (no workcell, no cameras).
    ``token``: the daemon requires it, from ``{log_dir}/daemon.token`` (0600, as the daemon
    demands of a token file; ``SimRig.token_file``). ``extra_args``: more daemon flags
    (``--idle-timeout S``, ...). ``python``: the interpreter of the rig's processes (default
    this one; another venv's, e.g. the project's beside lerobot's, docs/rollouts.md)."""
    # a free port is free when chosen, not when the daemon binds it: another process of a
    # busy machine (a parallel test's server) may take it meanwhile; then new ports
    for attempt in range(PORT_ATTEMPTS):
        try:
            return _start_sim_daemon(
                log_dir, seed=seed, time_scale=time_scale, scene=scene, timeout=timeout,
                extra_args=extra_args, token=token, python=python,
            )  # fmt: skip
        except PortTaken:
            if attempt == PORT_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


#: how many times a sim daemon is started on new ports when one was taken before it bound
PORT_ATTEMPTS = 3


class PortTaken(RuntimeError):
    """The daemon exited because a port chosen free was taken before it bound it."""


def _start_sim_daemon(
    log_dir: Path,
    *,
    seed: int,
    time_scale: float,
    scene: str | None,
    timeout: float,
    extra_args: Sequence[str],
    token: str | None,
    python: str | None,
) -> SimRig:
    token_file: Path | None = None
    if token is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        token_file = log_dir / "daemon.token"
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
        extra_args = ["--token-file", str(token_file), *extra_args]
    port, cam = free_port(), free_port()
    child = _spawn(
        "daemon",
        [
            "-m",
            "mecharm.daemon.cli",
            "--backend",
            "sim",
            *(["--scene", scene] if scene is not None else []),
            "--seed",
            str(seed),
            "--time-scale",
            str(time_scale),
            "--port",
            str(port),
            "--camera-port",
            str(cam),
            "--log-level",
            "warning",
            *extra_args,
        ],
        log_dir,
        python,
    )

    def tcp_up() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True

    def cam_up() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{cam}/top.jpg", timeout=5.0) as r:
            return bool(r.status == 200)

    try:
        if scene is not None:
            _wait(cam_up, child, timeout, "the cameras")
        _wait(tcp_up, child, timeout, "the arm port")
    except RuntimeError as exc:
        if "already in use" in str(exc):
            raise PortTaken(str(exc)) from None
        raise
    return SimRig(child, port, cam, token_file)


def start_recorder(
    log_dir: Path,
    data_root: Path,
    camera: str,
    udp_port: int | None = None,
    timeout: float = 30.0,
    *,
    key_file: Path | None = None,
    log_level: str = "warning",
    extra_args: Sequence[str] = (),
    python: str | None = None,
) -> tuple[Child, int]:
    """``mecharm-recorder`` on a free UDP port; returns once it answers a frame request.

    ``key_file`` None: the default per-user key, as the runtime's default (docs/recorder.md).
    ``extra_args``: more flags, e.g. ``["--require-mount"]``.
    """
    udp = udp_port or free_port(socket.SOCK_DGRAM)
    key_args = ["--key-file", str(key_file)] if key_file is not None else []
    child = _spawn(
        "recorder",
        [
            "-m",
            "mecharm.recorder.cli",
            "--data-root",
            str(data_root),
            "--camera",
            camera,
            "--udp-port",
            str(udp),
            "--log-level",
            log_level,
            *key_args,
            *extra_args,
        ],
        log_dir,
        python,
    )
    try:
        sender = RecorderSender("127.0.0.1", udp, key_file=key_file)
    except KeyFileError as exc:  # unusable key file: the child refuses it too (exit 2)
        child.stop(timeout)
        raise RuntimeError(f"recorder not started: {exc}\n{child.tail()}") from None

    def answers() -> bool:
        _path, _ts, reason = sender.request_frame("ready_probe", timeout=0.5)
        return reason in ("ok_orphan", "ok", "no_frame_available", "stale_frame")

    try:
        _wait(answers, child, timeout, "frame requests")
    finally:
        sender.close()
    return child, udp
