"""The daemon client for synchronous callers: lerobot's loop calls the robot and its
leaders from a plain thread (docs/lerobot-robot.md).

The asyncio side (the client and its keepalive pings) runs in its own thread behind an
anyio blocking portal, so a caller that computes for minutes between two calls keeps the
daemon's slot: the link pings meanwhile (the daemon drops a client silent for its idle
timeout, docs/daemon.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import TypeVar

from anyio.from_thread import BlockingPortal, start_blocking_portal

from mecharm.common.keyfile import read_daemon_token
from mecharm.common.logging import get_logger
from mecharm.runtime.client import DaemonClient
from mecharm.runtime.config import RuntimeSettings

__all__ = ["BlockingLink", "LinkError"]

log = get_logger("mecharm.runtime.blocking_link")

T = TypeVar("T")


class LinkError(RuntimeError):
    """The daemon cannot be reached or answered wrong; the message says what to do."""


class BlockingLink:
    """One daemon connection (``settings.daemon``: host, port, token, waits) on a portal
    thread; ``call`` runs a coroutine function there and waits for its result."""

    def __init__(self, settings: RuntimeSettings) -> None:
        self.settings = settings
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None
        self._client: DaemonClient | None = None
        self._keepalive: AbstractContextManager[None] | None = None

    @property
    def is_open(self) -> bool:
        return self._portal is not None and self._client is not None and self._client.is_connected

    @property
    def client(self) -> DaemonClient:
        if self._client is None:
            raise LinkError("the daemon link is not open")
        return self._client

    def open(self) -> DaemonClient:
        """Connect (token and hello), start the keepalive; LinkError naming what to check."""
        if self._portal is not None:
            raise LinkError("already connected: disconnect() first")
        self._portal_cm = start_blocking_portal()
        self._portal = self._portal_cm.__enter__()
        try:
            self._portal.call(self._connect)
            assert self._client is not None
            self._keepalive = self._portal.wrap_async_context_manager(self._client.keepalive())
            self._keepalive.__enter__()
        except BaseException:
            self.close()
            raise
        return self._client

    async def _connect(self) -> None:
        d = self.settings.daemon
        client = DaemonClient(
            d.host,
            d.port,
            token=read_daemon_token(d.token_file),
            request_timeout=d.request_timeout_s,
            connect_timeout=d.connect_timeout_s,
            busy_wait_s=d.busy_wait_s,
            keepalive_s=d.keepalive_s or None,
            time_scale=self.settings.time_scale,
        )
        try:
            await client.connect()
        except Exception as exc:
            raise LinkError(
                f"daemon {d.host}:{d.port}: {exc} (is mecharm-daemon running, and is the "
                "token file its token?)"
            ) from None
        self._client = client

    def call(self, fn: Callable[..., Awaitable[T]], *args: object) -> T:
        """``await fn(*args)`` on the link's thread; its result or its exception."""
        if self._portal is None:
            raise LinkError("the daemon link is not open")
        return self._portal.call(fn, *args)

    def close(self, last: Callable[[DaemonClient], Awaitable[object]] | None = None) -> None:
        """Stop the pings, run ``last`` while the link still answers (restoring what
        ``open``'s caller changed; its failure is logged, the link closes anyway), close."""
        portal, client, keepalive = self._portal, self._client, self._keepalive
        self._client, self._keepalive = None, None
        try:
            if keepalive is not None:
                keepalive.__exit__(None, None, None)
            if portal is not None and client is not None:
                if last is not None and client.is_connected:
                    try:
                        portal.call(last, client)
                    except Exception as exc:  # the link is going anyway
                        log.warning("link_last_call_failed", error=str(exc))
                portal.call(client.aclose)
        finally:
            if self._portal_cm is not None:
                self._portal_cm.__exit__(None, None, None)
            self._portal_cm, self._portal = None, None
