"""Shared-secret key files (docs/recorder.md, "The key file").

The runtime and the recorder sign their datagrams with one secret that lives in a
file only their user can read. Whichever process starts first creates it: 32
random bytes as hex, written to a private temporary file (``O_EXCL``, mode 0600
from the first byte) and published with ``link()``, which never replaces a file
that exists; so two processes starting together agree on one key and a reader
never sees a half-written one. A key file that group or others may access is
refused, with the ``chmod`` that fixes it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import time
from pathlib import Path

__all__ = [
    "KEY_MIN_CHARS",
    "KeyFileError",
    "config_dir",
    "default_daemon_token_file",
    "default_recorder_key_file",
    "load_or_create_key",
    "read_daemon_token",
    "read_key",
    "read_secret_file",
    "secret_file_problem",
]

#: a key of fewer characters is refused (the generated one has 64 hex characters)
KEY_MIN_CHARS = 32
_KEY_MAX_CHARS = 4096
_PUBLISH_WAIT_S = 2.0


class KeyFileError(ValueError):
    """The key file cannot be used; the message names the file and what to do."""


def config_dir() -> Path:
    """The per-user configuration folder: ``$XDG_CONFIG_HOME/mecharm`` (default ``~/.config/mecharm``)."""
    base = os.environ.get("XDG_CONFIG_HOME", "").strip()
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return root / "mecharm"


def default_recorder_key_file() -> Path:
    """Where the runtime and the recorder look for their shared secret unless told otherwise."""
    return config_dir() / "recorder.key"


def default_daemon_token_file() -> Path:
    """The daemon's shared secret, beside the recorder key: the runtime sends it when it
    exists (docs/setup.md, "Defaults"); the daemon requires it with ``--token-file``."""
    return config_dir() / "daemon.token"


def read_daemon_token(path: Path | None) -> str | None:
    """The token the runtime says hello with: from ``path``; None: from the default file when
    it exists, else no token. Raises KeyFileError naming the file and what to do."""
    if path is None:
        path = default_daemon_token_file()
        if not path.is_file():
            return None
    path = Path(path).expanduser()
    try:
        token = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise KeyFileError(
            f"token file {path} does not exist; copy the daemon's token there "
            f"(default {default_daemon_token_file()}) or pass --token-file"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KeyFileError(f"token file {path}: cannot read: {exc}") from None
    if not token:
        raise KeyFileError(f"token file {path} is empty; copy the daemon's token there")
    return token


def secret_file_problem(path: Path, st: os.stat_result, what: str) -> str | None:
    """Why a secret (the recorder key, the daemon token) at ``path`` with status ``st``
    cannot be trusted, or None: not a regular file, readable or writable by group or
    others, another user's, or in a folder group or others may write (anyone there could
    swap the file). One rule for every secret (docs/recorder.md, "The key file")."""
    if not stat.S_ISREG(st.st_mode):
        return f"{what} {path} is not a regular file"
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        return (
            f"{what} {path} is accessible by group or others "
            f"(mode {stat.S_IMODE(st.st_mode):04o}); run: chmod 600 {path}"
        )
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"{what} {path} belongs to uid {st.st_uid}, not to this user ({os.getuid()})"
    folder = Path(os.path.abspath(path)).parent
    try:
        dst = folder.stat()
    except OSError as exc:
        return f"{what} {path}: cannot check its folder: {exc.strerror or exc}"
    if dst.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (
            f"{what} {path} is in a folder group or others may write "
            f"(mode {stat.S_IMODE(dst.st_mode):04o}): anyone could replace it; keep it in a "
            f"private folder (e.g. {config_dir()}) or run: chmod go-w {folder}"
        )
    return None


def read_secret_file(path: Path, what: str, limit: int, cannot: str = "cannot open") -> bytes:
    """The first ``limit`` bytes of a secret at ``path``, opened without following a
    symlink and checked by ``secret_file_problem`` on the open file (so it cannot be
    swapped between the check and the read). Raises KeyFileError naming ``what``."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise KeyFileError(f"{what} {path}: {cannot}: {exc.strerror or exc}") from None
    try:
        problem = secret_file_problem(path, os.fstat(fd), what)
        if problem is not None:
            raise KeyFileError(problem)
        return os.read(fd, limit)
    finally:
        os.close(fd)


def read_key(path: Path) -> bytes:
    """The secret in ``path``; raise KeyFileError when it is missing, too open or not a key."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise KeyFileError(f"key file {path} does not exist")
    data = read_secret_file(path, "key file", _KEY_MAX_CHARS + 2)
    try:
        text = data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise KeyFileError(f"key file {path}: not ASCII text") from None
    if len(text) < KEY_MIN_CHARS or len(text) > _KEY_MAX_CHARS or any(c.isspace() for c in text):
        raise KeyFileError(
            f"key file {path}: the key must be one line of {KEY_MIN_CHARS}..{_KEY_MAX_CHARS} "
            f"characters without spaces (e.g. `openssl rand -hex 32`)"
        )
    return text.encode("ascii")


def _publish_new_key(path: Path) -> None:
    """Create ``path`` with a fresh key unless it exists (then leave it alone)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_hex(32).encode("ascii") + b"\n")
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)  # atomic, and never replaces a key another process published
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links: exclusive create of the file itself
            fd2 = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd2, "wb") as fh:
                fh.write(Path(tmp).read_bytes())
                fh.flush()
                os.fsync(fh.fileno())
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def load_or_create_key(path: Path) -> bytes:
    """Read the shared secret at ``path``, creating the file (0600) first if there is none.

    Raises KeyFileError naming the file: too open (with the chmod to run), not a key,
    or the folder is not writable.
    """
    path = Path(path).expanduser()
    if not path.exists() and not path.is_symlink():
        try:
            _publish_new_key(path)
        except FileExistsError:
            pass  # another process is creating it right now
        except OSError as exc:
            raise KeyFileError(f"key file {path}: cannot create: {exc.strerror or exc}") from None
    deadline = time.monotonic() + _PUBLISH_WAIT_S
    while True:
        try:
            return read_key(path)
        except KeyFileError:
            # the no-hard-link fallback may be mid-write in another process: wait briefly
            try:
                short = path.stat().st_size < KEY_MIN_CHARS
            except OSError:
                short = False
            if not short or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
