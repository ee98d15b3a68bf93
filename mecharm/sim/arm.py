"""A simulated mechArm 270 that answers like pymycobot's ``MechArm270``.

Tests, the daemon's ``sim`` backend, the serial firmware emulator and the
simulated workcell all drive this one model. It is evaluated lazily from a
(scaled) clock, so there is no background thread: every query computes the
state at "now". Motion model (documented in docs/daemon.md):

* a send starts after ``start_delay_s``; all joints move together along a
  smoothstep profile (zero velocity at both ends) and arrive at the same time;
  the duration is ``max|Δ| / (deg_per_s_per_speed * speed)`` — a 90° move at
  speed 20 takes ~5.7 s, as on the real arm;
* the arm settles at ``target + e`` where each joint's error grows with how far
  it moved (up to ``settle_error_deg[j]``; a joint that holds stays within
  ``hold_error_deg``): the real rig's 1-2.7° post-move errors; while the jaws
  hold something, each joint also stops short on the side the weight pulls, by
  50-100 % of ``settle_load_deg[j]`` (0 unless the sim profile's arm sets it);
* readings add gaussian noise (``noise_deg``) and are rounded to 0.01° like
  the firmware's int16 x100 encoding;
* a send with j1 above ``reject_j1_above`` is silently ignored (firmware quirk);
* fresh mode 1: a new send replaces the current motion from where the arm is when it
  takes effect (``start_delay_s`` after the send: the motion under way goes on until
  then, so sends faster than the reaction time still move the arm, one reaction time
  late); fresh mode 0: sends queue and run one after another;
* the gripper moves 0 (closed) .. 100 (open) with its own speed-dependent timing;
  a gripper command returns after ``gripper_command_s`` (the rig's SDK call holds
  the caller for seconds: docs/simulation-timing.md).

Every duration is divided by ``time_scale``. Given the same seed and the same
sequence of calls, settle errors and read noise are reproducible.

One concern: the arm model (motion profile, gripper, faults) that every simulated path
queries; its parts share one lazily evaluated state and are not separable.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import serial
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from mecharm.common.kinematics import JOINT_MAX, JOINT_MIN, fk_tip

__all__ = [
    "HOME",
    "Listener",
    "SimArm",
    "SimArmConfig",
    "SimArmDataError",
    "SimArmFaults",
    "SimSerialError",
]

HOME: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0, 0.0, -30.0)
_ZEROS = [0.0] * 6
#: read noise is drawn this many readings at a time: one numpy call per read cost more than the read
_NOISE_BLOCK = 256

Listener = Callable[[str, dict[str, Any]], None]

#: What pymycobot raises on a lost serial port; the sim raises the same type.
SimSerialError = serial.SerialException


class SimArmDataError(ValueError):
    """Invalid argument, raised before anything is "sent" (as the SDK's MechArmDataException)."""


class SimArmConfig(BaseModel):
    """Parameters of the simulated arm. Defaults reproduce the real rig's figures."""

    model_config = ConfigDict(extra="forbid")

    time_scale: float = Field(
        default=1.0, gt=0, le=1000, description="1.0 = real time; tests use 10-50"
    )
    read_latency_s: float = Field(
        default=0.020, ge=0, le=5, description="cost of one get_* call (real: ~20 ms)"
    )
    write_latency_s: float = Field(
        default=0.005, ge=0, le=5, description="cost of one set/send call"
    )
    no_reply_s: float = Field(
        default=1.5,
        ge=0,
        le=10,
        description="how long a failed read takes before -1 (SDK: 3 x 0.5 s)",
    )
    noise_deg: float = Field(
        default=0.08, ge=0, le=5, description="std dev of read noise per joint"
    )
    settle_error_deg: tuple[float, float, float, float, float, float] = Field(
        default=(0.8, 1.8, 1.6, 1.0, 1.0, 0.8),
        description="max |post-move error| per joint for a move of >= settle_full_move_deg",
    )
    hold_error_deg: float = Field(
        default=0.15, ge=0, le=5, description="max error of a joint that did not move"
    )
    settle_load_deg: tuple[float, float, float, float, float, float] = Field(
        default=(0.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        description="extra post-move error per joint while the jaws hold something, on the "
        "side gravity pulls (the tip lower); the sim profile's arm sets it",
    )
    settle_full_move_deg: float = Field(
        default=20.0, gt=0, description="move size at which the full settle error applies"
    )
    deg_per_s_per_speed: float = Field(
        default=0.8, gt=0, description="joint rate = this x speed (deg/s)"
    )
    start_delay_s: float = Field(
        default=0.05, ge=0, le=5, description="firmware reaction time before a move starts"
    )
    gripper_full_travel_s: float = Field(
        default=0.6, gt=0, description="0->100 travel time at speed 50"
    )
    gripper_command_s: float = Field(
        default=0.0,
        ge=0,
        le=30,
        description="how long a gripper command holds the call before it returns "
        "(rig: 4.0, docs/simulation-timing.md)",
    )
    reject_j1_above: float = Field(
        default=90.7, description="sends with j1 above this are silently ignored"
    )
    initial_angles: tuple[float, float, float, float, float, float] = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    initial_gripper: float = Field(default=100.0, ge=0, le=100)
    initial_fresh_mode: int = Field(default=0, ge=0, le=1)
    seed: int = 0

    @field_validator("settle_error_deg", "settle_load_deg")
    @classmethod
    def _nonneg(cls, v: tuple[float, ...], info: ValidationInfo) -> tuple[float, ...]:
        if any(e < 0 or e > 10 for e in v):
            raise ValueError(f"{info.field_name} values must be within 0..10")
        return v


@dataclass
class _Segment:
    start: tuple[float, ...]
    end: tuple[float, ...]
    t0: float  # sim time the motion starts (after the reaction delay)
    duration: float
    #: the motion this one replaced, still under way until ``t0`` (a send in fresh mode 1
    #: takes effect one reaction time after it arrives, not at once)
    before: _Segment | None = None

    def at(self, t: float) -> tuple[float, ...]:
        if self.duration <= 0 or t >= self.t0 + self.duration:
            return self.end
        if t <= self.t0:
            return self.before.at(t) if self.before is not None else self.start
        u = (t - self.t0) / self.duration
        s = u * u * (3.0 - 2.0 * u)
        return tuple(a + (b - a) * s for a, b in zip(self.start, self.end, strict=True))

    @property
    def t_end(self) -> float:
        return self.t0 + self.duration


@dataclass
class _Pending:
    target: tuple[float, ...]
    speed: int
    stall_at: float | None
    settle_error: tuple[float, ...] | None = None


def _gravity_side(angles: Sequence[float]) -> list[float]:
    """Per joint, the sign of a change that lowers the tool tip at ``angles`` (nominal FK):
    the side a load pulls each joint to. 0 for a joint that does not move the tip's height."""
    base = np.asarray(angles, dtype=np.float64)
    probe = np.repeat(base[None, :], 7, axis=0)
    probe[1:] += np.eye(6) * 0.5
    y = fk_tip(probe)[:, 1]
    dy = y[1:] - y[0]
    return [0.0 if abs(d) < 1e-6 else (-1.0 if d > 0 else 1.0) for d in dy]


class SimArmFaults:
    """Fault injection for tests. Each fault is consumed by the calls it affects."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ignore_sends = 0
        self._stall_at: float | None = None
        self._fail_reads = 0
        self._fail_kind: str = "-1"
        self._disconnected = False
        self._settle_error: tuple[float, ...] | None = None
        self._spike_s = 0.0
        self._spikes = 0
        #: how many times each fault took effect (GET /faults shows them)
        self.counts = {
            "ignored_sends": 0,
            "stalls": 0,
            "failed_reads": 0,
            "settle_errors": 0,
            "latency_spikes": 0,
        }

    def ignore_next_sends(self, n: int = 1) -> None:
        """The next ``n`` send_angles calls are accepted by the SDK but the arm does not move."""
        with self._lock:
            self._ignore_sends = int(n)

    def stall_next_move(self, at_fraction: float = 0.5) -> None:
        """The next accepted move stops for good at ``at_fraction`` (0..1) of its path."""
        if not 0.0 <= at_fraction <= 1.0:
            raise ValueError(f"at_fraction must be within 0..1, got {at_fraction}")
        with self._lock:
            self._stall_at = float(at_fraction)

    def fail_reads(self, n: int = 1, kind: str = "-1") -> None:
        """The next ``n`` reads return the SDK's no-reply value (-1; get_angles -1 or [] per ``kind``)."""
        if kind not in ("-1", "[]"):
            raise ValueError(f"kind must be '-1' or '[]', got {kind!r}")
        with self._lock:
            self._fail_reads = int(n)
            self._fail_kind = kind

    def settle_error_next_move(self, deg: Sequence[float]) -> None:
        """The next accepted move settles ``deg[j]`` degrees off its target on joint j (on top
        of the model's own settle error): a servo that ends visibly short or long."""
        vals = tuple(float(d) for d in deg)
        if len(vals) != 6 or any(not math.isfinite(d) or abs(d) > 20 for d in vals):
            raise ValueError(f"deg must be 6 numbers within -20..20, got {list(deg)!r}")
        with self._lock:
            self._settle_error = vals

    def read_latency_spike(self, seconds: float, n: int = 1) -> None:
        """The next ``n`` reads each take ``seconds`` longer (sim time), then answer normally."""
        if not 0 <= seconds <= 600:
            raise ValueError(f"seconds must be within 0..600, got {seconds}")
        with self._lock:
            self._spike_s, self._spikes = float(seconds), int(n)

    def disconnect(self) -> None:
        """Lose the serial link: every call raises ``serial.SerialException`` until reconnect()."""
        with self._lock:
            self._disconnected = True

    def reconnect(self) -> None:
        with self._lock:
            self._disconnected = False

    def clear(self) -> None:
        with self._lock:
            self._ignore_sends = 0
            self._stall_at = None
            self._fail_reads = 0
            self._disconnected = False
            self._settle_error = None
            self._spikes = 0

    def armed(self) -> dict[str, Any]:
        """What is armed now (JSON-ready), for GET /faults."""
        with self._lock:
            return {
                "ignore_sends": self._ignore_sends,
                "stall_at": self._stall_at,
                "read_failures": self._fail_reads,
                "read_failure_kind": self._fail_kind,
                "settle_error_deg": None
                if self._settle_error is None
                else list(self._settle_error),
                "latency_spikes": self._spikes,
                "latency_spike_s": self._spike_s,
                "disconnected": self._disconnected,
            }

    @property
    def pending_read_failures(self) -> int:
        return self._fail_reads

    @property
    def disconnected(self) -> bool:
        return self._disconnected

    # consumed by SimArm
    def _take_ignore(self) -> bool:
        with self._lock:
            if self._ignore_sends > 0:
                self._ignore_sends -= 1
                self.counts["ignored_sends"] += 1
                return True
            return False

    def _take_stall(self) -> float | None:
        with self._lock:
            s, self._stall_at = self._stall_at, None
            if s is not None:
                self.counts["stalls"] += 1
            return s

    def _take_settle_error(self) -> tuple[float, ...] | None:
        if self._settle_error is None:
            return None
        with self._lock:
            e, self._settle_error = self._settle_error, None
            if e is not None:
                self.counts["settle_errors"] += 1
            return e

    def _take_latency_spike(self) -> float:
        if not self._spikes:  # every read asks: skip the lock when none is armed
            return 0.0
        with self._lock:
            if self._spikes > 0:
                self._spikes -= 1
                self.counts["latency_spikes"] += 1
                return self._spike_s
            return 0.0

    def _take_read_failure(self) -> str | None:
        if not self._fail_reads:  # every read asks: skip the lock when no failure is armed
            return None
        with self._lock:
            if self._fail_reads > 0:
                self._fail_reads -= 1
                self.counts["failed_reads"] += 1
                return self._fail_kind
            return None


class SimArm:
    """Thread-safe simulated arm with pymycobot's blocking API and return conventions."""

    def __init__(
        self, config: SimArmConfig | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config or SimArmConfig()
        self.faults = SimArmFaults()
        self._clock = clock
        self._t0 = clock()
        self._lock = threading.RLock()
        self._listeners: list[Listener] = []
        self._settle_rng = random.Random(self.config.seed)
        self._noise_rng = np.random.default_rng(self.config.seed + 1_000_003)
        self._normals: list[float] = []  # standard normals drawn ahead, consumed 6 per noisy read
        self._normals_at = 0
        self._rest: tuple[float, ...] = tuple(float(a) for a in self.config.initial_angles)
        self._seg: _Segment | None = None
        self._queue: deque[_Pending] = deque()
        self._fresh_mode = int(self.config.initial_fresh_mode)
        self._powered = True
        g = float(self.config.initial_gripper)
        self._grip = _Segment((g,), (g,), 0.0, 0.0)
        self._grip_floor: float | None = None
        self.counters = {"sends": 0, "sends_accepted": 0, "reads": 0}

    # ------------------------------------------------------------ time
    def sim_time(self) -> float:
        """Seconds of simulated time since creation (real time x time_scale)."""
        return (self._clock() - self._t0) * self.config.time_scale

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds / self.config.time_scale)

    # ------------------------------------------------------------ listeners
    def add_listener(self, cb: Listener) -> None:
        """``cb(event, data)`` is called outside the lock for "send" and "gripper" events."""
        with self._lock:
            self._listeners.append(cb)

    def remove_listener(self, cb: Listener) -> None:
        with self._lock:
            if cb in self._listeners:
                self._listeners.remove(cb)

    def _emit(self, event: str, data: dict[str, Any]) -> None:
        for cb in list(self._listeners):
            cb(event, data)

    # ------------------------------------------------------------ motion core
    def _advance(self, t: float) -> None:
        """Retire finished segments and start queued ones up to sim time ``t``."""
        while self._seg is not None and t >= self._seg.t_end:
            self._rest = self._seg.end
            t_end = self._seg.t_end
            self._seg = None
            if self._queue:
                self._start_segment(self._queue.popleft(), t_end)

    def _pose(self, t: float) -> tuple[float, ...]:
        self._advance(t)
        return self._seg.at(t) if self._seg is not None else self._rest

    def _start_segment(self, p: _Pending, t: float) -> None:
        cfg = self.config
        before = self._seg
        # keep the chain short: below the first motion already under way at ``t``, the ones
        # it replaced are over (a 30 Hz stream sends faster than the reaction time, so the
        # segments still waiting pile up only for one reaction time)
        seg = before
        while seg is not None and seg.t0 > t:
            seg = seg.before
        if seg is not None:
            seg.before = None
        # the new command takes effect after the reaction time; until then the motion
        # under way goes on, so it starts from where that motion will be then
        start = before.at(t + cfg.start_delay_s) if before is not None else self._rest
        load = (
            cfg.settle_load_deg
            if self._grip_floor is not None and any(cfg.settle_load_deg)
            else None
        )
        down = _gravity_side(p.target) if load is not None else None
        end = []
        for j, (a, b) in enumerate(zip(start, p.target, strict=True)):
            frac = min(1.0, abs(b - a) / cfg.settle_full_move_deg)
            bound = cfg.hold_error_deg + (cfg.settle_error_deg[j] - cfg.hold_error_deg) * frac
            err = self._settle_rng.uniform(-1.0, 1.0) * max(bound, 0.0)
            if load is not None and down is not None and load[j] > 0:
                # a loaded servo stops short on the side the weight pulls: 50-100 % of the figure
                err += down[j] * load[j] * self._settle_rng.uniform(0.5, 1.0)
            end.append(min(JOINT_MAX[j], max(JOINT_MIN[j], b + err)))
        if p.settle_error is not None:  # a fault armed from outside (docs/simulation-faults.md)
            end = [
                min(JOINT_MAX[j], max(JOINT_MIN[j], e + d))
                for j, (e, d) in enumerate(zip(end, p.settle_error, strict=True))
            ]
        if p.stall_at is not None:
            end = [a + (b - a) * p.stall_at for a, b in zip(start, end, strict=True)]
        delta = max(abs(b - a) for a, b in zip(start, end, strict=True))
        rate = cfg.deg_per_s_per_speed * p.speed
        self._seg = _Segment(tuple(start), tuple(end), t + cfg.start_delay_s, delta / rate, before)

    def _freeze(self, t: float) -> None:
        """Stop where the arm is now and drop queued moves."""
        self._rest = self._pose(t)
        self._seg = None
        self._queue.clear()

    # ------------------------------------------------------------ checks
    def _check_link(self) -> None:
        if self.faults.disconnected:
            raise SimSerialError("simulated serial link lost (faults.disconnect())")

    @staticmethod
    def _check_speed(speed: Any) -> int:
        if isinstance(speed, bool) or not isinstance(speed, int) or not 1 <= speed <= 100:
            raise SimArmDataError(f"speed must be an int in 1..100, got {speed!r}")
        return speed

    def _next_normals(self) -> list[float]:
        """The next 6 standard normal draws of the noise generator (call under the lock).

        Drawn in blocks; the stream is the one per-read ``normal(0, sigma, 6)`` calls
        would give, value for value (numpy's normal is ``loc + scale * standard_normal``).
        """
        i = self._normals_at
        if i + 6 > len(self._normals):
            self._normals = self._noise_rng.standard_normal(6 * _NOISE_BLOCK).tolist()
            i = 0
        self._normals_at = i + 6
        return self._normals[i : i + 6]

    def _read_failure(self) -> str | None:
        kind = self.faults._take_read_failure()
        if kind is not None:
            self._sleep(self.config.no_reply_s)
            return kind
        self._sleep(self.faults._take_latency_spike())  # an armed spike: this read is slow
        return None

    # ------------------------------------------------------------ SDK API: reads
    def get_angles(self) -> list[float] | int:
        """Noisy joint angles (6 floats, 0.01° resolution); -1 or [] when the firmware does not answer."""
        self._check_link()
        kind = self._read_failure()
        if kind is not None:
            return [] if kind == "[]" else -1
        self._sleep(self.config.read_latency_s)
        with self._lock:
            self.counters["reads"] += 1
            pose = self._pose(self.sim_time())
            sigma = self.config.noise_deg
            if (
                sigma > 0
            ):  # noise is 0.0 + sigma * z exactly as numpy's normal(0.0, sigma) computes it
                return [
                    round(a + (0.0 + sigma * z), 2)
                    for a, z in zip(pose, self._next_normals(), strict=True)
                ]
        return [round(a + n, 2) for a, n in zip(pose, _ZEROS, strict=True)]

    def get_gripper_value(self) -> int:
        """Gripper opening 0 (closed) .. 100 (open), int; -1 on no reply."""
        self._check_link()
        if self._read_failure() is not None:
            return -1
        self._sleep(self.config.read_latency_s)
        return round(self.true_gripper())

    def get_fresh_mode(self) -> int:
        self._check_link()
        if self._read_failure() is not None:
            return -1
        self._sleep(self.config.read_latency_s)
        with self._lock:
            return self._fresh_mode

    def is_moving(self) -> int:
        """1 while a move (or a queued one) is in progress, else 0; -1 on no reply."""
        self._check_link()
        if self._read_failure() is not None:
            return -1
        self._sleep(self.config.read_latency_s)
        return 1 if self.true_moving() else 0

    # ------------------------------------------------------------ SDK API: writes
    def send_angles(self, angles: Sequence[float], speed: int) -> int:
        """Command a joint move. Returns 1 (the firmware acknowledges even moves it then ignores)."""
        if not isinstance(angles, list | tuple) or len(angles) != 6:
            raise SimArmDataError(f"angles must be a list of 6 numbers, got {angles!r}")
        target: list[float] = []
        for i, a in enumerate(angles):
            if isinstance(a, bool) or not isinstance(a, int | float) or not math.isfinite(a):
                raise SimArmDataError(f"angles[{i}] must be a finite number, got {a!r}")
            if not JOINT_MIN[i] <= a <= JOINT_MAX[i]:
                raise SimArmDataError(f"angles[{i}] = {a} outside [{JOINT_MIN[i]}, {JOINT_MAX[i]}]")
            target.append(float(a))
        speed = self._check_speed(speed)
        self._check_link()
        self._sleep(self.config.write_latency_s)
        accepted = target[1] <= self.config.reject_j1_above and not self.faults._take_ignore()
        start: tuple[float, ...] | None = None
        with self._lock:
            self.counters["sends"] += 1
            if accepted:
                self.counters["sends_accepted"] += 1
                t = self.sim_time()
                start = tuple(self._pose(t))
                p = _Pending(
                    tuple(target),
                    speed,
                    self.faults._take_stall(),
                    self.faults._take_settle_error(),
                )
                self._powered = True
                if self._fresh_mode == 1 or self._seg is None:
                    self._queue.clear()
                    self._start_segment(p, t)
                else:
                    self._queue.append(p)
        # ``from``: where the arm was as the send went in (a listener that reads the pose
        # later may find the arm already past a short move's target)
        self._emit(
            "send",
            {"angles": list(target), "speed": speed, "accepted": accepted,
             "from": list(start) if start is not None else None},
        )  # fmt: skip
        return 1

    def _gripper_to(self, target: float, speed: int) -> None:
        """Start the jaws toward ``target``, then hold the caller for the command's time."""
        t = self.sim_time()
        with self._lock:
            current = self._grip.at(t)[0]
            floor = self._grip_floor
            if floor is not None and target < floor:
                target = floor if current >= floor else current  # the held object stops the jaws
            factor = min(2.5, max(0.5, 50.0 / speed))
            duration = abs(target - current) / 100.0 * self.config.gripper_full_travel_s * factor
            self._grip = _Segment((current,), (target,), t + self.config.start_delay_s, duration)
        self._emit("gripper", {"target": target, "speed": speed})
        self._sleep(self.config.gripper_command_s)  # the jaws move meanwhile

    def set_gripper_state(self, state: int, speed: int) -> int:
        """0 = open (to 100), 1 = close (to 0)."""
        if state not in (0, 1) or isinstance(state, bool):
            raise SimArmDataError(f"state must be 0 (open) or 1 (close), got {state!r}")
        speed = self._check_speed(speed)
        self._check_link()
        self._sleep(self.config.write_latency_s)
        self._gripper_to(100.0 if state == 0 else 0.0, speed)
        return 1

    def set_gripper_value(self, value: int, speed: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
            raise SimArmDataError(f"gripper value must be an int in 0..100, got {value!r}")
        speed = self._check_speed(speed)
        self._check_link()
        self._sleep(self.config.write_latency_s)
        self._gripper_to(float(value), speed)
        return 1

    def set_fresh_mode(self, mode: int) -> int:
        if mode not in (0, 1) or isinstance(mode, bool):
            raise SimArmDataError(f"fresh mode must be 0 or 1, got {mode!r}")
        self._check_link()
        self._sleep(self.config.write_latency_s)
        with self._lock:
            self._fresh_mode = int(mode)
        return 1

    def power_on(self) -> int:
        self._check_link()
        self._sleep(self.config.write_latency_s)
        with self._lock:
            self._powered = True
        return 1

    def release_all_servos(self) -> int:
        """Servos go limp: motion stops where it is (the sim does not model sagging).

        The next send re-engages them, as on the real arm.
        """
        self._check_link()
        self._sleep(self.config.write_latency_s)
        with self._lock:
            self._freeze(self.sim_time())
            self._powered = False
        return 1

    def drag(self, angles: Sequence[float]) -> tuple[float, ...]:
        """A hand moves the limp arm to ``angles`` (drag-teach: a leader arm whose servos are
        released; sim and tests only, docs/lerobot-robot.md, "Leaders"). Refused while the
        servos are powered (they hold the pose) and outside the SDK limits; the encoders then
        read the new pose (with their noise), as on a real arm moved by hand."""
        pose = tuple(float(a) for a in angles)
        if len(pose) != 6 or not all(math.isfinite(a) for a in pose):
            raise SimArmDataError(f"drag: give six finite angles, got {list(angles)!r}")
        for j, a in enumerate(pose):
            if not JOINT_MIN[j] <= a <= JOINT_MAX[j]:
                raise SimArmDataError(
                    f"drag: j{j} = {a} outside the SDK limits [{JOINT_MIN[j]}, {JOINT_MAX[j]}]"
                )
        with self._lock:
            if self._powered:
                raise SimArmDataError(
                    "drag: the servos are powered and hold the pose; release them first "
                    "(release_all_servos)"
                )
            self._freeze(self.sim_time())
            self._rest = pose
        return pose

    def stop(self) -> int:
        """Stop now and drop queued moves."""
        self._check_link()
        self._sleep(self.config.write_latency_s)
        with self._lock:
            self._freeze(self.sim_time())
        return 1

    # ------------------------------------------------------------ ground truth (sim and tests only)
    def true_angles(self) -> tuple[float, ...]:
        """Noise-free joint state now. Never sleeps, never fails."""
        with self._lock:
            return tuple(self._pose(self.sim_time()))

    def true_gripper(self) -> float:
        """Actual gripper opening now, 0 closed .. 100 open."""
        with self._lock:
            v = self._grip.at(self.sim_time())[0]
            floor = self._grip_floor
            if floor is not None and self._grip.start[0] >= floor:
                v = max(v, floor)
            return float(v)

    def true_moving(self) -> bool:
        with self._lock:
            t = self.sim_time()
            self._advance(t)
            return self._seg is not None or bool(self._queue)

    def true_gripper_moving(self) -> bool:
        with self._lock:
            return self.sim_time() < self._grip.t_end

    @property
    def powered(self) -> bool:
        return self._powered

    def set_load_settle(self, deg: Sequence[float]) -> None:
        """The extra post-move error per joint while the jaws hold something (the sim
        profile's arm, ``WorldArm``, sets it; docs/simulation-arm.md)."""
        cfg = SimArmConfig.model_validate(
            {**self.config.model_dump(), "settle_load_deg": tuple(float(d) for d in deg)}
        )
        with self._lock:
            self.config = cfg

    def block_gripper_at(self, value: float | None) -> None:
        """Model an object in the jaws: closing stops at ``value`` (None = nothing held)."""
        with self._lock:
            self._grip_floor = value

    def wait_idle(self, timeout: float = 30.0, poll: float = 0.005) -> bool:
        """Block (real seconds) until the arm and gripper are at rest; False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.true_moving() and not self.true_gripper_moving():
                return True
            time.sleep(poll)
        return False
