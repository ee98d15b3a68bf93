"""Ping / pong (docs/recorder.md, "Ping: proving the data root"): the real service on real
UDP sockets. It answers an authenticated ping with where it writes; a spoofed, wrongly
signed or replayed ping gets nothing, is counted, and the service keeps serving; pongs are
bounded in size and rate."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from mecharm.recorder.envelope import EVENT_LABEL, REPLY_LABEL, new_session_id, seal, unseal
from mecharm.recorder.events import (
    DROP_PING_RATE,
    MAX_PONG_BYTES,
    PINGS_PER_SEC,
    EventError,
    Ping,
    TrialEnd,
    TrialStart,
    parse_event,
    parse_pong,
    root_identity,
)
from mecharm.recorder.sender import PING_REFUSED, RecorderSender

OTHER_KEY = b"an entirely different key, 32+ chars"
STEM = "run_0001_20260101_120000"


def _listener() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    return sock


def _drain(sock: socket.socket) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(sock.recv(65535))
        except BlockingIOError:
            return out


@pytest.mark.anyio
async def test_the_recorder_answers_a_ping_with_its_root(
    settings_factory: Any, run_recorder: Any, wait_for: Any, data_root: Path
) -> None:
    async with run_recorder(settings_factory()) as svc:
        sender = RecorderSender(port=svc.port)
        await wait_for(lambda: svc.camera.latest is not None, what="the first side frame")
        r = await sender.ping_async(5.0)
        assert r.ok and r.reason == "ok" and r.pong is not None, r
        pong = r.pong
        assert pong.root == str(data_root.resolve())
        assert pong.identity == root_identity(data_root) is not None
        assert (pong.root_ok, pong.root_problem) == (True, "")
        assert (pong.udp_port, pong.camera, pong.recording, pong.trial) == (
            svc.port,
            "open",
            False,
            None,
        )
        assert pong.frame_age_ms is not None and pong.frame_age_ms >= 0
        # with a trial open, the pong says it is recording which trial
        sender.notify(TrialStart(run_stem=STEM))
        await wait_for(lambda: svc.trial is not None, what="the trial to open")
        r = await sender.ping_async(5.0)
        assert r.pong is not None and (r.pong.recording, r.pong.trial) == (True, STEM)
        sender.notify(TrialEnd(run_stem=STEM))
        await wait_for(lambda: svc.trial is None, what="the trial to close")
        assert svc.pings == 2 and svc.status()["pings"] == 2
        # the ping is no trial event: nothing of it is in the trial's states.csv
        assert await svc.wait_closed()
        sender.close()


@pytest.mark.anyio
async def test_a_spoofed_or_replayed_ping_gets_no_pong(
    settings_factory: Any, run_recorder: Any, wait_for: Any
) -> None:
    async with run_recorder(settings_factory()) as svc:
        target = ("127.0.0.1", svc.port)
        body = Ping(nonce="0" * 16).model_dump_json().encode()
        with _listener() as sock:
            # plain JSON (no envelope) and a ping signed with another key
            sock.sendto(body, target)
            sock.sendto(seal(OTHER_KEY, EVENT_LABEL, new_session_id(), 1, None, body), target)
            # a real ping, sent twice: the second is a replay
            legit = RecorderSender(port=svc.port)
            _seq, _nonce, data = legit._ping_datagram()
            sock.sendto(data, target)
            await wait_for(lambda: svc.pings == 1, what="the genuine ping's pong")
            sock.sendto(data, target)
            refused = svc.counters.refused
            await wait_for(
                lambda: (
                    (refused.get("unsigned"), refused.get("bad_mac"), refused.get("replayed"))
                    == (1, 1, 1)
                ),
                what="the three bad pings counted",
            )
            replies = _drain(sock)
        assert len(replies) == 1 and svc.pings == 1  # only the genuine one was answered
        reply = unseal(legit._key, REPLY_LABEL, replies[0])
        assert parse_pong(reply.body).root
        # and the recorder keeps serving: a fresh ping is answered
        r = await legit.ping_async(5.0)
        assert r.ok and svc.pings == 2
        legit.close()


@pytest.mark.anyio
async def test_pongs_are_bounded_in_size_and_rate(
    settings_factory: Any, run_recorder: Any, wait_for: Any, tmp_path: Path
) -> None:
    # a data root whose path is far longer than a pong may carry
    deep = tmp_path.joinpath(*(["d" * 60] * 12))
    deep.mkdir(parents=True)
    assert len(str(deep)) > 700
    async with run_recorder(settings_factory(data_root=deep)) as svc:
        sender = RecorderSender(port=svc.port)
        n = 60
        with _listener() as sock:
            t0 = time.monotonic()
            for _ in range(n):
                sock.sendto(sender._ping_datagram()[2], ("127.0.0.1", svc.port))
            await wait_for(
                lambda: svc.pings + svc.counters.refused.get(DROP_PING_RATE, 0) == n,
                what="every ping answered or refused",
            )
            elapsed = time.monotonic() - t0
            replies: list[bytes] = []
            await wait_for(
                lambda: replies.extend(_drain(sock)) or len(replies) >= svc.pings,
                what="every pong sent to arrive",
            )
        # at most one second's burst plus the refill during the flood
        assert svc.pings <= PINGS_PER_SEC + PINGS_PER_SEC * elapsed + 1
        assert svc.counters.refused[DROP_PING_RATE] == n - svc.pings > 0
        assert len(replies) == svc.pings > 0
        for data in replies:
            assert len(data) <= MAX_PONG_BYTES
            pong = parse_pong(unseal(sender._key, REPLY_LABEL, data).body)
            assert pong.root.endswith("...") and len(pong.root) < len(str(deep))
            assert pong.identity == root_identity(deep)  # the identity still decides
        sender.close()


@pytest.mark.anyio
async def test_a_ping_to_a_port_nobody_listens_on_is_refused_not_timed_out(
    udp_port: int,
) -> None:
    sender = RecorderSender(port=udp_port)
    r = await sender.ping_async(0.5)
    assert (r.reason, r.pong) == (PING_REFUSED, None) and r.tries >= 1
    r = sender.ping(0.3)
    assert (r.reason, r.pong) == (PING_REFUSED, None)


def test_the_ping_is_strict_on_the_wire() -> None:
    ok = parse_event(json.dumps({"type": "ping", "nonce": "ab" * 8, "ts": 1.0e9}))
    assert isinstance(ok, Ping)
    for bad in ("short", "Z" * 16, "ab" * 40):
        with pytest.raises(EventError, match="nonce"):
            parse_event(json.dumps({"type": "ping", "nonce": bad}))
    with pytest.raises(EventError, match="malformed pong"):
        parse_pong(b'{"type": "pong", "nonce": "x"}')


def test_root_identity_follows_symlinks_and_refuses_files(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    os.symlink(real, link)
    assert root_identity(link) == root_identity(real) is not None
    assert root_identity(tmp_path / "real" / ".." / "real") == root_identity(real)
    (tmp_path / "f").write_text("x")
    assert root_identity(tmp_path / "f") is None
    assert root_identity(tmp_path / "missing") is None
