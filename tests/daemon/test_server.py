"""The daemon over real loopback sockets with the sim backend."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest
from structlog.testing import capture_logs

from mecharm.common.envelope import Envelope
from mecharm.common.kinematics import JOINT_MAX, JOINT_MIN
from mecharm.daemon.backends.sim import SimBackend
from mecharm.daemon.protocol import MAX_LINE_BYTES
from mecharm.daemon.server import ArmServer, run_server
from mecharm.sim.arm import HOME, SimArm, SimArmConfig

from .conftest import FAST, LineClient

pytestmark = pytest.mark.anyio


class InstrumentedBackend(SimBackend):
    """SimBackend that records overlapping calls and can be slowed down or broken."""

    def __init__(self, arm: SimArm, delay: float = 0.0) -> None:
        super().__init__(arm)
        self.delay = delay
        self.active = 0
        self.max_active = 0
        self.calls: list[str] = []
        self.closed = False
        self.boom = False
        self._mon = threading.Lock()

    def blocks(self, call: str) -> bool:
        return True  # always through the arm thread: the overlap check is meaningful

    def _call(self, what: str, *args: Any) -> Any:
        with self._mon:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            if self.boom:
                raise RuntimeError("bug in the backend")
            if self.delay:
                time.sleep(self.delay)
            self.calls.append(what)
            return super()._call(what, *args)
        finally:
            with self._mon:
                self.active -= 1

    def close(self) -> None:
        self.closed = True
        super().close()


async def _until(cond: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


def line(obj: Any) -> bytes:
    return json.dumps(obj).encode() + b"\n"


async def test_every_command_on_the_sim_backend(client: LineClient, sim_arm: SimArm) -> None:
    hello = await client.ok("hello", {"client": "test"})
    assert hello["protocol_version"] == 1 and hello["backend"] == "sim"
    assert hello["joint_min"] == [-160, -75, -175, -155, -115, -180]
    assert hello["joint_max"] == [160, 120, 65, 155, 115, 180]
    assert "send_angles" in hello["commands"] and hello["authenticated"] is True
    assert (
        hello["capabilities"]["simulated"] is True
        and hello["capabilities"]["auth_required"] is False
    )

    angles = await client.ok("get_angles")
    assert (
        isinstance(angles, list) and len(angles) == 6 and all(isinstance(a, float) for a in angles)
    )

    assert await client.ok("set_fresh_mode", {"mode": 1}) is None
    assert await client.ok("get_fresh_mode") == 1
    target = [10.0, 80.0, -5.0, 0.0, 0.0, -30.0]
    sent = await client.ok(
        "send_angles", {"angles": target, "speed": 5}
    )  # 80° at speed 5: ~0.4 s real
    assert sent == {"angles": target, "speed": 5}
    assert await client.ok("is_moving") is True
    assert sim_arm.wait_idle(5)
    assert await client.ok("is_moving") is False
    got = await client.ok("get_angles")
    assert max(abs(a - b) for a, b in zip(got, target, strict=True)) < 2.7

    assert await client.ok("set_gripper_value", {"value": 20, "speed": 100}) is None
    assert sim_arm.wait_idle(5)
    assert await client.ok("get_gripper_value") == 20
    assert await client.ok("set_gripper_state", {"state": 0, "speed": 50}) is None
    assert sim_arm.wait_idle(5)
    assert await client.ok("get_gripper_value") == 100

    await client.ok("send_angles", {"angles": [60.0, 0, 0, 0, 0, 0], "speed": 10})
    assert await client.ok("stop") is None
    assert await client.ok("is_moving") is False
    assert await client.ok("release_all_servos") is None
    assert not sim_arm.powered
    assert await client.ok("power_on") is None
    assert sim_arm.powered
    assert await client.ok("set_fresh_mode", {"mode": 0}) is None
    assert await client.ok("get_fresh_mode") == 0

    stats = await client.ok("stats")
    assert stats["backend"] == "sim"
    assert stats["commands"]["get_angles"] == 2
    assert stats["latency"]["get_angles"]["n"] == 2
    assert stats["counters"]["requests"] == 19  # every request before this one


async def test_send_result_reports_what_reached_the_wire(client: LineClient) -> None:
    sent = await client.ok("send_angles", {"angles": [10.123456, 0, 0, 0, 0, -30], "speed": 20})
    assert sent["angles"][0] == 10.12  # pymycobot sends int(angle * 100)


async def test_silent_rejection_above_j1_90_7(sim_arm: SimArm) -> None:
    # an envelope as wide as the SDK's: the firmware's own silent rejection is under test here
    sdk_wide = Envelope(JOINT_MIN, JOINT_MAX)
    async with run_server(SimBackend(sim_arm), "127.0.0.1", 0, envelope=sdk_wide) as srv:
        client = await LineClient.connect(srv.port)
        try:
            await _silently_rejected(client, sim_arm)
        finally:
            await client.close()


async def _silently_rejected(client: LineClient, sim_arm: SimArm) -> None:
    before = sim_arm.true_angles()
    resp = await client.call(
        "send_angles", {"angles": [0.0, 95.0, 0.0, 0.0, 0.0, 0.0], "speed": 50}
    )
    assert resp["ok"] is True  # the daemon cannot know: the firmware acknowledges and ignores it
    await asyncio.sleep(0.05)
    assert await client.ok("is_moving") is False
    assert sim_arm.true_angles() == before
    got = await client.ok("get_angles")
    assert abs(got[1] - before[1]) < 0.5


async def test_busy_second_client_first_unaffected(server: ArmServer) -> None:
    a = await LineClient.connect(server.port)
    await a.ok("hello")
    b = await LineClient.connect(server.port)
    msg = await b.recv(timeout=30)  # answered while `a` still holds the daemon: not left hanging
    assert msg["ok"] is False and msg["id"] is None and msg["error"]["code"] == "busy"
    assert "one client at a time" in msg["error"]["message"]
    assert await b.at_eof()
    await b.close()
    assert len(await a.ok("get_angles")) == 6  # undisturbed
    await a.close()
    # the next client is served once the first is gone
    deadline = time.monotonic() + 3
    while True:
        c = await LineClient.connect(server.port)
        await c.send_raw(line({"id": 9, "cmd": "get_angles"}))
        resp = await c.recv()
        if resp["ok"]:
            break
        await c.close()
        assert time.monotonic() < deadline, "next client never served"
        await asyncio.sleep(0.02)
    await c.close()
    assert server.stats.counters["busy_rejections"] >= 1


BAD_LINES: list[tuple[bytes, str]] = [
    (b"garbage\n", "bad_json"),
    (b"\n", "bad_json"),
    (b"[1,2,3]\n", "bad_json"),
    (b'{"id": 1, "cmd": \n', "bad_json"),
    (b"\xff\xfe\xfd\n", "bad_json"),
    (b'{"cmd": "get_angles"}\n', "bad_request"),
    (b'{"id": "x", "cmd": "get_angles"}\n', "bad_request"),
    (b'{"id": 5, "cmd": "get_angles", "args": "no"}\n', "bad_request"),
    (b'{"id": 5, "command": "get_angles"}\n', "bad_request"),
    (line({"id": 5, "cmd": "dance"}), "unknown_command"),
    (line({"id": 5, "cmd": "get_coords"}), "unknown_command"),
    (line({"id": 5, "cmd": "get_angles", "args": {"fast": True}}), "bad_args"),
    (line({"id": 5, "cmd": "send_angles", "args": {"angles": [0] * 5, "speed": 20}}), "bad_args"),
    (line({"id": 5, "cmd": "send_angles", "args": {"angles": [0] * 6}}), "bad_args"),
    (line({"id": 5, "cmd": "send_angles", "args": {"angles": ["a"] * 6, "speed": 20}}), "bad_args"),
    (line({"id": 5, "cmd": "set_fresh_mode", "args": {"mode": 2}}), "bad_args"),
    (line({"id": 5, "cmd": "set_gripper_state", "args": {"state": 3, "speed": 20}}), "bad_args"),
    (
        line(
            {"id": 5, "cmd": "send_angles", "args": {"angles": [0, 130, 0, 0, 0, 0], "speed": 20}}
        ),
        "angle_out_of_range",
    ),
    (
        line(
            {"id": 5, "cmd": "send_angles", "args": {"angles": [170, 0, 0, 0, 0, 0], "speed": 20}}
        ),
        "angle_out_of_range",
    ),
    (
        line(
            {"id": 5, "cmd": "send_angles", "args": {"angles": [0, 0, 0, 0, -116, 0], "speed": 20}}
        ),
        "angle_out_of_range",
    ),
    (line({"id": 5, "cmd": "send_angles", "args": {"angles": HOME, "speed": 0}}), "bad_speed"),
    (line({"id": 5, "cmd": "send_angles", "args": {"angles": HOME, "speed": 250}}), "bad_speed"),
    (line({"id": 5, "cmd": "send_angles", "args": {"angles": HOME, "speed": 2.5}}), "bad_speed"),
    (
        line({"id": 5, "cmd": "set_gripper_value", "args": {"value": 120, "speed": 20}}),
        "bad_gripper_value",
    ),
    (
        line({"id": 5, "cmd": "set_gripper_value", "args": {"value": "open", "speed": 20}}),
        "bad_gripper_value",
    ),
]


async def test_100_bad_requests_each_get_the_right_code(
    client: LineClient, server: ArmServer
) -> None:
    for i in range(100):
        raw, code = BAD_LINES[i % len(BAD_LINES)]
        await client.send_raw(raw)
        resp = await client.recv()
        assert resp["ok"] is False, raw
        assert resp["error"]["code"] == code, (raw, resp)
        assert resp["error"]["message"]
        if b'"id": 5' in raw and code != "bad_request":
            assert resp["id"] == 5
        if i % 10 == 9:  # the connection stays usable
            assert len(await client.ok("get_angles")) == 6
    stats = await client.ok("stats")
    assert sum(stats["errors"].values()) == 100
    assert stats["counters"]["requests"] == 110


async def test_over_long_line_is_answered_and_discarded(client: LineClient) -> None:
    huge = (
        b'{"id": 1, "cmd": "hello", "args": {"client": "' + b"x" * (MAX_LINE_BYTES * 3) + b'"}}\n'
    )
    await client.send_raw(huge + line({"id": 2, "cmd": "get_angles"}))
    first = await client.recv()
    assert first["error"]["code"] == "line_too_long" and first["id"] is None
    second = await client.recv()
    assert second["id"] == 2 and second["ok"] is True


async def test_pipelined_concurrent_requests_are_serialized() -> None:
    arm = SimArm(SimArmConfig(**FAST))
    backend = InstrumentedBackend(arm, delay=0.001)
    async with run_server(backend, "127.0.0.1", 0) as srv:
        c = await LineClient.connect(srv.port)
        cmds = [
            ("get_angles", {}),
            ("is_moving", {}),
            ("get_gripper_value", {}),
            ("send_angles", {"angles": [5.0, 0, 0, 0, 0, 0], "speed": 50}),
            ("get_fresh_mode", {}),
        ]

        async def writer(k: int) -> None:
            for j in range(40):
                rid = k * 1000 + j
                cmd, args = cmds[(k + j) % len(cmds)]
                c.writer.write(line({"id": rid, "cmd": cmd, "args": args}))
                if j % 7 == 0:
                    await asyncio.sleep(0)
            await c.writer.drain()

        await asyncio.gather(*(writer(k) for k in range(5)))
        responses = [await c.recv() for _ in range(200)]
        await c.close()
    assert all(r["ok"] for r in responses)
    assert sorted(r["id"] for r in responses) == sorted(
        k * 1000 + j for k in range(5) for j in range(40)
    )
    # each writer's requests are answered in the order they were sent
    for k in range(5):
        mine = [r["id"] for r in responses if r["id"] // 1000 == k]
        assert mine == sorted(mine)
    assert backend.max_active == 1  # never two calls on the arm at once
    assert len(backend.calls) == 200


async def test_backend_failures_become_error_responses(client: LineClient, sim_arm: SimArm) -> None:
    sim_arm.faults.fail_reads(1)
    resp = await client.call("get_angles")
    assert resp["ok"] is False and resp["error"]["code"] == "arm_no_reply"
    assert "-1" in resp["error"]["message"]
    sim_arm.faults.fail_reads(1, kind="[]")
    resp = await client.call("get_angles")
    assert resp["error"]["code"] == "arm_no_reply" and "[]" in resp["error"]["message"]
    sim_arm.faults.fail_reads(1)
    assert (await client.call("get_gripper_value"))["error"]["code"] == "arm_no_reply"
    sim_arm.faults.disconnect()
    for cmd, args in [
        ("get_angles", {}),
        ("send_angles", {"angles": HOME, "speed": 20}),
        ("stop", {}),
    ]:
        resp = await client.call(cmd, args)
        assert resp["error"]["code"] == "serial_error", resp
    sim_arm.faults.reconnect()
    assert len(await client.ok("get_angles")) == 6


async def test_internal_error_is_reported_and_the_daemon_keeps_serving() -> None:
    arm = SimArm(SimArmConfig(**FAST))
    backend = InstrumentedBackend(arm)
    async with run_server(backend, "127.0.0.1", 0) as srv:
        c = await LineClient.connect(srv.port)
        backend.boom = True
        with capture_logs() as logs:
            resp = await c.call("get_angles")
        assert resp["error"]["code"] == "internal" and "RuntimeError" in resp["error"]["message"]
        assert any(e["event"] == "internal_error" for e in logs)
        backend.boom = False
        assert len(await c.ok("get_angles")) == 6
        await c.close()


async def test_auth_on() -> None:
    arm = SimArm(SimArmConfig(**FAST))
    # a long auth deadline: the held-back failure replies (0.25 s, 0.5 s) never race it
    async with run_server(
        SimBackend(arm), "127.0.0.1", 0, token="s3cret", auth_timeout_s=30
    ) as srv:
        c = await LineClient.connect(srv.port)
        resp = await c.call("get_angles")
        assert resp["error"]["code"] == "unauthorized"
        resp = await c.call("send_angles", {"angles": [30.0, 0, 0, 0, 0, 0], "speed": 100})
        assert resp["error"]["code"] == "unauthorized"
        assert not arm.true_moving()  # refused before reaching the arm
        assert (await c.call("hello"))["error"]["code"] == "unauthorized"
        resp = await c.call("hello", {"token": "wrong"})
        assert resp["error"]["code"] == "unauthorized" and "wrong token" in resp["error"]["message"]
        hello = await c.ok("hello", {"token": "s3cret"})
        assert hello["authenticated"] is True and hello["capabilities"]["auth_required"] is True
        assert len(await c.ok("get_angles")) == 6
        await c.close()
        # authentication is per connection
        await _until(lambda: srv.client is None)
        c2 = await LineClient.connect(srv.port)
        assert (await c2.call("get_angles"))["error"]["code"] == "unauthorized"
        await c2.close()


async def test_auth_off_needs_no_hello(client: LineClient) -> None:
    assert len(await client.ok("get_angles")) == 6
    assert (await client.ok("hello", {"token": "anything"}))["authenticated"] is True


async def test_auth_failures_and_timeout_drop_the_client() -> None:
    arm = SimArm(SimArmConfig(**FAST))
    async with run_server(
        SimBackend(arm), "127.0.0.1", 0, token="t", max_auth_failures=3, auth_backoff_s=0.0
    ) as srv:
        c = await LineClient.connect(srv.port)
        for _ in range(3):
            assert (await c.call("hello", {"token": "x"}))["error"]["code"] == "unauthorized"
        assert await c.at_eof()
        await c.close()
    async with run_server(SimBackend(arm), "127.0.0.1", 0, token="t", auth_timeout_s=0.3) as srv:
        # a silent unauthenticated client cannot hold the arm: dropped after auth_timeout_s
        idle = await LineClient.connect(srv.port)
        msg = await idle.recv(timeout=3)
        assert msg["error"]["code"] == "unauthorized" and "within" in msg["error"]["message"]
        assert await idle.at_eof()
        await idle.close()
        await _until(lambda: srv.client is None)
        good = await LineClient.connect(srv.port)
        assert (await good.ok("hello", {"token": "t"}))["authenticated"] is True
        await good.close()


async def test_idle_timeout() -> None:
    arm = SimArm(SimArmConfig(**FAST))
    async with run_server(SimBackend(arm), "127.0.0.1", 0, idle_timeout_s=0.2) as srv:
        c = await LineClient.connect(srv.port)
        assert len(await c.ok("get_angles")) == 6
        msg = await c.recv(timeout=3)
        assert (
            msg["ok"] is False
            and msg["error"]["code"] == "idle_timeout"
            and "idle" in msg["error"]["message"]
        )
        assert await c.at_eof()
        await c.close()


async def test_shutdown_finishes_the_command_in_flight() -> None:
    arm = SimArm(SimArmConfig(**FAST))
    backend = InstrumentedBackend(arm, delay=0.4)
    srv = ArmServer(backend, "127.0.0.1", 0)
    await srv.start()
    port = srv.port
    c = await LineClient.connect(port)
    await c.send_raw(line({"id": 1, "cmd": "get_angles"}))
    await _until(lambda: backend.active == 1)  # the call is now on the arm thread
    with capture_logs() as logs:
        stop = asyncio.ensure_future(srv.stop("test"))
        resp = await c.recv(timeout=3)
        await stop
    assert resp["id"] == 1 and resp["ok"] is True and len(resp["result"]) == 6
    assert await c.at_eof()
    assert backend.closed
    events = [e["event"] for e in logs]
    assert "daemon_stopping" in events and "daemon_stopped" in events
    assert any(e.get("reason") == "test" for e in logs if e["event"] == "daemon_stopping")
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)
    await c.close()


async def test_shutdown_with_an_idle_client_is_quick() -> None:
    arm = SimArm(SimArmConfig(**FAST))
    backend = InstrumentedBackend(arm)
    # a grace period no test could sit out: stop() must not wait for it, nothing is in flight
    async with run_server(backend, "127.0.0.1", 0, shutdown_grace_s=3600) as srv:
        c = await LineClient.connect(srv.port)
        assert len(await c.ok("get_angles")) == 6
        with capture_logs() as logs:
            await srv.stop("test")
        assert "daemon_shutdown_grace_expired" not in [e["event"] for e in logs]
        assert await c.at_eof()
        assert backend.closed
        await c.close()
        await srv.stop("again")  # idempotent


async def test_shutdown_grace_expires_for_a_hung_call() -> None:
    arm = SimArm(SimArmConfig(**FAST))
    backend = InstrumentedBackend(arm, delay=1.0)
    srv = ArmServer(backend, "127.0.0.1", 0, shutdown_grace_s=0.1)
    await srv.start()
    c = await LineClient.connect(srv.port)
    await c.send_raw(line({"id": 1, "cmd": "get_angles"}))
    await _until(lambda: backend.active == 1)
    with capture_logs() as logs:
        await srv.stop("test")
    assert any(e["event"] == "daemon_shutdown_grace_expired" for e in logs)
    assert backend.closed
    await c.close()


async def test_start_fails_cleanly_when_the_port_is_taken(server: ArmServer) -> None:
    backend = InstrumentedBackend(SimArm(SimArmConfig(**FAST)))
    other = ArmServer(backend, "127.0.0.1", server.port)
    with pytest.raises(OSError):
        await other.start()
    assert backend.closed


async def test_client_vanishing_mid_command_does_not_hurt_the_next_one() -> None:
    arm = SimArm(SimArmConfig(**FAST))
    backend = InstrumentedBackend(arm, delay=0.2)
    async with run_server(backend, "127.0.0.1", 0) as srv:
        a = await LineClient.connect(srv.port)
        await a.send_raw(line({"id": 1, "cmd": "get_angles"}))
        await _until(lambda: backend.active == 1)
        a.writer.transport.abort()  # RST while the arm is busy
        deadline = time.monotonic() + 3
        while True:
            b = await LineClient.connect(srv.port)
            await b.send_raw(line({"id": 9, "cmd": "get_angles"}))
            resp = await b.recv()
            if resp["ok"]:
                break
            assert resp["error"]["code"] == "busy"
            await b.close()
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        await b.close()
    assert backend.max_active == 1


def _fuzz_lines(n: int, seed: int) -> list[bytes]:
    import random

    rng = random.Random(seed)
    valid = [
        {"id": 1, "cmd": "get_angles", "args": {}},
        {"id": 2, "cmd": "send_angles", "args": {"angles": [0, 0, 0, 0, 0, -30], "speed": 20}},
        {"id": 3, "cmd": "set_gripper_value", "args": {"value": 50, "speed": 50}},
        {"id": 4, "cmd": "set_fresh_mode", "args": {"mode": 1}},
    ]
    junk: list[Any] = [
        None,
        True,
        -1,
        2**70,
        1.5,
        "",
        "x" * 50,
        [],
        {},
        [1, "a"],
        {"a": {"b": [None]}},
        float("inf"),
    ]
    out = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.25:
            raw = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 80))).replace(b"\n", b"")
        else:
            msg = json.loads(json.dumps(rng.choice(valid)))
            target = msg if rng.random() < 0.4 else msg["args"]
            key = rng.choice([*target.keys(), "extra"]) if target else "extra"
            if rng.random() < 0.2:
                target.pop(key, None)
            else:
                target[key] = rng.choice(junk)
            raw = json.dumps(msg).encode()
            if rng.random() < 0.1:
                raw = raw[: rng.randrange(1, len(raw))]
        out.append(raw + b"\n")
    return out


async def test_fuzzed_lines_each_get_one_answer_and_the_daemon_keeps_serving(
    client: LineClient,
) -> None:
    lines = _fuzz_lines(300, seed=1)
    await client.send_raw(b"".join(lines))
    codes = set()
    for _ in lines:
        resp = await client.recv()
        assert set(resp) in ({"id", "ok", "result"}, {"id", "ok", "error"})
        if not resp["ok"]:
            assert resp["error"]["code"] != "internal", resp
            codes.add(resp["error"]["code"])
    assert {"bad_json", "bad_request", "bad_args"} <= codes
    assert len(await client.ok("get_angles")) == 6
