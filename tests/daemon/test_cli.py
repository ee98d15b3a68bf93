"""mecharm-daemon: settings precedence, start-up errors, real processes stopped by SIGTERM, the demo."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest

from mecharm.common.config import ConfigError
from mecharm.daemon import cli
from mecharm.daemon.cli import StartupError, build_parser, settings_from_args
from mecharm.daemon.config import DaemonSettings, is_loopback, read_token
from mecharm.sim.arm import SimArm
from mecharm.sim.firmware import FirmwareEmulator

from .conftest import LineClient


def settings(argv: list[str]) -> DaemonSettings:
    return settings_from_args(build_parser().parse_args(argv))[0]


def test_precedence_defaults_yaml_env_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k in list(os.environ):
        if k.startswith("MECHARM_DAEMON_"):
            monkeypatch.delenv(k)
    cfg = tmp_path / "d.yaml"
    cfg.write_text("port: 6000\nbaud: 115200\nsim:\n  time_scale: 4.0\n  noise_deg: 0.2\n")
    s = settings(["--config", str(cfg)])
    assert (s.port, s.baud, s.sim.time_scale, s.sim.noise_deg) == (6000, 115200, 4.0, 0.2)
    assert s.backend == "sim" and s.listen_host() == "127.0.0.1"
    monkeypatch.setenv("MECHARM_DAEMON_PORT", "6001")
    monkeypatch.setenv("MECHARM_DAEMON_SIM__TIME_SCALE", "8")
    s = settings(["--config", str(cfg)])
    assert (s.port, s.sim.time_scale, s.sim.noise_deg) == (6001, 8.0, 0.2)
    s = settings(
        [
            "--config",
            str(cfg),
            "--port",
            "6002",
            "--time-scale",
            "16",
            "--read-latency",
            "0",
            "--seed",
            "9",
            "--backend",
            "mycobot",
            "--serial-port",
            "/dev/ttyUSB0",
        ]
    )
    assert (s.port, s.sim.time_scale, s.sim.read_latency_s, s.sim.noise_deg) == (
        6002,
        16.0,
        0.0,
        0.2,
    )
    assert s.seed == 9 and s.sim.seed == 9
    assert (
        s.backend == "mycobot" and s.serial_port == "/dev/ttyUSB0" and s.listen_host() == "0.0.0.0"
    )


@pytest.mark.parametrize(
    ("yaml_text", "argv", "key"),
    [
        ("port: 70000\n", [], "port"),
        ("bogus_key: 1\n", [], "bogus_key"),
        ("sim:\n  time_scale: -1\n", [], "sim.time_scale"),
        ("", ["--backend", "sim", "--time-scale", "0"], "sim.time_scale"),
        ("backend: robot\n", [], "backend"),
        ("- a list\n", [], "top level"),
    ],
)
def test_invalid_config_fails_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], yaml_text: str, argv: list[str], key: str
) -> None:
    cfg = tmp_path / "d.yaml"
    cfg.write_text(yaml_text)
    assert cli.main(["--config", str(cfg), *argv]) == 2
    err = capsys.readouterr().err
    assert key in err and "mecharm-daemon" in err


def test_read_token(tmp_path: Path) -> None:
    """The daemon refuses a token it cannot trust (docs/daemon.md, "The token"), naming the fix."""
    p = tmp_path / "token"
    good = "abc123-0123456789abcdef"
    p.write_text(good + "\n")
    os.chmod(p, 0o600)
    assert read_token(p) == good
    # "~" is the user's home, as in the shipped daemon.yaml's example
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(tmp_path))
        assert read_token(Path("~/token")) == good
    os.chmod(p, 0o644)
    with pytest.raises(ConfigError, match=r"accessible by group or others.*chmod 600"):
        read_token(p)
    os.chmod(p, 0o600)
    p.write_text("abc123\n")
    with pytest.raises(ConfigError, match=r"6 characters, fewer than 16.*openssl rand"):
        read_token(p)
    p.write_text("  \n")
    with pytest.raises(ConfigError, match="empty"):
        read_token(p)
    p.write_text("two words\n")
    with pytest.raises(ConfigError, match="one line"):
        read_token(p)
    with pytest.raises(ConfigError, match="cannot read"):
        read_token(tmp_path / "missing")
    shared = tmp_path / "shared"
    shared.mkdir()
    q = shared / "token"
    q.write_text(good + "\n")
    q.chmod(0o600)
    shared.chmod(0o777)  # anyone could swap the file
    with pytest.raises(ConfigError, match=r"folder group or others may write.*chmod go-w"):
        read_token(q)
    link = tmp_path / "link"
    link.symlink_to(p)
    with pytest.raises(ConfigError, match="cannot read"):
        read_token(link)  # a symlink is not followed


def test_the_daemon_refuses_a_weak_token_file_before_listening(tmp_path: Path) -> None:
    tok = tmp_path / "token"
    tok.write_text("letmein\n")
    tok.chmod(0o600)
    r = subprocess.run(
        [sys.executable, "-m", "mecharm.daemon.cli", "--backend", "sim", "--port", "0",
         "--token-file", str(tok)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "fewer than 16" in r.stderr and "Traceback" not in r.stderr


def test_is_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert (
        not is_loopback("0.0.0.0")
        and not is_loopback("192.168.1.5")
        and not is_loopback("pi.local")
    )


class _FakeWorkcell:
    def __init__(self) -> None:
        self.urls = {"top": "http://127.0.0.1:8080/top.jpg"}
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_scene_starts_the_workcell(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    made: list[_FakeWorkcell] = []

    def start_workcell(arm: SimArm, **kw: Any) -> _FakeWorkcell:
        calls.append({"arm": arm, **kw})
        made.append(_FakeWorkcell())
        return made[-1]

    mod = types.ModuleType("mecharm.sim.workcell")
    mod.start_workcell = start_workcell  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mecharm.sim.workcell", mod)
    s = settings(
        ["--config", os.devnull, "--scene", "random", "--seed", "4", "--camera-port", "8099",
         "--sim-profile", "rig"]
    )  # fmt: skip
    arm = SimArm(s.sim)
    wc = cli._start_workcell(s, arm, "127.0.0.1", cli.load_sim_profile(s))
    assert wc is made[0]
    profile = calls[0].pop("profile")
    assert profile.name == "rig"
    assert calls == [
        {"arm": arm, "scene": "random", "seed": 4, "host": "127.0.0.1", "camera_port": 8099}
    ]
    assert cli._start_workcell(settings(["--config", os.devnull]), arm, "127.0.0.1", None) is None
    cli._start_workcell(
        settings(["--config", os.devnull, "--scene", "random"]), arm, "127.0.0.1", None
    )
    assert calls[-1]["seed"] == 0  # no --seed: the sim arm's seed


def test_scene_without_workcell_module_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mecharm.sim.workcell", None)  # import raises ImportError
    s = settings(["--config", os.devnull, "--scene", "random"])
    with pytest.raises(StartupError, match="workcell is not available"):
        cli._start_workcell(s, SimArm(s.sim), "127.0.0.1", None)
    s = settings(["--config", os.devnull, "--scene", "random", "--backend", "mycobot"])
    with pytest.raises(ConfigError, match="needs --backend sim"):
        cli._start_workcell(s, None, "127.0.0.1", None)


# ---------------------------------------------------------------- real processes


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MECHARM_DAEMON_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Daemon:
    """``python -m mecharm.daemon.cli`` in a subprocess; learns its port from the JSON log."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mecharm.daemon.cli",
                "--config",
                os.devnull,
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                *args,
            ],
            cwd=cwd,
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: list[dict[str, Any]] = []
        self.port = self._wait_for("daemon_listening")["port"]

    def _wait_for(self, event: str, timeout: float = 20.0) -> dict[str, Any]:
        assert self.proc.stderr is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            raw = self.proc.stderr.readline()
            if not raw:
                raise AssertionError(
                    f"daemon exited before {event}: rc={self.proc.poll()} {self.events}"
                )
            ev = json.loads(raw)
            self.events.append(ev)
            if ev["event"] == event:
                return ev
        raise AssertionError(f"no {event} within {timeout} s")

    def terminate(self) -> tuple[int, list[dict[str, Any]]]:
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=20)
        rest = [json.loads(x) for x in err.splitlines() if x.strip()]
        return self.proc.returncode, self.events + rest


