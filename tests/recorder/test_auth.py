"""Authenticated, scoped events and hourly quotas (docs/recorder.md, "Authenticated events",
"Quotas"): the real service on real UDP sockets, real files."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from mecharm.common.keyfile import KeyFileError, load_or_create_key
from mecharm.common.layout import META, DataRoot
from mecharm.recorder.envelope import (
    EVENT_LABEL,
    REPLY_LABEL,
    EnvelopeError,
    ReplayGuard,
    Sealed,
    seal,
    unseal,
)
from mecharm.recorder.events import (
    FrameRequest,
    Measured,
    RecordingMeta,
    Stage,
    TrialEnd,
    TrialStart,
    parse_event,
)
from mecharm.recorder.sender import RecorderSender
from mecharm.recorder.service import RecorderService

STEM = "run_0001_20260101_120000"
STEM2 = "run_0002_20260101_120100"
OTHER_KEY = b"an entirely different key, 32+ chars"


def _meta(root: Path, stem: str) -> RecordingMeta:
    return RecordingMeta.model_validate_json(
        (DataRoot(root).recording(stem).dir / META).read_text()
    )


def _rows(root: Path, stem: str) -> list[str]:
    text = DataRoot(root).recording(stem).states.read_text().splitlines()[1:]
    return [line.split(",")[1] for line in text]


class Tap(RecorderSender):
    """A legitimate sender whose datagrams are also kept, as an attacker who saw them would."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.captured: list[bytes] = []

    def seal_event(self, body: bytes, trial: str | None) -> tuple[int, bytes]:
        seq, data = super().seal_event(body, trial)
        self.captured.append(data)
        return seq, data


# --- the envelope and the replay guard, without a service ------------------------------------
def _sealed(sid: str, seq: int, sent_ns: int | None = None) -> Sealed:
    return Sealed(sid, seq, time.monotonic_ns() if sent_ns is None else sent_ns, None, b"{}")


def test_replay_guard_accepts_each_sequence_number_once_within_its_window():
    g = ReplayGuard()
    sid = "0123456789abcdef"
    assert [g.admit(_sealed(sid, n)) for n in (5, 7, 6, 6, 5, 7, 8)] == [
        True, True, True, False, False, False, True,
    ]  # fmt: skip
    assert g.admit(_sealed(sid, 200))
    assert not g.admit(_sealed(sid, 200 - 64))  # fell out of the window: too old to tell
    assert g.admit(_sealed(sid, 200 - 63))  # still inside, never seen


def test_replay_guard_refuses_sessions_older_than_itself_or_than_what_it_forgot():
    before = time.monotonic_ns()
    g = ReplayGuard(max_sessions=2)
    assert not g.admit(_sealed("a" * 16, 1, sent_ns=before))  # sealed before the recorder started
    assert not g.admit(_sealed("a" * 16, 1, sent_ns=time.monotonic_ns() + 10**12))  # the future
    first = _sealed("1" * 16, 1)
    assert g.admit(first) and g.admit(_sealed("2" * 16, 1)) and g.admit(_sealed("3" * 16, 1))
    assert len(g) == 2  # session 1 was forgotten ...
    assert not g.admit(first)  # ... but its datagrams stay refused
    assert g.admit(_sealed("4" * 16, 1))  # new sessions still come in


def test_the_envelope_covers_every_byte_and_the_direction():
    key = b"k" * 32
    data = seal(key, EVENT_LABEL, "0123456789abcdef", 3, STEM, b'{"type":"stage","stage":"s"}')
    env = unseal(key, EVENT_LABEL, data)
    assert (env.sid, env.seq, env.trial) == ("0123456789abcdef", 3, STEM)
    for i in range(len(data)):  # flip any byte: refused
        bad = data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]
        with pytest.raises(EnvelopeError):
            unseal(key, EVENT_LABEL, bad)
    with pytest.raises(EnvelopeError) as err:
        unseal(key, REPLY_LABEL, data)  # an event is not a reply
    assert err.value.reason == "bad_mac"
    with pytest.raises(EnvelopeError) as err:
        unseal(key, EVENT_LABEL, b'{"type":"trial_start","run_stem":"x"}')
    assert err.value.reason == "unsigned"
    malformed = seal(key, EVENT_LABEL, "not-a-session-id", 1, None, b"{}")
    with pytest.raises(EnvelopeError) as err:
        unseal(key, EVENT_LABEL, malformed)
    assert err.value.reason == "bad_envelope"


