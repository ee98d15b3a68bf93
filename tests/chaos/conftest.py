"""Chaos suite fixtures (docs/reliability.md): real mounts, real processes, real faults.

Every test here is marked ``chaos`` (``make test`` and CI run them; ``-m "not chaos"``
skips them). Faults that need privileges (a tmpfs that fills up, ``umount -l`` under a
running trial) skip with a printed reason where they are not available; CI runs as
root on Linux, where they are. Traffic goes only to 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.chaos)


def _mount_unavailable() -> str | None:
    if not sys.platform.startswith("linux"):
        return f"tmpfs mounts need Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "tmpfs mounts need root (CI runs as root; run `sudo make test` to include them)"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "mount/umount are not installed"
    return None


class Tmpfs:
    """A size-limited tmpfs mounted at ``path`` for one test; lazily unmounted at the end."""

    def __init__(self, path: Path, size_kib: int) -> None:
        self.path = path
        self.size_kib = size_kib
        self.mounted = False

    def mount(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size_kib}k", "tmpfs", str(self.path)],
            check=True,
            capture_output=True,
            timeout=10,
        )
        self.mounted = True

    def unmount_lazy(self) -> None:
        """``umount -l``: the mount vanishes from the path at once, open files stay valid."""
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], check=True, timeout=10)
            self.mounted = False

    def fill(self, leave_bytes: int = 0) -> Path:
        """Fill the mount until fewer than ``leave_bytes`` remain; returns the filler file."""
        filler = self.path / f".filler_{uuid.uuid4().hex[:8]}"
        st = os.statvfs(self.path)
        free = st.f_bavail * st.f_frsize
        with open(filler, "wb") as fh, contextlib.suppress(OSError):
            remaining = max(0, free - leave_bytes)
            chunk = b"\0" * (1 << 16)
            while remaining > 0:
                fh.write(chunk[: min(len(chunk), remaining)])
                remaining -= len(chunk)
            fh.flush()
        return filler

    def free_bytes(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[..., Tmpfs]]:
    """Factory: ``tmpfs("name", size_kib=24_576)`` mounts a fresh tmpfs under tmp_path."""
    why = _mount_unavailable()
    if why is not None:
        print(f"chaos: skipping mount test: {why}")
        pytest.skip(why)
    made: list[Tmpfs] = []

    def make(name: str = "root", size_kib: int = 24 * 1024) -> Tmpfs:
        fs = Tmpfs(tmp_path / name, size_kib)
        try:
            fs.mount()
        except (subprocess.CalledProcessError, OSError) as exc:
            pytest.skip(f"cannot mount tmpfs at {fs.path}: {exc}")
        made.append(fs)
        return fs

    yield make
    for fs in made:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            fs.unmount_lazy()
