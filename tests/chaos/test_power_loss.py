"""A power loss of all three processes mid-trial (docs/runtime.md, "Interrupted trials"):
``kill -9`` of the runtime, the recorder and the simulated daemon while the block is held,
then all three started again as users start them.

What must hold: the cut trial is on the books (``interrupted``, its recording ``crashed``),
the restarted recorder repairs its side video, the report lists it, export with
``--include-crashed`` includes it, and the restarted session runs its own trial.
"""

from __future__ import annotations

import contextlib
import csv
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mecharm.common.layout import DataRoot
from mecharm.recorder.events import parse_recording_meta
from mecharm.runtime.records.ledger import verify_ledger
from mecharm.tools.cli import main as mecharm_main
from mecharm.tools.simrig import Child, start_recorder, start_sim_daemon

from .test_runtime_kill import SIDE, _finish, _follow, _runtime

pytestmark = pytest.mark.chaos

SCALE = 20.0


def _kill_group(child: Child) -> None:
    """The process and anything it started (the sim's camera server runs inside it)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.proc.pid, signal.SIGKILL)
    child.kill()


@pytest.mark.timeout(600)  # whole sessions as processes, under load
def test_power_loss_of_all_three_mid_trial_is_on_the_books_after_the_restart(
    tmp_path: Path, fk_data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "root"
    logs = DataRoot(root).logs
    logs.mkdir(parents=True)
    key = tmp_path / "keys" / "recorder.key"
    rig = start_sim_daemon(tmp_path / "sim_logs", seed=7, time_scale=SCALE)
    recorder, udp = start_recorder(logs, root, SIDE, key_file=key)
    children: list[Child] = [rig.daemon, recorder]
    procs: list[Any] = []
    try:
        out: list[str] = []
        first = _runtime(root, rig, udp, key, fk_data_dir, trials=3)
        procs.append(first)
        cut = threading.Event()

        def power_loss(line: str) -> None:
            if not cut.is_set() and line.startswith("  approach_place ") and " ok " in line:
                cut.set()
                os.kill(first.pid, signal.SIGKILL)
                _kill_group(recorder)
                _kill_group(rig.daemon)

        _finish(first, _follow(first, out, power_loss), out)
        assert cut.is_set(), "".join(out)
        (stem,) = [p.name for p in DataRoot(root).run_folders.iterdir()]
        files = DataRoot(root).recording(stem)
        assert not files.meta.exists() and files.video.exists()  # the recorder died mid-trial

        # the power is back: the three start again as users start them
        rig2 = start_sim_daemon(tmp_path / "sim_logs2", seed=8, time_scale=SCALE)
        recorder2, udp2 = start_recorder(logs, root, SIDE, key_file=key)
        children += [rig2.daemon, recorder2]
        out2: list[str] = []
        second = _runtime(root, rig2, udp2, key, fk_data_dir, trials=1)
        procs.append(second)
        code = _finish(second, _follow(second, out2), out2)
        text = "".join(out2)
        assert code == 0 and "Traceback" not in text, text
        assert f"{stem}: no ledger row, now on the books as interrupted" in text, text

        # the restarted recorder repaired the side video the kill left
        deadline = time.monotonic() + 60
        while not files.meta.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        meta = parse_recording_meta(files.meta.read_bytes())
        assert meta.status == "crashed" and meta.frames_written > 0, meta

        rows = list(csv.DictReader(DataRoot(root).ledger.read_text().splitlines()))
        assert [r["run_stem"] for r in rows][:1] == [stem] and len(rows) == 2, rows
        assert rows[0]["status"] == "interrupted" and rows[0]["recording_status"] == "crashed"
        assert rows[1]["status"] == "completed" and rows[1]["recording_status"] == "ok", rows[1]
        assert verify_ledger(DataRoot(root).ledger).ok

        page = tmp_path / "report.html"
        assert mecharm_main(["report", str(root), "--out", str(page)]) == 0
        assert stem in page.read_text()
        capsys.readouterr()
        argv = ["export", "lerobot", "--root", str(root), "--out", str(tmp_path / "ds"),
                "--no-progress", "--select", "all", "--include-crashed", "--cameras", "side",
                "--allow-time-scaled", "--allow-synthetic"]  # fmt: skip
        assert mecharm_main(argv) == 0, capsys.readouterr().err
        exported = capsys.readouterr().out
        assert f"exported {stem} as episode" in exported, exported
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()
        for c in children:
            c.stop()
