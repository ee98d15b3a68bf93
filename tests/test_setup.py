"""Set-up that cannot be got wrong (docs/setup.md): the time scale comes from the daemon,
every command starts from any directory, and each set-up trap gets one line that says what
to do, never a traceback. Every test drives the real processes (the CLIs as subprocesses,
the simulated daemon as a process) from ``/``.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from mecharm.common.defaults import APPROACH_PICK_ARC, RUNTIME_CONFIG
from mecharm.common.layout import LEDGER, RUNS_DIR, TRACE_SUFFIX, DataRoot
from mecharm.runtime.client import DaemonClient, TimeScaleMismatch
from mecharm.runtime.pick_place.records import RECORDS
from mecharm.runtime.records.trace import read_trace
from mecharm.runtime.simcontrol import scene_next
from mecharm.tools.cli import TOOL_GROUPS
from mecharm.tools.simrig import SimRig, free_port, start_sim_daemon

LEDGER_COLUMNS = RECORDS.ledger_columns
REPO = Path(__file__).resolve().parents[1]
SCALE = 20.0


def run_from_root(
    module: str, *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``python -m module args`` with the working directory ``/``."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=timeout,
        # the environment as the suite's session fixtures left it (their private config,
        # data and cache folders), the checkout first on the path so a process started in /
        # runs this code
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )


def one_line(r: subprocess.CompletedProcess[str], prog: str) -> str:
    """The operator's line: ``prog: ...`` on stderr; no traceback anywhere."""
    assert "Traceback" not in r.stderr + r.stdout, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith(f"{prog}: ")]
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.fixture(scope="module")
def sim_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimRig]:
    rig = start_sim_daemon(tmp_path_factory.mktemp("setup") / "logs", seed=7, time_scale=SCALE)
    yield rig
    rig.daemon.stop()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    r.mkdir()
    return r


def test_the_simulated_rig_runs_in_a_session_of_its_own(sim_rig: SimRig) -> None:
    """It stands in for the Pi and the devices: with the kernel's group scheduling a session
    of its own gets its own CPU share, as they have cores of their own (docs/observer.md)."""
    pid = sim_rig.daemon.proc.pid
    assert os.getsid(pid) == pid != os.getsid(0)


# ---------------------------------------------------------------- the time scale


def test_the_runtime_has_no_time_scale_flag_and_says_where_it_is() -> None:
    r = run_from_root("mecharm.runtime.cli", "--time-scale", "20")
    assert r.returncode == 2, r.stderr
    assert one_line(r, "mecharm-runtime") == (
        "mecharm-runtime: --time-scale: the runtime takes the daemon's time scale; start the "
        "daemon with --time-scale K"
    )
    from mecharm.runtime.cli import build_parser

    assert "--time-scale" not in build_parser().format_help()  # hidden: not an option
    assert "time_scale: 1.0\n" not in RUNTIME_CONFIG.read_text()  # a set key would be a check


def test_hello_announces_the_time_scale_and_a_reconnect_must_keep_it(tmp_path: Path) -> None:
    fast = start_sim_daemon(tmp_path / "a", scene=None, time_scale=SCALE)
    slow = start_sim_daemon(tmp_path / "b", scene=None, time_scale=5.0)
    try:

        async def main() -> None:
            c = DaemonClient(port=fast.daemon_port)
            hello = await c.connect()
            assert hello["time_scale"] == SCALE and c.time_scale == SCALE
            await c.aclose()
            c.port = slow.daemon_port  # "the daemon restarted" with another scale
            with pytest.raises(TimeScaleMismatch, match="restart the runtime"):
                await c.connect()
            assert not c.is_connected
            checked = DaemonClient(port=slow.daemon_port, time_scale=5.0)
            assert (await checked.connect())["time_scale"] == 5.0
            await checked.aclose()

        anyio.run(main)
    finally:
        fast.daemon.stop()
        slow.daemon.stop()


