"""Blocking calls (camera reads, OpenCV, file I/O, the FK table load) off the event loop.

One helper so every such call behaves the same under cancellation: a forced stop
must act at once, so the awaiting task is released immediately and the thread is
left to finish on its own (anyio's ``abandon_on_cancel``), as a camera read that
blocks for a frame cannot be interrupted. See docs/concurrency.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread

__all__ = ["to_thread"]

T = TypeVar("T")


async def to_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run ``fn(*args, **kwargs)`` in a worker thread; cancelling the caller abandons the thread."""
    return await anyio.to_thread.run_sync(
        functools.partial(fn, *args, **kwargs), abandon_on_cancel=True
    )
