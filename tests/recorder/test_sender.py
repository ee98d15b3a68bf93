"""The sender: notify never raises/blocks; request_frame maps every failure to a reason;
every datagram is signed, and only a signed reply to this very request is taken."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest

from mecharm.recorder.envelope import EVENT_LABEL, REPLY_LABEL, Sealed, seal, unseal
from mecharm.recorder.events import Commanded, FrameReply, Stage, TrialEnd, TrialStart, parse_event
from mecharm.recorder.sender import RecorderSender

KEY = b"0123456789abcdef0123456789abcdef"


def _open(data: bytes) -> Sealed:
    return unseal(KEY, EVENT_LABEL, data)


def _sender(port: int) -> RecorderSender:
    return RecorderSender(port=port, key=KEY)


def _listener() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(2.0)
    return sock


def test_notify_delivers_one_signed_json_event_per_datagram():
    stem = "run_0001_20260101_000000"
    with _listener() as sock, _sender(sock.getsockname()[1]) as s:
        s.notify(TrialStart(run_stem=stem))
        s.notify({"type": "stage", "stage": "stage2", "ts": 5.0})
        s.notify(TrialEnd(run_stem=stem))
        s.notify(Stage(stage="after"))
        envelopes = [_open(sock.recv(65535)) for _ in range(4)]
    first, second = (parse_event(e.body) for e in envelopes[:2])
    assert isinstance(first, TrialStart) and first.run_stem == stem
    assert isinstance(second, Stage) and second.ts == 5.0
    # one session, increasing sequence numbers, each event naming the trial it belongs to
    assert {e.sid for e in envelopes} == {s.session}
    assert [e.seq for e in envelopes] == [1, 2, 3, 4]
    assert [e.trial for e in envelopes] == [stem, stem, stem, None]
    assert s.sent == 4 and s.dropped == 0
    with pytest.raises(ValueError, match="MAC"):
        unseal(
            b"another key of thirty-two chars!",
            EVENT_LABEL,
            seal(KEY, EVENT_LABEL, s.session, 9, None, b"{}"),
        )


def test_notify_never_raises_when_nothing_listens_or_input_is_bad():
    with _listener() as sock:
        port = sock.getsockname()[1]
    s = RecorderSender(port=port)  # port now closed: nobody listens
    for _ in range(50):
        s.notify(Commanded(angles=[0, 0, 0, 0, 0, -30], speed=20))
    s.notify(object())  # not serializable
    s.notify({"bad": {1, 2}})  # set is not JSON
    bad_host = RecorderSender(host="256.1.1.1", port=5556)
    bad_host.notify(Stage(stage="x"))
    assert s.dropped == 2 and bad_host.dropped == 1
    s.close()
    s.notify(Stage(stage="after close"))  # reopens lazily


def test_notify_does_not_block_when_the_socket_buffer_is_full():
    with _listener() as sock:  # bound but never read: the kernel drops the overflow
        s = RecorderSender(port=sock.getsockname()[1])
        payload = {"type": "stage", "stage": "x", "note": "y" * 8000}
        for _ in range(2000):
            s.notify(payload)
        assert s.sent + s.dropped == 2000


def _signed(req: dict, body: bytes, seq: int | None = None) -> bytes:
    """A reply as the recorder signs it: bound to the request's session and sequence number."""
    return seal(KEY, REPLY_LABEL, req["sid"], req["seq"] if seq is None else seq, None, body)


def _reply_once(sock: socket.socket, build) -> threading.Thread:
    def run() -> None:
        data, _addr = sock.recvfrom(65535)
        env = _open(data)
        req = {**json.loads(env.body), "sid": env.sid, "seq": env.seq}
        for payload in build(req):
            sock.sendto(payload, ("127.0.0.1", req["reply_port"]))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_request_frame_ok_and_ignores_replies_for_other_tags():
    with _listener() as sock:

        def build(req):
            other = FrameReply(path="/other.jpg", reason="ok", tag="someone_else")
            yield _signed(req, other.model_dump_json().encode())
            good = FrameReply(
                path="/x.jpg", capture_ts=12.5, frame_age_ms=4.0, reason="ok", tag=req["tag"]
            )
            yield _signed(req, good.model_dump_json().encode())

        t = _reply_once(sock, build)
        result = _sender(sock.getsockname()[1]).request_frame("side_a", timeout=2.0)
        t.join()
    assert result == ("/x.jpg", 12.5, "ok")


@pytest.mark.parametrize("use_async", [False, True])
def test_spoofed_and_replayed_replies_are_ignored(use_async):
    """Unsigned, wrongly signed, or signed for another request: never taken for the answer."""
    with _listener() as sock:

        def build(req):
            forged = FrameReply(path="/etc/passwd", reason="ok", tag=req["tag"])
            body = forged.model_dump_json().encode()
            yield body  # plain JSON, as before the envelope
            yield seal(
                b"not the key, but 32 characters!!", REPLY_LABEL, req["sid"], req["seq"], None, body
            )
            yield _signed(req, body, seq=req["seq"] - 1)  # a captured reply to an earlier request
            yield seal(
                KEY, EVENT_LABEL, req["sid"], req["seq"], None, body
            )  # an event, not a reply
            good = FrameReply(path="/real.jpg", capture_ts=3.0, reason="ok", tag=req["tag"])
            yield _signed(req, good.model_dump_json().encode())

        t = _reply_once(sock, build)
        s = _sender(sock.getsockname()[1])
        next(s._seq)  # so that seq - 1 is a sequence number this session has used
        if use_async:
            result = asyncio.run(s.request_frame_async("side_b", timeout=2.0))
        else:
            result = s.request_frame("side_b", timeout=2.0)
        t.join()
    assert result == ("/real.jpg", 3.0, "ok")
    assert s.replies_ignored == 4


