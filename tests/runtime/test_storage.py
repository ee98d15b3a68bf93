"""Storage-fault building blocks without a mount: the trace writer, the backlog, the guard.

``/dev/full`` is the kernel's own full disk (every write fails with ENOSPC), so the
trace writer's fault path runs for real here; the mid-trial faults on a real tmpfs
are in tests/chaos/test_storage_faults.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from mecharm.common.fsutil import DataRootGuard, StorageFault, describe_os_error
from mecharm.runtime.records.backlog import Backlog
from mecharm.runtime.records.trace import TraceWriter, read_trace

needs_dev_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")


@needs_dev_full
def test_a_write_on_a_full_disk_never_raises_and_keeps_the_lines() -> None:
    trace = TraceWriter(Path("/dev/full"))
    trace.write("trial", run_stem="x")  # must not raise into the stage machine
    trace.input("angles", [1, 2, 3])
    assert trace.fault == "No space left on device (ENOSPC) writing the trace"
    assert trace.check_storage() == trace.fault
    assert [ln["seq"] for ln in trace.lines] == [1, 2] and trace.pending == 2
    trace.result("stopped", "storage (...)")  # closing a faulted trace is quiet too
    assert trace.lines[-1]["event"] == "result"


def test_recover_appends_only_the_lines_the_file_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    trace = TraceWriter(path)
    for k in range(3):
        trace.input("n", k)
    # the disk filled in the middle of line 4: whole lines stay, the half line is cut later
    with open(path, "a") as fh:
        fh.write('{"seq": 4, "event": "inp')
    trace._fail("No space left on device (ENOSPC) writing the trace")
    trace.input("n", 3)
    trace.result("stopped", "storage (x)")
    assert trace.pending == 2
    assert trace.recover() == 2 and trace.pending == 0
    lines = list(read_trace(path))
    assert [ln["seq"] for ln in lines] == [1, 2, 3, 4, 5] and lines[-1]["event"] == "result"
    assert path.read_text().endswith("\n")


def test_a_long_session_keeps_only_its_tail_in_memory_and_every_line_on_disk(
    tmp_path: Path,
) -> None:
    # the LeRobot robot writes two or three lines a tick for hours (docs/lerobot-robot.md)
    path = tmp_path / "t.jsonl"
    trace = TraceWriter(path, keep_lines=10)
    for k in range(100):
        trace.decision("stream_step", k)
    assert len(trace.lines) == 10 and trace.lines[0]["seq"] == 91 and trace.pending == 0
    assert [ln["seq"] for ln in read_trace(path)] == list(range(1, 101))
    # lines not yet on disk are never forgotten: recover() still needs them
    trace._fail("No space left on device (ENOSPC) writing the trace")
    for k in range(30):
        trace.decision("stream_step", 100 + k)
    assert trace.pending == 30 and len(trace.lines) == 40
    assert trace.recover() == 30 and [ln["seq"] for ln in read_trace(path)][-1] == 130
    memory = TraceWriter(None, keep_lines=5)  # no file: the tail only
    for k in range(12):
        memory.input("n", k)
    assert [ln["seq"] for ln in memory.lines] == [8, 9, 10, 11, 12]


def test_recover_rewrites_a_trace_the_new_disk_does_not_have(tmp_path: Path) -> None:
    path = tmp_path / "run" / "t.jsonl"
    path.parent.mkdir()
    trace = TraceWriter(path)
    trace.input("n", 0)
    trace._fail("data root gone")
    trace.result("stopped", "storage (data root gone)")
    path.unlink()
    path.parent.rmdir()  # a fresh disk: not even the run folder
    guard = DataRootGuard(tmp_path)
    trace.guard = guard
    assert trace.recover() == 2
    assert [ln["event"] for ln in read_trace(path)] == ["input", "result"]


def test_read_trace_tolerates_a_cut_tail_but_not_a_bad_middle_line(tmp_path: Path) -> None:
    good = [json.dumps({"seq": k, "event": "input"}) for k in (1, 2)]
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(good) + '\n{"seq": 3, "ev')
    with capture_logs() as logs:
        assert [ln["seq"] for ln in read_trace(cut)] == [1, 2]
    assert [e["event"] for e in logs] == ["trace_truncated_tail"]
    assert logs[0]["line"] == 3 and logs[0]["dropped_bytes"] == len('{"seq": 3, "ev')
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good[0] + "\nnot json\n" + good[1] + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not JSON"):
        list(read_trace(bad))


def test_backlog_keeps_order_and_stops_at_the_first_failure(tmp_path: Path) -> None:
    guard = DataRootGuard(tmp_path)
    written: list[str] = []
    fail = {"ledger row": True}

    def writer(what: str) -> object:
        def write() -> None:
            if fail.get(what):
                raise OSError(28, "No space left on device")
            written.append(what)

        return write

    log = Backlog()
    assert log.attempt(guard, "run_0001", "memories", writer("memories"))
    assert not log.attempt(guard, "run_0001", "ledger row", writer("ledger row"))
    # queued behind the failed one even though it would succeed: the order is the contract
    assert not log.attempt(guard, "run_0001", "run log", writer("run log"))
    assert written == ["memories"] and len(log) == 2
    assert log.items[0].error == "No space left on device (ENOSPC) writing the ledger row"
    assert log.describe() == "2 record(s) of run_0001 (ledger row, run log)"
    assert log.flush(guard) == 0 and len(log) == 2
    fail.clear()
    assert log.flush(guard) == 2 and written == ["memories", "ledger row", "run log"]


def test_guard_refuses_a_missing_root_and_paths_outside_it(tmp_path: Path) -> None:
    with pytest.raises(StorageFault, match="does not exist"):
        DataRootGuard(tmp_path / "nope")
    root = tmp_path / "root"
    root.mkdir()
    guard = DataRootGuard(root)
    assert guard.problem(probe=True) is None
    with pytest.raises(StorageFault, match="outside the data root"):
        guard.mkdir(root / ".." / "elsewhere")
    assert not (tmp_path / "elsewhere").exists()
    root.rename(tmp_path / "moved")
    assert guard.problem() is not None and "is gone" in str(guard.problem())
    with pytest.raises(StorageFault):
        guard.mkdir(root / "runs")
    assert not root.exists()  # never recreated: a missing SSD must not become a local folder


def test_guard_refuses_a_root_that_is_not_a_mount_point_when_required(tmp_path: Path) -> None:
    with pytest.raises(StorageFault, match="not a mount point"):
        DataRootGuard(tmp_path, require_mount=True)


def test_describe_os_error_names_the_errno() -> None:
    assert describe_os_error(OSError(5, "Input/output error"), "writing x") == (
        "Input/output error (EIO) writing x"
    )
    assert describe_os_error(StorageFault("gone")) == "gone"


def test_export_reads_a_ledger_whose_last_append_was_cut_short(tmp_path: Path) -> None:
    from mecharm.common.layout import DataRoot
    from mecharm.runtime.records.ledger import append_row
    from mecharm.tools.export.selection import read_ledger

    ledger = DataRoot(tmp_path).ledger
    append_row(ledger, {"run_stem": "run_0001_20260101_000000", "status": "completed"})
    with open(ledger, "a") as fh:
        fh.write("run_0002_20260101_000100,2026-01-01T00:01")  # the disk filled mid-row
    with capture_logs() as logs:
        rows = read_ledger(tmp_path)
    assert [r["run_stem"] for _n, r in rows] == ["run_0001_20260101_000000"]
    assert [e["event"] for e in logs] == ["ledger_truncated_tail"]


@pytest.mark.anyio
async def test_a_trial_the_root_refuses_is_retried_then_the_service_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The root fails between the check and the trial's first file (run_trial raises
    DataRootError before the arm moves): the service waits and tries again, and stops with
    a storage problem after the third refusal instead of spinning or exiting as "refused at
    start"."""
    import io
    from collections.abc import AsyncIterator
    from contextlib import asynccontextmanager
    from types import SimpleNamespace
    from typing import Any

    from mecharm.runtime import service
    from mecharm.runtime.config import RuntimeSettings
    from mecharm.runtime.recorder_link import RecorderLink
    from mecharm.runtime.trial import DataRootError

    calls: list[int] = []

    @asynccontextmanager
    async def fake_rig(settings: RuntimeSettings, guard: Any) -> AsyncIterator[tuple[Any, None]]:
        yield (
            SimpleNamespace(
                guard=guard, backlog=Backlog(), recorder=RecorderLink(None), settings=settings
            ),
            None,
        )

    async def refused_trial(rig: Any, **kw: Any) -> Any:
        calls.append(1)
        raise DataRootError(f"{tmp_path / 'x'} is a file, not a folder")

    monkeypatch.setattr(service, "open_rig", fake_rig)
    monkeypatch.setattr(service, "run_trial", refused_trial)
    out = io.StringIO()
    report = await service.run_service(RuntimeSettings(data_root=tmp_path, trials=5), out=out)
    assert len(calls) == 3 and report.trials == []
    assert report.storage_problem.startswith("storage: ") and "is a file" in report.storage_problem
    assert out.getvalue().count("trial not started:") == 3
