"""The step runner of the checks run with the real lerobot (rollout_check, family_check).

Each step is a real command line, its output in ``{work}/{name}.log``; the runner prints
one PASS/FAIL line per step and keeps a JSON summary, and the check fails when any does.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def add_common_args(ap: argparse.ArgumentParser) -> None:
    """``--project-python`` (the project's venv: the demo, the export, the simulated rig,
    whose OpenCV and rerun are newer than lerobot's pins) and ``--work``."""
    ap.add_argument(
        "--project-python", type=Path, default=ROOT / ".venv" / "bin" / "python",
        help="the project's venv (make venv): runs the demo, the export and the simulated rig",
    )  # fmt: skip
    ap.add_argument("--work", type=Path, help="keep everything here (default: a temp folder)")


def lerobot_home_steps(work: Path | None, prefix: str) -> tuple[Steps, Path]:
    """The check's folder (``work``, else a new temp one) with a fresh ``home`` in it as
    lerobot's ``HF_LEROBOT_HOME`` (its merge and replay find datasets by repo id there), and
    the step runner whose commands see it, offline, with the checkout importable."""
    work = work or Path(tempfile.mkdtemp(prefix=prefix))
    home = work / "home"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_LEROBOT_HOME": str(home),
           "PYTHONPATH": str(ROOT)}  # fmt: skip
    return Steps(work, env, {"work": str(work)}), home


@dataclass
class Steps:
    """Steps of one check in ``work``, run with ``env`` from the checkout."""

    work: Path
    env: Mapping[str, str]
    summary: dict[str, Any] = field(default_factory=dict)
    ok: bool = True

    def say(self, name: str, passed: bool, detail: str) -> bool:
        self.ok = self.ok and passed
        self.summary[name] = {"ok": passed, "detail": detail}
        print(f"{'PASS' if passed else 'FAIL'} {name}: {detail}", flush=True)
        return passed

    def run(self, name: str, cmd: list[str]) -> bool:
        """``cmd`` to its exit; passed when it exits 0."""
        t0 = time.monotonic()
        log = self.work / f"{name}.log"
        with log.open("w", encoding="utf-8") as fh:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=dict(self.env),
                                cwd=ROOT, check=False).returncode  # fmt: skip
        return self.say(name, rc == 0, f"exit {rc} in {time.monotonic() - t0:.0f} s ({log})")
