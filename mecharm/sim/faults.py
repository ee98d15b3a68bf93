"""Faults of the simulated rig, armed from outside (docs/simulation-faults.md).

One fault is a JSON object ``{"fault": NAME, ...parameters}``: what ``POST /faults``
of the workcell's server takes and what a scene file lists under ``faults:``.
``parse_fault`` validates it (an unknown fault or parameter gets a message naming it
and listing the valid ones); ``FaultBoard`` arms it on the part of the rig it hits:

* the arm's firmware (``SimArmFaults``): ignored sends, stall, settle error,
  read-latency spikes, read failures;
* the daemon process: crash (SIGKILL to itself, like ``kill -9``);
* the cameras (``CameraFaults``, wrapped around each feed's producer): lost,
  frozen, dropped and late frames;
* the world (``Physics`` and the scene): knock, push the box, missed grasp, lighting change.

Everything is loopback only and sim only: the workcell's server binds 127.0.0.1.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mecharm.common.config import describe_errors
from mecharm.common.logging import get_logger

__all__ = [
    "FAULT_MODELS",
    "CameraFaults",
    "FaultBoard",
    "FaultError",
    "parse_fault",
]

log = get_logger("mecharm.sim.faults")

Camera = Literal["top", "side"]


class FaultError(ValueError):
    """A fault spec is invalid; the message names what and lists the valid choices."""


#: one joint's settle error: the sim arm takes at most 20 degrees (``SimArm.settle_error_next_move``)
_Deg = Annotated[float, Field(ge=-20.0, le=20.0)]


class _Fault(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class IgnoreSends(_Fault):
    """The next ``n`` send_angles are acknowledged but the arm does not move."""

    n: int = Field(default=1, ge=1, le=100)


class Stall(_Fault):
    """The next accepted move stops for good at ``at_fraction`` of its path."""

    at_fraction: float = Field(default=0.5, ge=0.0, le=1.0)


class SettleError(_Fault):
    """The next accepted move ends ``deg[j]`` degrees off its target on joint j."""

    deg: tuple[_Deg, _Deg, _Deg, _Deg, _Deg, _Deg]


class ReadLatencySpike(_Fault):
    """The next ``n`` reads each take ``seconds`` longer (sim time)."""

    seconds: float = Field(gt=0, le=600)
    n: int = Field(default=1, ge=1, le=1000)


class ReadFailures(_Fault):
    """The next ``n`` reads get no reply (-1, or [] for get_angles with kind "[]")."""

    n: int = Field(default=1, ge=1, le=1000)
    kind: Literal["-1", "[]"] = "-1"


class Crash(_Fault):
    """The daemon process dies ``after_s`` real seconds after the reply (SIGKILL)."""

    after_s: float = Field(default=0.2, ge=0.05, le=600)


class CameraLost(_Fault):
    """The camera's streams close and new requests get 503, for ``seconds`` (None: until cleared)."""

    camera: Camera = "top"
    seconds: float | None = Field(default=None, gt=0, le=3600)


class FrozenFeed(_Fault):
    """The camera keeps sending its last frame, with fresh timestamps and ok status."""

    camera: Camera = "top"


class DropFrames(_Fault):
    """Each frame of the camera is lost with probability ``fraction``."""

    camera: Camera = "top"
    fraction: float = Field(ge=0.0, le=1.0)


class LateFrames(_Fault):
    """Each frame of the camera reaches the stream ``delay_s`` after it was rendered."""

    camera: Camera = "top"
    delay_s: float = Field(gt=0, le=10)


class Knock(_Fault):
    """The block on the mat is pushed by (dx_m, dz_m) metres now."""

    dx_m: float = Field(ge=-0.1, le=0.1)
    dz_m: float = Field(ge=-0.1, le=0.1)


class PushBox(_Fault):
    """The box slides on the mat by (dx_m, dz_m) metres now (the arm pushed it)."""

    dx_m: float = Field(ge=-0.15, le=0.15)
    dz_m: float = Field(ge=-0.15, le=0.15)


class MissedGrasp(_Fault):
    """The next close on the block slips: a miss wherever the tip is."""


class LightingChange(_Fault):
    """The scene's lighting changes now (any field of the scene's ``lighting``)."""

    model_config = ConfigDict(extra="allow")


FAULT_MODELS: dict[str, type[_Fault]] = {
    "ignore_sends": IgnoreSends,
    "stall": Stall,
    "settle_error": SettleError,
    "read_latency_spike": ReadLatencySpike,
    "read_failures": ReadFailures,
    "crash": Crash,
    "camera_lost": CameraLost,
    "frozen_feed": FrozenFeed,
    "drop_frames": DropFrames,
    "late_frames": LateFrames,
    "knock": Knock,
    "push_box": PushBox,
    "missed_grasp": MissedGrasp,
    "lighting": LightingChange,
}


