"""The runtime's side of the recorder: typed events out, side frames in, never a failure.

Observer principle (docs/architecture.md): nothing the recorder does may change what the
runtime does. Events go through ``RecorderSender.notify`` (fire-and-forget, never
raises); a side frame that does not come back is just "no side image". A disabled
link (``--no-recorder``, dry run) does nothing at all.

``probe`` proves, before the first trial, that a recorder listens and writes into this
runtime's data root (docs/recorder.md, "Ping: proving the data root"): side video is
never lost silently. Its last answer (``last_probe``) says on each trial line whether
side video was recorded, and why not. A recorder that answers from another data root gets
nothing more (``muted``): its video would land in a root no ledger points to. One that does
not answer keeps getting the events: it may start late, into the right root.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from mecharm.common.layout import DEFAULT_TASK
from mecharm.recorder.events import (
    REASON_MALFORMED_REPLY,
    REASON_TIMEOUT,
    Arrival,
    Commanded,
    Gripper,
    Measured,
    Stage,
    TrialEnd,
    TrialStart,
    root_identity,
)
from mecharm.recorder.sender import PING_REFUSED, PingResult, RecorderSender
from mecharm.runtime.records.ledger import RecordingInfo

__all__ = ["RecorderLink", "RecorderProbe", "assess_ping", "recording_text"]


@dataclass(frozen=True)
class RecorderProbe:
    """What a probe found. ``ok``: a recorder answered, writes into this data root, can
    write there now and its camera is not lost, so trials will have side video. ``detail``:
    one short clause for the console (``recorder not answering on udp 5601``); ``why`` the
    cause, ``fix`` what to do (both empty when ok)."""

    ok: bool
    root: str | None
    same_root: bool
    detail: str
    why: str = ""
    fix: str = ""
    #: a recorder answered (whatever its root)
    answered: bool = False
    #: the link sends nothing (--no-recorder, dry run): no probe was made
    enabled: bool = True
    port: int | None = None
    camera: str | None = None
    #: the recorder has a trial open
    recording: bool = False
    #: its side camera is a generated test card (``--camera synthetic``), not a camera
    synthetic: bool = False
    rtt_ms: float | None = None
    #: time.monotonic() of the probe
    at: float = 0.0

    def sentence(self) -> str:
        """The whole story on one line: what was found, why, what to do."""
        parts = [self.detail + (f" ({self.why})" if self.why else "")]
        if self.fix:
            parts.append(self.fix)
        return ". ".join(parts)


def assess_ping(
    result: PingResult, data_root: Path | None, host: str, port: int, timeout_s: float
) -> RecorderProbe:
    """Judge a ping against this runtime's data root (compared by identity, not spelling)."""
    where = f"udp {host}:{port}"
    now = time.monotonic()
    own = str(Path(data_root).absolute()) if data_root is not None else "?"
    pong = result.pong
    if pong is None:
        start = f"start it on this data root: mecharm-recorder --data-root {own} --udp-port {port}"
        if result.reason == PING_REFUSED:
            why = "nothing listens on that port: the recorder is not running, or on another port"
            fix = f"{start}, or give the runtime the recorder's port (--recorder-port N)"
        elif result.reason == REASON_TIMEOUT:
            why = (
                f"no signed answer within {timeout_s:g} s: a recorder with another key file, "
                "one older than the ping, or another program on that port"
            )
            fix = (
                "give both the same key file (runtime --recorder-key-file, recorder --key-file; "
                f"default ~/.config/mecharm/recorder.key), or {start}"
            )
        elif result.reason == REASON_MALFORMED_REPLY:
            why = "a reply signed with the key but not a valid pong: recorder and runtime versions differ"
            fix = "run a recorder and a runtime of the same version"
        else:
            why = f"the ping failed: {result.reason}"
            fix = "check the runtime's recorder.host/recorder.port settings"
        return RecorderProbe(
            False, None, False, f"recorder not answering on {where}", why, fix, at=now
        )
    mine = root_identity(data_root) if data_root is not None else None
    same = mine is not None and pong.identity == mine
    found = RecorderProbe(
        ok=False,
        root=pong.root,
        same_root=same,
        detail="",
        answered=True,
        port=pong.udp_port,
        camera=pong.camera,
        recording=pong.recording,
        synthetic=pong.synthetic,
        rtt_ms=result.rtt_ms,
        at=now,
    )
    if not same:
        if mine is None:
            why = f"this runtime's data root {own} cannot be read"
            fix = "mount the data root / fix --data-root"
        else:
            why = "its data root is another folder than this runtime's " + own
            fix = (
                f"restart the recorder with --data-root {own}, or run the runtime with "
                f"--data-root {pong.root}"
            )
        return replace(
            found, detail=f"recorder on {where} records into {pong.root}", why=why, fix=fix
        )
    if not pong.root_ok:
        return replace(
            found,
            detail=f"recorder on {where} cannot write to {pong.root}",
            why=pong.root_problem or "its mount check fails",
            fix="mount the data root (the SSD) and check the recorder's log",
        )
    if pong.camera == "lost":
        return replace(
            found,
            detail=f"recorder on {where} has lost its side camera",
            why="it retries every few seconds; until then a trial's video has no frames",
            fix="check the side camera (plugged in, its app running) and the recorder's log",
        )
    state = "recording a trial" if pong.recording else "idle"
    camera = f"SYNTHETIC test card ({pong.camera})" if pong.synthetic else f"camera {pong.camera}"
    return replace(found, ok=True, detail=f"recorder on {where}: same data root, {camera}, {state}")


