"""Every corpus trace replays to identical decisions: a change to lookup, guard, motion or
stage code that alters any decision of these recorded trials fails here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mecharm.tools.cli import main

from .conftest import corpus_traces


def test_corpus_covers_the_branches() -> None:
    """Successes, a pick retry, aborts through the exit path, dry runs: the corpus is worth replaying."""
    traces = corpus_traces()
    assert len(traces) >= 5
    results, kinds, transitions = [], set(), set()
    for t in traces:
        lines = [json.loads(x) for x in t.read_text().splitlines()]
        results.append(lines[-1]["status"])
        kinds |= {e["kind"] for e in lines if e["event"] == "decision"}
        transitions |= {(e["frm"], e["to"]) for e in lines if e["event"] == "transition"}
        assert t.stat().st_size < 200_000, f"{t.name} is too big for the repo corpus"
    assert "completed" in results and "stopped" in results
    assert "pick_retry" in kinds and "exit" in kinds
    assert ("lift_and_judge", "retry_pick") in transitions
    assert ("retry_pick", "detect") in transitions
    assert any(to == "abort" for _frm, to in transitions)


@pytest.mark.parametrize(
    "trace", corpus_traces(), ids=lambda p: p.name.removesuffix(".trace.jsonl")
)
def test_corpus_trace_replays_identical(
    trace: Path, replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["replay", str(trace), *replay_args])
    out = capsys.readouterr()
    assert rc == 0, out.out + out.err
    assert f"{trace}: identical (" in out.out


def test_all_traces_in_one_call(replay_args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    traces = [str(t) for t in corpus_traces()]
    rc = main(["replay", *traces, *replay_args])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.count(": identical (") == len(traces)
    assert f"{len(traces)} traces replayed in" in out


def test_committed_traces_name_no_machine_path() -> None:
    """The FK data dir is recorded as given (relative) and the temporary data root is replaced
    by the scenario's name: a trace recorded on one machine must not carry its absolute paths
    into the repository."""
    here = Path(__file__).resolve().parent
    traces = sorted(here.glob("*/*.trace.jsonl"))
    assert len(traces) >= 10
    for t in traces:
        constants = json.loads(t.read_text().splitlines()[0])["constants"]
        for key in ("fk_data_dir", "data_root", "approach_pick_arc", "approach_place_arc"):
            value = constants.get(key)
            assert value is None or not Path(value).is_absolute(), (t.name, key, value)
