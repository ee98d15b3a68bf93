"""The daemon's TCP server: one control client at a time, every arm call serialized.

Life cycle (uvicorn-style): ``start`` (open the backend, listen) → serve →
``stop`` (stop accepting → let the command in flight finish, up to a grace
period → cancel the rest → close the backend). A second client gets one
``busy`` error line and is closed at once; the first is not disturbed.

Each line is answered by exactly one response line, in order. Blocking
backend calls run in a worker thread (one at a time), so the event loop keeps
answering (busy replies, shutdown) while the arm works, and no two calls ever
overlap on the serial line. Who owns which task, and every deadline:
[docs/concurrency.md](../docs/concurrency.md).
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
from pydantic import BaseModel

from daemon_pi.backends.base import ArmBackend, BackendError
from daemon_pi.protocol import (
    ARGS_MODELS,
    COMMANDS,
    JOINT_MAX,
    JOINT_MIN,
    MAX_LINE_BYTES,
    PROTOCOL_VERSION,
    ErrorCode,
    HelloArgs,
    HelloResult,
    ProtocolError,
    decode_request,
    encode,
    encode_ok,
    error_response,
    validate_args,
)
from daemon_pi.stats import DaemonStats
from mecharm_common.hosted import start_hosted
from mecharm_common.logging import get_logger

__all__ = ["ArmServer", "run_server"]

log = get_logger("daemon_pi.server")

_TOO_LONG = object()
#: how long a closing socket may take to flush (busy replies, the last answer)
_CLOSE_S = 1.0


@dataclass
class _Conn:
    peer: str
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    opened: float = field(default_factory=time.monotonic)
    authed: bool = False
    auth_failures: int = 0
    #: this connection's own tasks; stop() cancels it once the grace period is over
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    #: True while waiting for the next line (nothing in flight)
    reading: bool = False
    #: set by the handler when it next goes idle or ends; created by stop() only
    idle_waiter: anyio.Event | None = None
    done: anyio.Event = field(default_factory=anyio.Event)

    def went_idle(self) -> None:
        if self.idle_waiter is not None:
            self.idle_waiter.set()


async def _close(writer: asyncio.StreamWriter) -> None:
    """Close and wait (bounded, shielded: also on the way out of a cancelled connection)."""
    writer.close()
    with anyio.move_on_after(_CLOSE_S, shield=True), suppress(Exception):
        await writer.wait_closed()


class ArmServer:
    """Serve ``backend`` on ``host:port`` (port 0 = pick a free one; see ``.port``).

    ``token``: shared secret; when set, the first request must be ``hello`` with it
    and every other command is refused until then.

    Two ways to run it: ``await task_group.start(server.run)`` (structured; the
    caller's task group owns the server), or ``await start()`` … ``await stop()``
    for callers without a task group (``run_server``, tests).
    """

    def __init__(
        self,
        backend: ArmBackend,
        host: str = "127.0.0.1",
        port: int = 5555,
        token: str | None = None,
        *,
        auth_timeout_s: float = 5.0,
        idle_timeout_s: float = 0.0,
        shutdown_grace_s: float = 5.0,
        max_auth_failures: int = 5,
    ) -> None:
        if token is not None and not token:
            raise ValueError("token must be a non-empty string or None")
        self.backend = backend
        self.host = host
        self.requested_port = port
        self.token = token
        self.auth_timeout_s = auth_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.shutdown_grace_s = shutdown_grace_s
        self.max_auth_failures = max_auth_failures
        self.stats = DaemonStats()
        self._server: asyncio.base_events.Server | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        # one arm call at a time: the lock orders them, the limiter caps the threads at one
        self._arm_lock = anyio.Lock()
        self._arm_limiter = anyio.CapacityLimiter(1)
        self._active: _Conn | None = None
        self._closing = False
        self._stop_reason = "requested"
        self._stop_requested = anyio.Event()
        self._stopped = anyio.Event()
        self._host: asyncio.Task[None] | None = None
        self._commands: dict[str, Callable[[_Conn, Any], Any]] = {
            name: getattr(self, f"_cmd_{name}") for name in COMMANDS
        }

    # ------------------------------------------------------------ life cycle
    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            return self.requested_port
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def closing(self) -> bool:
        """True once stop() has begun."""
        return self._closing

    @property
    def client(self) -> str | None:
        """Peer address of the control client, if one is connected."""
        return self._active.peer if self._active else None

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Open the backend, listen, report started, serve until ``stop()``, then shut down.

        Raises BackendError / OSError (port in use) before ``started``; the backend
        is closed again when listening fails. Every connection task belongs to this
        call's task group, so nothing outlives it.
        """
        await anyio.to_thread.run_sync(self.backend.open, limiter=self._arm_limiter)
        try:
            # asyncio's server on purpose: it resolves and binds as it always did, and each
            # connection's StreamReader frames lines cheaply (its limit is the line limit)
            self._server = await asyncio.start_server(
                self._hand_off,
                self.host,
                self.requested_port,
                limit=MAX_LINE_BYTES,
                start_serving=False,
            )
        except OSError:
            await self._close_backend()
            raise
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                await self._server.start_serving()  # from here _hand_off adds each connection to tg
                log.info(
                    "daemon_listening",
                    host=self.host,
                    port=self.port,
                    backend=self.backend.name,
                    auth=self.token is not None,
                )
                task_status.started()
                await self._stop_requested.wait()
                await self._shut_down()
            await self._close_backend()
            log.info(
                "daemon_stopped", reason=self._stop_reason, **self.stats.snapshot()["counters"]
            )
        finally:
            self._tg = None
            self._closing = True
            if self._server is not None:
                self._server.close()
            self._stopped.set()

    async def start(self) -> None:
        """Open the backend, then listen, serving from a background task until ``stop()``.

        Raises BackendError / OSError (port in use). For callers without a task group:
        ``run()`` is hosted in a background task (``mecharm_common.hosted``).
        """
        self._host = await start_hosted(self.run, "arm-server")

    async def stop(self, reason: str = "requested") -> None:
        """Stop accepting, let the command in flight finish, close the client and the backend."""
        if not self._closing:
            self._closing = True
            self._stop_reason = reason
            log.info("daemon_stopping", reason=reason, client=self.client)
            if self._server is not None:
                self._server.close()  # stop accepting at once
            self._stop_requested.set()
        if self._host is None and self._tg is None and not self._stopped.is_set():
            self._stopped.set()  # never started
        await self._stopped.wait()
        host, self._host = self._host, None
        if host is not None:
            await host  # re-raises a failure of run()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def _shut_down(self) -> None:
        """In run()'s task: grace for the command in flight, then EOF, then cancel."""
        conn = self._active
        if conn is not None and not conn.done.is_set() and not conn.reading:
            conn.idle_waiter = anyio.Event()
            with anyio.move_on_after(self.shutdown_grace_s) as grace:
                await conn.idle_waiter.wait()
            if grace.cancelled_caught:
                log.warning(
                    "daemon_shutdown_grace_expired",
                    grace_s=self.shutdown_grace_s,
                    reason="command in flight did not finish; cancelling its connection",
                )
        if conn is not None:
            conn.reader.feed_eof()  # the handler's read ends; it closes the connection itself
            with anyio.move_on_after(_CLOSE_S):
                await conn.done.wait()
            # still in a backend call: cancel it. A thread call cannot be interrupted, so the
            # cancellation lands when the call returns: the arm is never used by two calls
            conn.scope.cancel()
        if self._server is not None:
            with anyio.move_on_after(_CLOSE_S):
                await self._server.wait_closed()

    async def _close_backend(self) -> None:
        async with self._arm_lock:
            try:
                await anyio.to_thread.run_sync(self.backend.close, limiter=self._arm_limiter)
            except Exception as exc:  # closing must not hide the shutdown
                log.warning("backend_close_failed", error=repr(exc))

    # ------------------------------------------------------------ connections
    def _hand_off(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """asyncio's accept callback: the connection becomes a task of run()'s task group."""
        if self._tg is None:  # run() has ended; the listener is closing
            writer.close()
            return
        self._tg.start_soon(self._on_connect, reader, writer)

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = "{}:{}".format(*tuple(writer.get_extra_info("peername") or ("?", "?"))[:2])
        self.stats.count("connections")
        if self._closing or self._active is not None:
            code = ErrorCode.SHUTTING_DOWN if self._closing else ErrorCode.BUSY
            msg = (
                "daemon is shutting down"
                if self._closing
                else f"another control client ({self._active.peer if self._active else '?'}) is connected; "
                "the daemon serves one client at a time"
            )
            self.stats.count(
                "busy_rejections" if code is ErrorCode.BUSY else "rejected_shutting_down"
            )
            log.warning("client_rejected", peer=peer, code=code.value, reason=msg)
            await self._send_and_close(writer, error_response(None, code, msg))
            return
        conn = _Conn(peer, reader, writer)
        self._active = conn
        log.info("client_connected", peer=peer)
        reason = "client closed the connection"
        try:
            with conn.scope:
                reason = await self._serve(conn)
            if conn.scope.cancelled_caught:
                reason = "daemon shutdown (cancelled after the grace period)"
        except (ConnectionError, OSError) as exc:
            reason = f"connection lost: {exc!r}"
        except Exception as exc:  # a bug here must not take the server's task group down
            reason = f"internal error {type(exc).__name__}: {exc}"
            log.exception("connection_failed", peer=peer)
        finally:
            if self._active is conn:
                self._active = None
            log.info("client_disconnected", peer=peer, reason=reason)
            await _close(writer)
            conn.done.set()
            conn.went_idle()

    async def _send_and_close(self, writer: asyncio.StreamWriter, msg: BaseModel) -> None:
        try:
            writer.write(encode(msg))
            with anyio.move_on_after(_CLOSE_S):
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            await _close(writer)

    async def _read_line(self, reader: asyncio.StreamReader) -> bytes | object | None:
        """One line (with or without its newline), ``_TOO_LONG`` (discarded), or None at EOF."""
        try:
            return await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            return exc.partial or None
        except asyncio.LimitOverrunError as exc:
            consumed = exc.consumed
        # discard the over-long line up to and including its newline
        while True:
            await reader.readexactly(max(1, consumed))
            try:
                await reader.readuntil(b"\n")
                return _TOO_LONG
            except asyncio.IncompleteReadError:
                return None
            except asyncio.LimitOverrunError as exc:
                consumed = exc.consumed

    def _read_deadline(self, conn: _Conn) -> tuple[float | None, str]:
        """Seconds the next line may take (None = no limit) and why the client is dropped after it."""
        if self.token is not None and not conn.authed:
            left = self.auth_timeout_s - (time.monotonic() - conn.opened)
            return max(0.0, left), f"no valid hello with token within {self.auth_timeout_s} s"
        if self.idle_timeout_s > 0:
            return self.idle_timeout_s, f"idle for {self.idle_timeout_s} s"
        return None, ""

    async def _next_line(self, conn: _Conn) -> tuple[bytes | object | None, str]:
        """The next line, or (None, why) when the auth/idle deadline passed first."""
        timeout, why = self._read_deadline(conn)
        conn.reading = True
        conn.went_idle()
        try:
            if timeout is None:  # the hot path: no cancel scope to enter and leave
                return await self._read_line(conn.reader), ""
            with anyio.move_on_after(timeout):
                return await self._read_line(conn.reader), ""
            return None, why
        finally:
            conn.reading = False

    async def _serve(self, conn: _Conn) -> str:
        while not self._closing:
            line, timed_out = await self._next_line(conn)
            if timed_out:
                code = (
                    ErrorCode.UNAUTHORIZED
                    if self.token is not None and not conn.authed
                    else ErrorCode.IDLE_TIMEOUT
                )
                conn.writer.write(
                    encode(error_response(None, code, f"closing the connection: {timed_out}"))
                )
                with suppress(ConnectionError, OSError):
                    await conn.writer.drain()
                return timed_out
            if line is None:
                return "daemon shutdown" if self._closing else "client closed the connection"
            if line is _TOO_LONG:
                self.stats.record("<invalid>", 0.0, ErrorCode.LINE_TOO_LONG.value)
                out = encode(
                    error_response(
                        None,
                        ErrorCode.LINE_TOO_LONG,
                        f"line longer than {MAX_LINE_BYTES} bytes discarded",
                    )
                )
                log.warning("request_rejected", peer=conn.peer, code="line_too_long")
            else:
                assert isinstance(line, bytes)
                out = await self._handle_line(conn, line)
            conn.writer.write(out)
            await conn.writer.drain()
            if conn.auth_failures >= self.max_auth_failures:
                return f"{conn.auth_failures} failed authentication attempts"
        return "daemon shutdown"

    # ------------------------------------------------------------ requests
    async def _handle_line(self, conn: _Conn, line: bytes) -> bytes:
        """Answer one request line with its encoded response line; count it in the stats."""
        t0 = time.perf_counter()
        cmd_label = "<invalid>"
        rid: int | None = None
        try:
            req = decode_request(line.strip())
            rid = req.id
            cmd_label = req.cmd if req.cmd in ARGS_MODELS else "<unknown>"
            if self.token is not None and not conn.authed and req.cmd != "hello":
                raise ProtocolError(
                    ErrorCode.UNAUTHORIZED,
                    f"{req.cmd[:64]!r} refused: authenticate first with hello {{token}}",
                    rid,
                )
            args = validate_args(req.cmd, req.args, rid)
            result = await self._commands[req.cmd](conn, args)
            out = encode_ok(req.id, result)  # no response model on the hot path: same bytes
        except ProtocolError as exc:
            resp = error_response(
                exc.request_id if exc.request_id is not None else rid, exc.code, exc.message
            )
            log.warning(
                "request_rejected",
                peer=conn.peer,
                id=resp.id,
                cmd=cmd_label,
                code=exc.code.value,
                reason=exc.message,
            )
        except BackendError as exc:
            resp = error_response(rid, exc.code, exc.message)
            log.warning(
                "arm_error",
                peer=conn.peer,
                id=rid,
                cmd=cmd_label,
                code=exc.code.value,
                reason=exc.message,
            )
        except Exception as exc:
            resp = error_response(
                rid, ErrorCode.INTERNAL, f"{cmd_label}: internal error {type(exc).__name__}: {exc}"
            )
            log.exception("internal_error", peer=conn.peer, id=rid, cmd=cmd_label)
        else:
            self.stats.record(cmd_label, time.perf_counter() - t0, None)
            return out
        self.stats.record(cmd_label, time.perf_counter() - t0, resp.error.code)
        return encode(resp)

    async def _arm(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run one backend call, serialized; blocking calls go to a worker thread."""
        if not self.backend.blocks(fn.__name__) and not self._arm_lock.locked():
            # runs to completion on the loop thread without yielding: nothing can overlap it,
            # so taking and releasing the free lock would only cost time
            return fn(*args)
        async with self._arm_lock:
            if self.backend.blocks(fn.__name__):
                # not abandoned on cancel: a cancelled connection waits for its call to
                # return, so the lock is never released while the arm is still busy
                return await anyio.to_thread.run_sync(fn, *args, limiter=self._arm_limiter)
            return fn(*args)

    # ------------------------------------------------------------ commands
    async def _cmd_hello(self, conn: _Conn, args: HelloArgs) -> dict[str, Any]:
        if self.token is not None and not conn.authed:
            given = (args.token or "").encode()
            if not hmac.compare_digest(given, self.token.encode()):
                conn.auth_failures += 1
                self.stats.count("auth_failures")
                what = "missing" if args.token is None else "wrong"
                raise ProtocolError(
                    ErrorCode.UNAUTHORIZED,
                    f"hello: {what} token ({conn.auth_failures}/{self.max_auth_failures} attempts)",
                )
            conn.authed = True
            log.info("client_authenticated", peer=conn.peer, client=args.client)
        caps = {
            "auth_required": self.token is not None,
            "max_line_bytes": MAX_LINE_BYTES,
            "fresh_mode": True,
            "gripper": True,
            "stats": True,
            **self.backend.capabilities(),
        }
        return HelloResult(
            protocol_version=PROTOCOL_VERSION,
            backend=self.backend.name,
            joint_min=list(JOINT_MIN),
            joint_max=list(JOINT_MAX),
            commands=list(COMMANDS),
            capabilities=caps,
            authenticated=conn.authed or self.token is None,
        ).model_dump()

    async def _cmd_get_angles(self, conn: _Conn, args: Any) -> list[float]:
        return await self._arm(self.backend.get_angles)  # type: ignore[no-any-return]

    async def _cmd_send_angles(self, conn: _Conn, args: Any) -> dict[str, Any]:
        sent = await self._arm(self.backend.send_angles, list(args.angles), args.speed)
        return {"angles": sent, "speed": args.speed}

    async def _cmd_set_gripper_state(self, conn: _Conn, args: Any) -> None:
        await self._arm(self.backend.set_gripper_state, args.state, args.speed)

    async def _cmd_set_gripper_value(self, conn: _Conn, args: Any) -> None:
        await self._arm(self.backend.set_gripper_value, args.value, args.speed)

    async def _cmd_get_gripper_value(self, conn: _Conn, args: Any) -> int:
        return await self._arm(self.backend.get_gripper_value)  # type: ignore[no-any-return]

    async def _cmd_set_fresh_mode(self, conn: _Conn, args: Any) -> None:
        await self._arm(self.backend.set_fresh_mode, args.mode)

    async def _cmd_get_fresh_mode(self, conn: _Conn, args: Any) -> int:
        return await self._arm(self.backend.get_fresh_mode)  # type: ignore[no-any-return]

    async def _cmd_is_moving(self, conn: _Conn, args: Any) -> bool:
        return await self._arm(self.backend.is_moving)  # type: ignore[no-any-return]

    async def _cmd_power_on(self, conn: _Conn, args: Any) -> None:
        await self._arm(self.backend.power_on)

    async def _cmd_release_all_servos(self, conn: _Conn, args: Any) -> None:
        await self._arm(self.backend.release_all_servos)

    async def _cmd_stop(self, conn: _Conn, args: Any) -> None:
        await self._arm(self.backend.stop)

    async def _cmd_stats(self, conn: _Conn, args: Any) -> dict[str, Any]:
        snap = self.stats.snapshot()
        snap.update(backend=self.backend.name, client=conn.peer)
        return snap


@asynccontextmanager
async def run_server(
    backend: ArmBackend,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    **kwargs: Any,
) -> AsyncIterator[ArmServer]:
    """Start an ArmServer (port 0 = a free port, read ``server.port``) and stop it on exit."""
    server = ArmServer(backend, host, port, token, **kwargs)
    await server.start()
    try:
        yield server
    finally:
        await server.stop("context exit")
