"""The recorder service: UDP events in, one recording folder per trial out.

Concurrency design (why frame_request is answered within 20 ms even while the
camera blocks in ``read()``)::

    camera thread ── read() (may block) ──▶ latest (immutable, swapped by reference)
          │                                     ▲
          └─ offer(frame) ─▶ frame-writer thread │  reads it, never waits on the camera
                             (H.264 + frame_log) │
    UDP 5556 ─ receiver ─▶ bounded event stream ─▶ dispatcher task ─┘ events → states.csv;
      (never blocks: full → dropped, counted)                         frame_request → jpg + reply;
                                                                      ping → pong (data root, camera)

Only the camera thread waits on the device, only the writer thread waits on the
encoder; the dispatcher does bounded work per datagram (parse, a CSV row, or
one JPEG encode of the newest frame ~3-5 ms). A frame older than
``stale_frame_sec`` is refused as ``stale_frame``; after camera loss the newest
frame is forgotten, so it is never served (the shared freshness rule,
docs/recorder.md#frame-freshness). Every datagram is verified before anything
acts on it (MAC, replay, the trial it names: docs/recorder.md, "Authenticated
events"), and every datagram handler is wrapped: a bad datagram is logged
(rate-limited), counted and dropped, the service keeps serving.
Tasks, owners and deadlines: [docs/concurrency.md](../docs/concurrency.md).

One concern: the recorder's socket, event dispatch, trials and life cycle; the replies
(frame requests, pings) are in replies.py, the capture, writers and quotas in their own
modules.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from mecharm.cameras.base import CameraSource
from mecharm.cameras.factory import make_camera
from mecharm.common.fsutil import DataRootGuard, StorageFault, UnsafeNameError
from mecharm.common.hosted import start_hosted
from mecharm.common.keyfile import load_or_create_key
from mecharm.common.logging import get_logger
from mecharm.recorder.capture import CameraWorker
from mecharm.recorder.config import RecorderSettings
from mecharm.recorder.envelope import (
    DROP_FOREIGN_TRIAL,
    DROP_FOREIGN_TRIAL_START,
    DROP_OVERSIZED,
    DROP_REPLAYED,
    DROP_TRIAL_QUOTA,
    EVENT_LABEL,
    EnvelopeError,
    ReplayGuard,
    Sealed,
    unseal,
)
from mecharm.recorder.events import (
    MAX_EVENT_BYTES,
    PINGS_PER_SEC,
    Arrival,
    Commanded,
    EventError,
    FrameRequest,
    Gripper,
    Measured,
    Ping,
    Stage,
    TrialEnd,
    TrialStart,
    parse_event,
)
from mecharm.recorder.quota import Bucket, HourlyQuota, folder_bytes
from mecharm.recorder.repair import RepairScan, unrepaired_recordings
from mecharm.recorder.replies import Replies
from mecharm.recorder.status import RateLimitedLog, StatusCounters
from mecharm.recorder.trial import TrialRecording
from mecharm.recorder.writer import CapturedFrame, FrameWriter

__all__ = ["RecorderService"]

log = get_logger("mecharm.recorder")
_RCVBUF = 4 * 1024 * 1024


Datagram = tuple[bytes, Any]


#: the encoder's nice value when the recorder leads a session of its own (``own_session``)
OWN_SESSION_ENCODER_NICE = 10


def encoder_nice(setting: int | None) -> int:
    """``video.encoder_nice``, or for None: 10 in a session of our own, else 0.

    In its own session (its own autogroup) the nice value only orders the recorder's
    threads: the encoder yields to the frame_request reply and the camera read and still
    gets the group's share. In the starter's session it would also yield to every busy
    process there and drop frames (docs/recorder.md, "Under CPU contention").
    """
    if setting is not None:
        return setting
    leads = hasattr(os, "getsid") and os.getsid(0) == os.getpid()
    return OWN_SESSION_ENCODER_NICE if leads else 0


class _Receiver(asyncio.DatagramProtocol):
    """Hands each datagram to the dispatcher's stream; never blocks, never waits.

    A plain asyncio protocol on purpose: it is the cheapest way to take a datagram
    off the socket. When the stream's buffer is full the datagram is dropped and
    counted (``dropped_events``): the recorder is an observer and its backlog must
    neither grow without bound nor be pushed back onto the sender.
    """

    def __init__(self, service: RecorderService, events: MemoryObjectSendStream[Datagram]) -> None:
        self.service = service
        self.events = events

    def datagram_received(self, data: bytes, addr: Any) -> None:
        try:
            self.events.send_nowait((data, addr))
        except anyio.WouldBlock:
            self.service.counters.dropped_events += 1
            self.service._overflow(buffered=self.service.settings.event_buffer)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # shutting down: no longer reading

    def error_received(self, exc: Exception) -> None:
        log.debug("udp_error", error=str(exc))


class RecorderService(Replies):
    """Start with ``await start()``, stop with ``await stop()`` (or ``serve(stop_event)``)."""

    def __init__(
        self,
        settings: RecorderSettings,
        camera_factory: Callable[[], CameraSource] | None = None,
    ) -> None:
        self.settings = settings
        self.root = Path(settings.data_root).absolute()
        if settings.camera is None:
            raise ValueError("the recorder needs a side camera (settings.camera)")
        self.camera_spec = settings.camera
        self.counters = StatusCounters()
        self.trial: TrialRecording | None = None
        self.mount_ok: bool | None = None
        self.guard: DataRootGuard | None = None  # bound at the first good check (_root_problem)
        self.port: int | None = None
        spec = self.camera_spec
        factory = camera_factory or (lambda: make_camera(spec))
        self.writer = FrameWriter(
            settings.max_pending_frames,
            settings.csv_flush_sec,
            on_media_error=self._media_error,
            nice=encoder_nice(settings.video.encoder_nice),
        )
        self.camera = CameraWorker(
            factory,
            self._on_frame,
            lost_after=settings.camera_lost_after,
            retry_sec=settings.camera_retry_sec,
            frozen_after_sec=settings.frozen_after_sec,
            on_lost=self._camera_lost,
        )
        self._reject = RateLimitedLog(log, "event_rejected")
        # authenticated, scoped events (docs/recorder.md, "Authenticated events"): a key file
        # that is too open or not a key raises KeyFileError here, before anything starts
        self._key = load_or_create_key(settings.key_file)
        self._replay = ReplayGuard()
        self._refused = RateLimitedLog(log, "event_refused")
        #: the envelope of the datagram being handled and its source address, and the
        #: session that opened the trial
        self._origin: Sealed | None = None
        self._peer: Any = None
        self._owner: str | None = None
        self._owner_seen = 0.0
        self._orphan_quota = HourlyQuota(
            "orphan_frames", settings.orphan_frames_per_hour, settings.orphan_bytes_per_hour
        )
        self._trial_quota = HourlyQuota(
            "trials", settings.trials_per_hour, settings.trial_bytes_per_hour
        )
        self._overflow = RateLimitedLog(log, "event_dropped", per_sec=1)
        self._frame_bucket = Bucket(settings.max_frame_requests_per_sec)
        #: pongs answered; their budget (docs/recorder.md, "Ping: proving the data root")
        self.pings = 0
        self._ping_bucket = Bucket(PINGS_PER_SEC)
        self._root_text = str(self.root.resolve())
        #: one event per trial whose media and meta are still being finished
        self._closing: set[anyio.Event] = set()
        self.repair_scan = RepairScan(self.root, [])
        self._transport: asyncio.DatagramTransport | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._host: asyncio.Task[None] | None = None
        self._stop_requested: anyio.Event | None = None
        self._stopped: anyio.Event | None = None
        self._stop_reason = "shutdown"
        self._stop_timeout = 10.0
        self._handlers: dict[type, Callable[[Any], None]] = {
            TrialStart: self._trial_start,
            TrialEnd: self._trial_end,
            FrameRequest: self._frame_request,
            Stage: self._trial_event,
            Commanded: self._trial_event,
            Arrival: self._trial_event,
            Gripper: self._trial_event,
            Measured: self._trial_event,
            Ping: self._ping,
        }

    # --- life cycle -----------------------------------------------------------------------------
    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Bind the UDP port (raises OSError if taken), start the threads, serve until ``stop()``.

        The dispatcher, housekeeping, status line and trial finishers are tasks of
        this call's task group; the camera and writer threads are joined before it returns.
        """
        s = self.settings
        self._stop_requested = self._stop_requested or anyio.Event()
        self._stopped = self._stopped or anyio.Event()
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF)
            sock.bind((s.host, s.udp_port))
        except OSError:
            sock.close()
            self._stopped.set()
            raise
        send, receive = anyio.create_memory_object_stream[Datagram](s.event_buffer)
        drained = anyio.Event()
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: _Receiver(self, send), sock=sock)
        self._transport = transport
        self.port = sock.getsockname()[1]
        # nothing sealed before now is accepted, of any session (a replay across a restart)
        self._replay.start_ns = self._replay.floor_ns = time.monotonic_ns()
        self._check_mount(initial=True)
        # recordings a killed recorder left without a meta: listed before the first event
        # is served, so none of this run's trials is among them; repaired in a low-priority
        # thread (docs/recorder.md, "Crashed recordings")
        self.repair_scan = RepairScan(
            self.root, unrepaired_recordings(self.root) if self.mount_ok else []
        )
        self.writer.start()
        self.camera.start()
        self.repair_scan.start()
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._dispatch, receive, drained, name="dispatcher")
                tg.start_soon(self._housekeeping, name="housekeeping")
                if s.status_interval_sec > 0:
                    tg.start_soon(self._status_loop, name="status")
                log.info(
                    "recorder_started",
                    port=self.port,
                    data_root=str(self.root),
                    camera=self.camera_spec,
                    mount_ok=self.mount_ok,
                    unrepaired=len(self.repair_scan.folders),
                )
                task_status.started()
                await self._stop_requested.wait()
                # stop reading first: a trial_start now could open a trial nobody would close;
                # the dispatcher handles what is already buffered, then sees the end of the stream
                transport.close()
                send.close()
                with anyio.move_on_after(1.0):
                    await drained.wait()
                await self._shut_down()
                tg.cancel_scope.cancel()  # housekeeping, status, the dispatcher if still busy
        finally:
            self._tg = None
            transport.close()
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.camera.stop)
                await anyio.to_thread.run_sync(self.writer.stop)
                await anyio.to_thread.run_sync(self.repair_scan.stop)
            log.info("recorder_stopped", reason=self._stop_reason, **self.status())
            self._stopped.set()

    async def _shut_down(self) -> None:
        """Close an open trial as truncated and give closing trials ``timeout`` to finish."""
        reason, timeout = self._stop_reason, self._stop_timeout
        if self.trial is not None:
            log.warning("trial_truncated", run_stem=self.trial.run_stem, reason=reason)
            self._close_trial("truncated", reason)
        if self._closing and not await self.wait_closed(timeout):
            log.error(
                "shutdown_incomplete",
                reason=f"{len(self._closing)} trial(s) still closing after {timeout:g} s",
            )

    async def start(self) -> None:
        """Bind the UDP port (raises OSError if taken), start the camera and writer threads.

        For callers without a task group: ``run()`` is hosted in a background task
        (``mecharm.common.hosted``); ``stop()`` ends it.
        """
        self._host = await start_hosted(self.run, "recorder")

    async def stop(self, reason: str = "shutdown", timeout: float = 10.0) -> None:
        """Close an open trial as truncated, finish pending files, stop the threads."""
        if self._stop_requested is None:
            self._stop_requested = anyio.Event()
            self._stopped = anyio.Event()
        assert self._stopped is not None
        if not self._stop_requested.is_set():
            self._stop_reason, self._stop_timeout = reason, timeout
            self._stop_requested.set()
        if self._host is None and self._tg is None and not self._stopped.is_set():
            self._stopped.set()  # never started
        await self._stopped.wait()
        host, self._host = self._host, None
        if host is not None:
            await host  # re-raises a failure of run()

    async def serve(self, stop: anyio.Event | asyncio.Event) -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(self.run)
            await stop.wait()
            await self.stop()

    async def _dispatch(
        self, events: MemoryObjectReceiveStream[Datagram], drained: anyio.Event
    ) -> None:
        """Handle datagrams in arrival order until the receiver closes the stream."""
        try:
            await self._dispatch_all(events)
        finally:
            drained.set()

    async def _dispatch_all(self, events: MemoryObjectReceiveStream[Datagram]) -> None:
        with events:
            while True:
                try:
                    # drain without a checkpoint per datagram; wait only when the buffer is empty
                    data, addr = events.receive_nowait()
                except anyio.WouldBlock:
                    try:
                        data, addr = await events.receive()
                    except anyio.EndOfStream:
                        return
                except anyio.EndOfStream:
                    return
                try:
                    self.handle_datagram(data, addr)
                except Exception as exc:  # the service never dies of bad input
                    log.exception("event_handler_failed", error=f"{type(exc).__name__}: {exc}")

    # --- camera side (called from the camera thread) --------------------------------------------
    def _on_frame(self, frame: CapturedFrame) -> None:
        if self.trial is not None:
            self.writer.offer(frame)

    def _camera_lost(self, why: str) -> None:
        trial = self.trial
        if trial is not None:
            trial.camera_lost_count += 1
            trial.mark("camera_lost", f"camera lost: {why}")

    def _media_error(self, trial: TrialRecording, exc: BaseException) -> None:
        why = self._root_problem()
        if why is not None:
            trial.mark("mount_lost", why)
        else:
            trial.reasons.append(f"media write failed: {type(exc).__name__}: {exc}")

    # --- datagrams -------------------------------------------------------------------------------
    def handle_datagram(self, data: bytes, addr: Any) -> None:
        """MAC, replay and scope first (docs/recorder.md, "Authenticated events"), then the event."""
        c = self.counters
        c.events += 1
        c.last_event_mono = time.monotonic()
        peer = str(addr[0]) if addr else ""
        if len(data) > MAX_EVENT_BYTES:
            self._refuse(DROP_OVERSIZED, f"more than {MAX_EVENT_BYTES} bytes", len(data), peer)
            return
        try:
            sealed = unseal(self._key, EVENT_LABEL, data)
        except EnvelopeError as exc:
            self._refuse(exc.reason, str(exc), len(data), peer)
            return
        if not self._replay.admit(sealed):
            self._refuse(DROP_REPLAYED, "sequence number used before", len(data), peer)
            return
        if sealed.sid == self._owner:
            self._owner_seen = c.last_event_mono
        try:
            event = parse_event(sealed.body)
        except EventError as exc:
            c.rejected += 1
            self._reject(error=str(exc), size=len(data), peer=peer)
            return
        why = self._out_of_scope(event, sealed)
        if why is not None:
            self._refuse(why, f"{event.type} for trial {sealed.trial}", len(data), peer)
            return
        self._origin, self._peer = sealed, addr
        try:
            self._handlers[type(event)](event)
        finally:
            self._origin = self._peer = None

    def _refuse(self, reason: str, error: str, size: int, peer: str) -> None:
        """Drop a datagram unacted on: counted (status line, the open trial's meta), logged 10/s."""
        self.counters.refuse(reason)
        if self.trial is not None:
            refused = self.trial.events_refused
            refused[reason] = refused.get(reason, 0) + 1
        self._refused(reason=reason, error=error, size=size, peer=peer)

    def _out_of_scope(self, ev: Any, sealed: Sealed) -> str | None:
        """Why an authentic event must not act on the open trial, or None."""
        if isinstance(ev, TrialStart | TrialEnd) and sealed.trial != ev.run_stem:
            return DROP_FOREIGN_TRIAL
        if self.trial is None or sealed.sid == self._owner:
            return None  # the owner's other trials and stray events are the handlers' business
        if isinstance(ev, TrialStart):
            # another session: refused while the owner is alive; a silent owner (crashed
            # runtime) is taken over and its trial closed truncated by _trial_start; so is the
            # trial a restarted runtime says it put on its books as interrupted (a handshake:
            # only the runtime that holds the data root reconciles, docs/recorder.md)
            if ev.supersedes is not None and ev.supersedes == self.trial.run_stem:
                return None
            quiet = time.monotonic() - self._owner_seen
            return DROP_FOREIGN_TRIAL_START if quiet < self.settings.session_takeover_sec else None
        if isinstance(ev, FrameRequest | Ping) or (
            sealed.trial is None and not isinstance(ev, TrialEnd)
        ):
            return None  # served as an orphan frame / answered / counted as outside a trial
        return DROP_FOREIGN_TRIAL

    def _scoped(self) -> TrialRecording | None:
        """The open trial if the datagram being handled belongs to it, else None."""
        trial, origin = self.trial, self._origin
        if trial is None or origin is None:
            return None
        return trial if origin.sid == self._owner and origin.trial == trial.run_stem else None

    def _quota_hit(self, quota: HourlyQuota, why: str) -> None:
        quota.refused += 1
        if quota.log_due():
            log.warning("quota_reached", quota=quota.name, reason=why, **quota.usage())

    def _trial_start(self, ev: TrialStart) -> None:
        if self.trial is not None:
            prev = self.trial.run_stem
            cut = (
                f"its runtime ended; {ev.run_stem}'s runtime put it on the books as interrupted"
                if ev.supersedes == prev
                else f"second trial_start ({ev.run_stem})"
            )
            log.warning("trial_truncated", run_stem=prev, reason=cut)
            self._close_trial("truncated", cut)
        why = self._check_mount()
        if why is not None:
            log.error("trial_start_refused", run_stem=ev.run_stem, reason=why)
            return
        why = self._trial_quota.exceeded()
        if why is not None:
            self._quota_hit(self._trial_quota, why)
            self._refuse(DROP_TRIAL_QUOTA, why, 0, "")
            return
        try:
            trial = TrialRecording.create(
                self.root, ev.run_stem, self.settings, self.camera_spec, ev.task
            )
        except (OSError, UnsafeNameError) as exc:
            log.error(
                "trial_start_refused", run_stem=ev.run_stem, reason=f"{type(exc).__name__}: {exc}"
            )
            return
        trial.add_event(ev)
        if self.camera.state == "lost":
            trial.mark("camera_lost", "camera unavailable at trial start")
        self.writer.begin(trial)
        self.trial = trial
        self._trial_quota.add(items=1)
        self._owner = self._origin.sid if self._origin is not None else None
        self._owner_seen = time.monotonic()
        self.counters.trials_started += 1
        log.info("trial_started", run_stem=ev.run_stem, path=trial.rel_path)

    def _trial_end(self, ev: TrialEnd) -> None:
        trial = self.trial
        if trial is None:
            log.warning("trial_end_without_trial", run_stem=ev.run_stem)
            return
        if trial.run_stem != ev.run_stem:
            log.warning("trial_end_mismatch", run_stem=ev.run_stem, open_trial=trial.run_stem)
            return
        self._write_row(trial, ev)
        self._close_trial(None, "")

    def _trial_event(self, ev: Any) -> None:
        trial = self._scoped()
        if trial is None:
            self.counters.ignored_no_trial += 1
            log.debug("event_outside_trial", type=ev.type)
            return
        self._write_row(trial, ev)

    def _write_row(self, trial: TrialRecording, ev: Any, note: str = "") -> None:
        try:
            trial.add_event(ev, note)
        except (OSError, ValueError) as exc:
            log.error(
                "states_write_failed", run_stem=trial.run_stem, error=f"{type(exc).__name__}: {exc}"
            )

    # --- closing a trial ------------------------------------------------------------------------
    def _close_trial(self, status: str | None, reason: str) -> None:
        trial, self.trial = self.trial, None
        if trial is None:
            return
        if status is not None:
            trial.mark(status, reason)
        trial.ended_ts = time.time()
        trial.close_deadline = time.monotonic() + self.settings.close_budget_sec
        try:
            trial.close_states()
        except OSError as exc:
            log.error("states_close_failed", run_stem=trial.run_stem, error=str(exc))
        fut = self.writer.end(trial)
        done = anyio.Event()
        self._closing.add(done)
        assert self._tg is not None, "trials are only closed while the service runs"
        self._tg.start_soon(self._finish, trial, fut, done, name=f"finish {trial.run_stem}")

    async def _finish(self, trial: TrialRecording, media: Future[None], done: anyio.Event) -> None:
        try:
            # the writer thread resolves a concurrent future; wrap_future awaits it without
            # parking a worker thread (plain asyncio on purpose, see docs/concurrency.md)
            await asyncio.wrap_future(media)
            why = self._root_problem()
            if why is not None:
                trial.mark("mount_lost", why)
            self.counters.trials_closed += 1
            try:
                meta = trial.write_meta()
            except OSError as exc:
                log.error(
                    "meta_write_failed",
                    run_stem=trial.run_stem,
                    status=trial.status,
                    error=f"{exc.strerror or exc}",
                )
                return
            self._trial_quota.add(nbytes=folder_bytes(trial.dir))
            log.info(
                "trial_closed",
                run_stem=trial.run_stem,
                status=meta.status,
                reason=meta.status_reason,
                frames_captured=meta.frames_captured,
                frames_written=meta.frames_written,
                frames_dropped=meta.frames_dropped,
                dropped_at_close=trial.frames_dropped_at_close,
                effective_fps=meta.effective_fps,
                elapsed_sec=meta.elapsed_sec,
                camera_frozen=meta.camera_frozen,
            )
        finally:
            trial.release()  # from here a folder without a meta reads as abandoned
            self._closing.discard(done)
            done.set()

    async def wait_closed(self, timeout: float = 10.0) -> bool:
        """Wait until every closing trial has written its meta (tests, shutdown); False on timeout."""
        with anyio.move_on_after(timeout):
            while self._closing:
                await next(iter(self._closing)).wait()
            return True
        return False

    # --- housekeeping ---------------------------------------------------------------------------
    def _root_problem(self) -> str | None:
        """Why the data root cannot be written now, or None: the guard the runtime uses too.

        Bound to the root's device the first time the root is usable, so a lazily
        unmounted SSD (the same path, now a folder on the local disk) is refused, and
        an SSD mounted again at its mount point is adopted (docs/reliability.md).
        """
        if self.guard is None:
            try:
                self.guard = DataRootGuard(self.root, self.settings.require_mount)
            except StorageFault as exc:
                return str(exc)
            return None
        if self.guard.rebind():
            return None
        return self.guard.problem(probe=True) or f"data root {self.root} is not usable"

    def _check_mount(self, initial: bool = False) -> str | None:
        why = self._root_problem()
        ok = why is None
        if ok != self.mount_ok:
            if ok:
                log.info("data_root_ok", data_root=str(self.root))
            else:
                log.error("mount_lost" if not initial else "data_root_unavailable", reason=why)
        self.mount_ok = ok
        return why

    async def _housekeeping(self) -> None:
        s = self.settings
        tick = min(s.csv_flush_sec, s.mount_check_sec) / 2
        last_mount = time.monotonic()
        while True:
            await anyio.sleep(tick)
            trial = self.trial
            if trial is not None:
                try:
                    trial.flush_states()
                except OSError as exc:
                    log.error("states_flush_failed", run_stem=trial.run_stem, error=str(exc))
            trial = self.trial
            if trial is not None and time.time() - trial.started_ts > s.max_trial_sec:
                limit = f"no trial_end after max_trial_sec={s.max_trial_sec:g}"
                log.warning("trial_truncated", run_stem=trial.run_stem, reason=limit)
                self._close_trial("truncated", limit)
            if time.monotonic() - last_mount >= s.mount_check_sec:
                last_mount = time.monotonic()
                why = self._check_mount()
                if why is not None and self.trial is not None:
                    log.error("trial_aborted", run_stem=self.trial.run_stem, reason=why)
                    self._close_trial("mount_lost", why)

    def status(self) -> dict[str, Any]:
        c, cam = self.counters, self.camera
        trial = self.trial
        return {
            "trial": trial.run_stem if trial else None,
            "camera": cam.state,
            "fps": round(cam.fps(), 2),
            "frames": cam.frames,
            "trial_frames": trial.frames_written if trial else None,
            "dropped": self.writer.frames_dropped,
            "frozen": cam.frozen,
            "camera_lost_count": cam.lost_count,
            "events": c.events,
            "rejected": c.rejected,
            "dropped_events": c.dropped_events,
            "frame_requests": c.frame_requests,
            "pings": self.pings,
            "refused": dict(c.refused),
            "sessions": len(self._replay),
            "last_event_age_s": c.last_event_age(),
            "mount_ok": self.mount_ok,
        }

    async def _status_loop(self) -> None:
        while True:
            await anyio.sleep(self.settings.status_interval_sec)
            log.info("recorder_status", **self.status())
