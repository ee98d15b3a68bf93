"""Storage faults mid-trial against the real service: a full disk, a lazily unmounted SSD.

The sim daemon and workcell run as a process, the runtime in-process through
``run_service`` (the same code as ``mecharm-runtime``), the data root on a real
tmpfs. What must hold (docs/reliability.md, "Storage faults"): no traceback, the
trial ends ``stopped`` with reason ``storage (...)`` through the exit path (never
with the block in the air), the records wait in memory and reach the data root
once it is back (trace ending in ``result``, ledger row), and nothing is ever
written outside the root.
"""

from __future__ import annotations

import asyncio
import csv
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mecharm.common.config import load_settings
from mecharm.common.layout import DataRoot
from mecharm.common.shutdown import ShutdownSignals
from mecharm.recorder.sender import RecorderSender
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.records.ledger import verify_ledger
from mecharm.runtime.records.trace import read_trace
from mecharm.runtime.service import ServiceReport, run_service
from mecharm.runtime.simcontrol import scene_next
from mecharm.tools.simrig import SimRig, start_recorder, start_sim_daemon

SCALE = 20.0
SIDE = "synthetic?fps=15&w=320&h=240"
#: stages during which the gripper holds the block (a storage abort must never end there)
HOLDING = {"lift_and_judge", "approach_place", "descend_place", "servo_place", "release"}


class Console(io.StringIO):
    """The operator's console; ``when(text, action)`` runs ``action`` once when ``text`` is printed."""

    def __init__(self) -> None:
        super().__init__()
        self.actions: list[tuple[str, Callable[[], None]]] = []

    def when(self, text: str, action: Callable[[], None]) -> None:
        self.actions.append((text, action))

    def write(self, s: str) -> int:
        n = super().write(s)
        for i, (text, action) in enumerate(self.actions):
            if text in s:
                self.actions.pop(i)
                action()
                break
        return n


@pytest.fixture
def sim_rig(tmp_path: Path) -> Any:
    rig = start_sim_daemon(tmp_path / "logs", seed=7, time_scale=SCALE)
    yield rig
    rig.daemon.stop()


def _settings(root: Path, fk: Path, rig: SimRig, **over: Any) -> RuntimeSettings:
    return load_settings(
        RuntimeSettings,
        overrides={
            "data_root": root,
            "fk_data_dir": fk,
            "daemon_port": rig.daemon_port,
            "top_camera": rig.top_url,
            "recorder_enabled": False,
            "time_scale": SCALE,
            "trials": 2,
            **over,
        },
    )


def _run(settings: RuntimeSettings, console: Console, rig: SimRig) -> ServiceReport:
    async def between(i: int) -> int:
        await asyncio.to_thread(scene_next, rig.control_url, 7 + i)
        return 7 + i

    scene_next(rig.control_url, 7)
    return asyncio.run(
        run_service(settings, signals=ShutdownSignals(), out=console, between_trials=between)
    )


def _ledger(root: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(DataRoot(root).ledger.read_text().splitlines()))


def _exit_went_home(trace: list[dict[str, Any]]) -> bool:
    exits = [e for e in trace if e["event"] == "decision" and e.get("kind") == "exit"]
    steps = exits[-1]["value"]["steps"] if exits else []
    return any(s.get("step") == "home" and s.get("ok") for s in steps)


@pytest.mark.parametrize("fill_after", ["approach_pick", "grasp"])
def test_disk_full_mid_trial_stops_safely_and_keeps_every_record(
    tmpfs: Any, fk_data_dir: Path, sim_rig: SimRig, fill_after: str
) -> None:
    fs = tmpfs("root", size_kib=16 * 1024)
    console = Console()
    fillers: list[Path] = []
    # the disk fills right after `fill_after`; the operator frees it when the console asks
    console.when(f"  {fill_after} ", lambda: fillers.append(fs.fill()))
    console.when("data root unwritable", lambda: fillers[0].unlink())
    report = _run(_settings(fs.path, fk_data_dir, sim_rig, storage_wait_s=60.0), console, sim_rig)
    out = console.getvalue()
    assert "Traceback" not in out
    first, second = report.trials
    assert first.status == "stopped" and first.reason.startswith("storage ("), first.reason
    assert "No space left on device (ENOSPC)" in first.reason
    assert first.records_pending, "the full disk kept some records in memory"
    # the abort came at a stage boundary where the gripper was empty, then the arm went home
    trace = list(read_trace(first.trace_path))
    abort = next(e for e in trace if e["event"] == "transition" and e["to"] == "abort")
    assert abort["frm"] not in HOLDING, abort
    if fill_after == "grasp":  # the block was in the gripper: the place went on to the release
        assert any(e["event"] == "transition" and e["frm"] == "release" for e in trace)
    assert _exit_went_home(trace)
    # once the space is back every record is on disk, whole lines only
    assert trace[-1]["event"] == "result" and trace[-1]["reason"] == first.reason
    assert [e["seq"] for e in trace] == list(range(1, len(trace) + 1))
    rows = _ledger(fs.path)
    assert [r["run_stem"] for r in rows] == [first.run_stem, second.run_stem]
    assert rows[0]["status"] == "stopped" and rows[0]["reason"] == first.reason
    assert verify_ledger(DataRoot(fs.path).ledger).ok
    assert DataRoot(fs.path).runlog(first.run_stem).is_file()
    # the next trial waited for the root and then ran normally
    assert "data root unwritable" in out and "wrote" in out
    assert second.status == "completed", second.reason
    assert not report.storage_problem and not report.records_lost