@pytest.mark.anyio
async def test_sim_daemon_process_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    d = Daemon(["--backend", "sim", "--time-scale", "20"], tmp_path)
    try:
        c = await LineClient.connect(d.port)
        assert (await c.ok("hello"))["backend"] == "sim"
        assert len(await c.ok("get_angles")) == 6
    finally:
        rc, events = d.terminate()
    assert rc == 0
    stopping = [e for e in events if e["event"] == "daemon_stopping"]
    assert stopping and stopping[0]["reason"] == "signal SIGTERM"
    assert any(e["event"] == "daemon_stopped" for e in events)
    assert await c.at_eof()
    await c.close()


@pytest.mark.anyio
async def test_mycobot_daemon_process_through_the_emulator(
    tmp_path: Path, emulator: FirmwareEmulator
) -> None:
    d = Daemon(
        ["--backend", "mycobot", "--serial-port", emulator.path, "--baud", "1000000"], tmp_path
    )
    try:
        c = await LineClient.connect(d.port)
        assert (await c.ok("hello"))["backend"] == "mycobot"
        await c.ok("send_angles", {"angles": [15.0, 10.0, 0, 0, 0, -30.0], "speed": 80})
        assert emulator.arm.wait_idle(5)
        got = await c.ok("get_angles")
        assert abs(got[0] - 15.0) < 2.7
        await c.close()
    finally:
        rc, _events = d.terminate()
    assert rc == 0