def test_request_frame_timeout_when_absent():
    with _listener() as sock:
        port = sock.getsockname()[1]
    assert _sender(port).request_frame("x", timeout=0.2) == (None, None, "timeout")


def test_request_frame_malformed_reply():
    with _listener() as sock:
        t = _reply_once(sock, lambda req: [_signed(req, b'{"path": 5, "reason": "who knows"}')])
        assert _sender(sock.getsockname()[1]).request_frame("x") == (
            None,
            None,
            "malformed_reply",
        )
        t.join()


def test_request_frame_invalid_tag_is_a_reason_not_an_exception():
    path, ts, reason = _sender(9).request_frame("../../etc", timeout=0.1)
    assert (path, ts) == (None, None) and reason.startswith("exception:")


@pytest.mark.anyio
async def test_request_frame_async_does_not_block_the_loop():
    with _listener() as sock:
        port = sock.getsockname()[1]
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        result = await _sender(port).request_frame_async("x", timeout=0.3)
        task.cancel()
    assert result == (None, None, "timeout")
    assert ticks >= 2  # the loop kept running while we waited (a blocking wait gives 0)

    with _listener() as sock:
        t = _reply_once(
            sock,
            lambda req: [
                _signed(
                    req,
                    FrameReply(path="/p.jpg", capture_ts=1.0, reason="ok_orphan", tag=req["tag"])
                    .model_dump_json()
                    .encode(),
                )
            ],
        )
        result = await _sender(sock.getsockname()[1]).request_frame_async("y", timeout=2.0)
        t.join()
    assert result == ("/p.jpg", 1.0, "ok_orphan")


def test_emit_builds_and_sends_or_counts_a_drop():
    from mecharm.recorder.events import Measured

    with _listener() as sock, _sender(sock.getsockname()[1]) as s:
        s.emit(Measured, angles=[1, 2, 3, 4, 5, 6])
        s.emit(Measured, angles=[])  # what get_angles returns when the firmware is silent
        s.emit(Measured, angles=-1)
        got = parse_event(_open(sock.recv(65535)).body)
    assert isinstance(got, Measured) and got.angles[0] == 1
    assert s.sent == 1 and s.dropped == 2


# --- background mode (the runtime's): notify only queues, the sender's thread sends ----------


def _background_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "recorder-events"]


def _collect(sock: socket.socket, n: int) -> tuple[threading.Thread, list[bytes]]:
    """Read up to ``n`` datagrams in a thread (the kernel buffer holds only ~100 of them)."""
    got: list[bytes] = []

    def run() -> None:
        try:
            while len(got) < n:
                got.append(sock.recv(65535))
        except TimeoutError:
            pass

    t = threading.Thread(target=run)
    t.start()
    return t, got


def test_background_notify_delivers_every_event_in_order_with_its_trial():
    stem = "run_0002_20260101_000000"
    with _listener() as sock:
        reader, got = _collect(sock, 303)
        s = RecorderSender(port=sock.getsockname()[1], key=KEY, background=True)
        s.notify(TrialStart(run_stem=stem))
        # the trial is taken when the event is handed over, not when the thread sends it: a
        # frame request made right after names the trial this trial_start opened
        assert s.trial == stem
        for k in range(300):
            s.notify(Commanded(angles=[float(k)] * 6, speed=50, ts_send=1.0, attempt=1))
            if k % 20 == 19:  # paced like a trial's events: the test's reader keeps up
                time.sleep(0.02)
        s.notify(TrialEnd(run_stem=stem))
        s.notify(Stage(stage="after"))
        s.close()  # sends what is still queued first
        reader.join()
    envelopes = [_open(d) for d in got]
    assert len(envelopes) == 303
    events = [parse_event(e.body) for e in envelopes]
    assert isinstance(events[0], TrialStart) and isinstance(events[-2], TrialEnd)
    assert [e.angles[0] for e in events[1:301]] == [float(k) for k in range(300)]  # type: ignore[union-attr]
    assert [e.seq for e in envelopes] == list(range(1, 304))
    assert [e.trial for e in envelopes] == [stem] * 302 + [None]
    assert s.sent == 303 and s.dropped == 0
    assert not _background_threads()  # close() ended the thread


@pytest.mark.slow
def test_background_notify_never_waits_on_a_stuck_thread_and_bounds_its_queue(monkeypatch):
    import mecharm.recorder.sender as sender_mod

    monkeypatch.setattr(sender_mod, "BACKGROUND_QUEUE_MAX", 50)
    release = threading.Event()
    with _listener() as sock:
        reader, got = _collect(sock, 200)  # ends 2 s after the last datagram
        s = RecorderSender(port=sock.getsockname()[1], key=KEY, background=True)
        real_send = s._send

        def stuck(event: object, trial: str | None) -> None:
            release.wait(10)  # a sending thread that cannot send (a stalled kernel buffer)
            real_send(event, trial)

        monkeypatch.setattr(s, "_send", stuck)
        for _ in range(200):  # returns every time: the caller never waits on the thread
            s.notify(Stage(stage="s"))
        assert s.dropped >= 200 - 51  # the first is in the thread, 50 queued, the rest dropped
        release.set()
        s.close()
        reader.join()
    assert len(got) == s.sent and s.sent + s.dropped == 200
    s.notify(Stage(stage="late"))  # after close: dropped, never raised
    assert s.sent + s.dropped == 201 and not _background_threads()


def test_background_sender_starts_no_thread_until_the_first_event():
    s = RecorderSender(port=9, key=KEY, background=True)
    assert not _background_threads()
    s.close()
    assert not _background_threads() and s.sent == 0
