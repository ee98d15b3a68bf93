"""Traces of the first format (stage names ``stage1``..``stage10``, ``send_t`` inputs, the
``gripper_sleep_s`` setting) are still read and replayed against today's code, which reports
where they now decide otherwise (docs/replay.md, "Traces older than the code"). The three
traces in ``legacy_v1/`` were recorded before the rename and are kept as they were (but for
their ``fk_data_dir``, made relative: docs/replay.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mecharm.runtime.pick_place import FORMER_NAMES, STAGE_ORDER
from mecharm.tools.cli import main
from mecharm.tools.replay.tracefile import read_recorded

LEGACY = sorted((Path(__file__).resolve().parent / "legacy_v1").glob("*.trace.jsonl"))


def test_legacy_traces_are_first_format() -> None:
    assert len(LEGACY) == 3
    for t in LEGACY:
        first = json.loads(t.read_text().splitlines()[0])
        assert "format" not in first and "gripper_sleep_s" in first["constants"]
        assert '"stage": "stage1"' in t.read_text() and '"kind": "send_t"' in t.read_text()


def test_every_former_name_maps_to_a_stage() -> None:
    assert set(FORMER_NAMES.values()) == set(STAGE_ORDER)


@pytest.mark.parametrize("trace", LEGACY, ids=lambda p: p.name.removesuffix(".trace.jsonl"))
def test_legacy_trace_reads_with_todays_names(trace: Path) -> None:
    rec = read_recorded(trace)
    stages = {e.get("stage") for _n, e in rec.lines} | {
        e.get("frm") for _n, e in rec.lines if "frm" in e
    }
    assert stages - {None, "start", "end", "abort"} <= {s.value for s in STAGE_ORDER}
    assert "gripper_settle_s" in rec.constants and "gripper_sleep_s" not in rec.constants
    if rec.result["status"] == "stopped":
        assert rec.result["reason"].startswith("descend_pick: fk lookup out_of_range")


@pytest.mark.parametrize("trace", LEGACY, ids=lambda p: p.name.removesuffix(".trace.jsonl"))
def test_legacy_trace_replays_against_todays_code_reporting_by_decision(
    trace: Path, replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Read in today's names and replayed with today's behaviour: the replay reports where
    the old trial would now decide otherwise, by stage and decision, and nothing fails."""
    rc = main(["replay", str(trace), *replay_args])
    out = capsys.readouterr()
    assert rc == 1, out.out + out.err
    assert f"{trace}: different" in out.out and "DIFFERENT: " in out.out
    assert "first difference" in out.out and ", motion_check" in out.out
    assert "unknown to this code" not in out.out + out.err
    assert "Traceback" not in out.out + out.err
