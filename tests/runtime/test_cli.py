"""`mecharm-runtime` as a process: flag validation, mount guard, Ctrl-C finishes the trial."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mecharm.runtime.records.ledger import ledger_path, verify_ledger
from mecharm.tools.simrig import start_sim_daemon


def _run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mecharm.runtime.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_bad_flag_value_names_the_key() -> None:
    r = _run([], env={"MECHARM_RUNTIME_TIME_SCALE": "-1"})
    assert r.returncode == 2 and "time_scale" in r.stderr
    r = _run([], env={"MECHARM_RUNTIME_ARM__SPEED": "fast"})
    assert r.returncode == 2 and "speed" in r.stderr


def test_missing_data_root_is_refused(tmp_path: Path) -> None:
    r = _run(["--data-root", str(tmp_path / "ssd_not_mounted"), "--trials", "1"])
    assert r.returncode == 3 and "does not exist" in r.stderr
    assert not (tmp_path / "ssd_not_mounted").exists()


@pytest.mark.slow
def test_first_ctrl_c_finishes_the_current_trial(tmp_path: Path, fk_data_dir: Path) -> None:
    rig = start_sim_daemon(tmp_path / "logs", seed=7, time_scale=20)
    root = tmp_path / "root"
    root.mkdir()
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mecharm.runtime.cli",
                "--dry-run",
                "--trials",
                "5",
                "--data-root",
                str(root),
                "--top-camera",
                rig.top_url,
                "--log-level",
                "warning",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "MECHARM_RUNTIME_FK_DATA_DIR": str(fk_data_dir)},
        )
        assert proc.stdout is not None
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "detect" in line:  # trial 1 is running: first Ctrl-C
                proc.send_signal(signal.SIGINT)
                break
        out, _ = proc.communicate(timeout=60)
        text = "".join(lines) + out
    finally:
        rig.daemon.stop()
    assert proc.returncode == 0, text
    assert "1 trial(s): 1 completed" in text and "stopped: signal" in text
    assert "return_home" in text  # the trial ran to its end after the signal
    assert verify_ledger(ledger_path(root)).rows == 1


@pytest.mark.parametrize("argv", [["--help"]])
def test_help(argv: list[str]) -> None:
    r = _run(argv)
    assert r.returncode == 0 and "--dry-run" in r.stdout
