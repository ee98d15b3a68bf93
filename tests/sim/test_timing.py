"""The profile's timing reaches the arm, the cameras and the judge stand-in; ``ideal`` adds nothing.

Times are checked in sim time, or as lower bounds, or as the exact sleeps the
simulator asks for: never as a wall-clock upper bound (docs/simulation-timing.md).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import random
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import mecharm.sim.arm as arm_module
from mecharm.daemon.cli import _sim_arm_config, build_parser, load_sim_profile, settings_from_args
from mecharm.runtime.client import DaemonClient
from mecharm.sim.arm import SimArm, SimArmConfig
from mecharm.sim.camserver import CameraFeed
from mecharm.sim.profile import load_profile
from mecharm.sim.timing import TIMING_PROFILES, JudgeLatency, RigTiming
from mecharm.sim.workcell import start_workcell
from mecharm.tools.simrig import start_sim_daemon
from mecharm_dev.messages_api import MessagesApiServer

RIG = TIMING_PROFILES["rig"]
HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01", "content-type": "application/json"}
GOOD = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}


def _daemon_settings(*flags: str, config: Path | None = None) -> Any:
    args = build_parser().parse_args(
        ["--backend", "sim", *flags, *(["--config", str(config)] if config else [])]
    )
    return settings_from_args(args)[0]


def _arm_config(*flags: str, config: Path | None = None) -> SimArmConfig:
    """The sim arm's config as the daemon builds it: the profile loaded once, then applied."""
    settings = _daemon_settings(*flags, config=config)
    return _sim_arm_config(settings, load_sim_profile(settings))


# ---------------------------------------------------------------- ideal: today's simulator


def test_ideal_timing_adds_nothing() -> None:
    ideal = TIMING_PROFILES["ideal"]
    assert ideal == RigTiming()
    assert ideal.arm_overrides() == {}
    assert ideal.camera_first_frame_s == 0.0
    assert ideal.judge.draw(random.Random(0)) == 0.0
    assert SimArmConfig().gripper_command_s == 0.0
    settings = _daemon_settings("--sim-profile", "ideal", "--time-scale", "10")
    assert (
        _sim_arm_config(settings, load_sim_profile(settings)) is settings.sim
    )  # the arm's config untouched


