"""Arm adapters behind ``ArmPort``: the live daemon, the dry run, and the trace tap.

``DaemonArm`` is the last line of defence: it refuses (``GuardViolation``) any pose
with j1 above the safety limit even if a caller skipped the guard, so such a pose
can never reach the wire. ``DryRunArm`` records what would be sent and pretends each
send arrives at once. ``TracedArm`` writes every reading and every send (time and
the angles that went on the wire) into the trace so replay can feed them back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mecharm.common.envelope import Envelope
from mecharm.daemon.protocol import wire_angles
from mecharm.runtime.client import ArmNoReply, DaemonClient, DaemonError
from mecharm.runtime.guard import GuardViolation, check_pose
from mecharm.runtime.ports import ArmPort, Clock, Reading, Sent
from mecharm.runtime.records.trace import TraceWriter

__all__ = ["DaemonArm", "DryRunArm", "TracedArm"]


def _sent_angles(reply: Any, requested: Sequence[float]) -> tuple[float, ...]:
    """The ``angles`` of the daemon's send_angles reply: what went on the wire.

    A reply without them (a daemon older than this contract) is an error, not a
    guess: the dataset must record what the arm was sent (docs/protocol.md)."""
    angles = reply.get("angles") if isinstance(reply, dict) else None
    if (
        not isinstance(angles, list)
        or len(angles) != 6
        or not all(isinstance(a, int | float) and not isinstance(a, bool) for a in angles)
    ):
        raise DaemonError(f"send_angles reply {reply!r} does not say which angles were sent "
                          f"(requested {list(requested)}); update the daemon")  # fmt: skip
    return tuple(float(a) for a in angles)


class DaemonArm:
    """``ArmPort`` over a connected ``DaemonClient``."""

    def __init__(
        self,
        client: DaemonClient,
        clock: Clock,
        j1_max: float = 88.0,
        envelope: Envelope | None = None,
    ) -> None:
        self.client, self.clock, self.j1_max = client, clock, j1_max
        #: the daemon's safety envelope (service.py sets it from the hello); None: none known
        self.envelope = envelope

    async def read_angles(self) -> Reading:
        asked = self.clock.now()
        try:
            angles = await self.client.get_angles()
        except ArmNoReply as exc:
            return Reading(None, self.clock.now(), str(exc), t_asked=asked)
        return Reading(tuple(angles), self.clock.now(), t_asked=asked)

    async def send_angles(self, angles: Sequence[float], speed: int) -> Sent:
        verdict = check_pose(angles, j1_max=self.j1_max, envelope=self.envelope)
        if not verdict.ok:
            raise GuardViolation(f"refusing to send {list(angles)}: {verdict.reason}")
        reply = await self.client.send_angles(angles, speed)
        return Sent(self.clock.now(), _sent_angles(reply, angles))

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

    async def send_angles(self, angles: Sequence[float], speed: int) -> Sent:
        verdict = check_pose(angles, j1_max=self.j1_max)
        if not verdict.ok:
            raise GuardViolation(f"refusing to send {list(angles)}: {verdict.reason}")
        self.pose = tuple(wire_angles(angles))
        self.sent.append({"cmd": "send_angles", "angles": list(self.pose), "speed": speed})
        return Sent(self.clock.now(), self.pose)

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

    async def send_angles(self, angles: Sequence[float], speed: int) -> Sent:
        sent = await self.inner.send_angles(angles, speed)
        self.trace.input("sent", sent)
        return sent

    async def set_gripper_state(self, state: int, speed: int) -> None:
        await self.inner.set_gripper_state(state, speed)

    async def set_gripper_value(self, value: int, speed: int) -> None:
        await self.inner.set_gripper_value(value, speed)

    async def set_fresh_mode(self, mode: int) -> None:
        await self.inner.set_fresh_mode(mode)

    async def stop(self) -> None:
        await self.inner.stop()
