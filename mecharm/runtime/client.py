"""Asyncio client of the arm daemon: one connection, one request in flight, typed errors.

Why a flat error set (anyio style): the stage machine must react differently to a
daemon held by someone else (``DaemonBusy``), a dropped link (``ConnectionLost``),
a request that got no answer in time (``DaemonTimeout``), a request the daemon
refused before it reached the arm (``ArmRefused``) and an arm that did not answer
(``ArmNoReply``). The client never reconnects by itself: a lost daemon in the
middle of a motion must abort the trial, so ``connect()`` is explicit.

The daemon drops a client that sends no request for its ``idle_timeout_s``
(docs/daemon.md, "Client slot"); ``keepalive()`` pings it while nothing else is
sent, so the operator's client never loses the arm by idling.

One concern: the daemon's client, its typed errors and its keepalive; they share one
connection's state.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio

from mecharm.common.envelope import Envelope
from mecharm.common.logging import get_logger
from mecharm.daemon.protocol import (
    MAX_LINE_BYTES,
    ErrorCode,
    ErrorResponse,
    ProtocolError,
    Request,
    decode_response,
    encode,
)

__all__ = [
    "ArmNoReply",
    "ArmRefused",
    "ClientClosed",
    "ConnectionLost",
    "DaemonBusy",
    "DaemonClient",
    "DaemonError",
    "DaemonTimeout",
    "OutsideEnvelope",
    "TimeScaleMismatch",
    "Unauthorized",
    "connect_fix",
]

log = get_logger("mecharm.runtime.client")

#: how long connect() waits between tries while the daemon answers busy
_BUSY_RETRY_S = 0.25
#: keepalive interval when the daemon announces an idle timeout: a third of it, so two
#: pings may be late (a loaded machine) before the daemon would drop us
_KEEPALIVE_FRACTION = 1 / 3
_KEEPALIVE_MIN_S = 0.05
#: a gripper command holds the arm's SDK call for seconds before it returns (the real rig's
#: open: about 4 s, docs/simulation-timing.md): its reply may take this long
GRIPPER_TIMEOUT_S = 10.0


class DaemonError(Exception):
    """Base of every error the daemon client raises."""


class DaemonBusy(DaemonError):
    """Another control client holds the daemon (it answered ``busy`` and closed)."""


class ConnectionLost(DaemonError):
    """The connection broke from outside (EOF, reset, refused, garbled or mismatched reply)."""


class ClientClosed(DaemonError):
    """The client was closed (by us) or never connected."""


class DaemonTimeout(DaemonError):
    """No reply within the request timeout; the connection is closed (its state is unknown)."""


class ArmRefused(DaemonError):
    """The daemon rejected the request before it reached the arm (validation, unknown command)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Unauthorized(ArmRefused):
    """The daemon requires a token and did not get a valid one."""


class OutsideEnvelope(ArmRefused):
    """The daemon refused a pose outside its safety envelope; the arm did not move."""


class TimeScaleMismatch(DaemonError):
    """The daemon's time scale is not the one this session expects (docs/setup.md, "Time
    scale"); the connection is closed before any motion."""


class ArmNoReply(DaemonError):
    """The arm did not answer (SDK -1 / empty reading) or the serial line failed."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def connect_fix(exc: DaemonError, *, token_given: bool, token_file: object = None) -> str:
    """What the operator does when ``connect()`` failed with ``exc``: the one home of these
    texts, for ``mecharm-runtime``'s start and ``mecharm doctor`` (docs/doctor.md)."""
    if isinstance(exc, Unauthorized):
        if not token_given:
            return (
                "the daemon requires a token: pass --token-file FILE (a copy of the daemon's "
                "token file)"
            )
        return (
            f"--token-file {token_file} does not hold the daemon's token: copy the daemon's "
            "token file (the one its --token-file names)"
        )
    if isinstance(exc, DaemonBusy):
        return (
            "another client holds the arm (a runtime running?): stop it, or wait for the "
            "daemon's idle timeout to free the slot"
        )
    if isinstance(exc, TimeScaleMismatch):
        return str(exc).partition("; ")[2]
    return (
        "start mecharm-daemon there (on the Pi), or fix --daemon-host/--daemon-port (and the "
        "network between them)"
    )


_NO_REPLY_CODES = {
    ErrorCode.ARM_NO_REPLY.value,
    ErrorCode.SERIAL_ERROR.value,
    ErrorCode.ARM_UNAVAILABLE.value,
}


