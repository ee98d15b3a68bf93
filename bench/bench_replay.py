"""Replay benchmark: time to replay each corpus trace (``tests/replay/corpus``).

Figures (median of repeated runs, same process, table loaded once beforehand):
* ``parse_ms`` — the baseline: reading the trace's JSON lines, nothing else;
* ``replay_ms`` — what ``mecharm replay`` does per trace: read and check the trace,
  run the stage machine on its inputs, compare every decision;
* ``x_parse`` — replay time as a multiple of the parse baseline;
* ``x_real_rig`` — how many times faster than the recorded trial would take on the
  real rig (trace time span × the trial's time_scale) the replay is.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import mecharm.common.kinematics
import mecharm.runtime.lookup.build
from bench import Row, has, median_ms
from mecharm.common.layout import TRACE_SUFFIX
from mecharm.common.logging import configure_logging
from mecharm.runtime.lookup import ensure_table, load_arc, load_table
from mecharm.runtime.records.trace import DECISION_EVENTS
from mecharm.tools.replay.runner import replay, replay_settings
from mecharm.tools.replay.tracefile import read_recorded

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "replay" / "corpus"


def _table_dir() -> Path:
    h = hashlib.sha256()
    for mod in (mecharm.runtime.lookup.build, mecharm.common.kinematics):
        h.update(Path(str(mod.__file__)).read_bytes())
    return Path(tempfile.gettempdir()) / f"mecharm_bench_replay_fk_{h.hexdigest()[:12]}"


def run(quick: bool = False) -> dict[str, Any]:
    configure_logging("error")
    reps = 3 if quick else 15
    table = load_table(ensure_table(_table_dir()))
    arcs = (
        load_arc(REPO / "configs/poses/approach_pick.json"),
        load_arc(REPO / "configs/poses/approach_place.json"),
    )
    out: dict[str, Any] = {"reps": reps}
    ratios, per_trace = [], []
    for path in sorted(CORPUS.glob(f"*{TRACE_SUFFIX}")):
        name = path.name.removesuffix(TRACE_SUFFIX)

        def parse(p: Path = path) -> None:
            with open(p, encoding="utf-8") as fh:
                for raw in fh:
                    json.loads(raw)

        def full(p: Path = path) -> bool:
            rec = read_recorded(p)
            settings, notes = replay_settings(rec)
            return asyncio.run(replay(rec, settings, table, *arcs, notes)).identical

        assert full(), f"{name} does not replay identical: the figures would be meaningless"
        parse_ms = median_ms(parse, reps)
        replay_ms = median_ms(full, reps)
        rec = read_recorded(path)
        span = float(rec.result.get("ts", 0.0)) - float(rec.header.get("ts", 0.0))
        real_s = span * float(rec.constants.get("time_scale", 1.0))
        n_dec = sum(1 for _n, e in rec.lines if e["event"] in DECISION_EVENTS)
        out[name] = (
            f"replay {replay_ms:.1f} ms vs parse {parse_ms:.2f} ms (x{replay_ms / parse_ms:.1f}); "
            f"{len(rec.lines)} lines, {n_dec} decisions; real-rig trial ~{real_s:.0f} s -> "
            f"x{real_s / (replay_ms / 1000.0):.0f} faster"
        )
        ratios.append(replay_ms / parse_ms)
        per_trace.append(replay_ms)
    out["replay_ms_per_trace_median"] = round(statistics.median(per_trace), 2)
    out["replay_ms_per_trace_max"] = round(max(per_trace), 2)
    out["x_parse_median"] = round(statistics.median(ratios), 1)
    out["corpus_total_ms"] = round(sum(per_trace), 1)
    return out


def rows(result: dict[str, Any]) -> list[Row]:
    """The table's line: replaying a corpus trace against only parsing it."""
    r = result
    if not has(r, "replay_ms_per_trace_median", "x_parse_median"):
        return []
    return [
        Row(
            "replay",
            "one corpus trace",
            f"median {r['replay_ms_per_trace_median']} ms, max {r.get('replay_ms_per_trace_max', '?')} ms",
            "—",
            f"only parsing the trace's JSON (replay takes {r['x_parse_median']}x that, median)",
        )
    ]


if __name__ == "__main__":
    for k, v in run(quick=True).items():
        print(f"{k}: {v}")
