"""The signed envelope around every recorder datagram (docs/recorder.md, "Authenticated events").

Part of the wire contract beside ``mecharm.recorder.events``: the JSON event travels inside
one line of header that names the sending session, its sequence number, the
sender's monotonic clock and the trial the event belongs to, and an HMAC-SHA256
over all of it with the secret from the key file (``mecharm.common.keyfile``)::

    mr1 <mac: 64 hex> <session: 16 hex> <seq> <sent_mono_ns> <trial or -> <json>

The MAC covers everything after the MAC and a label saying the direction (an
event cannot be passed off as a reply, or a reply as an event). It is checked
before the JSON is parsed. Replies carry the session and sequence number of the
request they answer, so a captured reply cannot answer another request.
``ReplayGuard`` is the recorder's memory of sessions: a sequence number is
accepted once, and a session it does not know must be newer than what it forgot.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from mecharm.common.fsutil import UnsafeNameError, validate_name

__all__ = [
    "DROP_BAD_ENVELOPE",
    "DROP_BAD_MAC",
    "DROP_FOREIGN_TRIAL",
    "DROP_FOREIGN_TRIAL_START",
    "DROP_OVERSIZED",
    "DROP_REPLAYED",
    "DROP_TRIAL_QUOTA",
    "DROP_UNSIGNED",
    "EVENT_LABEL",
    "MAGIC",
    "REPLY_LABEL",
    "EnvelopeError",
    "ReplayGuard",
    "Sealed",
    "new_session_id",
    "seal",
    "unseal",
]

MAGIC: Final = b"mr1 "
EVENT_LABEL: Final = b"mecharm-recorder event\n"
REPLY_LABEL: Final = b"mecharm-recorder reply\n"
_MAC_HEX: Final = 64
_HEAD: Final = len(MAGIC) + _MAC_HEX + 1
_NO_TRIAL: Final = "-"
_SID_RE: Final = re.compile(rb"[0-9a-f]{16}")
_NUM_RE: Final = re.compile(rb"[0-9]{1,19}")

# --- why a datagram was dropped before any handler saw it (docs/recorder.md) ----------------
DROP_OVERSIZED: Final = "oversized"  # more than mecharm.recorder.events.MAX_EVENT_BYTES
DROP_UNSIGNED: Final = "unsigned"  # no envelope at all (plain JSON, garbage)
DROP_BAD_MAC: Final = "bad_mac"  # an envelope whose MAC is not the key's
DROP_BAD_ENVELOPE: Final = "bad_envelope"  # MAC right, header fields malformed (a sender bug)
DROP_REPLAYED: Final = "replayed"  # a sequence number already used, or older than the recorder
# scoping: an event acts only on the trial its session opened
DROP_FOREIGN_TRIAL_START: Final = "foreign_trial_start"  # another session's trial is open and alive
DROP_FOREIGN_TRIAL: Final = "foreign_trial"  # names a trial its session did not open
DROP_TRIAL_QUOTA: Final = "trial_quota"  # trial_start beyond the hourly trial quota


class EnvelopeError(ValueError):
    """A datagram whose envelope does not hold; ``reason`` is one of the DROP_* names."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Sealed:
    """An envelope whose MAC held: who sent it, in which order, for which trial."""

    sid: str
    seq: int
    sent_ns: int
    trial: str | None
    body: bytes


def new_session_id() -> str:
    """A random session id (16 hex characters), one per sender."""
    return secrets.token_hex(8)


@functools.lru_cache(maxsize=16)
def _keyed(key: bytes, label: bytes) -> hmac.HMAC:
    """HMAC state after the key and the label: each datagram then costs a copy and its bytes."""
    return hmac.new(key, label, hashlib.sha256)


def _mac(key: bytes, label: bytes, signed: bytes) -> bytes:
    h = _keyed(key, label).copy()
    h.update(signed)
    return h.hexdigest().encode("ascii")