@pytest.mark.anyio
async def test_token_file_enables_auth(tmp_path: Path) -> None:
    tok = tmp_path / "token"
    tok.write_text("letmein-0123456789\n")
    os.chmod(tok, 0o600)
    d = Daemon(["--backend", "sim", "--token-file", str(tok)], tmp_path)
    try:
        c = await LineClient.connect(d.port)
        assert (await c.call("get_angles"))["error"]["code"] == "unauthorized"
        assert (await c.ok("hello", {"token": "letmein-0123456789"}))["authenticated"] is True
        assert len(await c.ok("get_angles")) == 6
        await c.close()
    finally:
        rc, _ = d.terminate()
    assert rc == 0


@pytest.mark.anyio
async def test_sim_daemon_with_a_scene_starts_the_workcell(tmp_path: Path) -> None:
    d = Daemon(
        ["--backend", "sim", "--scene", "random", "--seed", "3", "--camera-port", "0"], tmp_path
    )
    try:
        started = [e for e in d.events if e["event"] == "workcell_started"]
        if not started:
            started = [d._wait_for("workcell_started")]
        assert started[0]["seed"] == 3 and started[0]["urls"]
        c = await LineClient.connect(d.port)
        assert len(await c.ok("get_angles")) == 6
        await c.close()
    finally:
        rc, events = d.terminate()
    assert rc == 0
    assert any(e["event"] == "workcell_closed" for e in events)


def test_listening_beyond_loopback_without_token_warns(tmp_path: Path) -> None:
    d = Daemon(["--backend", "sim", "--host", "0.0.0.0"], tmp_path)
    rc, events = d.terminate()
    assert rc == 0
    warn = [e for e in events if e["event"] == "no_authentication"]
    assert warn and warn[0]["level"] == "warning" and "anyone on the network" in warn[0]["reason"]


def test_startup_failure_exits_1_with_the_reason(tmp_path: Path) -> None:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "mecharm.daemon.cli",
            "--config",
            os.devnull,
            "--backend",
            "mycobot",
            "--serial-port",
            str(tmp_path / "ttyGONE"),
            "--host",
            "127.0.0.1",
            "--port",
            "0",
        ],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode == 1
    # the log's JSON lines, and one plain line for the operator (docs/setup.md)
    events = [json.loads(x) for x in p.stderr.splitlines() if x.startswith("{")]
    failed = [e for e in events if e["event"] == "daemon_start_failed"]
    assert failed and "cannot open serial port" in failed[0]["reason"]
    plain = [x for x in p.stderr.splitlines() if x.startswith("mecharm-daemon: ")]
    assert len(plain) == 1 and "cannot open serial port" in plain[0]


@pytest.mark.anyio
async def test_demo_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from mecharm.daemon.demo import run_demo

    assert await run_demo(time_scale=50.0) == 0
    out = capsys.readouterr().out
    assert "hello: protocol 1" in out
    assert out.count("arrived=True") == 3
    assert "error outside_envelope: send_angles refused" in out  # the j1=95 send
    assert "is_moving=False" in out
    assert '"code":"busy"' in out and "error bad_speed" in out
    assert "daemon stopped" in out
    await asyncio.sleep(0)
