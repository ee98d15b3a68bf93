"""Records that could not be written yet: kept in memory until the data root is back.

A storage fault (disk full, I/O error, the SSD pulled) must not lose a trial's
records, and must not send them anywhere but the data root (docs/reliability.md).
What a trial could not write is queued here, in order, as small closures over the
data it holds in memory (trace lines, the ledger row, the run log, the memories);
the service retries the queue before every trial and at exit, and what is still
queued when the process ends is reported as lost, with counts, on the console and
in the log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mecharm.common.fsutil import DataRootGuard, StorageFault, describe_os_error
from mecharm.common.logging import get_logger

__all__ = ["Backlog", "PendingWrite"]

log = get_logger("mecharm.runtime.records.backlog")


@dataclass
class PendingWrite:
    run_stem: str
    what: str  # "trace (12 lines)", "ledger row", "run log", "memories"
    write: Callable[[], object]
    error: str = ""


class Backlog:
    """An ordered queue of pending writes; ``flush`` writes them in order while the root takes them."""

    def __init__(self) -> None:
        self.items: list[PendingWrite] = []
        self.flushed = 0

    def __len__(self) -> int:
        return len(self.items)

    def add(self, run_stem: str, what: str, write: Callable[[], object], error: str = "") -> None:
        self.items.append(PendingWrite(run_stem, what, write, error))
        log.warning("record_pending", run_stem=run_stem, what=what, error=error or None)

    def attempt(
        self, guard: DataRootGuard, run_stem: str, what: str, write: Callable[[], object]
    ) -> bool:
        """Write now when nothing is queued before it and the root takes it, else queue it."""
        if not self.items:
            try:
                guard.ensure()
                write()
                return True
            except (OSError, StorageFault) as exc:
                self.add(run_stem, what, write, describe_os_error(exc, f"writing the {what}"))
                return False
        self.add(run_stem, what, write, "an earlier record is still pending")
        return False

    def flush(self, guard: DataRootGuard) -> int:
        """Write what is queued, in order, stopping at the first failure; returns how many were written."""
        done = 0
        while self.items:
            item = self.items[0]
            try:
                guard.ensure(probe=True)
                item.write()
            except (OSError, StorageFault) as exc:
                item.error = describe_os_error(exc, f"writing the {item.what}")
                break
            self.items.pop(0)
            done += 1
            log.info("record_flushed", run_stem=item.run_stem, what=item.what)
        self.flushed += done
        return done

    def describe(self) -> str:
        """``3 records of run_0004 (trace, ledger row, run log)``: what the operator would lose."""
        runs: dict[str, list[str]] = {}
        for item in self.items:
            runs.setdefault(item.run_stem, []).append(item.what)
        return "; ".join(
            f"{len(whats)} record(s) of {stem} ({', '.join(whats)})" for stem, whats in runs.items()
        )
