"""Ports that serve a trace's recorded inputs, in order, to the stage machine.

Why in lockstep with the stages: the same inputs must reach the same stage run
(detect after a pick retry is a second run of detect). Each recorded input carries
the index of the stage run it was read in; the replay trace counts transitions and
decisions as the machine writes them, so the feed knows where the machine is.

When the machine asks for an input the trace does not have next — another kind,
or none left in this stage run — the code has changed what it reads and the feed
raises ``ReplayDivergence`` (the first one is kept for the report; the machine
then aborts like on any port error). A stage run that the recorded trial ended
with a port error (daemon lost, camera failure) or a forced stop is reproduced at
the same point: the same exception type and message, or the stop event.
Nothing here opens a socket, a camera or a file.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mecharm.daemon.protocol import wire_angles
from mecharm.runtime import client as client_errors
from mecharm.runtime.ports import (
    Reading,
    ReleaseView,
    SceneObservation,
    Sent,
    TipObservation,
    VerdictObservation,
)
from mecharm.runtime.recorder_link import RecorderLink
from mecharm.runtime.records.trace import TraceWriter
from mecharm.tools.replay.tracefile import Recorded, RecordedInput

__all__ = [
    "ReplayArm",
    "ReplayDivergence",
    "ReplayEyes",
    "ReplayFeed",
    "ReplayLink",
    "ReplayTrace",
    "recorded_error",
]


class ReplayDivergence(RuntimeError):
    """The machine asked for an input the trace does not have next."""


class ReplayTrace(TraceWriter):
    """In-memory trace of the replayed run that also counts stage runs and their decisions."""

    def __init__(self) -> None:
        super().__init__(None)
        self.instance = 0
        self.decisions_in_instance = 0

    def write(self, event: str, **fields: Any) -> dict[str, Any]:
        line = super().write(event, **fields)
        if event == "decision":
            self.decisions_in_instance += 1
        elif event == "transition":
            self.instance += 1
            self.decisions_in_instance = 0
        return line


#: labels of mecharm.runtime.engine.describe_error -> the client error they name
_LABELS: dict[str, type[Exception]] = {
    "daemon connection lost": client_errors.ConnectionLost,
    "daemon timeout": client_errors.DaemonTimeout,
    "daemon busy": client_errors.DaemonBusy,
}
_TYPE_NAME = re.compile(
    r"^[A-Z][A-Za-z0-9_]*(Error|Exception|Violation|Lost|Timeout|Busy|Refused|NoReply)$"
)


def recorded_error(reason: str) -> Exception | None:
    """The exception that made a stage fail with ``reason`` ("descend_pick: daemon connection lost: ..."),
    rebuilt so the machine words the same reason again; None when it was no port error."""
    _stage, sep, rest = reason.partition(": ")
    if not sep:
        return None
    label, sep, msg = rest.partition(": ")
    if not sep:
        return None
    if label in _LABELS:
        return _LABELS[label](msg)
    if label in ("arm refused the command", "arm no reply"):
        return _coded(label, msg)
    if _TYPE_NAME.match(label):
        return type(label, (Exception,), {})(msg)
    return None


def _coded(label: str, msg: str) -> Exception:
    """ArmRefused/ArmNoReply word themselves "code: message"; rebuild one whose text is ``msg`` as recorded."""
    cls = (
        client_errors.ArmRefused if label == "arm refused the command" else client_errors.ArmNoReply
    )
    code, _sep, message = msg.partition(": ")
    err = cls(code, message)
    err.args = (msg,)
    return err


class ReplayFeed:
    """The recorded inputs and the recorded ends of each stage run."""

    def __init__(self, recorded: Recorded, trace: ReplayTrace, force: asyncio.Event) -> None:
        self.recorded = recorded
        self.trace = trace
        self.force = force
        self.queue: deque[RecordedInput] = deque(recorded.inputs)
        self.divergence: ReplayDivergence | None = None
        self.skipped: list[
            RecordedInput
        ] = []  # inputs the replay moved past without asking for them
        self.served = 0

    # ------------------------------------------------------------ helpers
    def _stage(self) -> str:
        return self.trace.stage or "?"

    def _drop_past(self) -> None:
        while self.queue and self.queue[0].instance < self.trace.instance:
            self.skipped.append(self.queue.popleft())

    def _at_recorded_end(self) -> dict[str, Any] | None:
        """The recorded failing transition when the machine is where the recorded stage run ended."""
        k = self.trace.instance
        if k >= len(self.recorded.instances):
            return None
        inst = self.recorded.instances[k]
        end = inst.end
        if end is None or end.get("outcome") != "fail":
            return None
        if self.queue and self.queue[0].instance == k:
            return None  # inputs of this stage run are still to come
        if self.trace.decisions_in_instance < inst.decisions:
            return None
        return end

    async def _maybe_fail_here(self) -> None:
        end = self._at_recorded_end()
        if end is None:
            return
        reason = str(end["reason"])
        if reason.startswith("forced stop"):
            self.force.set()
            await asyncio.Event().wait()  # the machine cancels this stage at once, as on the rig
        err = recorded_error(reason)
        if err is not None:
            raise err

    def _diverge(self, msg: str) -> ReplayDivergence:
        exc = ReplayDivergence(msg)
        if self.divergence is None:
            self.divergence = exc
        return exc

    # ------------------------------------------------------------ API
    def storage_fault(self) -> str | None:
        """The recorded storage fault that ended this stage run before its body ran, if any.

        On the rig the machine reads the data root's state before each stage
        (docs/reliability.md); the trace keeps only the resulting transition, so it
        is given back here where that transition is the whole recorded stage run.
        """
        end = self._at_recorded_end()
        reason = str(end.get("reason", "")) if end is not None else ""
        if reason.startswith("storage (") and reason.endswith(")"):
            inst = self.recorded.instances[self.trace.instance]
            if inst.decisions == 0:
                return reason[len("storage (") : -1]
        return None

    def next_kind(self) -> str | None:
        """The kind of the next recorded input of the current stage run (None when there is none)."""
        self._drop_past()
        head = self.queue[0] if self.queue else None
        return head.kind if head is not None and head.instance == self.trace.instance else None

    async def take(self, kind: str) -> Any:
        """The next recorded input, which must be of ``kind`` and belong to the current stage run."""
        if self.divergence is not None:
            raise ReplayDivergence(f"after the divergence: {self._stage()} asks for {kind}")
        self._drop_past()
        head = self.queue[0] if self.queue else None
        if head is not None and head.instance == self.trace.instance:
            if head.kind != kind:
                raise self._diverge(
                    f"{self._stage()} asks for input {kind!r}, the trace has {head.kind!r} next "
                    f"(line {head.line})"
                )
            self.queue.popleft()
            self.served += 1
            return head.value
        await self._maybe_fail_here()
        where = (
            f"; next recorded input: {head.kind!r} in {head.stage} (line {head.line})"
            if head
            else "; the trace has no inputs left"
        )
        raise self._diverge(
            f"{self._stage()} asks for input {kind!r}, the recorded run of this stage had no more "
            f"inputs{where}"
        )

    async def command(self) -> None:
        """A port call without an input (gripper, fresh mode, stop): fails where the recorded one failed."""
        if self.divergence is not None:
            raise ReplayDivergence(f"after the divergence: {self._stage()} sends a command")
        self._drop_past()
        await self._maybe_fail_here()


class ReplayArm:
    """``ArmPort`` answering from the trace: readings and send times as recorded, no motion."""

    def __init__(self, feed: ReplayFeed) -> None:
        self.feed = feed

    async def read_angles(self) -> Reading:
        r: Reading = await self.feed.take("angles")
        return r

    async def send_angles(self, angles: Sequence[float], speed: int) -> Sent:
        if self.feed.next_kind() == "send_t":  # a first-format trace recorded the send time only
            t: float = await self.feed.take("send_t")
            return Sent(t, tuple(wire_angles(angles)))
        sent: Sent = await self.feed.take("sent")
        return sent

    async def set_gripper_state(self, state: int, speed: int) -> None:
        await self.feed.command()

    async def set_gripper_value(self, value: int, speed: int) -> None:
        await self.feed.command()

    async def set_fresh_mode(self, mode: int) -> None:
        await self.feed.command()

    async def stop(self) -> None:
        await self.feed.command()


class ReplayEyes:
    """``EyesPort`` answering from the trace: the recorded detections, tips and verdicts."""

    def __init__(self, feed: ReplayFeed) -> None:
        self.feed = feed

    def start_trial(self, run_dir: Path | None) -> None:
        return None

    async def observe_scene(self, tag: str) -> SceneObservation:
        v: SceneObservation = await self.feed.take("scene")
        return v

    async def measure_tip(
        self, block_xz: tuple[float, float], tip_height_m: float, tag: str
    ) -> TipObservation:
        v: TipObservation = await self.feed.take("tip")
        return v

    async def locate_block(
        self, lift_m: float, near_xz: tuple[float, float], tag: str
    ) -> tuple[float, float] | None:
        v: tuple[float, float] | None = await self.feed.take("block_xz")
        return v

    async def judge_pick(self, tip_height_m: float, tag: str) -> VerdictObservation:
        v: VerdictObservation = await self.feed.take("pick_verdict")
        return v

    async def judge_place(self, side_frame: str | None, tag: str) -> VerdictObservation:
        v: VerdictObservation = await self.feed.take("place_verdict")
        return v

    async def look_place(self, tag: str) -> VerdictObservation:
        v: VerdictObservation = await self.feed.take("look_verdict")
        return v

    async def view_release(
        self, lift_m: float, box_xz: tuple[float, float], side_frame: str | None, tag: str
    ) -> ReleaseView:
        r: ReleaseView = await self.feed.take("release_view")
        return r

    async def ask_release(self, why: str, tag: str) -> VerdictObservation:
        v: VerdictObservation = await self.feed.take("release_answer")
        return v

    async def close(self) -> None:
        return None


class ReplayLink(RecorderLink):
    """A disabled recorder link (no UDP at all) whose side frame is the recorded one."""

    def __init__(self, feed: ReplayFeed) -> None:
        super().__init__(None)
        self.feed = feed

    async def side_frame(self, tag: str) -> tuple[str | None, float | None, str]:
        v: tuple[str | None, float | None, str] = await self.feed.take("side_frame")
        return v