# --- the service ------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_unsigned_forged_and_replayed_datagrams_never_act(
    settings_factory, run_recorder, wait_for, data_root
):
    async with run_recorder(settings_factory(status_interval_sec=0.2)) as svc:
        s = Tap(port=svc.port)
        forger = RecorderSender(port=svc.port, key=OTHER_KEY)
        await wait_for(lambda: svc.camera.latest is not None, what="first frame")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
            s.notify(TrialStart(run_stem=STEM))
            s.notify(Stage(stage="stage1"))
            await wait_for(lambda: svc.counters.events >= 2, what="the trial")
            for ev in (TrialStart(run_stem=STEM2), TrialEnd(run_stem=STEM), Stage(stage="evil")):
                raw.sendto(ev.model_dump_json().encode(), ("127.0.0.1", svc.port))  # unsigned
                forger.notify(ev)  # signed with another key
            for data in list(s.captured):  # replays of what the real sender sent
                raw.sendto(data, ("127.0.0.1", svc.port))
            await wait_for(lambda: svc.counters.events >= 10, what="the hostile datagrams")
            status = svc.status()
            s.notify(Measured(angles=[1, 2, 3, 4, 5, 6]))
            await asyncio.sleep(0.3)
            s.notify(TrialEnd(run_stem=STEM))
            await wait_for(lambda: svc.trial is None, what="the real trial_end")
            await svc.wait_closed()
    assert status["refused"] == {"unsigned": 3, "bad_mac": 3, "replayed": 2}
    meta = _meta(data_root, STEM)
    assert meta.status == "ok" and meta.events_refused == status["refused"]
    assert _rows(data_root, STEM) == ["trial_start", "stage", "measured", "trial_end"]
    assert {p.name for p in DataRoot(data_root).run_folders.iterdir()} == {STEM}


@pytest.mark.anyio
async def test_another_session_cannot_start_end_or_write_into_an_open_trial(
    settings_factory, run_recorder, wait_for, data_root
):
    settings = settings_factory(session_takeover_sec=1.0)
    async with run_recorder(settings) as svc:
        a, b = RecorderSender(port=svc.port), RecorderSender(port=svc.port)
        await wait_for(lambda: svc.camera.latest is not None, what="first frame")
        a.notify(TrialStart(run_stem=STEM))
        await wait_for(lambda: svc.trial is not None, what="trial A")
        b.notify(TrialStart(run_stem=STEM2))  # A is alive: refused
        b.trial = STEM  # B claims A's trial for its events
        b.notify(Stage(stage="not_yours"))
        b.notify(TrialEnd(run_stem=STEM))
        b.trial = None
        b.notify(Measured(angles=[0] * 6))  # outside any trial of B's: not written into A's
        reply = await b.request_frame_reply_async("b_side")  # answered as an orphan frame
        a.notify(Stage(stage="mine"))
        await wait_for(lambda: svc.counters.events >= 7, what="both senders")
        assert svc.trial is not None and svc.trial.run_stem == STEM
        refused = dict(svc.counters.refused)
        # A falls silent (its runtime crashed): after session_takeover_sec B's trial starts
        await asyncio.sleep(1.2)
        b.notify(TrialStart(run_stem=STEM2))
        await wait_for(lambda: svc.trial is not None and svc.trial.run_stem == STEM2, what="B")
        b.notify(TrialEnd(run_stem=STEM2))
        await wait_for(lambda: svc.trial is None, what="B's end")
        await svc.wait_closed()
    assert refused == {"foreign_trial_start": 1, "foreign_trial": 2}
    assert (
        reply.reason == "ok_orphan" and Path(reply.path).parent == DataRoot(data_root).orphan_frames
    )
    a_meta = _meta(data_root, STEM)
    assert a_meta.status == "truncated" and a_meta.frame_requests == 0
    assert a_meta.events_refused == refused
    assert _rows(data_root, STEM) == ["trial_start", "stage"]  # only A's own "mine"
    assert _meta(data_root, STEM2).status == "ok"


