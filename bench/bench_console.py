"""What the operator's console costs a trial (docs/console.md, "Figures").

Trace lines are fed to ``RuntimeConsole.on_trace`` (output to a StringIO, the printing
ones included) and the cost per line is reported. The console runs in the trial's
event loop, so this is time the trial's own code waits. ``run()`` (``python -m bench
console``) uses a trial-shaped mix: the line kinds of a recorded demo trial (457 angle
readings, 9 moves with their lookups, guards and arrivals, 4 gripper actions, 13
stages); ``python -m bench.bench_console TRACE.jsonl`` feeds a real trace instead.
"""

from __future__ import annotations

import io
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import Row, has
from mecharm.common.layout import TRACE_SUFFIX
from mecharm.runtime.console import RuntimeConsole
from mecharm.runtime.records.trace import TraceWriter


def trial_shaped() -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    pose = [-35.9, 87.74, -38.33, 3.6, -70.11, -30.0]
    for stage in range(13):
        st = f"stage_{stage}"
        for i in range(35):
            a = {"angles": [v + i * 0.01 for v in pose], "t": 1.0 + i, "error": ""}
            lines.append({"event": "input", "kind": "angles", "stage": st, "value": a})
        if stage < 9:
            look = {"ok": True, "target_xz": [0.18, 0.22], "angles": pose}
            lines.append({"event": "decision", "kind": "lookup", "stage": st, "value": look})
            for kind in ("guard", "command", "arrival"):
                v = {"note": f"move {stage}", "angles": pose, "speed": 20, "tol": 2.0}
                lines.append({"event": "decision", "kind": kind, "stage": st, "value": v})
        if stage < 4:
            g = {"action": "open", "note": "release", "value": 100}
            lines.append({"event": "decision", "kind": "gripper", "stage": st, "value": g})
        lines.append({"event": "transition", "stage": st, "frm": st, "to": "x", "outcome": "ok"})
    return lines


def per_line_us(lines: list[dict[str, Any]], rounds: int = 20) -> float:
    con = RuntimeConsole(io.StringIO())
    con.trial_start(1)
    t0 = time.perf_counter()
    for _ in range(rounds):
        for line in lines:
            con.on_trace(line)
    return (time.perf_counter() - t0) / (rounds * len(lines)) * 1e6


def trace_write_us(lines: list[dict[str, Any]], rounds: int = 20) -> float:
    """The baseline: what the trial already pays per line, the trace writer's own write of
    it to a real file (``TraceWriter.write``: JSON, ``os.write``), without a listener."""
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        for r in range(rounds):
            tw = TraceWriter(Path(d) / f"t{r}{TRACE_SUFFIX}")
            for line in lines:
                tw.write(line["event"], **{k: v for k, v in line.items() if k != "event"})
            tw.close()
        return (time.perf_counter() - t0) / (rounds * len(lines)) * 1e6


def run(quick: bool = False) -> dict[str, Any]:
    lines = trial_shaped()
    rounds = 5 if quick else 20
    us = per_line_us(lines, rounds)
    base = trace_write_us(lines, rounds)
    return {
        "lines_per_trial": len(lines),
        "us_per_line": round(us, 2),
        "ms_per_trial": round(us * len(lines) / 1000, 2),
        "baseline_trace_write_us_per_line": round(base, 2),
        "console_over_trace_write": round(us / base, 3),
    }


def rows(result: dict[str, Any]) -> list[Row]:
    """The table's line: the console's cost per trace line against writing the trace itself."""
    r = result
    if not has(
        r, "us_per_line", "ms_per_trial", "lines_per_trial", "baseline_trace_write_us_per_line"
    ):
        return []
    return [
        Row(
            "console",
            f"`RuntimeConsole.on_trace`, trial-shaped mix of {r['lines_per_trial']} lines",
            f"{r['us_per_line']} µs per line, {r['ms_per_trial']} ms per trial",
            "—",
            f"writing the trace line {r['baseline_trace_write_us_per_line']} µs "
            f"(ratio {r.get('console_over_trace_write', '?')})",
        )
    ]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench.bench_console TRACE.jsonl", file=sys.stderr)
        return 2
    lines = [json.loads(s) for s in Path(argv[0]).read_text(encoding="utf-8").splitlines()]
    print(f"{len(lines)} lines x 20: {per_line_us(lines):.1f} us per line (printing ones included)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
