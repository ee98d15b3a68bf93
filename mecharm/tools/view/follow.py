"""``mecharm view --follow DATA_ROOT``: stream trials to a viewer while their traces grow.

Polls the data root's run folders (``POLL_S``) for the newest trial and tails its
trace: every complete new line goes through the same ``TrialLogger`` as a finished
trial, so the live view and the trial's .rrd show the same entities. All trials go
into one recording, on the same entity paths, one after another on the ``time``
timeline; each new trial starts with a "trial ... starts" line on ``events/stages``.
The side video is not streamed (the recorder finishes the mp4 after the trial);
the trial's own .rrd has it. Stops on SIGINT/SIGTERM (docs/viewing.md, "Follow mode").
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import rerun as rr

from mecharm.common.layout import TRACE_SUFFIX, DataRoot, run_number
from mecharm.common.logging import get_logger
from mecharm.tools.view.rerunlog import TrialLogger
from mecharm.tools.view.trialfiles import ViewInputError, parse_line

__all__ = ["POLL_S", "TraceTail", "follow", "newest_trial", "stop_signals"]

log = get_logger("mecharm.tools.view.follow")

#: how often the run folders and the trace are looked at (5 Hz)
POLL_S = 0.2


def newest_trial(root: DataRoot) -> Path | None:
    """The highest-numbered run folder of any task (run numbers count across the tasks of a
    root, docs/tasks.md), or None when there is none yet."""
    best: tuple[int, Path] | None = None
    for folder in root.task_folders():
        try:
            entries = list(folder.iterdir())
        except OSError:
            continue
        for p in entries:
            n = run_number(p.name)
            if n is not None and p.is_dir() and (best is None or n > best[0]):
                best = (n, p)
    return best[1] if best else None


class TraceTail:
    """The complete lines appended to one trace since the last ``read``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.line_no = 0
        self._partial = b""

    def read(self) -> Iterator[tuple[int, bytes]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return
        self.offset += len(data)
        data = self._partial + data
        *lines, self._partial = data.split(b"\n")
        for raw in lines:
            self.line_no += 1
            if raw.strip():
                yield self.line_no, raw


@contextmanager
def stop_signals() -> Iterator[Callable[[], bool]]:
    """A ``stopped()`` check set by SIGINT or SIGTERM; the old handlers come back after."""
    hit: list[int] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        hit.append(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield lambda: bool(hit)
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def follow(rec: rr.RecordingStream, root: DataRoot, stopped: Callable[[], bool], say: Callable[[str], None]) -> int:  # fmt: skip
    """Stream the newest trial and every later one into ``rec`` until ``stopped()``; the
    number of trace lines streamed."""
    stem: str | None = None
    tail: TraceTail | None = None
    logger: TrialLogger | None = None
    lines = trial_lines = 0
    while not stopped():
        newest = newest_trial(root)
        if newest is not None and newest.name != stem:
            stem = newest.name
            tail = TraceTail(newest / f"{stem}{TRACE_SUFFIX}")
            logger = TrialLogger(rec, run_dir=newest, stem=stem)
            trial_lines = 0
            log.info("follow_trial", run_stem=stem)
            say(f"following {stem}")
        if tail is not None and logger is not None:
            for n, raw in tail.read():
                try:
                    e = parse_line(tail.path, n, raw.decode("utf-8", errors="replace"))
                except ViewInputError as exc:
                    logger.note(str(exc))
                    continue
                skipped = len(logger.skipped)
                logger.event(e)
                for why in logger.skipped[skipped:]:  # said live, as a finished trial's note
                    logger.note(f"skipped {why}", logger.last_ts)
                lines += 1
                trial_lines += 1
                if e.get("event") == "result":
                    logger.flush()
                    say(f"{stem}: {e.get('status')} ({trial_lines} trace lines)")
            logger.flush()
        time.sleep(POLL_S)
    if logger is not None:  # images written after the last stage end
        logger.images()
        logger.flush()
    return lines