@pytest.mark.anyio
async def test_replies_are_signed_for_the_request_they_answer(
    settings_factory, run_recorder, wait_for
):
    async with run_recorder(settings_factory()) as svc:
        s = RecorderSender(port=svc.port)
        await wait_for(lambda: svc.camera.latest is not None, what="first frame")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
            rx.bind(("127.0.0.1", 0))
            rx.settimeout(10)
            req = FrameRequest(tag="probe", reply_port=rx.getsockname()[1])
            seq, data = s.seal_event(req.model_dump_json().encode(), None)
            rx.sendto(data, ("127.0.0.1", svc.port))
            data, _ = await asyncio.to_thread(rx.recvfrom, 65535)  # the loop serves the recorder
            reply = unseal(s._key, REPLY_LABEL, data)
    assert (reply.sid, reply.seq) == (s.session, seq)
    assert json.loads(reply.body)["reason"] == "ok_orphan"


@pytest.mark.anyio
async def test_orphan_frame_and_trial_quotas(settings_factory, run_recorder, wait_for, data_root):
    settings = settings_factory(orphan_frames_per_hour=3, trials_per_hour=2)
    with capture_logs() as logs:
        async with run_recorder(settings) as svc:
            s = RecorderSender(port=svc.port)
            await wait_for(lambda: svc.camera.latest is not None, what="first frame")
            reasons = [(await s.request_frame_async(f"o{i}"))[2] for i in range(6)]
            for stem in (STEM, STEM2, "run_0003_20260101_120200"):
                s.notify(TrialStart(run_stem=stem))
                s.notify(TrialEnd(run_stem=stem))
            await wait_for(lambda: svc.counters.events >= 12, what="three trials")
            await svc.wait_closed()
            status = svc.status()
    assert reasons == ["ok_orphan"] * 3 + ["quota_exceeded"] * 3
    assert len(list(DataRoot(data_root).orphan_frames.iterdir())) == 3
    assert {p.name for p in DataRoot(data_root).run_folders.iterdir()} == {STEM, STEM2}
    assert status["refused"] == {"trial_quota": 1}
    hits = [e for e in logs if e["event"] == "quota_reached"]
    assert [e["quota"] for e in hits] == ["orphan_frames", "trials"]  # once per window each


@pytest.mark.anyio
async def test_orphan_bytes_quota(settings_factory, run_recorder, wait_for, data_root):
    async with run_recorder(settings_factory(orphan_bytes_per_hour=1)) as svc:
        s = RecorderSender(port=svc.port)
        await wait_for(lambda: svc.camera.latest is not None, what="first frame")
        first = (await s.request_frame_async("a"))[2]
        second = (await s.request_frame_async("b"))[2]
    assert (first, second) == ("ok_orphan", "quota_exceeded")


@pytest.mark.anyio
async def test_an_event_naming_another_trial_than_itself_is_refused(
    settings_factory, run_recorder, wait_for, data_root
):
    async with run_recorder(settings_factory()) as svc:
        s = RecorderSender(port=svc.port)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
            body = TrialStart(run_stem=STEM).model_dump_json().encode()
            raw.sendto(s.seal_event(body, STEM2)[1], ("127.0.0.1", svc.port))
            await wait_for(lambda: svc.counters.events >= 1, what="the datagram")
    assert svc.counters.refused == {"foreign_trial": 1} and not DataRoot(data_root).runs.exists()
    assert parse_event(body).run_stem == STEM


def test_a_loose_key_file_stops_the_service_with_the_chmod(settings_factory, tmp_path):
    key = tmp_path / "loose.key"
    load_or_create_key(key)
    key.chmod(0o644)
    with pytest.raises(KeyFileError, match=f"chmod 600 {key}"):
        RecorderService(settings_factory(key_file=key))
    with pytest.raises(KeyFileError, match="chmod 600"):
        RecorderSender(key_file=key)


