"""``kill -9`` of ``mecharm-runtime`` mid-trial, then a restart (docs/runtime.md, "Interrupted
trials"): the processes as users start them, the recorder with its log in the root.

What must hold: the cut trial gets its ledger row at the restart (``interrupted``, the stage
it was in named), ``mecharm ledger verify`` and the report count it, the restarted session's
own trial runs normally and keeps its side video although the restart came at once (the
recorder hands the killed runtime's recording over when the new runtime says it took over
that trial), and a second runtime on the same root is refused while one runs.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from mecharm.common.layout import DataRoot
from mecharm.runtime.records.ledger import verify_ledger
from mecharm.tools.cli import main as mecharm_main
from mecharm.tools.simrig import SimRig, start_recorder, start_sim_daemon

pytestmark = pytest.mark.chaos

SCALE = 20.0
DEADLINE_S = 300.0
#: the recorder's camera in these process tests: kills, power and disk faults are about the
#: books, not the picture, and the rig's rendered 1280x720 30 fps side camera with its H.264
#: encoding was most of their CPU (docs/testing.md, "Where the CPU goes")
SIDE = "synthetic?fps=15&w=320&h=240"


def _runtime(
    root: Path,
    rig: SimRig,
    udp: int,
    key: Path,
    fk: Path,
    trials: int,
    env: dict[str, str] | None = None,
) -> Any:
    return subprocess.Popen(
        [
            sys.executable, "-m", "mecharm.runtime.cli",
            "--trials", str(trials),
            "--data-root", str(root),
            "--daemon-port", str(rig.daemon_port),
            "--top-camera", rig.top_url,
            "--sim-control", rig.control_url,
            "--recorder-port", str(udp),
            "--recorder-key-file", str(key),
            "--no-rerun",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "MECHARM_RUNTIME_FK_DATA_DIR": str(fk), **(env or {})},
    )  # fmt: skip


def _follow(proc: Any, out: list[str], on_line: Any = None) -> threading.Thread:
    def read() -> None:
        for line in proc.stdout:
            out.append(line)
            if on_line is not None:
                on_line(line)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


def _finish(proc: Any, reader: threading.Thread, out: list[str]) -> int:
    try:
        code = int(proc.wait(timeout=DEADLINE_S))
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("mecharm-runtime did not finish:\n" + "".join(out[-40:]))
    reader.join(timeout=10)
    proc.stdout.close()
    return code


@pytest.mark.timeout(600)  # whole sessions as processes, under load
def test_a_killed_trial_is_on_the_books_after_the_restart(
    tmp_path: Path, fk_data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "root"
    logs = DataRoot(root).logs
    logs.mkdir(parents=True)
    key = tmp_path / "keys" / "recorder.key"
    rig = start_sim_daemon(tmp_path / "sim_logs", seed=7, time_scale=SCALE)
    recorder, udp = start_recorder(logs, root, SIDE, key_file=key)
    procs: list[Any] = []
    try:
        first_out: list[str] = []
        first = _runtime(root, rig, udp, key, fk_data_dir, trials=3)
        procs.append(first)
        killed = threading.Event()

        def kill_when_holding(line: str) -> None:
            # the block is in the jaws, the arm on its way to the box: kill -9
            if not killed.is_set() and line.startswith("  approach_place ") and " ok " in line:
                killed.set()
                os.kill(first.pid, signal.SIGKILL)

        _finish(first, _follow(first, first_out, kill_when_holding), first_out)
        assert killed.is_set(), "".join(first_out)
        cut = sorted(p.name for p in DataRoot(root).run_folders.iterdir())
        assert len(cut) == 1

        # at once: the new runtime takes the root over
        second_out: list[str] = []
        second = _runtime(root, rig, udp, key, fk_data_dir, trials=1)
        procs.append(second)
        reader = _follow(second, second_out)
        # while it runs, a third runtime on the same root is refused
        while not any("detect" in line for line in second_out) and second.poll() is None:
            reader.join(timeout=0.2)
        third = _runtime(root, rig, udp, key, fk_data_dir, trials=1)
        procs.append(third)
        third_out, _ = third.communicate(timeout=120)
        assert third.returncode == 3, third_out
        assert "another mecharm-runtime is running" in third_out
        assert "Traceback" not in third_out
        code = _finish(second, reader, second_out)
        text = "".join(second_out)
        assert code == 0, text
        assert "Traceback" not in text
        assert f"{cut[0]}: no ledger row, now on the books as interrupted" in text, text

        rows = list(csv.DictReader(DataRoot(root).ledger.read_text().splitlines()))
        assert len(rows) == 2, rows
        assert rows[0]["run_stem"] == cut[0]
        cut_row, new_row = rows
        assert cut_row["status"] == "interrupted"
        # killed while holding the block: the signal lands in one of the holding stages
        holding = ("approach_place", "descend_place", "servo_place", "release")
        assert any(f"interrupted during {st}:" in cut_row["reason"] for st in holding), cut_row
        assert cut_row["pick_verdict"] == "yes"  # the trace had got that far
        assert new_row["status"] == "completed", new_row
        # the restart came at once: the new trial still has its side video
        assert new_row["recording_status"] == "ok", new_row
        assert verify_ledger(DataRoot(root).ledger).ok
        # the report lists it
        page = tmp_path / "report.html"
        assert mecharm_main(["report", str(root), "--out", str(page)]) == 0
        capsys.readouterr()
        html = page.read_text()
        assert cut[0] in html and "interrupted" in html
        assert recorder.alive(), recorder.tail()
        # the cut trial's side recording (closed by the recorder at the hand-over) exports;
        # its top video ends at the kill, the side video at the hand-over: side only
        ds = tmp_path / "ds"
        argv = ["export", "lerobot", "--root", str(root), "--out", str(ds), "--no-progress",
                "--select", "all", "--include-crashed", "--cameras", "side",
                "--allow-time-scaled", "--allow-synthetic"]  # fmt: skip
        assert mecharm_main(argv) == 0, capsys.readouterr().err
        exported = capsys.readouterr().out
        assert f"exported {cut[0]} as episode" in exported, exported
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()
        recorder.stop()
        rig.daemon.stop()
