"""The corpus generator still records traces that replay identical (record → replay end to end,
on the simulated rig as real processes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mecharm.tools.cli import main
from mecharm_dev.make_corpus import record


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_fresh_recordings_replay_identical(
    tmp_path: Path, fk_data_dir: Path, replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    files = record(tmp_path / "corpus", fk_data_dir, ["abort_lookup", "dry_run"], time_scale=20.0)
    assert [f.name for f in files] == ["abort_lookup.trace.jsonl", "dry_run.trace.jsonl"]
    results = [json.loads(f.read_text().splitlines()[-1]) for f in files]
    assert results[0]["status"] == "stopped" and "fk lookup out_of_range" in results[0]["reason"]
    assert results[1]["status"] == "completed"
    # the recording machine's temporary data root stays out of the trace (it names the scenario)
    heads = [json.loads(f.read_text().splitlines()[0]) for f in files]
    assert [h["constants"]["data_root"] for h in heads] == ["abort_lookup", "dry_run"]
    capsys.readouterr()
    assert main(["replay", *map(str, files), *replay_args]) == 0, capsys.readouterr()
    assert capsys.readouterr().out.count(": identical (") == 2
