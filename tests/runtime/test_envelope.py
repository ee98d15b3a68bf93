"""The runtime against the daemon's safety envelope: it reads it from hello, refuses to start
when its own settings are wider (exit 7), guards its poses with it, and goes on with its own
limits (one warning) when an older daemon announces none (docs/daemon.md, "Safety envelope")."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from mecharm.common.envelope import Envelope
from mecharm.common.kinematics import JOINT_MAX, JOINT_MIN
from mecharm.daemon.backends.sim import SimBackend
from mecharm.daemon.server import ArmServer, run_server
from mecharm.runtime.arm import DaemonArm
from mecharm.runtime.client import DaemonClient, OutsideEnvelope
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.guard import GuardViolation, check_pose
from mecharm.runtime.ports import RealClock
from mecharm.runtime.rigsetup import EnvelopeRefused, check_envelope
from mecharm.sim.arm import SimArm, SimArmConfig

TOP = "synthetic?fps=15&w=640&h=360"
DEFAULT_MAX = Envelope().joint_max


def _max(**joints: float) -> tuple[float, ...]:
    hi = list(DEFAULT_MAX)
    for name, v in joints.items():
        hi[int(name[1:])] = v
    return tuple(hi)


def _min(**joints: float) -> tuple[float, ...]:
    lo = list(JOINT_MIN)
    for name, v in joints.items():
        lo[int(name[1:])] = v
    return tuple(lo)


class _OlderServer(ArmServer):
    """A daemon from before the envelope: its hello has no ``envelope`` field."""

    async def _cmd_hello(self, conn: Any, args: Any) -> dict[str, Any]:
        hello = await super()._cmd_hello(conn, args)
        del hello["envelope"]
        return hello


def _arm() -> SimArm:
    return SimArm(SimArmConfig(time_scale=20.0, seed=3, initial_angles=(0, 0, 0, 0, 0, -30)))


@pytest.fixture
async def daemon(request: pytest.FixtureRequest) -> AsyncIterator[tuple[ArmServer, SimArm]]:
    """A real daemon on loopback whose envelope is the test's parameter."""
    arm = _arm()
    env: Envelope = request.param
    async with run_server(SimBackend(arm), "127.0.0.1", 0, envelope=env) as srv:
        yield srv, arm


async def _client(port: int) -> DaemonClient:
    c = DaemonClient("127.0.0.1", port, request_timeout=5.0)
    await c.connect()
    return c


# ------------------------------------------------------------ start-up: exit 7


@pytest.mark.anyio
@pytest.mark.parametrize("daemon", [Envelope(JOINT_MIN, _max(j1=85.0))], indirect=True)
async def test_runtime_refuses_to_start_against_a_narrower_daemon(
    daemon: tuple[ArmServer, SimArm], tmp_path: Path, fk_data_dir: Path
) -> None:
    """``mecharm-runtime`` as a process against a real daemon whose j1 maximum is 85."""
    srv, arm = daemon
    root = tmp_path / "root"
    root.mkdir()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mecharm.runtime.cli",
        "--config", os.devnull, "--data-root", str(root), "--daemon-port", str(srv.port),
        "--trials", "1", "--no-recorder", "--top-camera", TOP,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "MECHARM_RUNTIME_FK_DATA_DIR": str(fk_data_dir)},
    )  # fmt: skip
    _, err = await proc.communicate()
    text = err.decode()
    assert proc.returncode == 7, text
    assert "Traceback" not in text
    assert "mecharm-runtime: refusing to start: settings wider than the safety envelope" in text
    assert "j1_max 88 is above the envelope's j1 maximum 85" in text
    assert "configs/daemon.yaml" in text
    assert arm.counters["sends"] == 0  # the arm never moved
    assert srv.stats.snapshot()["commands"].get("send_angles", 0) == 0


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("daemon", "settings", "needle"),
    [
        (Envelope(JOINT_MIN, _max(j1=85.0)), {}, "j1_max 88 is above the envelope's j1 maximum 85"),
        (Envelope(JOINT_MIN, _max(j5=-40.0)), {}, "home [0.0, 0.0, 0.0, 0.0, 0.0, -30.0]: j5 = -30.00 is above the envelope's maximum -40°"),
        (Envelope(_min(j5=-20.0), DEFAULT_MAX), {}, "j5 = -30.00 is below the envelope's minimum -20°"),
        (Envelope(JOINT_MIN, _max(j0=80.0)), {}, "swept_j0 85 is outside the envelope's j0 limits [-160, 80]"),
        (Envelope(JOINT_MIN, _max(j0=80.0)), {"swept_j0": 79.0}, None),
        (Envelope(JOINT_MIN, _max(j1=85.0)), {"j1_max": 85.0}, None),
    ],
    indirect=["daemon"],
)  # fmt: skip
async def test_each_setting_is_compared(
    daemon: tuple[ArmServer, SimArm], settings: dict[str, Any], needle: str | None
) -> None:
    srv, _ = daemon
    c = await _client(srv.port)
    try:
        s = RuntimeSettings(**settings)
        if needle is None:
            assert check_envelope(s, c) == srv.envelope
        else:
            with pytest.raises(EnvelopeRefused) as exc:
                check_envelope(s, c)
            assert needle in str(exc.value) and f"127.0.0.1:{srv.port}" in str(exc.value)
    finally:
        await c.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("daemon", "settings", "needle"),
    [
        # HOME -> the approach_place pose turns j4 89.2°: a 40° per-move bound refuses every trial
        (Envelope(JOINT_MIN, DEFAULT_MAX, 40.0), {},
         "the trial's moves turn j4 by up to 89.2° in one send (HOME to the approach_place pose)"),
        (Envelope(JOINT_MIN, DEFAULT_MAX, 100.0), {}, None),
        # the runtime's own near-work bound must fit too
        (Envelope(JOINT_MIN, DEFAULT_MAX, 100.0), {"joint_step_max_deg": 120.0},
         "joint_step_max_deg 120 is above the envelope's per-move bound 100"),
    ],
    indirect=["daemon"],
)  # fmt: skip
async def test_a_per_move_bound_below_the_trials_moves_is_refused_at_start(
    daemon: tuple[ArmServer, SimArm], settings: dict[str, Any], needle: str | None
) -> None:
    from mecharm.runtime.lookup import load_arc

    srv, _ = daemon
    c = await _client(srv.port)
    try:
        s = RuntimeSettings(**settings)
        arcs = (load_arc(s.pick_place.approach_pick_arc), load_arc(s.pick_place.approach_place_arc))
        if needle is None:
            assert check_envelope(s, c, arcs=arcs) == srv.envelope
        else:
            with pytest.raises(EnvelopeRefused) as exc:
                check_envelope(s, c, arcs=arcs)
            assert needle in str(exc.value), str(exc.value)
    finally:
        await c.aclose()


