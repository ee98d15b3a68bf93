"""A full disk under the processes as users start them (docs/reliability.md, "No write ends a
process"): the simulated rig's daemon, ``mecharm-runtime`` and ``mecharm-recorder`` as
separate processes, each with its log file in the data root's ``logs/`` (as the demo starts
them), the data root a real tmpfs that fills while the block is in the gripper. (The demo's
own entry point ran the same fault until it was cut for the suite's time: it runs the same
session code, ``run_service``, with the same three processes and log folder.)

What must hold: no traceback from either process, the runtime's exit path taken with the
block out of the jaws (the simulator's truth), the trial ``stopped: storage (...)``, and once
the operator frees the space its trace ends in ``result`` and its ledger row is there; the
recorder is still alive and records the next trial.
"""

from __future__ import annotations

import csv
import json
import subprocess
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from mecharm.common.layout import DataRoot
from mecharm.runtime.records.ledger import verify_ledger
from mecharm.runtime.records.trace import read_trace
from mecharm.tools.simrig import SimRig, start_recorder, start_sim_daemon

from .test_runtime_kill import SIDE, _runtime

pytestmark = pytest.mark.chaos

SCALE = 20.0
#: the whole test's bound (the sim at 20× runs the two trials in well under a minute)
DEADLINE_S = 420.0


def _truth(rig: SimRig) -> dict[str, Any]:
    with urllib.request.urlopen(f"{rig.control_url}/scene/truth", timeout=10) as r:
        return dict(json.loads(r.read()))


@pytest.mark.timeout(600)  # two trials and a wait for the disk, as processes, under load
def test_disk_full_while_holding_never_ends_the_runtime_or_the_recorder(
    tmpfs: Any, fk_data_dir: Path, tmp_path: Path
) -> None:
    fs = tmpfs(
        "root", size_kib=128 * 1024
    )  # room for the first trial's videos until grasp, under load
    root = fs.path
    logs = DataRoot(root).logs
    logs.mkdir(parents=True)
    key = tmp_path / "keys" / "recorder.key"  # outside the root: it never fills
    # every process logs into the root's logs/ (as `make run` has them), onto the disk that fills
    rig = start_sim_daemon(logs, seed=7, time_scale=SCALE)
    recorder, udp = start_recorder(logs, root, SIDE, key_file=key)
    fillers: list[Path] = []
    out: list[str] = []
    truth_at_stop: list[dict[str, Any]] = []
    proc: subprocess.Popen[str] | None = None
    try:
        proc = _runtime(
            root, rig, udp, key, fk_data_dir, trials=2,
            env={"MECHARM_RUNTIME_STORAGE_WAIT_S": "120"},
        )  # fmt: skip
        assert proc.stdout is not None

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.append(line)
                # the block is in the jaws: the disk fills now
                if not fillers and line.startswith("  grasp ") and " ok " in line:
                    fillers.append(fs.fill())
                # the operator frees the space when the console asks for it
                if "data root unwritable" in line and fillers and fillers[0].exists():
                    truth_at_stop.append(_truth(rig))
                    fillers[0].unlink()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            code = proc.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail("mecharm-runtime did not finish:\n" + "".join(out[-40:]))
        reader.join(timeout=10)
        text = "".join(out)
        assert fillers, "the disk was never filled (no grasp line):\n" + text
        assert code == 0, text
        assert "Traceback" not in text
        assert "data root unwritable" in text, text
        # the block was out of the jaws while the runtime waited for the disk
        assert truth_at_stop and not truth_at_stop[0].get("grasped"), truth_at_stop
        # every record of the stopped trial reached the disk once it had space again
        rows = list(csv.DictReader(DataRoot(root).ledger.read_text().splitlines()))
        assert len(rows) == 2, rows
        first, second = rows
        assert first["status"] == "stopped" and first["reason"].startswith("storage ("), first
        assert "No space left on device (ENOSPC)" in first["reason"]
        assert verify_ledger(DataRoot(root).ledger).ok
        trace = list(read_trace(DataRoot(root).trace(first["run_stem"])))
        assert trace[-1]["event"] == "result" and trace[-1]["reason"] == first["reason"]
        assert second["status"] == "completed", second
        # the recorder lived through it and recorded the next trial
        assert recorder.alive(), recorder.tail()
        assert "Traceback" not in recorder.tail()
        assert second["recording_status"] == "ok", second
        # the runtime's own log file is in the root, whole lines only
        log_files = sorted(logs.glob("runtime_*.log"))
        assert log_files
        for line in log_files[0].read_text().splitlines():
            json.loads(line)
        for log_file in logs.glob("*.log"):  # nobody's log holds a traceback
            assert "Traceback" not in log_file.read_text(errors="replace"), log_file
    finally:
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if fillers and fillers[0].exists():
            fillers[0].unlink()
        recorder.stop()
        rig.daemon.stop()
