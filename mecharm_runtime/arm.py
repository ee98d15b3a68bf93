"""Arm adapters behind ``ArmPort``: the live daemon, the dry run, and the trace tap.

``DaemonArm`` is the last line of defence: it refuses (``GuardViolation``) any pose
with j1 above the safety limit even if a caller skipped the guard, so such a pose
can never reach the wire. ``DryRunArm`` records what would be sent and pretends each
send arrives at once. ``TracedArm`` writes every reading and send time into the
trace so replay can feed them back.
"""

from __future__ import annotations

from collections.abc import Sequence

from mecharm_runtime.client import ArmNoReply, DaemonClient
from mecharm_runtime.guard import GuardViolation, check_pose
from mecharm_runtime.ports import ArmPort, Clock, Reading
from mecharm_runtime.records.trace import TraceWriter

__all__ = ["DaemonArm", "DryRunArm", "TracedArm"]


class DaemonArm:
    """``ArmPort`` over a connected ``DaemonClient``."""

    def __init__(self, client: DaemonClient, clock: Clock, j1_max: float = 88.0) -> None:
        self.client, self.clock, self.j1_max = client, clock, j1_max

    async def read_angles(self) -> Reading:
        try:
            angles = await self.client.get_angles()
        except ArmNoReply as exc:
            return Reading(None, self.clock.now(), str(exc))
        return Reading(tuple(angles), self.clock.now())

    async def send_angles(self, angles: Sequence[float], speed: int) -> float:
        verdict = check_pose(angles, j1_max=self.j1_max)
        if not verdict.ok:
            raise GuardViolation(f"refusing to send {list(angles)}: {verdict.reason}")
        await self.client.send_angles(angles, speed)
        return self.clock.now()

    async def set_gripper_state(self, state: int, speed: int) -> None:
        await self.client.set_gripper_state(state, speed)

    async def set_gripper_value(self, value: int, speed: int) -> None:
        await self.client.set_gripper_value(value, speed)

    async def set_fresh_mode(self, mode: int) -> None:
        await self.client.set_fresh_mode(mode)

    async def stop(self) -> None:
        await self.client.stop()


class DryRunArm:
    """No motion at all: a virtual arm that is wherever it was last told to be."""

    def __init__(self, clock: Clock, start: Sequence[float], j1_max: float = 88.0) -> None:
        self.clock, self.j1_max = clock, j1_max
        self.pose = tuple(float(a) for a in start)
        self.sent: list[dict[str, object]] = []

    async def read_angles(self) -> Reading:
        return Reading(self.pose, self.clock.now())

    async def send_angles(self, angles: Sequence[float], speed: int) -> float:
        verdict = check_pose(angles, j1_max=self.j1_max)
        if not verdict.ok:
            raise GuardViolation(f"refusing to send {list(angles)}: {verdict.reason}")
        self.pose = tuple(float(a) for a in angles)
        self.sent.append({"cmd": "send_angles", "angles": list(self.pose), "speed": speed})
        return self.clock.now()

    async def set_gripper_state(self, state: int, speed: int) -> None:
        self.sent.append({"cmd": "set_gripper_state", "state": state, "speed": speed})

    async def set_gripper_value(self, value: int, speed: int) -> None:
        self.sent.append({"cmd": "set_gripper_value", "value": value, "speed": speed})

    async def set_fresh_mode(self, mode: int) -> None:
        self.sent.append({"cmd": "set_fresh_mode", "mode": mode})

    async def stop(self) -> None:
        self.sent.append({"cmd": "stop"})


class TracedArm:
    """Wraps an ``ArmPort``; every reading and send time becomes a trace input."""

    def __init__(self, inner: ArmPort, trace: TraceWriter) -> None:
        self.inner, self.trace = inner, trace

    async def read_angles(self) -> Reading:
        r = await self.inner.read_angles()
        self.trace.input("angles", r)
        return r

    async def send_angles(self, angles: Sequence[float], speed: int) -> float:
        t = await self.inner.send_angles(angles, speed)
        self.trace.input("send_t", t)
        return t

    async def set_gripper_state(self, state: int, speed: int) -> None:
        await self.inner.set_gripper_state(state, speed)

    async def set_gripper_value(self, value: int, speed: int) -> None:
        await self.inner.set_gripper_value(value, speed)

    async def set_fresh_mode(self, mode: int) -> None:
        await self.inner.set_fresh_mode(mode)

    async def stop(self) -> None:
        await self.inner.stop()
