"""A data root of ten trials of every kind the report must show, through ``make run``'s set-up.

Six sessions, one after another on one root, each a ``tools.demo.start_demo_rig`` rig (the
simulated rig, the recorder, one runtime session with its log file) tagged with its name:

========== ======= ============================================================
session    trials  what it gives
========== ======= ============================================================
realtime   2       placed, recorded at real time: exportable
demo       3       placed at 5x: recorded ok, refused by the exporter (time-scaled)
stalled    1       the side camera loses 97 % of its frames: recording ``stalled``
aborted    1       the arm's first move stalls half-way: stopped, reason named
norecorder 2       no recorder: no side video at all
harsh      1       the ``harsh`` simulation profile: whatever it makes of the trial
========== ======= ============================================================

    .venv/bin/python -m mecharm_dev.mixed_root ROOT

then ``make report-check DATA_ROOT=ROOT`` (docs/report.md, "The check in a real browser").
About 5 minutes on the 2-core machine (the two real-time trials are most of it).
"""

from __future__ import annotations

import asyncio
import io
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mecharm.runtime.cli import session_logging
from mecharm.runtime.service import session_console
from mecharm.sim.profile import load_profile
from mecharm.tools.demo import run_scenes, start_demo_rig
from mecharm_dev.stall_check import post_fault

__all__ = ["SESSIONS", "Session", "main"]


@dataclass(frozen=True)
class Session:
    name: str
    trials: int
    seed: int
    time_scale: float = 5.0
    recorder: bool = True
    profile: str = "rig"
    #: a fault of the simulator's (docs/simulation-faults.md) posted before the first trial
    fault: dict[str, Any] | None = None


SESSIONS = (
    Session("realtime", 2, 21, time_scale=1.0),
    Session("demo", 3, 31),
    Session("stalled", 1, 41, fault={"fault": "drop_frames", "camera": "side", "fraction": 0.97}),
    # (a top camera lost before the session is refused at start-up: no trial at all)
    Session("aborted", 1, 51, fault={"fault": "stall", "at_fraction": 0.5}),
    Session("norecorder", 2, 61, recorder=False),
    Session("harsh", 1, 71, profile="harsh"),
)


def run_session(root: Path, s: Session) -> str:
    """One session on ``root``; its console text."""
    rig = start_demo_rig(
        root, trials=s.trials, seed=s.seed, time_scale=s.time_scale, sim_profile=s.profile,
        profile=load_profile(s.profile), recorder=s.recorder, extra={"tags": [s.name]},
        say=lambda _text: None,
    )  # fmt: skip
    out = io.StringIO()
    try:
        if s.fault is not None:
            post_fault(rig.control_url, s.fault)
        console = session_console(rig.settings, out)
        try:
            with session_logging(rig.settings, console):
                asyncio.run(run_scenes(rig.settings, rig.control_url, s.seed, console))
        finally:
            console.close()
    finally:
        rig.stop()
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2):
        print("usage: python -m mecharm_dev.mixed_root ROOT [SESSION,...] (default: all of "
              + ",".join(s.name for s in SESSIONS) + ")", file=sys.stderr)  # fmt: skip
        return 2
    root = Path(args[0])
    root.mkdir(parents=True, exist_ok=True)
    names = args[1].split(",") if len(args) == 2 else [s.name for s in SESSIONS]
    failed = 0
    for s in (s for s in SESSIONS if s.name in names):
        print(f"mixed-root: {s.name}: {s.trials} trial(s) ...", flush=True)
        try:
            text = run_session(root, s)
        except Exception as exc:  # a session that cannot start: say so, go on with the next
            print(f"  {s.name} did not run: {type(exc).__name__}: {exc}", flush=True)
            failed += 1
            continue
        for line in text.splitlines():
            if " rec " in line or "stopped" in line:
                print(f"  {line.strip()}", flush=True)
    print(f"mixed-root: {root} ready; make report-check DATA_ROOT={root}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
