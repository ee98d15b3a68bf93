"""Safe file I/O: atomic writes, names from the network, and the data-root mount guard."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
import tempfile
import uuid
from pathlib import Path
from typing import Any

__all__ = [
    "NAME_MAX",
    "DataRootGuard",
    "LineFile",
    "OutsideRootError",
    "StorageFault",
    "UnsafeNameError",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "check_data_root",
    "describe_os_error",
    "inside_root",
    "safe_join",
    "validate_name",
]

NAME_MAX = 128
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class UnsafeNameError(ValueError):
    """A name that came from outside (network, file) cannot be used as a path component."""


def validate_name(name: object, what: str = "name") -> str:
    """Return ``name`` if it is a safe single path component, else raise UnsafeNameError.

    Safe: a str of 1..NAME_MAX characters from [A-Za-z0-9._-], starting with a letter
    or digit, not containing "..". Rejects separators, NUL, absolute paths, empty.
    """
    if not isinstance(name, str):
        raise UnsafeNameError(f"{what} must be a string, got {type(name).__name__}")
    if not name:
        raise UnsafeNameError(f"{what} is empty")
    if len(name) > NAME_MAX:
        raise UnsafeNameError(f"{what} is {len(name)} characters long (max {NAME_MAX})")
    if ".." in name or not _NAME_RE.fullmatch(name):
        raise UnsafeNameError(f"{what} {name[:60]!r} has characters outside [A-Za-z0-9._-] or '..'")
    return name


def inside_root(root: Path, path: Path) -> Path:
    """``path`` with every symlink resolved, when that is still inside ``root`` (resolved
    too); else OutsideRootError. The one rule for every file any process writes under the
    data root, repairs and memories included (docs/data-root.md, "Nothing outside the
    root"): a folder or file symlinked out of the root is refused, never followed."""
    root_r = Path(root).resolve()
    resolved = Path(path).resolve()
    if resolved != root_r and root_r not in resolved.parents:
        via = "" if resolved == Path(path).absolute() else f" (it leads to {resolved})"
        raise OutsideRootError(
            f"{path} is outside the data root {root_r}{via}; move it back under the root "
            "or remove the link"
        )
    return resolved


def safe_join(root: Path, *names: str) -> Path:
    """Join validated names under ``root``; the result is guaranteed to stay inside root."""
    return inside_root(
        root, Path(root).joinpath(*(validate_name(n, "path component") for n in names))
    )


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder, fsync, rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def check_data_root(root: Path, require_mount: bool = False) -> str | None:
    """Mount guard (docs/runtime.md, "The data root and the mount guard"). Return None when ``root`` is usable, else the reason.

    Usable means: it exists and is a directory, it is a mount point when
    ``require_mount`` is set, and a probe file can be written and removed.
    Never creates ``root`` itself: a missing SSD must not turn into a local folder.
    """
    root = Path(root)
    if not root.is_dir():
        return f"data root {root} does not exist or is not a directory"
    if require_mount and not os.path.ismount(root):
        return f"data root {root} is not a mount point"
    probe = root / f".mount_probe_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        return f"data root {root} is not writable: {exc.strerror or exc}"
    return None


class StorageFault(RuntimeError):
    """The data root cannot take a write now (gone, another device, full, read-only)."""


class OutsideRootError(UnsafeNameError, StorageFault):
    """A path under the data root resolves outside it (a symlink out): refused, not written.
    Both an unsafe name (for those who validate names) and a storage fault (for the guard)."""


def describe_os_error(exc: BaseException, what: str = "") -> str:
    """``No space left on device (ENOSPC) writing the trace``: the errno name an operator can search."""
    if isinstance(exc, StorageFault):
        return str(exc)
    if isinstance(exc, OSError) and exc.errno is not None:
        name = errno.errorcode.get(exc.errno, str(exc.errno))
        text = f"{exc.strerror or os.strerror(exc.errno)} ({name})"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return f"{text} {what}".strip() if what else text


class DataRootGuard:
    """One guard for every file a process creates under the data root (docs/reliability.md).

    ``check_data_root`` says whether a root is usable; this object also remembers what
    the root *was* when the session started (its device, whether it was a mount
    point), because after ``umount -l`` the same path silently becomes a folder on
    the local disk: same name, another device. ``problem()`` is a few ``stat`` calls,
    cheap enough to run before every file is created and at every stage boundary;
    ``problem(probe=True)`` also writes and removes a probe file (full or read-only
    disks). A root that comes back as a *mount point* on a new device (the SSD
    plugged in again) is adopted again by ``rebind()``; a bare folder never is.
    """

    def __init__(self, root: Path, require_mount: bool = False) -> None:
        self.root = Path(root)
        self.require_mount = require_mount
        problem = check_data_root(self.root, require_mount)
        if problem is not None:
            raise StorageFault(problem)
        st = os.stat(self.root)
        self.device = st.st_dev
        self.was_mount = os.path.ismount(self.root)

    def problem(self, probe: bool = False) -> str | None:
        """None when the root is still the one the session started with, else the reason."""
        try:
            st = os.stat(self.root)
        except OSError as exc:
            return f"data root {self.root} is gone: {describe_os_error(exc)}"
        if not stat.S_ISDIR(st.st_mode):
            return f"data root {self.root} is not a directory any more"
        if st.st_dev != self.device:
            what = "unmounted" if not os.path.ismount(self.root) else "mounted again"
            return f"data root {self.root} is not the device it was at start ({what})"
        if (self.require_mount or self.was_mount) and not os.path.ismount(self.root):
            return f"data root {self.root} is not a mount point"
        if probe:
            return check_data_root(self.root, self.require_mount)
        return None

    def ensure(self, probe: bool = False) -> None:
        """Raise StorageFault naming the reason unless the root is fit to write to."""
        problem = self.problem(probe)
        if problem is not None:
            raise StorageFault(problem)

    def rebind(self) -> bool:
        """Adopt a root that came back as a mount point on a new device; True when usable now."""
        if self.problem(probe=True) is None:
            return True
        if not (self.require_mount or self.was_mount) or not os.path.ismount(self.root):
            return False  # a bare folder where the mount was: the local disk, never adopted
        if check_data_root(self.root, self.require_mount) is not None:
            return False
        self.device = os.stat(self.root).st_dev
        return True

    def inside(self, path: Path) -> Path:
        """``path`` resolved, refusing anything that leaves the root (``inside_root``)."""
        return inside_root(self.root, path)

    def mkdir(self, path: Path, *, exist_ok: bool = True) -> Path:
        """Create a folder under the root (parents too) after the guard check."""
        self.ensure()
        p = self.inside(path)
        p.mkdir(parents=True, exist_ok=exist_ok)
        return p

    def write_atomic(self, path: Path, data: bytes) -> None:
        """Guarded ``atomic_write_bytes``; the folder must already exist under the root."""
        self.ensure()
        atomic_write_bytes(self.inside(path), data)


class LineFile:
    """An append-only text file that only ever holds whole lines (docs/reliability.md).

    ``write`` collects text in memory (``csv.writer`` writes one row per call);
    ``flush`` sends it with ``os.write`` on an unbuffered descriptor and, when that
    fails (disk full, I/O error), cuts the file back to its last whole line before
    raising, so no reader ever meets half a row. The text that failed stays pending:
    a later ``flush`` tries it again.
    """

    def __init__(self, path: Path, *, truncate: bool = False) -> None:
        self.path = Path(path)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | (os.O_TRUNC if truncate else 0)
        self._fd: int | None = os.open(self.path, flags, 0o644)
        self.size = os.fstat(self._fd).st_size  # bytes on disk, always at a line end
        self._pending: list[str] = []

    @property
    def closed(self) -> bool:
        return self._fd is None

    def fileno(self) -> int:
        if self._fd is None:
            raise ValueError(f"{self.path} is closed")
        return self._fd

    def write(self, text: str) -> int:
        if self._fd is None:
            raise ValueError(f"{self.path} is closed")
        self._pending.append(text)
        return len(text)

    def flush(self) -> None:
        if self._fd is None or not self._pending:
            return
        data = "".join(self._pending).encode("utf-8")
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self.size)
            raise
        self._pending.clear()
        self.size += len(data)

    def discard_pending(self) -> None:
        """Forget the text not written yet (its owner keeps it elsewhere)."""
        self._pending.clear()

    def close(self) -> None:
        """Flush, fsync and close; the descriptor is closed even when the flush fails."""
        fd = self._fd
        if fd is None:
            return
        try:
            self.flush()
            os.fsync(fd)
        finally:
            self._fd = None
            os.close(fd)
