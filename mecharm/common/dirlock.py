"""Advisory locks on folders: "some live process is writing this" without a lock file.

The recorder holds an ``flock`` on a trial's recording folder from ``trial_start``
until its meta is written; a repair holds it while it rewrites the folder. The
kernel drops the lock when the holder dies (SIGKILL included), so a folder that is
free and has no meta was abandoned, and a folder that is held is still being
written (docs/recorder.md, "Crashed recordings"). Locks are advisory: only code
that asks (the recorder, the repair, the runtime's check) sees them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["DirBusyError", "dir_held", "hold_dir", "lock_dir", "unlock_dir"]


class DirBusyError(BlockingIOError):
    """Another open file description holds the folder's lock."""


def lock_dir(path: Path) -> int:
    """Take the folder's exclusive lock without waiting; returns the fd to pass to ``unlock_dir``.

    Raises DirBusyError when it is held (also by another fd of this process) and
    OSError when the folder cannot be opened.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DirBusyError(f"{path} is held by another process") from None
    except OSError:
        os.close(fd)
        raise
    return fd


def unlock_dir(fd: int | None) -> None:
    """Release a lock from ``lock_dir`` (closing the fd drops it); None is ignored."""
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


@contextlib.contextmanager
def hold_dir(path: Path) -> Iterator[None]:
    """``with hold_dir(p):`` — the lock for the block; raises DirBusyError when held."""
    fd = lock_dir(path)
    try:
        yield
    finally:
        unlock_dir(fd)


def dir_held(path: Path) -> bool | None:
    """True when another holder has the folder's lock, False when free, None when the
    folder cannot be opened. Probes by taking and dropping the lock at once."""
    try:
        fd = lock_dir(path)
    except DirBusyError:
        return True
    except OSError:
        return None
    unlock_dir(fd)
    return False