@pytest.mark.slow
def test_a_time_scale_setting_the_daemon_does_not_announce_is_refused(
    sim_rig: SimRig, root: Path, fk_data_dir: Path
) -> None:
    r = run_from_root(
        "mecharm.runtime.cli",
        *("--trials", "1", "--no-recorder", "--data-root", str(root)),
        *("--daemon-port", str(sim_rig.daemon_port), "--top-camera", sim_rig.top_url),
        env={"MECHARM_RUNTIME_TIME_SCALE": "1", "MECHARM_RUNTIME_FK_DATA_DIR": str(fk_data_dir)},
    )
    line = one_line(r, "mecharm-runtime")
    assert r.returncode == 2, r.stderr
    assert "runs at time scale 20" in line and "drop time_scale" in line
    # said once: the refusal line, not also a log line echoed on the console
    assert (r.stdout + r.stderr).count("runs at time scale 20") == 1, r.stdout + r.stderr
    assert "time_scale_refused" not in r.stdout + r.stderr
    assert not DataRoot(root).run_folders.exists() or not any(DataRoot(root).run_folders.iterdir())


@pytest.mark.slow
def test_a_trial_from_root_takes_the_daemons_time_scale(
    sim_rig: SimRig, root: Path, fk_data_dir: Path
) -> None:
    """The strong test: a real trial, started in /, with the packaged config and arcs and no
    time scale given: the trace records the daemon's."""
    r = run_from_root(
        "mecharm.runtime.cli",
        *("--trials", "1", "--no-recorder", "--data-root", str(root)),
        *("--daemon-port", str(sim_rig.daemon_port), "--top-camera", sim_rig.top_url),
        *("--sim-control", sim_rig.control_url, "--log-level", "warning"),
        env={"MECHARM_RUNTIME_FK_DATA_DIR": str(fk_data_dir)},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert "1 completed" in r.stdout, r.stdout
    constants = _constants(root)
    assert constants["time_scale"] == SCALE
    assert constants["pick_place"]["approach_pick_arc"] == str(APPROACH_PICK_ARC)  # type: ignore[index]


@pytest.mark.slow
def test_a_dry_run_from_root_uses_the_setting_else_real_time(
    sim_rig: SimRig, root: Path, fk_data_dir: Path
) -> None:
    """A dry run talks to no daemon: the time_scale key (here through the environment)."""
    # a fresh scene: an earlier test of this module may have left the block in the box
    scene_next(sim_rig.control_url, seed=3)
    r = run_from_root(
        "mecharm.runtime.cli",
        *("--dry-run", "--trials", "1", "--data-root", str(root)),
        *("--top-camera", sim_rig.top_url, "--log-level", "warning"),
        env={
            "MECHARM_RUNTIME_TIME_SCALE": str(SCALE),
            "MECHARM_RUNTIME_FK_DATA_DIR": str(fk_data_dir),
        },
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert _constants(root)["time_scale"] == SCALE


def _constants(root: Path) -> dict[str, object]:
    """The constants the one trial under ``root`` recorded in its trace."""
    (run_dir,) = DataRoot(root).run_folders.iterdir()
    head = next(read_trace(DataRoot(root).trace(run_dir.name)))
    assert head["event"] == "trial"
    return dict(head["constants"])


# ---------------------------------------------------------------- every command from /


@pytest.mark.slow
@pytest.mark.parametrize(
    "module, args",
    [
        ("mecharm.runtime.cli", ["--help"]),
        ("mecharm.daemon.cli", ["--help"]),
        ("mecharm.recorder.cli", ["--help"]),
        ("mecharm.tools.cli", ["--help"]),
        *[("mecharm.tools.cli", [group, "--help"]) for group in TOOL_GROUPS],
        ("mecharm.tools.demo", ["--help"]),
    ],
)
def test_every_entry_point_starts_from_root(module: str, args: list[str]) -> None:
    r = run_from_root(module, *args, timeout=120)
    assert r.returncode == 0 and "usage:" in r.stdout, r.stderr
    assert "Traceback" not in r.stderr


def test_the_defaults_are_found_from_root(tmp_path: Path) -> None:
    """From /, the runtime loads the shipped settings and arcs and stops at the first thing
    the operator must give: a data root (none set, and the user's default folder is absent)."""
    env = {"XDG_DATA_HOME": str(tmp_path), "MECHARM_DATA_ROOT": ""}
    r = run_from_root("mecharm.runtime.cli", "--dry-run", "--trials", "1", env=env, timeout=120)
    assert r.returncode == 3, r.stderr
    line = one_line(r, "mecharm-runtime")
    assert "does not exist" in line and str(tmp_path / "mecharm" / "data") in line
    assert APPROACH_PICK_ARC.is_file() and APPROACH_PICK_ARC.parent.parent == RUNTIME_CONFIG.parent


def test_one_variable_sets_every_process_default_data_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MECHARM_DATA_ROOT (docs/setup.md): the runtime, the recorder, `mecharm fk` and
    `mecharm replay` default to it alike; no machine's mount point is written in the code."""
    from mecharm.common.config import load_settings
    from mecharm.common.layout import default_data_root
    from mecharm.recorder.config import RecorderSettings
    from mecharm.runtime.config import RuntimeSettings
    from mecharm.runtime.lookup.settings import FkToolSettings
    from mecharm.tools.replay.config import ReplaySettings

    monkeypatch.setenv("MECHARM_DATA_ROOT", str(tmp_path / "ssd"))
    assert default_data_root() == tmp_path / "ssd"
    assert load_settings(RuntimeSettings).data_root == tmp_path / "ssd"
    assert load_settings(RecorderSettings).data_root == tmp_path / "ssd"
    assert load_settings(FkToolSettings).data_dir == tmp_path / "ssd"
    assert load_settings(ReplaySettings).data_dir == tmp_path / "ssd"
    monkeypatch.setenv("MECHARM_DATA_ROOT", "")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert load_settings(RuntimeSettings).data_root == tmp_path / "mecharm" / "data"
    # a flag still wins over the variable
    assert load_settings(RuntimeSettings, overrides={"data_root": "/x"}).data_root == Path("/x")


# ---------------------------------------------------------------- the traps, one line each


def test_unknown_scene_suggests_the_closest() -> None:
    r = run_from_root(
        "mecharm.daemon.cli", "--backend", "sim", "--scene", "randm", "--port", "0",
        "--camera-port", "0", "--log-level", "error", timeout=120,
    )  # fmt: skip
    assert r.returncode == 2
    line = one_line(r, "mecharm-daemon")
    assert "unknown scene 'randm'; did you mean 'random'? known: random" in line


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


@pytest.mark.parametrize("flag", ["--camera-port", "--port"])
def test_a_daemon_port_in_use_names_the_port_and_its_flag(busy_port: int, flag: str) -> None:
    ports = {"--port": str(free_port()), "--camera-port": str(free_port())}
    ports[flag] = str(busy_port)
    r = run_from_root(
        "mecharm.daemon.cli", "--backend", "sim", "--scene", "random", "--log-level", "error",
        *[a for kv in ports.items() for a in kv], timeout=120,
    )  # fmt: skip
    assert r.returncode == 1
    line = one_line(r, "mecharm-daemon")
    assert f"127.0.0.1:{busy_port} is already in use" in line and f"pass {flag}" in line


def test_a_recorder_port_in_use_names_the_port_and_its_flag(tmp_path: Path, root: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        r = run_from_root(
            "mecharm.recorder.cli", "--data-root", str(root), "--udp-port", str(port),
            "--camera", "synthetic",
            "--key-file", str(tmp_path / "key"), "--log-level", "error", timeout=120,
        )  # fmt: skip
    assert r.returncode == 2
    line = one_line(r, "mecharm-recorder")
    assert f"UDP port 127.0.0.1:{port} is already in use" in line and "--udp-port" in line


@pytest.mark.slow
def test_a_stopped_sim_daemon_is_one_line_not_a_url_error(
    sim_rig: SimRig, root: Path, fk_data_dir: Path, tmp_path: Path
) -> None:
    """The scene for trial 1 (every trial gets a fresh one) is asked of a simulated rig that
    has stopped: one line, then the session's summary, no traceback."""
    gone = start_sim_daemon(tmp_path / "gone", seed=3, time_scale=SCALE)
    gone.daemon.stop()
    r = run_from_root(
        "mecharm.runtime.cli",
        *("--dry-run", "--trials", "2", "--data-root", str(root)),
        *("--top-camera", sim_rig.top_url, "--sim-control", gone.control_url),
        *("--log-level", "error"),
        env={
            "MECHARM_RUNTIME_TIME_SCALE": str(SCALE),
            "MECHARM_RUNTIME_FK_DATA_DIR": str(fk_data_dir),
        },
    )
    assert r.returncode == 9, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "URLError" not in r.stderr + r.stdout
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith("no fresh scene: ")]
    assert f"sim control {gone.control_url} does not answer" in line, line
    assert "0 trial(s): 0 completed" in r.stdout and "trial 1" not in r.stdout


def test_the_first_trial_gets_a_fresh_scene_too() -> None:
    """An earlier session may have left the block in the box: ask before trial 1 as well."""
    import http.server
    import threading

    from mecharm.runtime.cli import fresh_scenes

    asked: list[str] = []

    class Scene(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            asked.append(self.path)
            body = json.dumps({"layout": {"seed": 41}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_a: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Scene)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        between = fresh_scenes(f"http://127.0.0.1:{server.server_port}")
        assert anyio.run(between, 0) == 41
    finally:
        server.shutdown()
        server.server_close()
    assert asked == ["/scene/next"]


# ---------------------------------------------------------------- start failures: what to do


def test_an_unreachable_daemon_says_what_to_do(root: Path, fk_data_dir: Path) -> None:
    port = free_port()
    r = run_from_root(
        "mecharm.runtime.cli",
        *("--trials", "1", "--no-recorder", "--no-rerun", "--data-root", str(root)),
        *("--daemon-port", str(port), "--top-camera", "synthetic?fps=30&w=320&h=240"),
        env={"MECHARM_RUNTIME_FK_DATA_DIR": str(fk_data_dir)},
    )
    assert r.returncode == 1, r.stdout + r.stderr
    line = one_line(r, "mecharm-runtime")
    assert line.startswith(
        f"mecharm-runtime: cannot start: cannot connect to daemon 127.0.0.1:{port}"
    )
    assert line.endswith(
        "Do: start mecharm-daemon there (on the Pi), or fix --daemon-host/--daemon-port (and "
        "the network between them)"
    ), line


@pytest.mark.parametrize("token", [None, "not-the-daemons-token-0123456789"])
def test_a_missing_or_wrong_token_says_what_to_do(
    token: str | None, root: Path, fk_data_dir: Path, tmp_path: Path
) -> None:
    """The same fix texts as ``mecharm doctor`` (client.connect_fix)."""
    from mecharm.common.config import load_settings
    from mecharm.daemon.backends.sim import SimBackend
    from mecharm.daemon.server import run_server
    from mecharm.runtime.config import RuntimeSettings
    from mecharm.runtime.rigsetup import DaemonUnavailable
    from mecharm.runtime.service import run_service
    from mecharm.sim.arm import SimArm, SimArmConfig

    token_file = tmp_path / "daemon.token"
    if token is not None:
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)

    async def main() -> str:
        arm = SimArm(SimArmConfig(time_scale=SCALE, seed=3))
        async with run_server(
            SimBackend(arm), "127.0.0.1", 0, "the-daemons-token-0123456789"
        ) as srv:
            settings = load_settings(
                RuntimeSettings,
                overrides={
                    "data_root": root, "fk_data_dir": fk_data_dir, "trials": 1,
                    "recorder_enabled": False, "rerun_after_trial": False,
                    "daemon_port": srv.port, "top_camera": "synthetic?fps=30&w=320&h=240",
                    **({"daemon_token_file": token_file} if token is not None else {}),
                },
            )  # fmt: skip
            with pytest.raises(DaemonUnavailable) as err:
                await run_service(settings, out=io.StringIO())
            return str(err.value)

    said = anyio.run(main)
    if token is None:
        assert said.endswith(
            "Do: the daemon requires a token: pass --token-file FILE (a copy of the daemon's "
            "token file)"
        ), said
    else:
        assert said.endswith(
            f"Do: --token-file {token_file} does not hold the daemon's token: copy the "
            "daemon's token file (the one its --token-file names)"
        ), said


def test_an_unknown_settings_key_suggests_the_closest(tmp_path: Path) -> None:
    cfg = tmp_path / "runtime.yaml"
    cfg.write_text("time_scle: 2\n")
    r = run_from_root("mecharm.runtime.cli", "--config", str(cfg), timeout=120)
    assert r.returncode == 2
    assert "time_scle: unknown key; did you mean 'time_scale'?" in one_line(r, "mecharm-runtime")
    cfg.write_text("sim:\n  time_scal: 3\n")  # nested: the daemon's sim block
    r = run_from_root("mecharm.daemon.cli", "--config", str(cfg), timeout=120)
    assert r.returncode == 2
    assert "sim.time_scal: unknown key; did you mean 'time_scale'?" in one_line(r, "mecharm-daemon")


def test_an_unknown_ledger_column_suggests_the_closest(tmp_path: Path, root: Path) -> None:
    """A ledger whose header has a renamed column stops the runtime before the arm moves
    (exit 4); a mistyped column in the export's --select is named with the right one."""
    header = ["recording_stauts" if c == "recording_status" else c for c in LEDGER_COLUMNS]
    (root / RUNS_DIR).mkdir()
    (root / RUNS_DIR / LEDGER).write_text(",".join(header) + "\n")
    r = run_from_root("mecharm.runtime.cli", "--dry-run", "--trials", "1", "--data-root", str(root))
    assert r.returncode == 4
    assert "extra 'recording_stauts' (did you mean 'recording_status'?)" in one_line(
        r, "mecharm-runtime"
    )
    r = run_from_root(
        "mecharm.tools.cli", "export", "lerobot", "--root", str(root),
        "--out", str(tmp_path / "ds"), "--select", "recording_stauts=ok", "--no-progress",
    )  # fmt: skip
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "unknown ledger column 'recording_stauts'; did you mean 'recording_status'?" in r.stderr


def test_replaying_the_run_log_names_the_trace(tmp_path: Path) -> None:
    stem = "run_0001_20260101_000000"
    run_dir = DataRoot(tmp_path).run_dir(stem)
    run_dir.mkdir(parents=True)
    runlog = DataRoot(tmp_path).runlog(stem)
    runlog.write_text(json.dumps({"run_stem": stem}))
    r = run_from_root("mecharm.tools.cli", "replay", str(runlog), timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    trace = DataRoot(tmp_path).trace(stem)
    assert f"is the run log; replay takes the trace: {trace.name} beside it" in r.stderr + r.stdout


@pytest.mark.slow
def test_a_legacy_trace_replays_from_root(fk_data_dir: Path) -> None:
    """Its recorded arcs are the old relative defaults (configs/poses/...): from / the
    replay reads the shipped ones and runs the trial through today's code, which decides
    otherwise (exit 1, docs/replay.md, "Traces older than the code"), not a missing arc."""
    trace = REPO / "tests" / "replay" / "legacy_v1" / f"success_seed7{TRACE_SUFFIX}"
    assert '"approach_pick_arc": "configs/poses/approach_pick.json"' in trace.read_text()
    r = run_from_root("mecharm.tools.cli", "replay", str(trace), "--data-dir", str(fk_data_dir))
    assert r.returncode == 1 and f"{trace}: different" in r.stdout, r.stdout + r.stderr
    assert "Traceback" not in r.stderr


def test_doctor_fails_the_daemon_check_on_a_time_scale_setting_it_does_not_announce(
    sim_rig: SimRig, root: Path, fk_data_dir: Path
) -> None:
    r = run_from_root(
        "mecharm.tools.cli", "doctor", "--data-root", str(root), "--no-recorder",
        "--daemon-port", str(sim_rig.daemon_port), "--top-camera", sim_rig.top_url,
        env={"MECHARM_RUNTIME_TIME_SCALE": "1", "MECHARM_RUNTIME_FK_DATA_DIR": str(fk_data_dir)},
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith("FAIL") and "daemon" in ln]
    assert "runs at time scale 20, this session at 1" in line
    assert "drop time_scale" in r.stdout and "Traceback" not in r.stderr