def _error_for(resp: ErrorResponse) -> DaemonError:
    code, message = resp.error.code, resp.error.message
    if code == ErrorCode.BUSY.value:
        return DaemonBusy(f"daemon busy: {message}")
    if code == ErrorCode.UNAUTHORIZED.value:
        return Unauthorized(code, message)
    if code == ErrorCode.OUTSIDE_ENVELOPE.value:
        return OutsideEnvelope(code, message)
    if code in _NO_REPLY_CODES:
        return ArmNoReply(code, message)
    if code == ErrorCode.SHUTTING_DOWN.value:
        return ConnectionLost(f"daemon shutting down: {message}")
    if code == ErrorCode.IDLE_TIMEOUT.value:
        return ConnectionLost(f"daemon dropped the connection: {message}")
    return ArmRefused(code, message)


class DaemonClient:
    """One serialized control connection to ``mecharm-daemon``.

    Requests are sent one at a time (an internal lock), each answer must carry the
    request's id, and each request has a timeout. After a timeout or a protocol
    violation the connection is closed: its state can no longer be trusted. A request
    cancelled in flight (a stage left, a forced stop) keeps the connection: its late
    reply is read and dropped before the next request, so ``stop`` still goes through.

    ``busy_wait_s``: how long ``connect()`` keeps trying while another client holds the
    daemon (a stale one is dropped after the daemon's idle timeout); 0 = fail at once.
    ``keepalive_s``: the interval of ``keepalive()``'s pings; None = a third of the idle
    timeout the daemon announces in its hello (no pings when it has none).
    ``time_scale``: the scale this session expects the daemon to announce; None = whatever
    the first hello says. Either way a later hello (a reconnect to a restarted daemon) must
    announce the same, or connect() raises TimeScaleMismatch: the session's waits are scaled
    by it (docs/setup.md, "Time scale").
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 5555,
        *,
        token: str | None = None,
        request_timeout: float = 3.0,
        connect_timeout: float = 3.0,
        client_name: str = "mecharm-runtime",
        busy_wait_s: float = 0.0,
        keepalive_s: float | None = None,
        time_scale: float | None = None,
    ) -> None:
        self.host, self.port = host, port
        self.token = token
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self.client_name = client_name
        self.busy_wait_s = busy_wait_s
        self.keepalive_s = keepalive_s
        self.expected_time_scale = time_scale
        self.pings = 0
        self._last_reply = 0.0  # monotonic time the daemon last answered us
        self.hello: dict[str, Any] | None = None
        self.hello_seen = False  # a hello was answered: its time scale is the session's
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()
        self._next_id = 1
        self._broken: str | None = None
        self._stale: list[int] = []  # ids of cancelled requests whose replies are still due

    # ------------------------------------------------------------ life cycle

    @property
    def is_connected(self) -> bool:
        return self._writer is not None and self._broken is None

    async def connect(self) -> dict[str, Any]:
        """Open the connection and say hello; while the daemon answers busy, try again for
        up to ``busy_wait_s``. Raises DaemonBusy, ConnectionLost, DaemonTimeout, Unauthorized."""
        deadline = time.monotonic() + self.busy_wait_s
        tries = 0
        while True:
            tries += 1
            try:
                return await self._connect_once()
            except DaemonBusy as exc:
                left = deadline - time.monotonic()
                if left <= 0:
                    if tries > 1:
                        raise DaemonBusy(f"{exc} (still busy after {tries} tries)") from None
                    raise
                if tries == 1:
                    log.warning(
                        "daemon_busy_waiting",
                        daemon=f"{self.host}:{self.port}",
                        wait_s=self.busy_wait_s,
                        reason=str(exc),
                        operator=True,  # the session seems to hang: say why
                    )
                await asyncio.sleep(min(_BUSY_RETRY_S, left))

    async def _connect_once(self) -> dict[str, Any]:
        if self._writer is not None:
            await self.aclose()
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, limit=MAX_LINE_BYTES * 2),
                self.connect_timeout,
            )
        except TimeoutError:
            raise DaemonTimeout(
                f"connect to {self.host}:{self.port} timed out after {self.connect_timeout}s"
            ) from None
        except OSError as exc:
            raise ConnectionLost(
                f"cannot connect to daemon {self.host}:{self.port}: {exc.strerror or exc}"
            ) from None
        self._broken = None
        self._stale = []
        args: dict[str, Any] = {"client": self.client_name}
        if self.token is not None:
            args["token"] = self.token
        try:
            self.hello = await self.request("hello", args, timeout=self.connect_timeout)
            self._check_time_scale()
        except DaemonError:
            await self.aclose()
            raise
        return self.hello

    @property
    def time_scale(self) -> float:
        """The time scale the daemon announced in its last hello: its ``time_scale``, else
        (older daemons) ``capabilities.time_scale``, else 1.0 (real time)."""
        hello = self.hello or {}
        value = hello.get("time_scale", (hello.get("capabilities") or {}).get("time_scale", 1.0))
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e6:
            raise ConnectionLost(
                f"daemon {self.host}:{self.port} announced an invalid time scale {value!r}"
            )
        return float(value)

    def _check_time_scale(self) -> None:
        got, want = self.time_scale, self.expected_time_scale
        if want is not None and abs(got - want) > 1e-9 * max(got, want):
            raise TimeScaleMismatch(
                f"daemon {self.host}:{self.port} runs at time scale {got:g}, this session at "
                f"{want:g}; "
                + (
                    "restart the runtime to take the daemon's"
                    if self.hello_seen
                    else "drop time_scale from the runtime's settings (it takes the daemon's) "
                    f"or start the daemon with --time-scale {want:g}"
                )
            )
        self.expected_time_scale, self.hello_seen = got, True

    def envelope(self) -> Envelope | None:
        """The safety envelope the daemon announced in its last hello; None when it announced
        none (a daemon older than the envelope) or no hello was made. Raises ValueError
        naming what is wrong when the announced one is malformed."""
        data = (self.hello or {}).get("envelope")
        return None if data is None else Envelope.from_wire(data)

    async def aclose(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await writer.wait_closed()

    async def __aenter__(self) -> DaemonClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------ requests

    async def request(
        self, cmd: str, args: dict[str, Any] | None = None, *, timeout: float | None = None
    ) -> Any:
        """Send one request and return its ``result``.

        Raises ClientClosed, ConnectionLost, DaemonTimeout, DaemonBusy, ArmRefused,
        Unauthorized, ArmNoReply.
        """
        async with self._lock:
            if self._writer is None or self._reader is None:
                raise ClientClosed("daemon client is not connected")
            if self._broken is not None:
                raise ConnectionLost(self._broken)
            rid = self._next_id
            self._next_id += 1
            line = encode(Request(id=rid, cmd=cmd, args=args or {}))
            limit = self.request_timeout if timeout is None else timeout
            if self._stale:
                await self._skip_stale(limit)
            try:
                self._writer.write(line)
                # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancellation that
                # races with the reply, so a forced stop would wait for the whole move
                async with asyncio.timeout(limit):
                    raw = await self._exchange(cmd)
                self._last_reply = time.monotonic()
            except TimeoutError:
                await self._break(f"no reply to {cmd} (id {rid}) within {limit:.2f}s")
                raise DaemonTimeout(f"no reply to {cmd} within {limit:.2f}s") from None
            except asyncio.CancelledError:
                # the request was written; its reply is still coming: skip it before the next one
                self._stale.append(rid)
                raise
            except ConnectionLost:
                raise
            except (OSError, ConnectionError) as exc:
                await self._break(f"connection to daemon lost during {cmd}: {exc}")
                raise ConnectionLost(f"connection to daemon lost during {cmd}: {exc}") from None
        return self._interpret(rid, cmd, raw)

    async def _skip_stale(self, limit: float) -> None:
        """Read and drop the replies of cancelled requests (in order, ids checked)."""
        while self._stale:
            stale = self._stale[0]
            try:
                async with asyncio.timeout(limit):
                    raw = await self._exchange(f"cancelled request {stale}")
                resp = decode_response(raw)
            except TimeoutError:
                await self._break(f"no reply to cancelled request {stale} within {limit:.2f}s")
                raise DaemonTimeout(
                    f"no reply to cancelled request {stale} within {limit:.2f}s"
                ) from None
            except ProtocolError as exc:
                await self._break(f"garbled reply to cancelled request {stale}: {exc}")
                raise ConnectionLost(self._broken or "") from None
            except (OSError, ConnectionError) as exc:
                await self._break(f"connection to daemon lost: {exc}")
                raise ConnectionLost(f"connection to daemon lost: {exc}") from None
            if resp.id != stale:
                await self._break(f"reply id {resp.id} does not match cancelled request id {stale}")
                raise ConnectionLost(self._broken or "")
            self._stale.pop(0)

    async def _exchange(self, cmd: str) -> bytes:
        assert self._writer is not None and self._reader is not None
        await self._writer.drain()
        try:
            raw = await self._reader.readuntil(b"\n")
        except asyncio.IncompleteReadError:
            await self._break(f"daemon closed the connection during {cmd}")
            raise ConnectionLost(f"daemon closed the connection during {cmd}") from None
        except asyncio.LimitOverrunError:
            await self._break(f"reply to {cmd} longer than {MAX_LINE_BYTES} bytes")
            raise ConnectionLost(f"reply to {cmd} longer than {MAX_LINE_BYTES} bytes") from None
        return raw

    def _interpret(self, rid: int, cmd: str, raw: bytes) -> Any:
        try:
            resp = decode_response(raw)
        except ProtocolError as exc:
            self._broken = f"garbled reply to {cmd}: {exc}"
            raise ConnectionLost(self._broken) from None
        if isinstance(resp, ErrorResponse):
            err = _error_for(resp)
            if isinstance(err, DaemonBusy | ConnectionLost):
                self._broken = str(err)
                raise err
            if resp.id is not None and resp.id != rid:
                self._broken = f"reply id {resp.id} does not match request id {rid} ({cmd})"
                raise ConnectionLost(self._broken)
            raise err
        if resp.id != rid:
            self._broken = f"reply id {resp.id} does not match request id {rid} ({cmd})"
            raise ConnectionLost(self._broken)
        return resp.result

    async def _break(self, reason: str) -> None:
        self._broken = reason
        writer = self._writer
        if writer is not None:
            writer.close()

    # ------------------------------------------------------------ keepalive

    @property
    def keepalive_interval(self) -> float | None:
        """Seconds between pings when nothing else is sent; None = no pings needed."""
        if self.keepalive_s is not None and self.keepalive_s > 0:
            return max(_KEEPALIVE_MIN_S, self.keepalive_s)
        caps = (self.hello or {}).get("capabilities") or {}
        idle = caps.get("idle_timeout_s")
        if isinstance(idle, int | float) and not isinstance(idle, bool) and idle > 0:
            return max(_KEEPALIVE_MIN_S, float(idle) * _KEEPALIVE_FRACTION)
        return None

    @contextlib.asynccontextmanager
    async def keepalive(self) -> AsyncIterator[None]:
        """While inside, ping the daemon whenever it has not answered us for
        ``keepalive_interval`` seconds: between trials, while the operator decides, during
        long waits without arm requests. Pings go through ``request`` (one request at a time
        on the connection) and never fail the body: a failed ping breaks the connection like
        any request, and the next real request raises ConnectionLost with the reason."""
        body_error: Exception | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._keepalive_loop)
            try:
                yield
            except Exception as exc:  # raised again below, as itself: not in an exception group
                body_error = exc
            finally:
                tg.cancel_scope.cancel()
        if body_error is not None:
            raise body_error

    async def _keepalive_loop(self) -> None:
        cmd = "ping"
        while True:
            every = self.keepalive_interval
            if every is None or not self.is_connected:
                await anyio.sleep(every or 1.0)  # nothing to keep (yet): look again later
                continue
            if "ping" not in ((self.hello or {}).get("commands") or ["ping"]):
                cmd = "get_fresh_mode"  # a daemon from before ping: the cheapest read
            wait = self._last_reply + every - time.monotonic()
            if wait > 0:
                await anyio.sleep(wait)
                continue
            if self._lock.locked():  # a request is in flight: that is activity
                await anyio.sleep(every)
                continue
            try:
                await self.request(cmd)
                self.pings += 1
            except DaemonError as exc:
                log.warning("daemon_keepalive_failed", cmd=cmd, reason=str(exc))
                self._last_reply = time.monotonic()  # no retry storm on a broken connection
            except Exception:  # a bug here must not abort the trial it runs beside
                log.exception("daemon_keepalive_crashed", cmd=cmd)
                return

    # ------------------------------------------------------------ commands

    async def get_angles(self) -> list[float]:
        """Current joint angles (6 floats). Raises ArmNoReply when the arm gave none."""
        result = await self.request("get_angles")
        if (
            not isinstance(result, list)
            or len(result) != 6
            or not all(isinstance(a, int | float) and not isinstance(a, bool) for a in result)
        ):
            raise ArmNoReply("bad_reading", f"get_angles returned {result!r}, not 6 numbers")
        return [float(a) for a in result]

    async def send_angles(self, angles: Sequence[float], speed: int) -> Any:
        return await self.request(
            "send_angles", {"angles": [float(a) for a in angles], "speed": int(speed)}
        )

    async def set_gripper_state(self, state: int, speed: int) -> Any:
        return await self.request(
            "set_gripper_state",
            {"state": int(state), "speed": int(speed)},
            timeout=max(self.request_timeout, GRIPPER_TIMEOUT_S),
        )

    async def set_gripper_value(self, value: int, speed: int) -> Any:
        return await self.request(
            "set_gripper_value",
            {"value": int(value), "speed": int(speed)},
            timeout=max(self.request_timeout, GRIPPER_TIMEOUT_S),
        )

    async def set_fresh_mode(self, mode: int) -> Any:
        return await self.request("set_fresh_mode", {"mode": int(mode)})

    async def stop(self) -> Any:
        return await self.request("stop")

    async def is_moving(self) -> Any:
        return await self.request("is_moving")
