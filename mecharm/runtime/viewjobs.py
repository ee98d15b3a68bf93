"""The session's Rerun helpers, as background processes that can never hold up or fail a trial.

After each trial its Rerun file is built from its records by ``mecharm.tools.view --save``
(niced, started once the trial's records are written, never awaited inside a trial; one
builder at a time, the others queued: each takes a few hundred MB); ``--display`` runs
``mecharm.tools.view --follow`` beside the session. Before the first trial ``start`` checks
that rerun-sdk is importable and (for ``--display``) that a viewer can be spawned, and says
in one line what is off otherwise. A helper that fails gives one warning line on the console
and its log file under the data root's logs folder; the trials and the exit code are
unchanged (docs/console.md, "Rerun").
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anyio

from mecharm.common.fsutil import DataRootGuard, StorageFault
from mecharm.common.layout import DataRoot
from mecharm.common.logging import get_logger
from mecharm.common.rerun_viewer import (
    INSTALL_HINT,
    display_problem,
    rerun_available,
    viewer_executable,
)

__all__ = ["VIEW_MODULE", "ViewJobs", "rerun_missing", "viewer_missing"]

log = get_logger("mecharm.runtime.viewjobs")

#: the module run as ``python -m``; tests point it at one that fails
VIEW_MODULE = "mecharm.tools.view"


def rerun_missing() -> str | None:
    """Why no Rerun file can be built by this Python (None: rerun-sdk is importable).

    A cheap look (no import: rerun-sdk takes seconds to import); the builders run this same
    interpreter."""
    return None if rerun_available() else f"rerun-sdk not installed ({INSTALL_HINT})"


def viewer_missing(python: str = sys.executable) -> str | None:
    """Why ``--display`` cannot spawn a Rerun viewer (None: the ``rerun`` executable is beside
    ``python``, as in an installed venv that is not activated, or on PATH)."""
    if viewer_executable(python) is not None:
        return None
    return f"no Rerun viewer (rerun) beside {python} or on PATH ({INSTALL_HINT})"


#: builders a session left running when it ended (they finish on their own); kept referenced
#: so their ``Popen`` objects are not collected while the process runs
_LEFT_RUNNING: list[subprocess.Popen[bytes]] = []


@dataclass
class _Job:
    what: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    told: bool = False
    #: said when it ends well (None: nothing to say)
    done: str | None = None


class ViewJobs:
    """``say(text)`` puts a line on the operator's console."""

    def __init__(
        self,
        root: Path,
        say: Callable[[str], None],
        *,
        module: str | None = None,
        python: str = sys.executable,
        guard: DataRootGuard | None = None,
        task: str | None = None,
    ) -> None:
        #: the session's task's folders: a trial's Rerun file goes into its run folder
        self.layout = DataRoot(root, task) if task else DataRoot(root)
        #: nothing is written (not even a log file) unless the root is still the session's
        self.guard = guard
        self.say = say
        self.module = module or VIEW_MODULE
        self.python = python
        self.builds: list[_Job] = []
        #: (run_dir, run_stem, wait_s) of the builds waiting for the running one to end
        self.queue: list[tuple[Path, str, float]] = []
        self.follower: _Job | None = None
        #: why no trial's Rerun file is built this session (None: they are)
        self.builds_off: str | None = None

    def start(self, build: bool, display: bool, url: str | None) -> None:
        """Before the first trial: what can run. One line for what cannot (then nothing of it
        is tried); ``--display`` with a viewer at hand starts the live view."""
        missing = rerun_missing()
        if build and missing:
            self.builds_off = missing
            log.warning("rerun_files_off", reason=missing)
            self.say(f"Rerun files off: {missing}, or --no-rerun")
        if not display:
            return
        off = missing or (None if url else viewer_missing(self.python) or display_problem())
        if off:
            log.warning("live_view_off", reason=off)
            self.say(
                f"live view off (--display): {off}; or --display-url URL of a running viewer, "
                "or after a trial `mecharm view RUN --web` (a browser)"
                if not missing
                else f"live view off (--display): {off}"
            )
            return
        self.follow(url)

    def _spawn(self, what: str, args: list[str], log_name: str) -> _Job | None:
        # niced: the trials keep the CPU (``nice`` rather than a preexec hook: the console's
        # refresh thread makes forking with one unsafe)
        nice = shutil.which("nice")
        argv = [*([nice, "-n", "10"] if nice else []), self.python, "-m", self.module, *args]
        log_path = self.layout.logs / log_name
        try:
            if self.guard is not None:
                self.guard.mkdir(log_path.parent)
            else:
                log_path.parent.mkdir(exist_ok=True)
            with open(log_path, "ab") as out:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # the operator's Ctrl-C is for the runtime
                )
        except (OSError, StorageFault) as exc:
            log.warning("view_not_started", what=what, argv=argv, error=str(exc))
            self.say(f"warning: {what} not started ({exc}); the trials go on without it")
            return None
        log.info("view_started", what=what, argv=argv, pid=proc.pid, log=str(log_path))
        return _Job(what, proc, log_path)

    def build(self, run_dir: Path, run_stem: str, wait_s: float) -> None:
        """Build the trial's Rerun file in the background (``wait_s``: for its side video),
        after the builds queued before it: never two builders at once."""
        if self.builds_off:
            return
        self.queue.append((run_dir, run_stem, wait_s))
        self.reap()

    def _next_build(self) -> None:
        """Start the oldest queued build when none is running."""
        while self.queue and not self.outstanding:
            run_dir, run_stem, wait_s = self.queue.pop(0)
            self._spawn_build(run_dir, run_stem, wait_s)

    def _spawn_build(self, run_dir: Path, run_stem: str, wait_s: float) -> None:
        rrd = self.layout.rerun(run_stem)
        args = [str(run_dir), "--save", str(rrd), "--wait", f"{wait_s:g}"]
        job = self._spawn(f"Rerun file of {run_stem}", args, f"view_{run_stem}.log")
        if job is not None:
            job.done = f"Rerun file of {run_stem} written: {rrd}"
            self.builds.append(job)

    def follow(self, url: str | None) -> None:
        """``--display``: stream the trials to a viewer while they run."""
        args = ["--follow", str(self.layout.root)] + (["--connect", url] if url else [])
        stamp = time.strftime("%Y%m%d_%H%M%S")
        self.follower = self._spawn("live view (--display)", args, f"view_follow_{stamp}.log")

    def reap(self) -> None:
        """One line for each helper that ended: the file it wrote, or a warning (once each)."""
        for job in [*self.builds, *([self.follower] if self.follower else [])]:
            rc = job.proc.poll()
            if rc is None or job.told:
                continue
            job.told = True
            if rc != 0:
                log.warning("view_failed", what=job.what, exit_code=rc, log=str(job.log_path))
                self.say(f"warning: {job.what} failed (exit {rc}); see {job.log_path}")
            elif job.done:
                self.say(job.done)
        self.builds = [j for j in self.builds if j.proc.poll() is None or not j.told]
        self._next_build()

    @property
    def outstanding(self) -> list[_Job]:
        return [j for j in self.builds if j.proc.poll() is None]

    async def finish(self, timeout_s: float, give_up: Callable[[], bool] = lambda: False) -> None:
        """End of session: stop the live view; wait for the builders at most ``timeout_s``
        (saying so), and leave the ones still running to finish on their own."""
        if self.follower is not None:
            await _stop(self.follower.proc)
            self.follower.told = self.follower.told or self.follower.proc.returncode in (
                0,
                -signal.SIGINT,
                -signal.SIGTERM,
                130,
            )
        self.reap()
        n = len(self.outstanding) + len(self.queue)
        if n:
            self.say(f"waiting up to {timeout_s:g} s for {n} Rerun file(s) to be built ...")
            deadline = time.monotonic() + timeout_s
            while (self.outstanding or self.queue) and time.monotonic() < deadline:
                if give_up():
                    break
                await anyio.sleep(0.2)
                self.reap()  # the next queued one starts as one ends
        self.reap()
        if self.queue:
            stems = ", ".join(stem for _, stem, _ in self.queue)
            log.warning("view_not_built", runs=stems)
            self.say(
                f"Rerun file(s) not built (session over): {stems}; build one later with "
                "mecharm view RUN_DIR --save FILE"
            )
            self.queue.clear()
        left = self.outstanding
        if left:
            self.say(
                f"{len(left)} Rerun file(s) still being built in the background: "
                + ", ".join(str(j.log_path) for j in left)
            )
            _LEFT_RUNNING[:] = [p for p in _LEFT_RUNNING if p.poll() is None]
            _LEFT_RUNNING.extend(j.proc for j in left)


async def _stop(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """SIGINT (the view's graceful path), then SIGTERM, then SIGKILL."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            return
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while proc.poll() is None and time.monotonic() < deadline:
            await anyio.sleep(0.05)