@pytest.mark.anyio
async def test_a_restarted_runtime_takes_over_the_trial_it_put_on_its_books(
    settings_factory, run_recorder, wait_for, data_root
):
    """The handshake, not the timer: a new session's trial_start that names the open trial as
    the one it reconciled (``supersedes``) closes it at once; naming any other trial does not."""
    settings = settings_factory(session_takeover_sec=600.0)  # the timer never fires here
    async with run_recorder(settings) as svc:
        a, b = RecorderSender(port=svc.port), RecorderSender(port=svc.port)
        await wait_for(lambda: svc.camera.latest is not None, what="first frame")
        a.notify(TrialStart(run_stem=STEM))
        await wait_for(lambda: svc.trial is not None, what="trial A")
        other = "run_0042_20260101_120000"
        b.notify(TrialStart(run_stem=STEM2, supersedes=other))  # not the open trial: refused
        await wait_for(lambda: svc.counters.refused.get("foreign_trial_start") == 1, what="refusal")
        b.notify(TrialStart(run_stem=STEM2, supersedes=STEM))
        await wait_for(lambda: svc.trial is not None and svc.trial.run_stem == STEM2, what="B")
        b.notify(TrialEnd(run_stem=STEM2))
        await wait_for(lambda: svc.trial is None, what="B's end")
        await svc.wait_closed()
    a_meta = _meta(data_root, STEM)
    assert a_meta.status == "truncated" and "put it on the books as interrupted" in (
        a_meta.status_reason
    )
    assert _meta(data_root, STEM2).status == "ok"


def test_replay_guard_refuses_a_known_sessions_datagram_from_before_its_start():
    """After a restart the runtime's session is re-created by its next fresh datagram; a
    captured datagram of the same session, sealed before the restart, with a number inside
    the window below, must not ride in on it."""
    sid = "0123456789abcdef"
    old = _sealed(sid, 5)  # trial 1's trial_start, captured
    time.sleep(0.001)
    g = ReplayGuard()  # the recorder restarted
    assert g.admit(_sealed(sid, 30))  # the runtime's next datagram re-creates the session
    assert not g.admit(old)  # 25 below the high-water mark: inside the window, never seen
    assert g.admit(_sealed(sid, 29))  # a fresh one overtaken in flight still counts


@pytest.mark.anyio
async def test_a_datagram_replayed_after_a_recorder_restart_never_acts(
    settings_factory, run_recorder, wait_for, data_root, udp_port
):
    """Trial 1's signed trial_start, captured, replayed after the recorder restarted and
    trial 2 started: refused as a replay; trial 2's recording keeps every frame."""
    settings = settings_factory(udp_port=udp_port)  # the restarted recorder on the same port
    async with run_recorder(settings) as svc:
        tap = Tap(port=svc.port)
        await wait_for(lambda: svc.camera.latest is not None, what="first frame")
        tap.notify(TrialStart(run_stem=STEM))
        tap.notify(TrialEnd(run_stem=STEM))
        await wait_for(lambda: _meta_exists(data_root, STEM), what="trial 1's meta")
        await svc.wait_closed()
    captured = list(tap.captured)
    async with run_recorder(settings) as svc:  # the same runtime session, a new recorder
        await wait_for(lambda: svc.camera.latest is not None, what="first frame")
        tap.notify(TrialStart(run_stem=STEM2))
        await wait_for(lambda: svc.trial is not None, what="trial 2")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
            for data in captured:
                raw.sendto(data, ("127.0.0.1", svc.port))
        await wait_for(lambda: svc.counters.refused.get("replayed", 0) == 2, what="refusals")
        assert svc.trial is not None and svc.trial.run_stem == STEM2
        await asyncio.sleep(0.5)
        tap.notify(TrialEnd(run_stem=STEM2))
        await wait_for(lambda: svc.trial is None, what="trial 2's end")
        await svc.wait_closed()
    meta = _meta(data_root, STEM2)
    assert meta.status == "ok" and meta.frames_written > 3, meta
    assert _meta(data_root, STEM).status == "ok"


def _meta_exists(root: Path, stem: str) -> bool:
    return (DataRoot(root).recording(stem).dir / META).exists()
