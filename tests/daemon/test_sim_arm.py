"""The simulated arm: motion timing, settle errors, noise, firmware quirks, faults.

Most tests drive the model with a manual clock (no sleeping, exact timing) and
zero call latencies; a few use the real clock to check latency and threads.
"""

from __future__ import annotations

import threading
import time

import pytest
import serial

from mecharm.sim.arm import HOME, SimArm, SimArmConfig, SimArmDataError


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


def make(clock: Clock, **kw: object) -> SimArm:
    cfg = {"read_latency_s": 0.0, "write_latency_s": 0.0, "no_reply_s": 0.0, "seed": 11, **kw}
    return SimArm(SimArmConfig(**cfg), clock=clock)  # type: ignore[arg-type]


def maxdiff(a, b) -> float:  # type: ignore[no-untyped-def]
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def arrival_time(arm: SimArm, clock: Clock, target, tol: float = 2.0, step: float = 0.01) -> float:  # type: ignore[no-untyped-def]
    t0 = clock.t
    while maxdiff(arm.true_angles(), target) > tol:
        clock.advance(step)
        assert clock.t - t0 < 60, "never arrived"
    return clock.t - t0


def test_90_degree_move_at_speed_20_takes_5_to_6_seconds() -> None:
    clock = Clock()
    arm = make(clock)
    target = [90.0, 0, 0, 0, 0, 0]
    arm.send_angles(target, 20)
    assert arm.is_moving() == 1
    t = 0.0
    while arm.true_moving():
        clock.advance(0.01)
        t += 0.01
    assert 5.0 <= t <= 6.0
    assert arm.is_moving() == 0


def test_speed_scales_duration() -> None:
    durations = {}
    for speed in (10, 20, 40, 80):
        clock = Clock()
        arm = make(clock)
        arm.send_angles([60.0, 0, 0, 0, 0, 0], speed)
        t = 0.0
        while arm.true_moving():
            clock.advance(0.005)
            t += 0.005
        durations[speed] = t
    assert durations[10] > durations[20] > durations[40] > durations[80]
    assert durations[10] / durations[20] == pytest.approx(2.0, rel=0.05)