def seal(
    key: bytes,
    label: bytes,
    sid: str,
    seq: int,
    trial: str | None,
    body: bytes,
    sent_ns: int | None = None,
) -> bytes:
    """The datagram carrying ``body``; ``trial`` must be a safe name or None."""
    sent = time.monotonic_ns() if sent_ns is None else sent_ns
    signed = f"{sid} {seq} {sent} {trial or _NO_TRIAL} ".encode() + body
    return MAGIC + _mac(key, label, signed) + b" " + signed


def unseal(key: bytes, label: bytes, data: bytes) -> Sealed:
    """Check the MAC first, then the header; raise EnvelopeError (with its drop reason)."""
    if not data.startswith(MAGIC) or len(data) < _HEAD or data[_HEAD - 1 : _HEAD] != b" ":
        raise EnvelopeError(DROP_UNSIGNED, "no signed envelope")
    signed = data[_HEAD:]
    if not hmac.compare_digest(_mac(key, label, signed), data[len(MAGIC) : _HEAD - 1]):
        raise EnvelopeError(DROP_BAD_MAC, "MAC does not match the key")
    parts = signed.split(b" ", 4)
    if len(parts) != 5:
        raise EnvelopeError(DROP_BAD_ENVELOPE, "envelope header has fewer than 4 fields")
    sid, seq, sent, trial, body = parts
    if not (_SID_RE.fullmatch(sid) and _NUM_RE.fullmatch(seq) and _NUM_RE.fullmatch(sent)):
        raise EnvelopeError(DROP_BAD_ENVELOPE, "malformed session, sequence or clock field")
    name: str | None = None
    if trial != _NO_TRIAL.encode():
        try:
            name = validate_name(trial.decode("ascii", "replace"), "trial")
        except UnsafeNameError as exc:
            raise EnvelopeError(DROP_BAD_ENVELOPE, str(exc)) from None
    return Sealed(sid.decode("ascii"), int(seq), int(sent), name, body)


class ReplayGuard:
    """Accept each (session, sequence number) once; forget old sessions safely.

    Per session: the highest sequence number seen and a 64-wide window below it
    (as IPsec and DTLS do), so a datagram overtaken by a later one still counts
    but none is accepted twice. A session not in memory is accepted only if it
    was sealed after ``floor_ns``: the recorder's start, raised to the last
    datagram of any session forgotten to stay within ``max_sessions``. And no
    datagram at all, of a known session or not, sealed before this recorder
    started (``start_ns``) is accepted: after a restart the runtime's session is
    re-created by its next fresh datagram, and its window would otherwise take a
    captured datagram of the same session whose number lies within the window
    below. So neither a restart nor forgetting lets a captured datagram back in.
    The clock is the monotonic one, shared by every process of the computer and
    not moved by wall-clock steps (a reboot resets it: docs/recorder.md,
    "Authenticated events", says what that leaves open).
    """

    WINDOW: Final = 64

    def __init__(self, max_sessions: int = 1024) -> None:
        self.max_sessions = max_sessions
        self.start_ns = self.floor_ns = time.monotonic_ns()
        #: sid -> [highest seq, window bits (bit i = highest - i seen), last accepted at]
        self._sessions: OrderedDict[str, list[int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def admit(self, sealed: Sealed) -> bool:
        """True the first time this (session, seq) arrives; False for a replay."""
        now = time.monotonic_ns()
        if sealed.sent_ns <= self.start_ns:  # sealed before this recorder ran: a replay
            return False
        state = self._sessions.get(sealed.sid)
        seq = sealed.seq
        if state is None:
            if sealed.sent_ns <= self.floor_ns or sealed.sent_ns > now:
                return False
            if len(self._sessions) >= self.max_sessions:
                _, old = self._sessions.popitem(last=False)
                self.floor_ns = max(self.floor_ns, old[2])
            self._sessions[sealed.sid] = [seq, 1, now]
            return True
        high, bits, _ = state
        if seq > high:
            shift = seq - high
            state[0] = seq
            state[1] = (
                ((bits << shift) | 1) & ((1 << self.WINDOW) - 1) if shift < self.WINDOW else 1
            )
        else:
            offset = high - seq
            if offset >= self.WINDOW or (bits >> offset) & 1:
                return False
            state[1] = bits | (1 << offset)
        state[2] = now
        self._sessions.move_to_end(sealed.sid)
        return True