def _lighting(params: dict[str, Any], base: Any = None) -> Any:
    """The scene Lighting with ``params`` applied, validated by the scene's own model."""
    from mecharm.sim.scene import Lighting  # the scene imports this module to check its faults

    known = sorted(Lighting.model_fields)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise FaultError(f"lighting: unknown parameter(s) {unknown}; valid: {known}")
    if not params:
        raise FaultError(f"lighting: name at least one parameter of {known}")
    current = (base or Lighting()).model_dump()
    try:
        return Lighting(**{**current, **params})
    except ValidationError as exc:
        raise FaultError("lighting: " + describe_errors(exc)) from None


def parse_fault(spec: Any) -> tuple[str, _Fault]:
    """``{"fault": NAME, ...}`` -> (NAME, its validated parameters); FaultError naming what is wrong."""
    valid = sorted(FAULT_MODELS)
    if not isinstance(spec, dict):
        raise FaultError(f'a fault is a JSON object {{"fault": NAME, ...}}; NAME one of {valid}')
    name = spec.get("fault")
    if not isinstance(name, str) or name not in FAULT_MODELS:
        raise FaultError(f"unknown fault {name!r}; valid faults: {valid}")
    params = {k: v for k, v in spec.items() if k != "fault"}
    model = FAULT_MODELS[name]
    if name == "lighting":
        _lighting(params)
        return name, model(**params)
    fields = sorted(model.model_fields)
    unknown = sorted(set(params) - set(fields))
    if unknown:
        raise FaultError(f"{name}: unknown parameter(s) {unknown}; valid: {fields or 'none'}")
    try:
        return name, model(**params)
    except ValidationError as exc:
        raise FaultError(f"{name}: {describe_errors(exc)} (parameters: {fields})") from None


class _CamState:
    def __init__(self) -> None:
        self.lost_until: float | None = None  # monotonic; inf = until cleared
        self.frozen = False
        self.drop = 0.0
        self.late_s = 0.0
        self.last = b""
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self.counts = {
            "frozen_frames": 0,
            "dropped_frames": 0,
            "late_frames": 0,
            "lost_refusals": 0,
        }


class CameraFaults:
    """Per-camera faults around each feed's producer and the server's streams."""

    def __init__(self, cameras: list[str], seed: int = 0) -> None:
        self._lock = threading.Lock()
        self._cams = {name: _CamState() for name in cameras}
        self._rng = random.Random(seed)

    def wrap(self, camera: str, produce: Callable[[], bytes]) -> Callable[[], bytes]:
        """The producer the feed calls: renders, then applies the armed faults (b"" = no frame)."""
        st = self._cams[camera]

        def produce_with_faults() -> bytes:
            if st.frozen and st.last:  # the stream goes on, the picture does not
                with self._lock:
                    st.counts["frozen_frames"] += 1
                return st.last
            jpeg = produce()
            with self._lock:
                st.last = jpeg
                if st.drop > 0 and self._rng.random() < st.drop:
                    st.counts["dropped_frames"] += 1
                    return b""
                if st.late_s > 0:
                    now = time.monotonic()
                    st.queue.append((now, jpeg))
                    out = b""
                    while st.queue and now - st.queue[0][0] >= st.late_s:
                        out = st.queue.popleft()[1]
                    if out:
                        st.counts["late_frames"] += 1
                    return out
            return jpeg

        return produce_with_faults

    def lost(self, camera: str) -> bool:
        """True while the camera is lost: its streams close, new requests get 503."""
        st = self._cams.get(camera)
        if st is None or st.lost_until is None:
            return False
        if time.monotonic() >= st.lost_until:
            with self._lock:
                st.lost_until = None
            log.info("fault_camera_back", camera=camera)
            return False
        return True

    def refused(self, camera: str) -> None:
        with self._lock:
            self._cams[camera].counts["lost_refusals"] += 1

    def arm(self, name: str, f: Any) -> None:
        st = self._cams[f.camera]
        with self._lock:
            if name == "camera_lost":
                st.lost_until = float("inf") if f.seconds is None else time.monotonic() + f.seconds
            elif name == "frozen_feed":
                st.frozen = True
            elif name == "drop_frames":
                st.drop = f.fraction
            elif name == "late_frames":
                st.late_s = f.delay_s
                st.queue.clear()

    def clear(self) -> None:
        with self._lock:
            for st in self._cams.values():
                st.lost_until, st.frozen, st.drop, st.late_s = None, False, 0.0, 0.0
                st.queue.clear()

    def status(self) -> dict[str, Any]:
        now = time.monotonic()
        with self._lock:
            return {
                name: {
                    "lost": st.lost_until is not None and now < st.lost_until,
                    "lost_for_s": None
                    if st.lost_until is None or st.lost_until == float("inf")
                    else round(max(0.0, st.lost_until - now), 2),
                    "frozen": st.frozen,
                    "drop_fraction": st.drop,
                    "late_s": st.late_s,
                    **st.counts,
                }
                for name, st in self._cams.items()
            }