def recording_text(rec: RecordingInfo, link: RecorderLink | None = None) -> str:
    """The ``rec`` part of a trial line: what was recorded, or loudly why there is no side
    video (the link's last probe: not answering, another root, ...)."""
    text = f"rec {rec.status}" + (
        f" {rec.frames} frames {rec.fps:.1f} fps" if rec.frames and rec.fps else ""
    )
    probe = link.last_probe if link is not None else None
    if probe is not None and probe.ok and probe.synthetic:  # this trial's recorder, a test card
        text += " (SYNTHETIC side camera: a test card)"
    if rec.status == "stalled":  # every frame written, and still not a dataset's: say why
        return f"{text} (NOT EXPORTABLE: {rec.note})"
    if rec.frames or link is None:
        return text
    if not link.enabled:
        return f"{text} ({link.off_reason})"
    probe = link.last_probe
    if probe is not None and not probe.ok:
        return f"{text} (NO SIDE VIDEO: {probe.detail})"
    cause = rec.note or "the recorder wrote no frames for this trial"
    return f"{text} (NO SIDE VIDEO: {cause})"


class RecorderLink:
    def __init__(
        self,
        sender: RecorderSender | None,
        frame_timeout_s: float = 2.0,
        *,
        data_root: Path | None = None,
        off_reason: str = "recorder off",
    ) -> None:
        self.sender = sender
        self.frame_timeout_s = frame_timeout_s
        #: the runtime's data root: a probe compares the recorder's with it
        self.data_root = data_root
        #: why a disabled link sends nothing (``--no-recorder``, dry run), for the trial line
        self.off_reason = off_reason
        #: the last probe's answer (None: never probed), for the trial lines and the console
        self.last_probe: RecorderProbe | None = None
        #: the newest trial this session's start put on the books as interrupted (sent once)
        self.supersedes: str | None = None

    @property
    def enabled(self) -> bool:
        return self.sender is not None

    @property
    def muted(self) -> bool:
        """The last probe found a recorder writing into another data root: it gets no trial
        events and no frame requests (it would record into that root)."""
        p = self.last_probe
        return p is not None and p.answered and not p.same_root

    @property
    def _sending(self) -> bool:
        return self.sender is not None and not self.muted

    def _send(self, event: object) -> None:
        if self.sender is not None and not self.muted:
            self.sender.notify(event)

    def trial_start(self, run_stem: str, task: str = DEFAULT_TASK) -> None:
        """The trial's first event, naming its task (where its recording goes); the first of
        a session also names the trial the start-up reconciliation found cut
        (``supersedes``), so the recorder hands its recording over."""
        if self._sending:
            self._send(TrialStart(run_stem=run_stem, supersedes=self.supersedes, task=task))
            self.supersedes = None

    def trial_end(self, run_stem: str) -> None:
        if self._sending:
            self._send(TrialEnd(run_stem=run_stem))

    def stage(self, stage: str) -> None:
        if self._sending:
            self._send(Stage(stage=stage))

    def commanded(
        self, sent_angles: Sequence[float], speed: int, ts_send: float, attempt: int, note: str
    ) -> None:
        """At the send: the angles that went on the wire (the dataset's action)."""
        if self._sending:
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
        if self._sending:
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
        if self._sending:
            self._send(Measured(angles=[float(a) for a in angles]))

    def gripper(self, value: int, note: str) -> None:
        """A gripper command with the value it drives the jaws to (0 closed .. 100 open)."""
        if self._sending:
            self._send(Gripper(state=int(value), note=note[:500]))

    async def probe(self, timeout_s: float = 1.0) -> RecorderProbe:
        """Ping the recorder and judge its answer against this runtime's data root; never
        raises. A disabled link answers at once (``enabled`` False, nothing sent)."""
        if self.sender is None:
            probe = RecorderProbe(False, None, False, self.off_reason, enabled=False)
        else:
            s = self.sender
            result = await s.ping_async(timeout_s)
            probe = assess_ping(result, self.data_root, s.host, s.port, timeout_s)
        self.last_probe = probe
        return probe

    async def side_frame(self, tag: str) -> tuple[str | None, float | None, str]:
        """(path, capture_ts, reason); ``(None, None, "recorder_disabled")`` when off."""
        if self.sender is None:
            return None, None, "recorder_disabled"
        if self.muted:
            return None, None, "recorder_other_root"
        return await self.sender.request_frame_async(tag, timeout=self.frame_timeout_s)

    def close(self) -> None:
        if self.sender is not None:
            self.sender.close()