# ------------------------------------------------------------ hello and the guard


@pytest.mark.anyio
@pytest.mark.parametrize(
    "daemon", [Envelope(_min(j4=-100.0), _max(j0=80.0, j1=85.0), 25.0)], indirect=True
)
async def test_the_hello_envelope_reaches_the_guard(daemon: tuple[ArmServer, SimArm]) -> None:
    srv, arm = daemon
    c = await _client(srv.port)
    try:
        env = c.envelope()
        assert env == srv.envelope and env is not None and env.max_step_deg == 25.0
        s = RuntimeSettings(j1_max=85.0, swept_j0=80.0)
        assert check_envelope(s, c) == env
        darm = DaemonArm(c, RealClock(), s.arm.j1_max, env)
        # inside the runtime's own limits but outside the daemon's (j0 80, j4 -100)
        for pose, what in (
            ((80.5, 0, 0, 0, 0, -30), "j0 = 80.50 is above the envelope's maximum 80°"),
            ((0, 0, 0, 0, -100.5, -30), "j4 = -100.50 is below the envelope's minimum -100°"),
        ):
            with pytest.raises(GuardViolation, match=what):
                await darm.send_angles(pose, 20)
        assert srv.stats.snapshot()["commands"].get("send_angles", 0) == 0  # never on the wire
        assert arm.counters["sends"] == 0
        await darm.send_angles((10.0, 0, 0, 0, 0, -30), 20)  # inside both
        assert arm.counters["sends"] == 1
    finally:
        await c.aclose()


def test_check_pose_keeps_to_the_narrower_of_both() -> None:
    env = Envelope(JOINT_MIN, _max(j1=85.0, j3=40.0))
    assert check_pose([0, 86.0, 0, 0, 0, 0], j1_max=88.0).ok
    v = check_pose([0, 86.0, 0, 0, 0, 0], j1_max=88.0, envelope=env)
    assert not v.ok and "j1 = 86.00 is above the envelope's maximum 85°" in v.reason
    v = check_pose([0, 87.0, 0, 0, 0, 0], j1_max=86.5, envelope=Envelope())
    assert not v.ok and "above the safety limit 86.5" in v.reason  # the runtime's is narrower
    v = check_pose([0, 0, 0, 41.0, 0, 0], envelope=env)
    assert not v.ok and "j3 = 41.00" in v.reason and "safety envelope" in v.reason
    assert check_pose([0, 85.0, 0, 40.0, 0, 0], envelope=env).ok


@pytest.mark.anyio
@pytest.mark.parametrize("daemon", [Envelope()], indirect=True)
async def test_a_raw_send_outside_is_a_typed_error(daemon: tuple[ArmServer, SimArm]) -> None:
    """The runtime's client (no guard in between) gets OutsideEnvelope; the arm stays."""
    srv, arm = daemon
    c = await _client(srv.port)
    try:
        before = await c.get_angles()
        with pytest.raises(OutsideEnvelope, match=r"outside_envelope: .*j1 = 90\.50"):
            await c.send_angles([0.0, 90.5, 0.0, 0.0, 0.0, -30.0], 20)
        assert c.is_connected and arm.counters["sends"] == 0
        after = await c.get_angles()
        assert max(abs(a - b) for a, b in zip(after, before, strict=True)) < 0.5
    finally:
        await c.aclose()


