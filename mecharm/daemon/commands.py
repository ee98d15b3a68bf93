"""What each request does: decode, check, run on the arm (serialized), answer one line.

``ArmCommands`` is the request side of ``ArmServer`` (server.py keeps the connections, the
client slot and the life cycle): one ``_cmd_<name>`` per protocol command
(mecharm/daemon/protocol.py), every backend call through ``_arm`` so no two calls overlap on the
serial line, and the safety envelope checked on every ``send_angles`` before it reaches
the arm (docs/daemon.md, "Safety envelope").
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from mecharm.common.envelope import Envelope, EnvelopeViolation
from mecharm.common.logging import get_logger
from mecharm.daemon.backends.base import ArmBackend, BackendError
from mecharm.daemon.protocol import (
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
from mecharm.daemon.stats import DaemonStats

if TYPE_CHECKING:
    from mecharm.daemon.server import Conn

__all__ = ["ArmCommands"]

log = get_logger("mecharm.daemon.server")


class ArmCommands:
    """The commands of ``ArmServer``, which sets these attributes (see its ``__init__``)."""

    backend: ArmBackend
    token: str | None
    envelope: Envelope
    stats: DaemonStats
    auth_timeout_s: float
    idle_timeout_s: float
    max_auth_failures: int
    _last_target: list[float] | None
    _arm_lock: anyio.Lock
    _arm_limiter: anyio.CapacityLimiter
    _link_lost: anyio.Event
    _commands: dict[str, Callable[[Conn, Any], Any]]

    def _claim(self, conn: Conn, rid: int | None) -> None:
        raise NotImplementedError  # the server's slot (server.py)

    def _failure_delay(self, host: str) -> tuple[int, float]:
        raise NotImplementedError  # the server's failed-hello memory (server.py)

    # ------------------------------------------------------------ requests
    async def _handle_line(self, conn: Conn, line: bytes) -> bytes:
        """Answer one request line with its encoded response line; count it in the stats."""
        t0 = time.perf_counter()
        cmd_label = "<invalid>"
        rid: int | None = None
        try:
            req = decode_request(line.strip())
            rid = req.id
            cmd_label = req.cmd if req.cmd in ARGS_MODELS else "<unknown>"
            if not conn.holder:  # still waiting in the pool (docs/daemon.md, "Client slot")
                if self.token is None:
                    self._claim(conn, rid)  # its first complete request takes the slot
                elif req.cmd != "hello":
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
            if exc.code is ErrorCode.SERIAL_ERROR:
                self._link_lost.set()  # the backend may want its link reopened
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

    async def _arm(self, fn: Callable[..., Any], *args: Any, blocks: bool | None = None) -> Any:
        """Run one backend call, serialized; blocking calls go to a worker thread.

        ``blocks``: whether ``fn`` may sleep; default ``backend.blocks(fn.__name__)``."""
        if blocks is None:
            blocks = self.backend.blocks(fn.__name__)
        if not blocks and not self._arm_lock.locked():
            # runs to completion on the loop thread without yielding: nothing can overlap it,
            # so taking and releasing the free lock would only cost time
            return fn(*args)
        async with self._arm_lock:
            if blocks:
                # not abandoned on cancel: a cancelled connection waits for its call to
                # return, so the lock is never released while the arm is still busy
                return await anyio.to_thread.run_sync(fn, *args, limiter=self._arm_limiter)
            return fn(*args)

    # ------------------------------------------------------------ commands
    async def _cmd_hello(self, conn: Conn, args: HelloArgs) -> dict[str, Any]:
        if self.token is not None and not conn.authed:
            given = (args.token or "").encode()
            if not hmac.compare_digest(given, self.token.encode()):
                conn.auth_failures += 1
                self.stats.count("auth_failures")
                recent, delay = self._failure_delay(conn.host)
                # only this reply waits, never past the connection's auth deadline
                delay = min(delay, conn.deadline - time.monotonic())
                if delay > 0:
                    await anyio.sleep(delay)
                what = "missing" if args.token is None else "wrong"
                raise ProtocolError(
                    ErrorCode.UNAUTHORIZED,
                    f"hello: {what} token ({conn.auth_failures}/{self.max_auth_failures} attempts "
                    f"on this connection; {recent} failures from {conn.host} recently, so this "
                    f"reply was held back {max(delay, 0.0):.2f} s)",
                )
            conn.authed = True
            log.info("client_authenticated", peer=conn.peer, client=args.client)
            self._claim(conn, None)
        caps = {
            "auth_required": self.token is not None,
            "auth_timeout_s": self.auth_timeout_s,
            "idle_timeout_s": self.idle_timeout_s,
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
            envelope=self.envelope.to_wire(),
            time_scale=self.backend.time_scale(),
        ).model_dump()

    async def _cmd_get_angles(self, conn: Conn, args: Any) -> list[float]:
        return await self._arm(self.backend.get_angles)  # type: ignore[no-any-return]

    async def _cmd_send_angles(self, conn: Conn, args: Any) -> dict[str, Any]:
        angles = list(args.angles)
        bad = self.envelope.violation(angles)
        if bad is None and self.envelope.max_step_deg is None:
            sent = await self._arm(self.backend.send_angles, angles, args.speed)
        elif bad is None:
            # read and send in one arm call: nothing can move the arm in between
            blocks = self.backend.blocks("get_angles") or self.backend.blocks("send_angles")
            sent = await self._arm(self._send_within_step, angles, args.speed, blocks=blocks)
            if isinstance(sent, EnvelopeViolation):
                bad = sent
        if bad is not None:
            raise ProtocolError(
                ErrorCode.OUTSIDE_ENVELOPE,
                f"send_angles refused, the arm does not move: {bad.message()} "
                "(the daemon's safety envelope; docs/daemon.md)",
            )
        return {"angles": sent, "speed": args.speed}

    def _send_within_step(self, angles: list[float], speed: int) -> list[float] | EnvelopeViolation:
        """Read the arm, then send only if no joint moves more than the per-move bound from
        where the arm is AND from the last target it accepted; else return the violation
        (nothing sent). The second reference matters in queue mode (fresh mode 0), where a
        send runs from the previous queued target, not from where the arm is now. Costs one
        ``get_angles`` per send (docs/daemon.md, "Safety envelope"). When both references
        are broken the larger move is named: what the message says then does not depend on
        how far the arm got toward the queued target before the send."""
        found = [self.envelope.step_violation(angles, self.backend.get_angles())]
        if self._last_target is not None:
            found.append(self.envelope.step_violation(angles, self._last_target))
        broken = [v for v in found if v is not None]
        if broken:
            return max(broken, key=lambda v: abs(v.value - (v.current or 0.0)))
        sent = self.backend.send_angles(angles, speed)
        self._last_target = list(angles)
        return sent  # type: ignore[no-any-return]

    async def _cmd_set_gripper_state(self, conn: Conn, args: Any) -> None:
        await self._arm(self.backend.set_gripper_state, args.state, args.speed)

    async def _cmd_set_gripper_value(self, conn: Conn, args: Any) -> None:
        await self._arm(self.backend.set_gripper_value, args.value, args.speed)

    async def _cmd_get_gripper_value(self, conn: Conn, args: Any) -> int:
        return await self._arm(self.backend.get_gripper_value)  # type: ignore[no-any-return]

    async def _cmd_set_fresh_mode(self, conn: Conn, args: Any) -> None:
        await self._arm(self.backend.set_fresh_mode, args.mode)

    async def _cmd_get_fresh_mode(self, conn: Conn, args: Any) -> int:
        return await self._arm(self.backend.get_fresh_mode)  # type: ignore[no-any-return]

    async def _cmd_is_moving(self, conn: Conn, args: Any) -> bool:
        return await self._arm(self.backend.is_moving)  # type: ignore[no-any-return]

    async def _cmd_power_on(self, conn: Conn, args: Any) -> None:
        await self._arm(self.backend.power_on)

    async def _cmd_release_all_servos(self, conn: Conn, args: Any) -> None:
        self._last_target = None  # limp: the arm goes wherever it is pushed
        await self._arm(self.backend.release_all_servos)

    async def _cmd_stop(self, conn: Conn, args: Any) -> None:
        await self._arm(self.backend.stop)
        self._last_target = None  # stopped, queue dropped: where the arm is is the reference

    async def _cmd_ping(self, conn: Conn, args: Any) -> None:
        """Keeps the slot (a complete request): never reaches the arm."""
        return None

    async def _cmd_stats(self, conn: Conn, args: Any) -> dict[str, Any]:
        snap = self.stats.snapshot()
        snap.update(backend=self.backend.name, client=conn.peer)
        return snap
