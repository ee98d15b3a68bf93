"""Traces of the first format (stage names ``stage1``..``stage10``, ``send_t`` inputs, the
``gripper_sleep_s`` setting) still replay, identical, against today's code. The three
traces in ``legacy_v1/`` were recorded before the rename and are kept as they were (but for
their ``fk_data_dir``, made relative: docs/replay.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mecharm_runtime.pick_place import FORMER_NAMES, STAGE_ORDER
from mecharm_tools.cli import main
from mecharm_tools.replay.tracefile import read_recorded

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
def test_legacy_trace_replays_identical(
    trace: Path, replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["replay", str(trace), *replay_args])
    out = capsys.readouterr()
    assert rc == 0, out.out + out.err
    assert f"{trace}: identical (" in out.out
    assert "unknown to this code" not in out.out + out.err