class FaultBoard:
    """Arms validated faults on the arm, the cameras, the world or the process; reports them.

    ``arm_faults`` is the SimArm's ``faults`` (None when the arm is not a SimArm);
    ``physics`` and ``scene`` are the workcell's; ``crash`` kills the process
    (injected so in-process tests need not die)."""

    def __init__(
        self,
        arm_faults: Any,
        physics: Any,
        scene: Any,
        cameras: CameraFaults,
        crash: Callable[[], None] | None = None,
    ) -> None:
        self.arm_faults = arm_faults
        self.physics = physics
        self.scene = scene
        self.cameras = cameras
        self._crash = crash or _kill_self
        self._lock = threading.Lock()
        self.history: collections.deque[dict[str, Any]] = collections.deque(maxlen=50)
        self.crash_at: float | None = None

    def arm(self, spec: Any) -> dict[str, Any]:
        """Validate and arm one fault; returns what was armed. FaultError when invalid."""
        name, f = parse_fault(spec)
        params = f.model_dump()
        if name in ("ignore_sends", "stall", "settle_error", "read_latency_spike", "read_failures"):
            af = self.arm_faults
            if af is None:
                raise FaultError(
                    f"{name}: the arm is not simulated here; no arm fault can be armed"
                )
            if name == "ignore_sends":
                af.ignore_next_sends(f.n)  # type: ignore[attr-defined]
            elif name == "stall":
                af.stall_next_move(f.at_fraction)  # type: ignore[attr-defined]
            elif name == "settle_error":
                af.settle_error_next_move(f.deg)  # type: ignore[attr-defined]
            elif name == "read_latency_spike":
                af.read_latency_spike(f.seconds, f.n)  # type: ignore[attr-defined]
            else:
                af.fail_reads(f.n, f.kind)  # type: ignore[attr-defined]
        elif name == "crash":
            self.crash_at = time.time() + f.after_s  # type: ignore[attr-defined]
            timer = threading.Timer(f.after_s, self._crash)  # type: ignore[attr-defined]
            timer.daemon = True
            timer.start()
        elif name in ("camera_lost", "frozen_feed", "drop_frames", "late_frames"):
            self.cameras.arm(name, f)
        elif name == "knock":
            try:
                self.physics.knock_block(f.dx_m, f.dz_m)  # type: ignore[attr-defined]
            except ValueError as exc:  # e.g. the block is in the gripper
                raise FaultError(f"knock: {exc}") from None
        elif name == "push_box":
            try:
                self.physics.push_box(f.dx_m, f.dz_m)  # type: ignore[attr-defined]
            except ValueError as exc:  # the block lies in the box
                raise FaultError(f"push_box: {exc}") from None
        elif name == "missed_grasp":
            self.physics.force_miss_next_grasp()
        elif name == "lighting":
            with self.scene.lock:
                lighting = _lighting(params, self.scene.layout.lighting)
                self.scene.layout = self.scene.layout.model_copy(update={"lighting": lighting})
                self.scene.bump()  # the static layer is drawn under the lighting: redraw it
            params = lighting.model_dump()
        entry = {"fault": name, **params, "ts": round(time.time(), 3)}
        with self._lock:
            self.history.append(entry)
        log.warning("fault_armed", **{k: v for k, v in entry.items() if k != "ts"})
        return entry

    def arm_all(self, specs: list[Any]) -> None:
        """Arm a scene file's ``faults:`` list (already checked when the scene was loaded)."""
        for spec in specs:
            self.arm(spec)

    def clear(self) -> dict[str, Any]:
        """Disarm every pending fault (a running crash timer is not stopped: the process is gone)."""
        if self.arm_faults is not None:
            self.arm_faults.clear()
        self.cameras.clear()
        self.physics.cancel_missed_grasp()
        log.info("faults_cleared")
        return self.status()

    def status(self) -> dict[str, Any]:
        """What is armed now, what took effect so far, and the last faults armed."""
        af = self.arm_faults
        with self._lock:
            history = list(self.history)
        return {
            "valid_faults": sorted(FAULT_MODELS),
            "arm": None if af is None else {"armed": af.armed(), "counts": dict(af.counts)},
            "cameras": self.cameras.status(),
            "world": {
                "missed_grasp_armed": self.physics.missed_grasp_armed,
                "lighting": self.scene.layout.lighting.model_dump(),
            },
            "crash_at": self.crash_at,
            "history": history,
        }


def _kill_self() -> None:
    """Die at once, as ``kill -9`` would: no cleanup, no goodbye on the sockets."""
    log.warning("fault_crash_now", pid=os.getpid())
    os.kill(os.getpid(), signal.SIGKILL)
