"""The runtime's side of the recorder: typed events out, side frames in, never a failure.

Observer principle (docs/architecture.md): nothing the recorder does may change what the
runtime does. Events go through ``RecorderSender.notify`` (fire-and-forget, never
raises); a side frame that does not come back is just "no side image". A disabled
link (``--no-recorder``, dry run) does nothing at all.
"""

from __future__ import annotations

from collections.abc import Sequence

from recorder.events import Arrival, Commanded, Gripper, Measured, Stage, TrialEnd, TrialStart
from recorder.sender import RecorderSender

__all__ = ["RecorderLink"]


class RecorderLink:
    def __init__(self, sender: RecorderSender | None, frame_timeout_s: float = 2.0) -> None:
        self.sender = sender
        self.frame_timeout_s = frame_timeout_s

    @property
    def enabled(self) -> bool:
        return self.sender is not None

    def _send(self, event: object) -> None:
        if self.sender is not None:
            self.sender.notify(event)

    def trial_start(self, run_stem: str) -> None:
        if self.sender is not None:
            self._send(TrialStart(run_stem=run_stem))

    def trial_end(self, run_stem: str) -> None:
        if self.sender is not None:
            self._send(TrialEnd(run_stem=run_stem))

    def stage(self, stage: str) -> None:
        if self.sender is not None:
            self._send(Stage(stage=stage))

    def commanded(
        self, sent_angles: Sequence[float], speed: int, ts_send: float, attempt: int, note: str
    ) -> None:
        """At the send: the angles that went on the wire (the dataset's action)."""
        if self.sender is not None:
            self._send(
                Commanded(
                    angles=[float(a) for a in sent_angles],
                    speed=speed,
                    ts_send=ts_send,
                    attempt=attempt,
                    note=note[:500],
                )
            )

    def arrival(
        self, ts_send: float, ts_arrival: float | None, attempt: int, arrived: bool, note: str
    ) -> None:
        """When the wait after a send ended."""
        if self.sender is not None:
            self._send(
                Arrival(
                    ts_send=ts_send,
                    ts_arrival=ts_arrival,
                    attempt=attempt,
                    arrived=arrived,
                    note=note[:500],
                )
            )

    def measured(self, angles: Sequence[float]) -> None:
        if self.sender is not None:
            self._send(Measured(angles=[float(a) for a in angles]))

    def gripper(self, value: int, note: str) -> None:
        """A gripper command with the value it drives the jaws to (0 closed .. 100 open)."""
        if self.sender is not None:
            self._send(Gripper(state=int(value), note=note[:500]))

    async def side_frame(self, tag: str) -> tuple[str | None, float | None, str]:
        """(path, capture_ts, reason); ``(None, None, "recorder_disabled")`` when off."""
        if self.sender is None:
            return None, None, "recorder_disabled"
        return await self.sender.request_frame_async(tag, timeout=self.frame_timeout_s)

    def close(self) -> None:
        if self.sender is not None:
            self.sender.close()
