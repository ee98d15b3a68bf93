"""Suite-wide fixtures. Each area keeps its own fixtures in tests/<area>/conftest.py."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import structlog


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def tcp_port() -> int:
    return free_port(socket.SOCK_STREAM)


@pytest.fixture
def udp_port() -> int:
    return free_port(socket.SOCK_DGRAM)


def session_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temp folder every xdist worker of this session shares (the session's own base
    folder without xdist): for what is made once and read by all (file-locked)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session", autouse=True)
def _private_config_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The per-user config folder (the recorder key file, docs/recorder.md) in a temp dir:
    the suite never writes into the developer's ~/.config; child processes inherit it."""
    home = tmp_path_factory.mktemp("xdg_config")
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_CONFIG_HOME", str(home))
    # nor into the developer's data: the default data root is a fresh, absent folder
    mp.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg_data")))
    # nor its cache (the simulated lenses' maps, mecharm/sim/lensmaps.py): one per session,
    # shared by the workers, so every run starts as on a fresh machine
    cache = session_dir(tmp_path_factory) / "xdg_cache"
    cache.mkdir(exist_ok=True)
    mp.setenv("XDG_CACHE_HOME", str(cache))
    mp.delenv("MECHARM_DATA_ROOT", raising=False)
    yield home
    mp.undo()


@pytest.fixture(scope="session", autouse=True)
def _no_rerun_builders() -> Iterator[None]:
    """Trials of the suite build no Rerun file after them (each builder is a process that
    imports rerun: seconds of CPU the 2-core box lacks); the tests that are about those
    files turn them on (test_console, the shared demo root). Child processes inherit it."""
    mp = pytest.MonkeyPatch()
    mp.setenv("MECHARM_RUNTIME_VIEWING__RERUN_AFTER_TRIAL", "false")
    yield
    mp.undo()


@pytest.fixture(autouse=True)
def _fresh_structlog() -> Iterator[None]:
    """A test that configures logging (a CLI main, level=error) must not hide the next test's
    events from ``structlog.testing.capture_logs``."""
    yield
    structlog.reset_defaults()


@pytest.fixture(scope="session")
def fk_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default FK table, built once for all xdist workers (file lock) and reused.

    The directory is keyed by the source of the code that builds the table, so a table
    left by an older build in the shared temp dir is never mistaken for today's default.
    """
    import hashlib

    import mecharm.common.kinematics
    import mecharm.runtime.lookup.build
    from mecharm.runtime.lookup import ensure_table, load_table

    h = hashlib.sha256()
    for mod in (mecharm.runtime.lookup.build, mecharm.common.kinematics):
        h.update(Path(str(mod.__file__)).read_bytes())
    shared = tmp_path_factory.getbasetemp().parent / f"fk_{h.hexdigest()[:12]}"
    shared.mkdir(exist_ok=True)
    with open(shared / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        load_table(ensure_table(shared))  # builds the table and its cache once
        fcntl.flock(lock, fcntl.LOCK_UN)
    return shared


@pytest.fixture(scope="session")
def demo_root(tmp_path_factory: pytest.TempPathFactory, fk_data_dir: Path) -> Path:
    """Two real trials of `make run`'s demo (simulated rig, recorder, side video, a Rerun file
    per trial), recorded
    once per test session and shared by every xdist worker (file lock): the viewer's and the
    report's tests read the same root. Read-only for the tests: copy what you change."""
    import os
    import shutil
    import subprocess
    import sys

    from mecharm.common.layout import FK_DIR

    shared = session_dir(tmp_path_factory)
    root = shared / "demo_root"
    with open(shared / "demo_root.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = root / ".recorded"
        if not done.is_file():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            shutil.copytree(fk_data_dir / FK_DIR, root / FK_DIR)
            repo = Path(__file__).resolve().parents[1]
            proc = subprocess.run(
                [sys.executable, "-m", "mecharm.tools.demo", "--trials", "2", "--data-root", str(root)],
                capture_output=True, text=True, cwd=repo, timeout=600, check=False,
                # as `make run`: each trial's Rerun file built after it (tests/tools/test_view.py)
                env={**os.environ, "PYTHONPATH": str(repo), "MECHARM_RUNTIME_VIEWING__RERUN_AFTER_TRIAL": "true"},
            )  # fmt: skip
            if proc.returncode != 0:
                pytest.fail(
                    f"demo failed ({proc.returncode}): {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
                )
            done.write_text("ok\n")
        fcntl.flock(lock, fcntl.LOCK_UN)
    return root


# ---- real mounts (chaos suite, export): a tmpfs that fills up, an SSD that goes away


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
        # unbuffered: a buffered file's close would flush what the full disk refused and
        # raise ENOSPC from the `with` itself (it did, now and then)
        with open(filler, "wb", buffering=0) as fh, contextlib.suppress(OSError):
            remaining = max(0, free - leave_bytes)
            chunk = b"\0" * (1 << 16)
            while remaining > 0:
                fh.write(chunk[: min(len(chunk), remaining)])
                remaining -= len(chunk)
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


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run under anyio's pytest plugin (``@pytest.mark.anyio``), on asyncio:
    the loop the product's ``anyio.run`` uses (docs/concurrency.md)."""
    return "asyncio"


# ---- the test modules' asserts rewritten once, before the workers start (docs/testing.md,
# "Why a fresh clone runs slower")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Before xdist starts its workers (in its own, later, hook): write the rewritten test
    modules each of them would otherwise rewrite at once in a fresh clone."""
    from mecharm_dev.asserts_ahead import rewrite_ahead

    rewrite_ahead(session.config, Path(__file__).resolve().parent)


# ---- the order files are handed to the workers (docs/testing.md, "Order")

#: seconds a test of each kind is taken to cost when ordering the files: a chaos test runs
#: real processes through a fault (10-50 s), a `slow` one is 2 s or more by its rule
ORDER_COST_S = {"chaos": 15.0, "slow": 5.0, "other": 0.2}


def file_cost(items: list[pytest.Item]) -> float:
    """A file's estimated cost from its tests' markers (no list of file names to keep)."""
    kinds = ("chaos" if i.get_closest_marker("chaos") else
             "slow" if i.get_closest_marker("slow") else "other" for i in items)  # fmt: skip
    return sum(ORDER_COST_S[k] for k in kinds)


@pytest.hookimpl(trylast=True)  # after tests/chaos/conftest.py has marked its tests
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The costliest files first, each file's tests in their own order. With `--dist
    loadfile --no-loadscope-reorder` (the Makefile) xdist hands the files out in this order,
    so the long ones do not start last and leave one worker running alone at the end; by
    default xdist hands out the files with the most tests first, which put the long files of
    few tests (the chaos faults, the Pi profile) at the end."""
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    ranked = sorted(files.values(), key=file_cost, reverse=True)  # stable: ties keep their order
    items[:] = [item for group in ranked for item in group]
