"""Signal handling shared by the three long-running processes (uvicorn-style).

The first SIGINT/SIGTERM sets ``stop`` (finish what is in flight, then exit);
a second one sets ``force`` (stop now). Old handlers are restored on exit.
``on_first`` / ``on_force`` are told at once, so the operator sees the first Ctrl-C
was heard and does not press it again by mistake (docs/console.md).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["ShutdownSignals", "capture_signals"]


@dataclass
class ShutdownSignals:
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    force: asyncio.Event = field(default_factory=asyncio.Event)
    received: list[str] = field(default_factory=list)
    #: called with the signal's name when the first one arrives / when a later one forces
    on_first: Callable[[str], None] | None = None
    on_force: Callable[[str], None] | None = None

    def trigger(self, name: str) -> None:
        self.received.append(name)
        first = not self.stop.is_set()
        if not first:
            self.force.set()
        self.stop.set()
        tell = self.on_first if first else self.on_force
        if tell is not None:
            tell(name)


@contextmanager
def capture_signals(loop: asyncio.AbstractEventLoop | None = None) -> Iterator[ShutdownSignals]:
    """Install SIGINT/SIGTERM handlers on the running loop for the duration of the block."""
    loop = loop or asyncio.get_running_loop()
    sigs = ShutdownSignals()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, sigs.trigger, sig.name)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):  # not main thread / platform
            pass
    try:
        yield sigs
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