def test_motion_is_smooth_and_joints_arrive_together() -> None:
    clock = Clock()
    arm = make(clock)
    arm.send_angles([40.0, 20.0, -10.0, 0, 0, 0], 50)
    prev = arm.true_angles()
    fractions = []
    while arm.true_moving():
        clock.advance(0.05)
        now = arm.true_angles()
        assert maxdiff(now, prev) < 5.0  # no jumps
        prev = now
        fractions.append((now[0] / 40.0, now[1] / 20.0))
    mid = fractions[len(fractions) // 2]
    assert mid[0] == pytest.approx(mid[1], abs=0.1)  # synchronized joints


@pytest.mark.parametrize("seed", range(8))
def test_settles_within_the_rigs_post_move_errors(seed: int) -> None:
    clock = Clock()
    arm = make(clock, seed=seed)
    target = [-31.93, 87.74, -38.33, 18.6, -45.11, -30.0]
    arm.send_angles(target, 20)
    clock.advance(20)
    err = maxdiff(arm.true_angles(), target)
    assert 0.0 < err <= 2.7
    # readings are noisy around the true pose, at 0.01° resolution
    reads = [arm.get_angles() for _ in range(50)]
    assert all(isinstance(r, list) and len(r) == 6 for r in reads)
    assert all(round(a, 2) == a for r in reads for a in r)  # type: ignore[union-attr]
    assert len({tuple(r) for r in reads}) > 1  # type: ignore[arg-type]
    assert all(maxdiff(r, arm.true_angles()) < 0.6 for r in reads)  # type: ignore[arg-type]


def test_settle_error_statistics_match_the_rig() -> None:
    errs = []
    for seed in range(40):
        clock = Clock()
        arm = make(clock, seed=seed)
        target = [20.0, 60.0, -30.0, 10.0, -40.0, -30.0]
        arm.send_angles(target, 50)
        clock.advance(20)
        errs.append(maxdiff(arm.true_angles(), target))
    assert max(errs) <= 2.7
    assert sum(errs) / len(errs) >= 0.8  # typically around 1-2°, not perfect


def test_a_joint_that_holds_stays_put() -> None:
    clock = Clock()
    arm = make(clock)
    arm.send_angles([50.0, 0, 0, 0, 0, 0], 50)
    clock.advance(20)
    a = arm.true_angles()
    assert all(abs(x) <= 0.15 for x in a[1:])


def test_deterministic_given_seed() -> None:
    def run(seed: int) -> tuple:  # type: ignore[type-arg]
        clock = Clock()
        arm = make(clock, seed=seed)
        arm.send_angles([10.0, 20, 30, 40, 50, 60], 30)
        clock.advance(10)
        return arm.true_angles(), tuple(arm.get_angles())  # type: ignore[arg-type]

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_read_noise_is_numpys_normal_per_read() -> None:
    """Noise drawn in blocks is the stream of one ``normal(0, sigma, 6)`` per read, value for value,
    across block refills and noise changes (readings with noise 0 draw nothing)."""
    import numpy as np

    clock = Clock()
    arm = make(clock, seed=3, noise_deg=0.3)
    arm.send_angles([10.0, 20, 30, 40, 50, 60], 30)
    clock.advance(0.7)  # mid-move: the pose is not round
    rng = np.random.default_rng(3 + 1_000_003)
    for i in range(700):
        sigma = (0.3, 0.0, 1.7)[i % 3]
        arm.config.noise_deg = sigma
        pose = arm.true_angles()
        noise = rng.normal(0.0, sigma, 6).tolist() if sigma > 0 else [0.0] * 6
        assert arm.get_angles() == [round(a + n, 2) for a, n in zip(pose, noise, strict=True)]


def test_j1_above_90_7_is_silently_ignored() -> None:
    clock = Clock()
    arm = make(clock)
    events: list = []  # type: ignore[type-arg]
    arm.add_listener(lambda e, d: events.append((e, d)))
    assert arm.send_angles([0.0, 90.8, 0, 0, 0, 0], 20) == 1  # the SDK call "succeeds"
    clock.advance(5)
    assert arm.is_moving() == 0
    assert maxdiff(arm.true_angles(), (0,) * 6) == 0
    assert events == [
        (
            "send",
            {"angles": [0.0, 90.8, 0.0, 0.0, 0.0, 0.0], "speed": 20, "accepted": False,
             "from": None},
        )
    ]  # fmt: skip
    arm.send_angles([0.0, 90.7, 0, 0, 0, 0], 100)
    assert events[-1][1]["accepted"] is True
    # an accepted send says where the arm was as it went in (the world arm's backlash side)
    assert events[-1][1]["from"] == pytest.approx(list(arm.true_angles()), abs=1e-9)
    clock.advance(10)
    assert arm.true_angles()[1] == pytest.approx(90.7, abs=2.0)


def test_fresh_mode_1_replaces_the_current_move() -> None:
    clock = Clock()
    arm = make(clock)
    arm.set_fresh_mode(1)
    assert arm.get_fresh_mode() == 1
    arm.send_angles([80.0, 0, 0, 0, 0, 0], 20)
    clock.advance(2.0)
    mid = arm.true_angles()[0]
    assert 5 < mid < 75
    arm.send_angles([-20.0, 0, 0, 0, 0, 0], 20)
    clock.advance(0.3)
    assert arm.true_angles()[0] < mid + 1  # turned around, never reached 80
    clock.advance(30)
    assert arm.true_angles()[0] == pytest.approx(-20, abs=1.0)


def test_fresh_mode_1_a_send_takes_effect_one_reaction_time_later() -> None:
    """The reaction time delays a command; it does not cancel the one under way: the
    pose does not jump at a send, and the old motion goes on until the new one starts."""
    clock = Clock()
    arm = make(clock)
    arm.set_fresh_mode(1)
    arm.send_angles([80.0, 0, 0, 0, 0, 0], 20)
    clock.advance(2.0)
    before = arm.true_angles()[0]
    arm.send_angles([-20.0, 0, 0, 0, 0, 0], 20)
    assert arm.true_angles()[0] == pytest.approx(before, abs=1e-9)  # no jump
    clock.advance(0.04)  # inside the 50 ms reaction time: still going towards 80
    assert arm.true_angles()[0] > before + 0.5


def test_fresh_mode_1_sends_faster_than_the_reaction_time_still_move_the_arm() -> None:
    """A control loop streams a new target every tick, 33 ms at 30 Hz, shorter than the
    firmware's 50 ms reaction time: the arm follows a 20°/s ramp within a few degrees."""
    clock = Clock()
    arm = make(clock)
    arm.set_fresh_mode(1)
    worst = 0.0
    for k in range(90):  # 3 s
        target = 20.0 * k / 30
        arm.send_angles([target, 0, 0, 0, 0, 0], 50)
        clock.advance(1 / 30)
        worst = max(worst, abs(target - arm.true_angles()[0]))
    assert arm.true_angles()[0] > 55
    assert worst < 3.0


def test_a_long_stream_keeps_only_the_motions_still_waiting() -> None:
    """Hours of a 100 Hz stream must not pile up every segment it replaced: only those
    still inside their reaction time (50 ms: 5 at 100 Hz) are kept."""
    clock = Clock()
    arm = make(clock)
    arm.set_fresh_mode(1)
    for k in range(2000):
        arm.send_angles([10.0 * ((k // 50) % 2), 0, 0, 0, 0, 0], 50)
        clock.advance(0.01)
    depth, seg = 0, arm._seg
    while seg is not None:
        depth, seg = depth + 1, seg.before
    assert depth <= 7


def test_fresh_mode_0_queues_moves() -> None:
    clock = Clock()
    arm = make(clock)
    assert arm.get_fresh_mode() == 0
    arm.send_angles([40.0, 0, 0, 0, 0, 0], 50)
    arm.send_angles([40.0, 30.0, 0, 0, 0, 0], 50)
    peak_j0 = 0.0
    saw_j1_before_j0_done = False
    while arm.true_moving():
        clock.advance(0.02)
        a = arm.true_angles()
        peak_j0 = max(peak_j0, a[0])
        if a[0] < 38 and a[1] > 2:
            saw_j1_before_j0_done = True
    assert peak_j0 > 38
    assert not saw_j1_before_j0_done
    assert arm.true_angles()[1] == pytest.approx(30, abs=2)


def test_stop_freezes_and_drops_the_queue() -> None:
    clock = Clock()
    arm = make(clock)
    arm.send_angles([80.0, 0, 0, 0, 0, 0], 20)
    arm.send_angles([0.0, 0, 0, 0, 0, 0], 20)
    clock.advance(2)
    arm.stop()
    here = arm.true_angles()
    clock.advance(20)
    assert arm.true_angles() == here and arm.is_moving() == 0


def test_release_all_servos_then_send_reengages() -> None:
    clock = Clock()
    arm = make(clock)
    arm.send_angles([30.0, 0, 0, 0, 0, 0], 50)
    clock.advance(0.5)
    arm.release_all_servos()
    assert not arm.powered and not arm.true_moving()
    arm.power_on()
    assert arm.powered
    arm.release_all_servos()
    arm.send_angles([0.0, 0, 0, 0, 0, 0], 50)
    assert arm.powered and arm.true_moving()


def test_gripper_open_close_timing() -> None:
    clock = Clock()
    arm = make(clock)
    events: list = []  # type: ignore[type-arg]
    arm.add_listener(lambda e, d: events.append((e, d)))
    assert arm.true_gripper() == 100.0
    arm.set_gripper_value(20, 100)
    assert events[-1] == ("gripper", {"target": 20.0, "speed": 100})
    clock.advance(0.05)
    assert arm.true_gripper() > 90  # has not moved yet much
    clock.advance(0.5)
    assert arm.true_gripper() == 20 and arm.get_gripper_value() == 20
    arm.set_gripper_state(0, 20)  # slower at low speed
    t = 0.0
    while arm.true_gripper_moving():
        clock.advance(0.01)
        t += 0.01
    assert 0.5 < t < 2.0  # settles well inside the rig's 2.0 s gripper sleep
    assert arm.get_gripper_value() == 100
    arm.set_gripper_state(1, 100)
    clock.advance(2)
    assert arm.get_gripper_value() == 0


def test_gripper_blocked_by_a_held_object() -> None:
    clock = Clock()
    arm = make(clock)
    arm.block_gripper_at(35.0)
    arm.set_gripper_value(20, 100)
    clock.advance(2)
    assert arm.true_gripper() == 35.0
    arm.block_gripper_at(None)
    arm.set_gripper_state(0, 100)
    clock.advance(2)
    assert arm.true_gripper() == 100


def test_sdk_style_argument_errors() -> None:
    arm = make(Clock())
    with pytest.raises(SimArmDataError, match="angles"):
        arm.send_angles([0, 0, 0], 20)
    with pytest.raises(SimArmDataError, match=r"angles\[1\]"):
        arm.send_angles([0, 121, 0, 0, 0, 0], 20)
    with pytest.raises(SimArmDataError, match="speed"):
        arm.send_angles(HOME, 0)
    with pytest.raises(SimArmDataError, match="speed"):
        arm.send_angles(HOME, 20.0)  # type: ignore[arg-type]
    with pytest.raises(SimArmDataError, match="gripper value"):
        arm.set_gripper_value(101, 20)
    with pytest.raises(SimArmDataError, match="state"):
        arm.set_gripper_state(2, 20)
    with pytest.raises(SimArmDataError, match="fresh mode"):
        arm.set_fresh_mode(2)


def test_fault_ignore_next_sends() -> None:
    clock = Clock()
    arm = make(clock)
    arm.faults.ignore_next_sends(2)
    arm.send_angles([30.0, 0, 0, 0, 0, 0], 50)
    arm.send_angles([30.0, 0, 0, 0, 0, 0], 50)
    clock.advance(5)
    assert maxdiff(arm.true_angles(), (0,) * 6) == 0
    arm.send_angles([30.0, 0, 0, 0, 0, 0], 50)
    clock.advance(5)
    assert arm.true_angles()[0] == pytest.approx(30, abs=1.5)
    assert arm.counters["sends"] == 3 and arm.counters["sends_accepted"] == 1


def test_fault_stall_mid_move() -> None:
    clock = Clock()
    arm = make(clock)
    arm.faults.stall_next_move(0.5)
    arm.send_angles([80.0, 0, 0, 0, 0, 0], 50)
    clock.advance(20)
    assert not arm.true_moving()
    assert 35 < arm.true_angles()[0] < 45
    arm.send_angles([80.0, 0, 0, 0, 0, 0], 50)  # consumed: the next move completes
    clock.advance(20)
    assert arm.true_angles()[0] == pytest.approx(80, abs=2)
    with pytest.raises(ValueError):
        arm.faults.stall_next_move(1.5)


def test_fault_fail_reads() -> None:
    arm = make(Clock())
    arm.faults.fail_reads(2)
    assert arm.get_angles() == -1
    assert arm.get_gripper_value() == -1
    assert isinstance(arm.get_angles(), list)
    arm.faults.fail_reads(1, kind="[]")
    assert arm.get_angles() == []
    assert isinstance(arm.get_angles(), list)
    arm.faults.fail_reads(3)
    assert arm.is_moving() == -1 and arm.get_fresh_mode() == -1
    arm.faults.clear()
    assert arm.is_moving() == 0


def test_fault_no_reply_takes_the_sdks_retry_time() -> None:
    arm = SimArm(SimArmConfig(time_scale=10, read_latency_s=0, no_reply_s=1.5))
    arm.faults.fail_reads(1)
    t0 = time.monotonic()
    assert arm.get_angles() == -1
    assert time.monotonic() - t0 >= 0.14  # 1.5 s / time_scale 10


def test_fault_disconnect_raises_serial_errors_until_reconnect() -> None:
    arm = make(Clock())
    arm.faults.disconnect()
    with pytest.raises(serial.SerialException):
        arm.get_angles()
    with pytest.raises(serial.SerialException):
        arm.send_angles(HOME, 20)
    assert arm.true_angles() == (0.0,) * 6  # ground truth still available
    arm.faults.reconnect()
    assert isinstance(arm.get_angles(), list)


def test_read_latency_is_scaled() -> None:
    arm = SimArm(SimArmConfig(time_scale=2.0, read_latency_s=0.04))
    t0 = time.monotonic()
    for _ in range(5):
        arm.get_angles()
    dt = (time.monotonic() - t0) / 5
    assert dt >= 0.019  # 40 ms / 2


def test_time_scale_speeds_up_motion_in_real_time() -> None:
    arm = SimArm(SimArmConfig(time_scale=50, read_latency_s=0, write_latency_s=0))
    arm.send_angles([90.0, 0, 0, 0, 0, 0], 20)  # ~5.7 s arm time -> ~0.11 s real
    assert arm.wait_idle(timeout=5.0)
    assert arm.true_angles()[0] == pytest.approx(90, abs=1.0)
    assert arm.sim_time() >= 5.0


def test_thread_safe_under_concurrent_callers() -> None:
    arm = SimArm(SimArmConfig(time_scale=50, read_latency_s=0, write_latency_s=0))
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            for _ in range(300):
                a = arm.get_angles()
                assert isinstance(a, list) and len(a) == 6
                arm.true_angles()
        except BaseException as exc:
            errors.append(exc)

    def sender() -> None:
        try:
            for i in range(100):
                arm.send_angles([float(i % 40), 0, 0, 0, 0, 0], 100)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(3)] + [
        threading.Thread(target=sender)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert arm.counters["sends"] == 100


def test_listener_is_called_outside_the_lock() -> None:
    arm = make(Clock())
    seen = []
    # a listener that calls back into the arm must not deadlock
    arm.add_listener(lambda e, d: seen.append((e, arm.true_angles(), arm.true_gripper())))
    arm.send_angles([10.0, 0, 0, 0, 0, 0], 50)
    arm.set_gripper_state(1, 50)
    assert [s[0] for s in seen] == ["send", "gripper"]


def test_config_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="time_scale"):
        SimArmConfig(time_scale=0)
    with pytest.raises(ValueError, match="settle_error_deg"):
        SimArmConfig(settle_error_deg=(1, 1, 1, 1, 1, -1))
    with pytest.raises(ValueError, match="bogus"):
        SimArmConfig(bogus=1)  # type: ignore[call-arg]
