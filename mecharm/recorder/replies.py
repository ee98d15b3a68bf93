"""What the recorder answers: a frame request (the newest side frame saved and described)
and a ping (where it writes, whether it can record now).

``Replies`` is that part of ``RecorderService`` (service.py keeps the socket, the event
dispatch, the trials and the life cycle). Both replies are sealed and sent back only to
the request's own session and sequence number; a flood of frame requests is cut by a
token bucket, pings by their own rate (docs/recorder.md, "Events and replies", "Quotas").
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mecharm.cameras.factory import is_synthetic
from mecharm.cameras.freshness import NoFrameError, StaleFrameError
from mecharm.common.fsutil import DataRootGuard, safe_join
from mecharm.common.layout import ORPHAN_FRAMES
from mecharm.common.logging import get_logger
from mecharm.recorder.capture import CameraWorker
from mecharm.recorder.config import RecorderSettings
from mecharm.recorder.envelope import (
    REPLY_LABEL,
    Sealed,
    seal,
)
from mecharm.recorder.events import (
    DROP_PING_RATE,
    DROP_PING_SOURCE,
    MAX_PONG_BYTES,
    PINGS_PER_SEC,
    REASON_IMWRITE_FAILED,
    REASON_MOUNT_LOST,
    REASON_NO_FRAME,
    REASON_OK,
    REASON_OK_ORPHAN,
    REASON_ORPHAN_SAVE_FAILED,
    REASON_QUOTA_EXCEEDED,
    REASON_STALE_FRAME,
    FrameReply,
    FrameRequest,
    Ping,
    Pong,
    exception_reason,
    root_identity,
)
from mecharm.recorder.quota import Bucket, HourlyQuota, file_bytes
from mecharm.recorder.snapshots import SnapshotEncodeError, save_jpeg
from mecharm.recorder.status import StatusCounters
from mecharm.recorder.trial import TrialRecording

if TYPE_CHECKING:
    from mecharm.recorder.capture import CameraWorker

__all__ = ["REASON_RATE_LIMITED", "Replies"]

log = get_logger("mecharm.recorder")
#: the exception:{Type} reason (docs/recorder.md) for a request refused by the rate limit
REASON_RATE_LIMITED = "exception:RateLimited"


class Replies:
    """The replies of ``RecorderService``, which sets these attributes (its ``__init__``)."""

    settings: RecorderSettings
    root: Path
    camera: CameraWorker
    camera_spec: str
    counters: StatusCounters
    trial: TrialRecording | None
    mount_ok: bool | None
    guard: DataRootGuard | None
    port: int | None
    pings: int
    _key: bytes
    _origin: Sealed | None
    _peer: Any
    _transport: asyncio.DatagramTransport | None
    _orphan_quota: HourlyQuota
    _frame_bucket: Bucket
    _ping_bucket: Bucket
    _root_text: str

    # the service's own (service.py)
    def _scoped(self) -> TrialRecording | None:
        raise NotImplementedError

    def _write_row(self, trial: TrialRecording, ev: Any, note: str = "") -> None:
        raise NotImplementedError

    def _quota_hit(self, quota: HourlyQuota, why: str) -> None:
        raise NotImplementedError

    def _check_mount(self, initial: bool = False) -> str | None:
        raise NotImplementedError

    def _refuse(self, reason: str, error: str, size: int, peer: str) -> None:
        raise NotImplementedError

    # --- frame requests -------------------------------------------------------------------------
    def _frame_request(self, ev: FrameRequest) -> None:
        t0 = time.perf_counter()
        c0 = time.thread_time()
        trial = self._scoped()  # another session's request is an orphan, never in this trial
        if self._frame_bucket.take():  # a flood must not fill the disk with JPEGs
            reply = self.serve_frame(ev.tag, trial)
        else:
            reply = FrameReply(
                reason=REASON_RATE_LIMITED, camera_frozen=self.camera.frozen, tag=ev.tag
            )
        self.counters.frame_requests += 1
        self.counters.reply(reply.reason)
        origin = self._origin
        if self._transport is not None and origin is not None:
            # signed, and bound to the request's session and sequence number
            data = seal(
                self._key,
                REPLY_LABEL,
                origin.sid,
                origin.seq,
                None,
                reply.model_dump_json().encode(),
            )
            try:
                self._transport.sendto(data, ("127.0.0.1", ev.reply_port))
            except OSError as exc:
                log.warning("frame_reply_failed", tag=ev.tag, error=str(exc))
        if trial is not None:
            trial.frame_requests += 1
            self._write_row(trial, ev, note=f"{ev.tag} {reply.reason}")
        log.info(
            "frame_request",
            tag=ev.tag,
            reason=reply.reason,
            frame_age_ms=reply.frame_age_ms,
            camera_frozen=reply.camera_frozen,
            path=reply.path,
            took_ms=round((time.perf_counter() - t0) * 1e3, 2),
            cpu_ms=round((time.thread_time() - c0) * 1e3, 2),
        )

    def serve_frame(self, tag: str, trial: TrialRecording | None) -> FrameReply:
        """Save the newest frame for ``tag`` (into ``trial``, or the orphan folder) and describe
        it; every failure is a reason."""
        frozen = self.camera.frozen
        if trial is None:
            why = self._orphan_quota.exceeded()
            if why is not None:
                self._quota_hit(self._orphan_quota, why)
                return FrameReply(reason=REASON_QUOTA_EXCEEDED, camera_frozen=frozen, tag=tag)
        try:  # the shared freshness rule: docs/recorder.md#frame-freshness
            aged = self.camera.buffer.read_latest(self.settings.stale_frame_sec)
        except NoFrameError:
            return FrameReply(reason=REASON_NO_FRAME, camera_frozen=frozen, tag=tag)
        except StaleFrameError as stale:
            return FrameReply(
                reason=REASON_STALE_FRAME,
                capture_ts=stale.latest.frame.wall_ts,
                frame_age_ms=stale.latest.age_ms,
                camera_frozen=frozen or stale.latest.frozen,
                tag=tag,
            )
        latest, age_ms, frozen = aged.frame, aged.age_ms, frozen or aged.frozen
        fail = REASON_IMWRITE_FAILED if trial else REASON_ORPHAN_SAVE_FAILED
        try:
            # the housekeeping check (with its probe write) may be up to a second old, and an
            # unmounted SSD's path is a folder on the local disk: the guard's stat-only device
            # check runs before every file (docs/reliability.md)
            moved = self.guard is not None and self.guard.problem() is not None
            if moved or (not self.mount_ok and self._check_mount() is not None):
                return FrameReply(reason=REASON_MOUNT_LOST, camera_frozen=frozen, tag=tag)
            if trial is not None:
                folder = trial.extracted
            else:
                folder = safe_join(self.root, *ORPHAN_FRAMES)
                folder.mkdir(parents=True, exist_ok=True)
            path = save_jpeg(
                latest.image,
                folder,
                tag,
                latest.wall_ts,
                self.settings.jpeg_quality,
                jpeg=latest.jpeg,
            )
        except SnapshotEncodeError:
            return FrameReply(reason=fail, camera_frozen=frozen, tag=tag)
        except OSError as exc:
            reason = REASON_MOUNT_LOST if self._check_mount() is not None else fail
            log.warning("frame_save_failed", tag=tag, error=str(exc), reason=reason)
            return FrameReply(reason=reason, camera_frozen=frozen, tag=tag)
        except Exception as exc:
            log.exception("frame_save_failed", tag=tag)
            return FrameReply(reason=exception_reason(exc), camera_frozen=frozen, tag=tag)
        if trial is None:
            self._orphan_quota.add(items=1, nbytes=file_bytes(path))
        return FrameReply(
            path=str(path),
            capture_ts=latest.wall_ts,
            frame_age_ms=age_ms,
            reason=REASON_OK if trial else REASON_OK_ORPHAN,
            camera_frozen=frozen,
            tag=tag,
        )

    # --- ping ----------------------------------------------------------------------------------
    def pong(self, nonce: str) -> Pong:
        """Where this recorder writes and whether it can record now (stat calls, no write)."""
        ident = root_identity(self.root)
        guard_problem = self.guard.problem() if self.guard is not None else None
        problem = guard_problem or ("" if self.mount_ok else "failed the recorder's mount check")
        newest = self.camera.latest
        age = None if newest is None else (time.monotonic_ns() - newest.mono_ns) / 1e6
        trial = self.trial
        return Pong.describe(
            nonce,
            self._root_text,
            problem,
            root_dev=ident[0] if ident else None,
            root_ino=ident[1] if ident else None,
            root_ok=not problem and ident is not None,
            udp_port=self.port or self.settings.udp_port,
            camera=self.camera.state,
            camera_frozen=self.camera.frozen,
            frame_age_ms=None if age is None else round(age, 1),
            recording=trial is not None,
            trial=trial.run_stem if trial else None,
            synthetic=is_synthetic(self.camera_spec),
        )

    def _ping(self, ev: Ping) -> None:
        """Answer an authenticated ping to its source: loopback only, a bounded size, at most
        PINGS_PER_SEC a second (a spoofed or flooding sender gets nothing to reflect)."""
        origin, peer = self._origin, self._peer
        if origin is None or self._transport is None:
            return
        if not (isinstance(peer, tuple) and peer[0] == "127.0.0.1" and int(peer[1]) >= 1024):
            self._refuse(DROP_PING_SOURCE, f"pong not sent to {peer!r}", 0, str(peer))
            return
        if not self._ping_bucket.take():
            self._refuse(DROP_PING_RATE, f"more than {PINGS_PER_SEC} pings a second", 0, peer[0])
            return
        body = self.pong(ev.nonce).model_dump_json().encode()
        data = seal(self._key, REPLY_LABEL, origin.sid, origin.seq, None, body)
        if len(data) > MAX_PONG_BYTES:  # the model's bounds keep it far below; never sent larger
            log.error("pong_too_large", size=len(data), limit=MAX_PONG_BYTES)
            return
        try:
            self._transport.sendto(data, (peer[0], int(peer[1])))
        except OSError as exc:
            log.warning("pong_failed", error=str(exc))
            return
        self.pings += 1
        log.debug("pong", to=peer[1], size=len(data))
