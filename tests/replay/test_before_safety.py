"""Traces recorded before the motion-safety and release settings existed (kept from the corpus
as it was) replay against today's code, which keeps no older behaviour for them: the replay
reads them, names the settings they lack, and reports where the trial would now decide
otherwise, decision by decision (docs/replay.md, "Traces older than the code")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mecharm.tools.cli import main

BEFORE = sorted((Path(__file__).resolve().parent / "before_safety").glob("*.trace.jsonl"))


def test_these_traces_predate_the_settings() -> None:
    assert len(BEFORE) == 2
    for t in BEFORE:
        constants = json.loads(t.read_text().splitlines()[0])["constants"]
        assert not {"joint_step_max_deg", "release_check", "path_check"} & set(constants)


@pytest.mark.parametrize("trace", BEFORE, ids=lambda p: p.name.removesuffix(".trace.jsonl"))
def test_replays_with_todays_checks_and_reports_the_differences_by_decision(
    trace: Path, replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["replay", str(trace), *replay_args])
    out = capsys.readouterr().out
    assert rc == 1 and f"{trace}: different" in out, out
    note = next(ln for ln in out.splitlines() if "settings not in the trace" in ln)
    assert "joint_step_max_deg" in note and "release_check" in note
    # today's motion checks are decisions the old trial never took: the first difference
    # names the stage and the decision
    first = out.split("first difference ", 1)[1].splitlines()[0]
    assert first.startswith("only in the replay: stage ") and ", motion_check: " in first, first