def test_ideal_gripper_command_sleeps_only_the_write_latency(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[float] = []
    real_sleep = time.sleep
    monkeypatch.setattr(arm_module.time, "sleep", lambda s: (asked.append(s), real_sleep(s)))
    arm = SimArm(SimArmConfig(time_scale=10))
    arm.set_gripper_state(0, 20)
    assert asked == [pytest.approx(0.005 / 10)]


# ---------------------------------------------------------------- the gripper


def test_rig_gripper_command_takes_the_rig_time_divided_by_the_time_scale(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[float] = []
    real_sleep = time.sleep
    monkeypatch.setattr(arm_module.time, "sleep", lambda s: (asked.append(s), real_sleep(s)))
    arm = SimArm(SimArmConfig(time_scale=10, initial_gripper=0.0, **RIG.arm_overrides()))
    t0 = arm.sim_time()
    assert arm.set_gripper_state(0, 20) == 1
    held = arm.sim_time() - t0
    # the call holds the caller the rig's 4.0 s of sim time: 0.4 s of real time at 10x
    assert asked == [pytest.approx(0.005 / 10), pytest.approx(4.0 / 10)]
    assert held >= 4.0
    # command to settled: when the call returns the jaws have stopped, open
    assert not arm.true_gripper_moving() and arm.true_gripper() == 100.0
    t1 = arm.sim_time()
    arm.set_gripper_value(20, 100)  # the close goes through the same SDK path
    assert arm.sim_time() - t1 >= 4.0
    assert arm.true_gripper() == 20.0


def test_the_profile_timing_reaches_the_daemon_arm_and_a_given_key_wins(tmp_path: Path) -> None:
    cfg = _arm_config("--sim-profile", "rig", "--time-scale", "10")
    assert cfg.gripper_command_s == RIG.gripper_command_s == 4.0
    assert cfg.time_scale == 10
    harsh = _arm_config("--sim-profile", "harsh")
    assert harsh.gripper_command_s == TIMING_PROFILES["harsh"].gripper_command_s > 4.0
    yaml_file = tmp_path / "daemon.yaml"
    yaml_file.write_text("sim:\n  gripper_command_s: 1.5\n", encoding="utf-8")
    mine = _arm_config("--sim-profile", "rig", config=yaml_file)
    assert mine.gripper_command_s == 1.5  # the operator's own setting is kept


def test_a_bad_profile_stops_the_daemon_with_a_clear_reason() -> None:
    import subprocess
    import sys

    from mecharm.common.config import ConfigError

    with pytest.raises(ConfigError, match="unknown name"):
        _arm_config("--sim-profile", "nosuch")
    out = subprocess.run(  # a bad flag: exit 2 with the reason, as README promises
        [sys.executable, "-m", "mecharm.daemon.cli", "--backend", "sim", "--sim-profile", "nosuch"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "unknown name" in out.stderr, out.stderr
    assert "Traceback" not in out.stdout + out.stderr


def test_rig_gripper_command_through_the_daemon_and_the_runtime_client(tmp_path: Path) -> None:
    """The real daemon (rig profile, 10x) holds a gripper command 0.4 s; the runtime's client
    waits for it instead of timing out (its gripper timeout is above the rig's command time)."""
    rig = start_sim_daemon(
        tmp_path / "logs", time_scale=10, scene=None, extra_args=["--sim-profile", "rig"]
    )

    async def run() -> tuple[float, int]:
        client = DaemonClient("127.0.0.1", rig.daemon_port, request_timeout=0.3)
        await client.connect()
        try:
            t0 = time.monotonic()
            await client.set_gripper_state(0, 20)
            held = time.monotonic() - t0
            value = await client.request("get_gripper_value")
            return held, int(value)
        finally:
            await client.aclose()

    try:
        held, value = asyncio.run(run())
    finally:
        rig.daemon.stop()
    assert held >= 4.0 / 10  # longer than the 0.3 s request timeout, and no DaemonTimeout
    assert value == 100


# ---------------------------------------------------------------- the cameras


def test_a_camera_delivers_its_first_frame_after_the_opening() -> None:
    n = 0

    def produce() -> bytes:
        nonlocal n
        n += 1
        return f"frame{n}".encode()

    feed = CameraFeed("top", produce, fps=50.0, first_frame_s=0.3)
    try:
        for _ in range(2):  # each opening (a /top.jpg) pays the delay again
            t0 = time.monotonic()
            got = feed.next_frame(timeout=10.0)
            assert got is not None
            assert time.monotonic() - t0 >= 0.3
    finally:
        feed.close()
    with pytest.raises(ValueError, match="first_frame_s must be >= 0"):
        CameraFeed("top", produce, fps=10.0, first_frame_s=-1.0)


def test_closing_a_camera_ends_an_opening_at_once() -> None:
    feed = CameraFeed("top", lambda: b"x", fps=10.0, first_frame_s=600.0)
    done = threading.Event()
    t = threading.Thread(target=lambda: (feed.next_frame(timeout=600.0), done.set()))
    t.start()
    time.sleep(0.1)
    feed.close()
    assert done.wait(30.0), "an opening camera kept its client after close()"
    t.join(30.0)


@pytest.mark.parametrize(("profile", "expected"), [("ideal", 0.0), ("rig", 1.0 / 10)])
def test_the_profile_first_frame_delay_reaches_the_served_cameras(
    profile: str, expected: float
) -> None:
    arm = SimArm(SimArmConfig(time_scale=10))
    wc = start_workcell(arm, "random", 0, camera_port=0, profile=load_profile(profile))
    try:
        assert wc.server is not None
        feeds = wc.server.feeds
        assert feeds["top"].first_frame_s == pytest.approx(expected)
        assert feeds["side"].first_frame_s == pytest.approx(expected)
    finally:
        wc.close()


# ---------------------------------------------------------------- the judge's latency


def test_the_rig_judge_latency_distribution() -> None:
    rng = random.Random(5)
    draws = sorted(RIG.judge.draw(rng) for _ in range(4000))
    med = statistics.median(draws)
    assert med == pytest.approx(RIG.judge.median_s(), rel=0.05)
    assert 2.5 < med < 3.2  # 1.8 s to the first token + 60 tokens at 63 tokens/s
    p95 = draws[int(0.95 * len(draws))]
    assert 3.5 < p95 < 5.0
    assert all(d > 0.95 for d in draws)  # never faster than generating the answer
    a, b = random.Random(9), random.Random(9)
    assert [RIG.judge.draw(a) for _ in range(5)] == [RIG.judge.draw(b) for _ in range(5)]


def _post(srv: MessagesApiServer) -> tuple[int, float]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    try:
        t0 = time.monotonic()
        conn.request("POST", "/v1/messages", json.dumps(GOOD), HEADERS)
        resp = conn.getresponse()
        resp.read()
        return resp.status, time.monotonic() - t0
    finally:
        conn.close()


def test_the_stand_in_answers_after_the_drawn_latency_and_errors_at_once() -> None:
    latency = JudgeLatency(ttft_median_s=0.2, ttft_sigma=0.3, answer_tokens=6, tokens_per_s=60.0)
    with MessagesApiServer(latency=latency, seed=3) as srv:
        srv.script(None, {"status": 529})
        status, _ = _post(srv)  # a scripted overload comes back without the model's time
        assert status == 529
        took = []
        for _ in range(3):
            status, elapsed = _post(srv)
            assert status == 200
            took.append(elapsed)
        log = srv.requests
    assert log[0]["latency_s"] == 0.0
    expected_rng = random.Random(3)
    expected = [round(latency.draw(expected_rng), 3) for _ in range(3)]
    assert [r["latency_s"] for r in log[1:]] == expected  # seeded: the same draws every run
    assert all(e >= d for e, d in zip(took, expected, strict=True))
    assert all(d >= 0.1 for d in expected)


def test_the_stand_in_answers_at_once_by_default() -> None:
    with MessagesApiServer() as srv:
        assert _post(srv)[0] == 200
        assert srv.requests[0]["latency_s"] == 0.0
