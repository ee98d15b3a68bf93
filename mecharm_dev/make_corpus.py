"""Regenerate the replay corpus: ``python -m mecharm_dev.make_corpus OUT_DIR``.

Why: ``tests/replay`` replays every trace under ``tests/replay/corpus/`` and expects
"identical"; when the trace format or a decision changes on purpose, the corpus is
re-recorded with this script instead of being edited by hand. Each trace is a real
trial on the simulated rig (``mecharm-daemon --backend sim`` as a child process,
the top camera over MJPEG, the real perception), recorder off:

* ``success_seed<N>.trace.jsonl`` — ordinary trials on scene seeds 7 and 8;
* ``pick_retry.trace.jsonl`` — the first pick verdict is turned into "no" at the
  judge boundary (a scripted miss): the trial takes the retry branch (release, HOME),
  re-observes the scene, picks again and completes;
* ``abort_lookup.trace.jsonl`` — ``dist_max_m`` 0.05 mm: the pick lookup finds no row
  within reach, the trial aborts and leaves through the exit path (retreat, home);
* ``dry_run.trace.jsonl`` — a ``--dry-run`` trial (virtual arm, modelled tip/verdicts);
* ``dry_run_pick_retry.trace.jsonl`` — a dry run with one scripted miss: retry, then success.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mecharm.common.config import load_settings
from mecharm.common.layout import FK_DIR, FK_TABLE, TRACE_SUFFIX, default_data_root
from mecharm.common.logging import configure_logging
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.ports import VerdictObservation
from mecharm.runtime.rigsetup import open_rig
from mecharm.runtime.simcontrol import scene_next
from mecharm.runtime.trial import run_trial
from mecharm.tools.simrig import start_sim_daemon

__all__ = ["SCENARIOS", "main", "record"]

#: name -> (scene seed, settings overrides, scripted pick misses)
SCENARIOS: dict[str, tuple[int, dict[str, Any], int]] = {
    "success_seed7": (7, {}, 0),
    "success_seed8": (8, {}, 0),
    "pick_retry": (9, {}, 1),
    "abort_lookup": (7, {"pick_place.dist_max_m": 0.00005}, 0),
    "dry_run": (8, {"dry_run": True}, 0),
    "dry_run_pick_retry": (9, {"dry_run": True}, 1),
}
#: every scenario: poll the arm every 0.1 s (real-rig time) instead of back to back, so a
#: trace holds tens of readings per move rather than hundreds (it changes no decision)
COMMON: dict[str, Any] = {"motion.poll_interval_s": 0.1}


class _ScriptedMiss:
    """Wraps the eyes: the first ``misses`` pick verdicts become "no" (a judge that says miss)."""

    def __init__(self, inner: Any, misses: int) -> None:
        self.inner, self.misses = inner, misses

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def judge_pick(self, tip_height_m: float, tag: str) -> VerdictObservation:
        v: VerdictObservation = await self.inner.judge_pick(tip_height_m, tag)
        if self.misses > 0:
            self.misses -= 1
            return VerdictObservation("no", 1.0, "corpus: scripted miss", "scripted")
        return v


async def _one(settings: RuntimeSettings, control_url: str, seed: int, misses: int) -> Path:
    await asyncio.to_thread(scene_next, control_url, seed)
    async with open_rig(settings) as (rig, _client):
        if misses:
            rig.eyes = _ScriptedMiss(rig.eyes, misses)
        summary = await run_trial(rig, scene_seed=seed)
    print(
        f"  {summary.run_stem}: {summary.status} {summary.reason} pick {summary.outcome['pick_verdict']} "
        f"place {summary.outcome['place_verdict']} attempts {summary.outcome['pick_attempts']}",
        flush=True,
    )
    return summary.trace_path


def _neutral_root(trace: Path, name: str) -> None:
    """The trace's recorded data root was a temporary directory of the recording machine; a
    committed trace names the scenario instead (replay never reads it: the FK data dir is
    recorded as given, and replay writes nowhere). The shipped approach arcs are recorded
    relative to the checkout (replay reads a shipped arc of another installation from its
    own, docs/replay.md)."""
    lines = trace.read_text(encoding="utf-8").splitlines(keepends=True)
    head = json.loads(lines[0])
    head["constants"]["data_root"] = name
    repo = Path(__file__).resolve().parents[1]
    task = head["constants"].get("pick_place", {})
    for key in ("approach_pick_arc", "approach_place_arc"):
        arc = Path(str(task.get(key, "")))
        if arc.is_absolute() and arc.is_relative_to(repo):
            task[key] = arc.relative_to(repo).as_posix()
    lines[0] = json.dumps(head) + "\n"
    trace.write_text("".join(lines), encoding="utf-8")


def record(
    out_dir: Path, fk_data_dir: Path, names: Sequence[str] | None = None, time_scale: float = 10.0
) -> list[Path]:
    """Record the scenarios into ``out_dir``; returns the written trace files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="replay_corpus_") as tmp:
        work = Path(tmp)
        rig = start_sim_daemon(work / "logs", seed=7, time_scale=time_scale)
        try:
            for name in names or list(SCENARIOS):
                seed, overrides, misses = SCENARIOS[name]
                root = work / name
                root.mkdir()
                settings = load_settings(RuntimeSettings, None, {
                    "data_root": root, "fk_data_dir": fk_data_dir, "daemon.port": rig.daemon_port,
                    "perception.top_camera": rig.top_url, "recorder.enabled": False, "time_scale": time_scale,
                    "sim_control_url": rig.control_url, **COMMON, **overrides,
                })  # fmt: skip
                print(f"{name}: scene seed {seed}", flush=True)
                trace = asyncio.run(_one(settings, rig.control_url, seed, misses))
                dest = out_dir / f"{name}{TRACE_SUFFIX}"
                shutil.copyfile(trace, dest)
                _neutral_root(dest, name)
                written.append(dest)
        finally:
            rig.daemon.stop()
    return written


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m mecharm_dev.make_corpus", description=__doc__.splitlines()[0]
    )
    p.add_argument(
        "out_dir", type=Path, help=f"where the {TRACE_SUFFIX} files go (tests/replay/corpus)"
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        default=default_data_root(),
        help=f"FK data dir: the table is DIR/{FK_DIR}/{FK_TABLE}, built when missing "
        "(default $MECHARM_DATA_ROOT, else ~/.local/share/mecharm/data)",
    )
    p.add_argument("--only", nargs="*", choices=list(SCENARIOS), help="record only these scenarios")
    p.add_argument(
        "--time-scale", type=float, default=10.0, help="sim speed-up (never changes a decision)"
    )
    args = p.parse_args(argv)
    configure_logging("warning")
    try:
        files = record(args.out_dir, args.data_dir, args.only, args.time_scale)
    except Exception as exc:
        print(f"make_corpus failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    for f in files:
        print(f"wrote {f} ({f.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
