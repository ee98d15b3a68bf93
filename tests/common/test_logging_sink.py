"""A log line that cannot be written is dropped and counted, never raised (docs/reliability.md,
"No write ends a process"): on /dev/full, on a closed stream, on a file whose disk is gone."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import pytest

from mecharm.common.fsutil import LineFile
from mecharm.common.logging import configure_logging, get_logger, log_lines_dropped


@pytest.fixture(autouse=True)
def _back_to_stderr() -> object:
    yield None
    configure_logging("warning")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_a_full_disk_drops_the_lines_counts_them_and_says_so_once() -> None:
    told: list[str] = []
    full = open("/dev/full", "w", encoding="utf-8")  # noqa: SIM115 - its close fails too
    configure_logging("info", json=True, stream=full, on_drop=told.append)
    log = get_logger("test")
    for i in range(5):
        log.warning("storage_fault", i=i)  # must not raise
    assert log_lines_dropped() == 5
    assert told == ["No space left on device (ENOSPC)"]
    with contextlib.suppress(OSError):
        full.close()


def test_a_closed_stream_and_a_failing_notice_raise_nothing() -> None:
    stream = io.StringIO()
    stream.close()

    def notice(_why: str) -> None:
        raise RuntimeError("the console is gone too")

    configure_logging("info", json=True, stream=stream, on_drop=notice)
    get_logger("test").error("mount_lost")
    assert log_lines_dropped() == 1


def test_a_line_file_keeps_whole_lines_and_goes_on_after_a_drop(tmp_path: Path) -> None:
    path = tmp_path / "runtime.log"
    lf = LineFile(path)
    configure_logging("info", json=True, stream=lf)
    log = get_logger("test")
    log.info("first")
    os.close(lf.fileno())  # the descriptor fails under the logger (as a vanished disk's does)
    lf._fd = os.open("/dev/full", os.O_WRONLY) if os.path.exists("/dev/full") else lf._fd
    log.info("dropped")
    assert log_lines_dropped() == 1
    events = [json.loads(line)["event"] for line in path.read_text().splitlines()]
    assert events == ["first"]
    # reconfigured, a new count starts
    configure_logging("info", json=True, stream=io.StringIO())
    assert log_lines_dropped() == 0
