"""mecharm_dev.testcpu: the per-file CPU plugin counts a test's own CPU and its children's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mecharm_dev.testcpu import main, report

REPO = Path(__file__).resolve().parents[2]

BUSY = """
import subprocess, sys, time

def test_spins_itself():
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass

def test_spins_in_a_child():
    subprocess.run([sys.executable, "-c", "import time\\nend = time.process_time() + 0.3\\nwhile time.process_time() < end: pass"], check=True)

def test_waits():
    time.sleep(0.2)
"""


def test_each_test_s_own_and_children_s_cpu_lands_in_its_file(tmp_path: Path) -> None:
    (tmp_path / "test_busy.py").write_text(BUSY)
    out = tmp_path / "cpu"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "MECHARM_TESTCPU"))}
    env.update(MECHARM_TESTCPU_DIR=str(out), PYTHONPATH=str(REPO))  # not an xdist worker: main
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "mecharm_dev.testcpu", "-p", "no:randomly",
         "-p", "no:cacheprovider", str(tmp_path / "test_busy.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r["id"].split("::")[1]: r for r in map(json.loads, (out / "main.jsonl").read_text().splitlines())}  # fmt: skip
    assert rows["test_spins_itself"]["self_s"] >= 0.25
    assert rows["test_spins_in_a_child"]["children_s"] >= 0.25
    assert rows["test_waits"]["wall_s"] >= 0.2
    assert rows["test_waits"]["self_s"] + rows["test_waits"]["children_s"] < 0.2
    text = report(out)
    assert "3 tests" in text and "`test_busy.py`" in text


def test_a_folder_without_lines_or_with_a_bad_one_is_one_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    assert main([str(tmp_path / "nowhere")]) == 2
    assert "no such folder" in capsys.readouterr().err
    for bad in ("0", "ten"):
        with pytest.raises(SystemExit) as exit_:
            main([str(tmp_path), "--top", bad])
        assert exit_.value.code == 2 and "rows >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit, match=r"no \*\.jsonl lines"):
        main([str(tmp_path)])
    (tmp_path / "gw0.jsonl").write_text('{"id": "t.py::x"}\n')
    with pytest.raises(SystemExit, match=r"gw0\.jsonl:1: not a testcpu line"):
        main([str(tmp_path)])
