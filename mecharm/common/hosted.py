"""Run a structured ``run(task_status=...)`` for callers that have no task group.

The daemon's server and the recorder's service own their tasks in an anyio task
group entered by their ``run()``. A task group must be left by the task that
entered it, so callers with an imperative ``start()`` … ``stop()`` (tests,
``run_server``) get ``run()`` hosted in one plain asyncio task. Why this is the
one place plain asyncio is kept: [docs/concurrency.md](../docs/concurrency.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import anyio.abc

__all__ = ["start_hosted"]


class _StartedFuture(anyio.abc.TaskStatus[None]):
    """Resolves a future when ``run()`` calls ``task_status.started()``."""

    def __init__(self, fut: asyncio.Future[None]) -> None:
        self.fut = fut

    def started(self, value: None = None) -> None:
        if not self.fut.done():
            self.fut.set_result(None)


async def start_hosted(
    run: Callable[..., Coroutine[Any, Any, None]], name: str
) -> asyncio.Task[None]:
    """Start ``run(task_status=...)`` in a background task; return it once ``run`` has started.

    Raises what ``run`` raised before reporting started (a port in use, a backend
    that cannot open). Await the returned task after asking ``run`` to stop.
    """
    started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    host = asyncio.create_task(run(task_status=_StartedFuture(started)), name=name)
    await asyncio.wait({started, host}, return_when=asyncio.FIRST_COMPLETED)
    if not started.done():
        host.result()  # raises run()'s failure
        raise RuntimeError(f"{name} returned before it had started")
    return host
