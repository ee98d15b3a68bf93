"""Traces recorded before the motion-safety and release settings existed (kept from the corpus
as it was) replay identical: the settings they lack take their before-values
(``BEFORE_THE_SETTING``), and the replay says so (docs/replay.md, "Settings newer than the
trace"). With ``--set`` the same trial replays under today's checks, and differs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mecharm_runtime.config import BEFORE_THE_SETTING
from mecharm_tools.cli import main

BEFORE = sorted((Path(__file__).resolve().parent / "before_safety").glob("*.trace.jsonl"))


def test_these_traces_predate_the_settings() -> None:
    assert len(BEFORE) == 2
    for t in BEFORE:
        constants = json.loads(t.read_text().splitlines()[0])["constants"]
        assert not set(BEFORE_THE_SETTING) & set(constants)


@pytest.mark.parametrize("trace", BEFORE, ids=lambda p: p.name.removesuffix(".trace.jsonl"))
def test_replays_identical_with_the_before_values(
    trace: Path, replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["replay", str(trace), *replay_args])
    out = capsys.readouterr().out
    assert rc == 0 and f"{trace}: identical (" in out, out
    assert "recorded before these settings existed (replayed as then)" in out
    assert "joint_step_max_deg=0.0" in out and "release_check=False" in out


def test_with_todays_checks_the_same_trial_decides_otherwise(
    replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    trace = next(t for t in BEFORE if t.name.startswith("success_seed7"))
    rc = main(["replay", str(trace), *replay_args, "--set", "joint_step_max_deg=15"])
    out = capsys.readouterr().out
    assert rc != 0 and "identical" not in out.split("\n")[0], out
