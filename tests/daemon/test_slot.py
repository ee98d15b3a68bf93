"""The client slot (docs/daemon.md, "Client slot") over real loopback sockets.

A connection waits in a bounded pool until it proves itself (with a token: a valid
hello; without: its first complete request); waiting connections never block the
one that proves itself; failed hellos are slowed per address without ever delaying a
correct one; a silent or dripping holder loses the slot after ``idle_timeout_s``.
Timing is asserted only as lower bounds or as the order of replies.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from mecharm.daemon.backends.sim import SimBackend
from mecharm.daemon.server import ArmServer, run_server
from mecharm.sim.arm import SimArm, SimArmConfig

from .conftest import FAST, LineClient

pytestmark = pytest.mark.anyio

TOKEN = "s3cret-token"


def line(obj: Any) -> bytes:
    return json.dumps(obj).encode() + b"\n"


@contextlib.asynccontextmanager
async def daemon(**kwargs: Any) -> AsyncIterator[ArmServer]:
    async with run_server(SimBackend(SimArm(SimArmConfig(**FAST))), "127.0.0.1", 0, **kwargs) as s:
        yield s


async def _until(cond: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def _closing_line(c: LineClient, timeout: float = 10.0) -> dict[str, Any]:
    """The one error line a dropped connection gets, then EOF."""
    msg = await c.recv(timeout)
    assert msg["ok"] is False and msg["id"] is None, msg
    assert await c.at_eof(timeout)
    await c.close()
    return msg


async def test_waiting_connections_never_block_the_one_with_the_token() -> None:
    async with daemon(token=TOKEN, auth_timeout_s=30) as srv:
        idle = [await LineClient.connect(srv.port) for _ in range(3)]
        wrong = await LineClient.connect(srv.port)
        assert (await wrong.call("hello", {"token": "nope"}))["error"]["code"] == "unauthorized"
        assert srv.client is None  # none of them holds the arm
        good = await LineClient.connect(srv.port)
        hello = await good.ok("hello", {"token": TOKEN})
        assert hello["authenticated"] is True
        assert srv.client is not None and srv.client.endswith(
            str(good.writer.get_extra_info("sockname")[1])
        )
        # the slot is taken: everyone still waiting is told so and closed
        for c in [*idle, wrong]:
            msg = await _closing_line(c)
            assert (
                msg["error"]["code"] == "busy"
                and "has taken the client slot" in (msg["error"]["message"])
            )
        assert len(await good.ok("get_angles")) == 6
        late = await LineClient.connect(srv.port)  # arrives while the slot is held: busy at once
        assert (await _closing_line(late))["error"]["code"] == "busy"
        await good.close()


async def test_a_silent_connection_is_dropped_after_auth_timeout() -> None:
    async with daemon(token=TOKEN, auth_timeout_s=0.3) as srv:
        c = await LineClient.connect(srv.port)
        t0 = time.monotonic()
        msg = await _closing_line(c)
        assert (
            time.monotonic() - t0 >= 0.15
        )  # not at once (t0 is taken after the server saw the connect)
        assert (
            msg["error"]["code"] == "unauthorized" and "auth_timeout_s" in msg["error"]["message"]
        )
        assert srv.stats.counters["auth_timeouts"] == 1
    async with daemon(auth_timeout_s=0.3) as srv:  # without a token: no complete request
        c = await LineClient.connect(srv.port)
        await c.send_raw(b'{"id": 1, "cmd": ')  # a request that never ends
        msg = await _closing_line(c)
        assert msg["error"]["code"] == "idle_timeout"
        assert "no complete request" in msg["error"]["message"]


async def test_without_token_the_first_request_takes_the_slot() -> None:
    async with daemon(auth_timeout_s=30) as srv:
        silent = await LineClient.connect(srv.port)
        junk = await LineClient.connect(srv.port)
        assert (await junk.call_raw(b"not json\n"))["error"]["code"] == "bad_json"
        assert srv.client is None  # neither a silent connection nor junk holds the arm
        runtime = await LineClient.connect(srv.port)
        assert (await runtime.ok("hello"))["authenticated"] is True
        assert srv.client is not None
        for c in (silent, junk):
            assert (await _closing_line(c))["error"]["code"] == "busy"
        await runtime.close()


async def test_the_waiting_pool_is_bounded_and_the_oldest_leaves_first() -> None:
    async with daemon(token=TOKEN, auth_timeout_s=30, max_connections=2) as srv:
        first = await LineClient.connect(srv.port)
        await _until(lambda: len(srv._waiting) == 1)
        second = await LineClient.connect(srv.port)
        await _until(lambda: len(srv._waiting) == 2)
        third = await LineClient.connect(srv.port)  # the pool is full: the oldest goes
        msg = await _closing_line(first)
        assert msg["error"]["code"] == "busy" and "max_connections" in msg["error"]["message"]
        await _until(lambda: len(srv._waiting) == 2)
        assert srv.stats.counters["evictions"] == 1
        assert (await third.ok("hello", {"token": TOKEN}))["authenticated"] is True
        assert (await _closing_line(second))["error"]["code"] == "busy"
        await third.close()


async def test_a_full_pool_sheds_the_connections_already_closed_before_evicting() -> None:
    """A connect flood's leftovers (closed by their peers, their end of file not yet read
    by the daemon) leave the pool without a word; the live waiting one stays."""
    async with daemon(token=TOKEN, auth_timeout_s=30, max_connections=3) as srv:
        live = await LineClient.connect(srv.port)
        await _until(lambda: len(srv._waiting) == 1)
        gone = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(2)]
        await _until(lambda: len(srv._waiting) == 3)
        for s in gone:  # closed with no await after it: the daemon has not read the ends yet
            s.close()
        srv._shed_closed_waiting()
        assert len(srv._waiting) == 1 and next(iter(srv._waiting)).peer.endswith(
            str(live.writer.get_extra_info("sockname")[1])
        )
        assert srv.stats.counters["closed_while_waiting"] == 2
        # the pool is not full now: a newcomer is admitted and nobody is evicted
        newcomer = await LineClient.connect(srv.port)
        await _until(lambda: len(srv._waiting) == 2)
        assert srv.stats.counters["evictions"] == 0
        assert (await live.ok("hello", {"token": TOKEN}))["authenticated"] is True
        assert (await _closing_line(newcomer))["error"]["code"] == "busy"
        await live.close()


async def test_failed_hellos_are_slowed_per_address_a_correct_one_never() -> None:
    async with daemon(
        token=TOKEN, auth_timeout_s=30, auth_backoff_s=0.2, auth_backoff_max_s=0.8
    ) as srv:
        bad = await LineClient.connect(srv.port)
        held: list[float] = []
        for expected in (0.2, 0.4, 0.8):
            t0 = time.monotonic()
            resp = await bad.call("hello", {"token": "guess"})
            held.append(time.monotonic() - t0)
            assert resp["error"]["code"] == "unauthorized"
            assert f"held back {expected:.2f} s" in resp["error"]["message"], resp
        assert all(h >= e for h, e in zip(held, (0.2, 0.4, 0.8), strict=True))
        # a fourth guess is held back 0.8 s; a correct hello from the same address meanwhile
        # is answered first, and takes the slot
        await bad.send_raw(line({"id": 99, "cmd": "hello", "args": {"token": "guess"}}))
        good = await LineClient.connect(srv.port)
        with capture_logs() as logs:
            hello = await good.ok("hello", {"token": TOKEN})
        assert hello["authenticated"] is True
        assert any(e["event"] == "slot_taken" for e in logs)
        msg = await _closing_line(bad)  # dropped while its reply was held back
        assert msg["error"]["code"] == "busy"
        await good.close()
        assert srv.stats.counters["auth_failures"] == 4


async def test_too_many_failures_on_one_connection_close_it() -> None:
    async with daemon(
        token=TOKEN, auth_timeout_s=30, auth_backoff_s=0.0, max_auth_failures=2
    ) as srv:
        c = await LineClient.connect(srv.port)
        for _ in range(2):
            assert (await c.call("hello", {"token": "x"}))["error"]["code"] == "unauthorized"
        assert await c.at_eof()
        await c.close()


async def test_a_silent_holder_loses_the_slot_after_idle_timeout() -> None:
    async with daemon(token=TOKEN, idle_timeout_s=0.4) as srv:
        stale = await LineClient.connect(srv.port)
        hello = await stale.ok("hello", {"token": TOKEN})
        assert hello["capabilities"]["idle_timeout_s"] == 0.4
        t0 = time.monotonic()
        other = await LineClient.connect(srv.port)
        assert (await _closing_line(other))["error"]["code"] == "busy"
        msg = await _closing_line(stale)
        assert time.monotonic() - t0 >= 0.2  # not at once (t0 is taken after the reply left)
        assert (
            msg["error"]["code"] == "idle_timeout" and "idle_timeout_s" in msg["error"]["message"]
        )
        nxt = await LineClient.connect(srv.port)
        assert (await nxt.ok("hello", {"token": TOKEN}))["authenticated"] is True
        await nxt.close()
        assert srv.stats.counters["idle_timeouts"] == 1


async def test_a_drip_without_newline_is_not_activity() -> None:
    async with daemon(idle_timeout_s=0.5) as srv:
        c = await LineClient.connect(srv.port)
        assert len(await c.ok("get_angles")) == 6
        t0 = time.monotonic()
        drips = 0
        with contextlib.suppress(ConnectionError):
            while srv.client is not None and drips < 200:
                await c.send_raw(b" ")
                drips += 1
                await asyncio.sleep(0.05)
        assert srv.client is None, "a dripping client kept the slot"
        assert time.monotonic() - t0 >= 0.25 and drips >= 3
        msg = await _closing_line(c)
        assert msg["error"]["code"] == "idle_timeout"


@pytest.mark.slow
async def test_ping_keeps_the_slot_and_never_reaches_the_arm() -> None:
    arm = SimArm(SimArmConfig(**FAST))
    async with run_server(SimBackend(arm), "127.0.0.1", 0, idle_timeout_s=0.6) as srv:
        c = await LineClient.connect(srv.port)
        reads = arm.counters["reads"]
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.8:  # three idle timeouts long
            assert await c.ok("ping") is None
            await asyncio.sleep(0.05)
        assert srv.client is not None
        assert arm.counters["reads"] == reads
        assert (await _closing_line(c))["error"]["code"] == "idle_timeout"


async def test_a_client_that_does_not_read_its_replies_loses_the_slot() -> None:
    async with daemon(idle_timeout_s=0.5) as srv:
        c = await LineClient.connect(srv.port)
        assert (await c.ok("hello"))["authenticated"] is True

        async def flood() -> None:
            req = line({"id": 1, "cmd": "hello"})
            for _ in range(20_000):
                c.writer.write(req * 10)
                await c.writer.drain()

        task = asyncio.ensure_future(flood())
        try:
            with capture_logs() as logs:
                await _until(lambda: srv.client is None, timeout=30)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await task
        assert srv.stats.counters["idle_timeouts"] == 1
        dropped = [e for e in logs if e["event"] == "client_dropped"]
        assert len(dropped) == 1 and "did not read its replies" in dropped[0]["reason"]
        c.writer.transport.abort()


async def test_duplicate_keys_and_absurd_ids_are_bad_requests(sim_arm: SimArm) -> None:
    async with run_server(SimBackend(sim_arm), "127.0.0.1", 0) as srv:
        c = await LineClient.connect(srv.port)
        await c.ok("send_angles", {"angles": [30.0, 0, 0, 0, 0, 0], "speed": 5})
        cases = [
            (b'{"id": 1, "cmd": "get_angles", "cmd": "stop"}\n', 1, "'cmd' twice"),
            (b'{"id": 2, "cmd": "stop", "args": {}, "args": {}}\n', 2, "'args' twice"),
            (
                b'{"id": 3, "cmd": "set_gripper_value", "args": {"value": 1, "value": 99, '
                b'"speed": 20}}\n',
                3,
                "'value' twice",
            ),
            (b'{"id": 4, "id": 5, "cmd": "stop"}\n', None, "'id' twice"),
            (b'{"id": ' + b"7" * 5000 + b', "cmd": "stop"}\n', None, "digits"),
            (b'{"id": ' + b"7" * 4000 + b', "cmd": "stop"}\n', None, "'id'"),
            (b'{"id": -' + b"7" * 30 + b', "cmd": "stop"}\n', None, "'id'"),
            (b'{"id": "' + b"x" * 5000 + b'", "cmd": "stop"}\n', None, "'id'"),
        ]
        for raw, rid, says in cases:
            resp = await c.call_raw(raw)
            assert resp["ok"] is False and resp["id"] == rid, (raw[:60], resp)
            assert resp["error"]["code"] == "bad_request", resp
            assert says in resp["error"]["message"], resp
            assert len(resp["error"]["message"]) < 400  # the absurd value is not echoed
        assert sim_arm.true_moving()  # no stop was run
        stats = await c.ok("stats")
        assert "internal" not in stats["errors"] and stats["errors"]["bad_request"] == len(cases)
        await c.close()