# ------------------------------------------------------------ an older daemon


@pytest.mark.anyio
async def test_an_older_daemon_leaves_the_runtimes_own_limits_with_one_warning() -> None:
    arm = _arm()
    srv = _OlderServer(SimBackend(arm), "127.0.0.1", 0)
    await srv.start()
    try:
        c = await _client(srv.port)
        try:
            assert "envelope" not in (c.hello or {}) and c.envelope() is None
            s = RuntimeSettings()
            with capture_logs() as logs:
                assert check_envelope(s, c) is None
                await c.connect()  # a reconnect between trials: no second warning
                assert check_envelope(s, c, warn_missing=False) is None
            warnings = [e for e in logs if e["event"] == "daemon_envelope_missing"]
            assert len(warnings) == 1 and warnings[0]["log_level"] == "warning"
            assert "only the runtime's own limits apply" in warnings[0]["reason"]
            darm = DaemonArm(c, RealClock(), s.arm.j1_max, None)
            with pytest.raises(GuardViolation, match="above the safety limit 88"):
                await darm.send_angles((0, 88.5, 0, 0, 0, -30), 20)
            await darm.send_angles((0, 87.5, 0, 0, 0, -30), 20)  # the SDK-wide old daemon
            assert arm.counters["sends"] == 1
        finally:
            await c.aclose()
    finally:
        await srv.stop()


@pytest.mark.anyio
async def test_a_malformed_announcement_is_refused() -> None:
    class _Garbled(ArmServer):
        async def _cmd_hello(self, conn: Any, args: Any) -> dict[str, Any]:
            hello = await super()._cmd_hello(conn, args)
            hello["envelope"]["joint_max"] = list(JOINT_MAX[:5])
            return hello

    srv = _Garbled(SimBackend(_arm()), "127.0.0.1", 0)
    await srv.start()
    try:
        c = await _client(srv.port)
        try:
            with pytest.raises(EnvelopeRefused, match=r"malformed safety envelope.*6 values"):
                check_envelope(RuntimeSettings(), c)
        finally:
            await c.aclose()
    finally:
        await srv.stop()


# ------------------------------------------------------------ a whole trial under a narrow envelope


@pytest.mark.slow
def test_a_trial_is_guarded_by_the_envelope_and_replays_with_it(
    tmp_path: Path, fk_data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """j0 may not go below −20° at this daemon: scene 7's block needs j0 −34° over it. The
    runtime's own guard refuses the approach (in the trace, naming the envelope) before the
    daemon would; the trace carries the envelope, so the replay guards with it too."""
    from mecharm.common.config import load_settings
    from mecharm.runtime.records.trace import read_trace
    from mecharm.runtime.rigsetup import open_rig
    from mecharm.runtime.simcontrol import scene_next
    from mecharm.runtime.trial import run_trial
    from mecharm.tools.cli import main
    from mecharm.tools.simrig import start_sim_daemon

    repo = Path(__file__).resolve().parents[2]
    rig = start_sim_daemon(
        tmp_path / "logs", seed=7, time_scale=20.0,
        extra_args=["--envelope-min=-20,-75,-175,-155,-115,-180"],
    )  # fmt: skip
    try:
        scene_next(rig.control_url, 7)
        settings = load_settings(
            RuntimeSettings,
            overrides={
                "data_root": tmp_path / "root", "fk_data_dir": fk_data_dir,
                "daemon_port": rig.daemon_port, "top_camera": rig.top_url,
                "recorder_enabled": False, "time_scale": 20.0,
            },
        )  # fmt: skip
        (tmp_path / "root").mkdir()

        async def one() -> Any:
            async with open_rig(settings) as (r, _c):
                return await run_trial(r, scene_seed=7)

        t = asyncio.run(one())
    finally:
        rig.daemon.stop()
    assert t.status == "stopped", t.reason
    assert t.reason.startswith("approach_pick: guard refused approach_pick: j0 = -34"), t.reason
    assert "below the envelope's minimum -20" in t.reason
    events = list(read_trace(t.trace_path))
    env = [e for e in events if e["event"] == "input" and e["kind"] == "envelope"]
    assert len(env) == 1 and env[0]["value"]["joint_min"][0] == -20.0
    sent = [e for e in events if e["event"] == "decision" and e["kind"] == "command"]
    assert all(e["value"]["angles"][0] >= -20.0 for e in sent)  # nothing outside was sent
    rc = main(
        ["replay", str(t.trace_path), "--data-dir", str(fk_data_dir),
         "--arc-pick", str(repo / "configs/poses/approach_pick.json"),
         "--arc-place", str(repo / "configs/poses/approach_place.json")]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0 and ": identical (" in out, out