def _all_files(path: Path) -> list[Path]:
    return [Path(d) / f for d, _dirs, files in os.walk(path) for f in files]


def test_lazy_unmount_mid_trial_writes_nothing_outside_the_root(
    tmpfs: Any, fk_data_dir: Path, sim_rig: SimRig, tmp_path: Path
) -> None:
    """Both writers run: the runtime and a recording recorder, each with require_mount."""
    fs = tmpfs("ssd", size_kib=32 * 1024)
    rec, udp = start_recorder(tmp_path / "logs", fs.path, SIDE, extra_args=["--require-mount"])
    console = Console()
    console.when("  approach_pick ", fs.unmount_lazy)
    settings = _settings(
        fs.path,
        fk_data_dir,
        sim_rig,
        require_mount=True,
        storage_wait_s=1.5,
        recorder_enabled=True,
        recorder_port=udp,
    )
    try:
        report = _run(settings, console, sim_rig)
        # the recorder keeps serving frame requests (into no folder) after the mount is gone
        sender = RecorderSender("127.0.0.1", udp)
        try:
            _path, _ts, reason = sender.request_frame("after_unmount", timeout=2.0)
        finally:
            sender.close()
        assert reason == "mount_lost", reason
    finally:
        rec.stop()
    out = console.getvalue()
    assert "Traceback" not in out
    (first,) = report.trials  # the second trial never started on the bare folder
    assert first.status == "stopped" and first.reason.startswith("storage (")
    assert "is not the device it was at start (unmounted)" in first.reason
    assert report.storage_problem and "storage:" in report.stopped_by
    # the bare mount point is a folder on the local disk: not one byte went there, from
    # either process (the recorder's trial folder, orphan frames; the runtime's records)
    assert _all_files(fs.path) == [] and list(fs.path.iterdir()) == []
    # nothing could be written: the console and the report say what was lost, with counts
    assert "RECORDS LOST" in out and first.run_stem in report.records_lost
    assert "ledger row" in report.records_lost and "trace" in report.records_lost


def test_ssd_plugged_back_in_gets_the_pending_records(
    tmpfs: Any, fk_data_dir: Path, sim_rig: SimRig
) -> None:
    fs = tmpfs("ssd", size_kib=16 * 1024)
    console = Console()
    console.when("  approach_pick ", fs.unmount_lazy)
    console.when("data root unwritable", fs.mount)  # a fresh, empty disk at the same mount point
    settings = _settings(fs.path, fk_data_dir, sim_rig, require_mount=True, storage_wait_s=60.0)
    report = _run(settings, console, sim_rig)
    first, second = report.trials
    assert first.reason.startswith("storage (")
    # the new disk holds the whole first trace (it never reached the old one intact) and both rows
    trace = list(read_trace(first.trace_path))
    assert trace[0]["event"] == "trial" and trace[-1]["event"] == "result"
    assert [r["run_stem"] for r in _ledger(fs.path)] == [first.run_stem, second.run_stem]
    assert second.status == "completed", second.reason
    assert not report.records_lost


def test_a_row_that_does_not_fit_is_cut_back_to_the_last_whole_row(tmpfs: Any) -> None:
    """A write that crosses into a page the full disk does not have is partly written by the
    kernel, then fails: the ledger (and every LineFile: trace, states.csv, frame_log.csv)
    is cut back to its last whole row."""
    from mecharm.common.fsutil import LineFile
    from mecharm.runtime.records.ledger import append_row

    fs = tmpfs("small", size_kib=1024)
    ledger = DataRoot(fs.path).ledger
    append_row(
        ledger, {"run_stem": "run_0001_20260101_000000", "status": "completed", "dry_run": 0}
    )
    before = ledger.read_bytes()
    fs.fill()
    long_reason = "storage (" + "x" * 9000 + ")"  # longer than the rest of the file's page
    with pytest.raises(OSError) as err:
        append_row(ledger, {"run_stem": "run_0002_20260101_000100", "reason": long_reason})
    assert err.value.errno == 28
    assert ledger.read_bytes() == before
    assert verify_ledger(ledger).ok
    log = LineFile(fs.path / "lines.csv")  # a fresh file on the full disk: nothing fits
    log.write("a,b\r\n" * 3000)
    with pytest.raises(OSError):
        log.flush()
    assert log.size == 0 and (fs.path / "lines.csv").stat().st_size == 0
    log.discard_pending()
    log.close()
