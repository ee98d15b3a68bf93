"""`mecharm eval` — a policy's success rate on the rig, with its confidence interval.

``mecharm eval POLICY --episodes N`` runs N rollouts (the ``rollout`` task, docs/rollouts.md)
on the simulated rig as ``make run`` starts it — the simulated daemon and workcell, the
recorder, one runtime session with its log file — on scenes ``--seed``, ``--seed + 1``, ...
(``--per-scene R`` episodes each), then reads the rollouts' ledger rows and says how often
the place judge found the block in the box: overall and per scene, each with a 95 % Wilson
interval. ``--no-run --data-root ROOT`` reads the rollouts of POLICY already in a root (the
real rig's: ``mecharm-runtime --task rollout --policy POLICY`` ran them).

A rollout that stopped (a refusal, a lost daemon, an operator's stop) counts as a failure,
and the table says how many stopped: a policy is judged by what it did.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import math
import os
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mecharm.common.layout import DataRoot, default_demo_root
from mecharm.runtime.rollout import RECORDS

__all__ = ["EvalSummary", "register", "summarize", "wilson"]

TASK = RECORDS.task
#: the normal quantile of a two-sided 95 % interval
Z95 = 1.959963984540054


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (``(0, 1)`` for n = 0): unlike the
    normal approximation it stays inside [0, 1] and is honest at 0/n and n/n, which small
    evaluations hit often."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # exact at the ends (0/n starts at 0, n/n ends at 1), not off by a rounding
    lo = 0.0 if successes == 0 else max(0.0, centre - half)
    hi = 1.0 if successes == n else min(1.0, centre + half)
    return lo, hi


@dataclass
class Tally:
    """Episodes, successes by the rig's judge, stopped ones; on the simulator also the
    world's truth: episodes whose block rests in the box, and judgements the truth contradicts."""

    episodes: int = 0
    successes: int = 0
    stopped: int = 0
    truth_known: int = 0
    placed_true: int = 0
    judge_wrong: int = 0

    def add(self, success: bool, stopped: bool, placed: bool | None = None) -> None:
        self.episodes += 1
        self.successes += success
        self.stopped += stopped
        if placed is not None:
            self.truth_known += 1
            self.placed_true += placed
            # only a judged rollout can be judged wrong (a stopped one was never judged)
            self.judge_wrong += not stopped and placed != success

    def to_dict(self) -> dict[str, Any]:
        lo, hi = wilson(self.successes, self.episodes)
        rate = self.successes / self.episodes if self.episodes else None
        out: dict[str, Any] = {"episodes": self.episodes, "successes": self.successes, "stopped": self.stopped,
               "success_rate": rate, "ci95": [round(lo, 4), round(hi, 4)]}  # fmt: skip
        if self.truth_known:
            tlo, thi = wilson(self.placed_true, self.truth_known)
            out["truth"] = {"episodes": self.truth_known, "in_box": self.placed_true,
                            "ci95": [round(tlo, 4), round(thi, 4)],
                            "judge_wrong": self.judge_wrong}  # fmt: skip
        return out


@dataclass
class EvalSummary:
    policy: str
    overall: Tally = field(default_factory=Tally)
    per_scene: dict[str, Tally] = field(default_factory=dict)
    run_stems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy, "task": TASK, **self.overall.to_dict(),
            "per_scene": {k: t.to_dict() for k, t in self.per_scene.items()},
            "run_stems": self.run_stems,
        }  # fmt: skip

    def table(self) -> str:
        def line(name: str, t: Tally) -> str:
            lo, hi = wilson(t.successes, t.episodes)
            return (f"{name:<12} {t.successes:>3}/{t.episodes:<3} "
                    f"{(t.successes / t.episodes if t.episodes else 0):>6.0%}   "
                    f"[{lo:.0%}, {hi:.0%}]   {t.stopped} stopped")  # fmt: skip

        rows = [f"policy {self.policy}", f"{'scene':<12} success  rate   95% interval (Wilson)"]
        rows += [line(f"seed {k}", t) for k, t in self.per_scene.items()]
        rows.append(line("all", self.overall))
        t = self.overall
        if t.truth_known:
            lo, hi = wilson(t.placed_true, t.truth_known)
            rows.append(
                f"the simulator's truth: the block in the box after {t.placed_true}/"
                f"{t.truth_known} [{lo:.0%}, {hi:.0%}]; the judge wrong on {t.judge_wrong}"
            )
        return "\n".join(rows)


def summarize(
    rows: Iterable[Mapping[str, Any]], policy: str, truths: Mapping[str, bool] | None = None
) -> EvalSummary:
    """The success tally of the ledger rows that are rollouts of ``policy``; ``truths``:
    run stem → the world's block rests in the box (the simulator's account)."""
    out = EvalSummary(policy)
    for row in rows:
        if row.get("policy") != policy:
            continue
        stem = str(row.get("run_stem", ""))
        ok, stopped = RECORDS.succeeded(row), row.get("status") != "completed"
        placed = (truths or {}).get(stem)
        out.overall.add(ok, stopped, placed)
        seed = str(row.get("scene_seed") or "unknown")
        out.per_scene.setdefault(seed, Tally()).add(ok, stopped, placed)
        out.run_stems.append(stem)
    return out


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The rollout session's settings of the command line (dotted paths)."""
    out: dict[str, Any] = {"task": TASK, "rollout.policy": args.policy}
    if args.max_s is not None:
        out["rollout.max_s"] = args.max_s
    return out


class LedgerUnreadable(ValueError):
    """The rollout ledger cannot be read as a CSV of rows; the message says where and why."""


def _ledger_rows(root: Path) -> list[dict[str, str]]:
    path = DataRoot(root, TASK).ledger
    if not path.is_file():
        return []
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            return list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise LedgerUnreadable(
            f"{path}: not a readable ledger ({type(exc).__name__}: {str(exc)[:200]}); "
            "mecharm ledger verify says more"
        ) from None


def _json_problem(out: Path | None) -> str | None:
    """Why the summary could not be written to ``--json`` (None: it can), asked before any
    rollout runs: a long evaluation must not end in an unwritable path."""
    if out is None:
        return None
    if out.is_dir() or not out.name:
        return f"--json {out}: is a folder; give a file name"
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        return f"--json {out}: no folder {parent}"
    if not os.access(parent, os.W_OK):
        return f"--json {out}: {parent} is not writable"
    if len(out.name) > 255:
        return f"--json {out.name[:40]}...: file name too long"
    return None


def _run_episodes(args: argparse.Namespace, root: Path) -> dict[str, bool | None] | int:
    """Run the rollouts on the simulated rig: run stem → the world's block in the box after
    it (None: the workcell did not say), in trial order; or an exit code."""
    from mecharm.common.logging import configure_logging
    from mecharm.runtime.cli import session_logging
    from mecharm.runtime.service import session_console
    from mecharm.runtime.simcontrol import SimControlError, scene_truth
    from mecharm.sim.profile import load_profile
    from mecharm.tools.demo import DemoRig, run_scenes, start_demo_rig

    profile = load_profile(args.sim_profile)  # checked before the root was made (run)
    configure_logging("warning")
    rig: DemoRig | None = None
    try:
        rig = start_demo_rig(
            root, trials=args.episodes, seed=args.seed, time_scale=args.time_scale,
            sim_profile=args.sim_profile, profile=profile, recorder=not args.no_recorder,
            extra=_overrides(args),
            python=str(args.sim_python) if args.sim_python else None,
        )  # fmt: skip
        url = rig.control_url
        placed: dict[int, bool | None] = {}

        def scene_end(i: int) -> None:  # the world as trial i left it, before the next scene
            try:
                truth = scene_truth(url)
            except SimControlError:
                placed[i] = None
                return
            placed[i] = (truth.get("block") or {}).get("resting_on") == "box"

        console = session_console(rig.settings)
        try:
            with session_logging(rig.settings, console):
                report = asyncio.run(
                    run_scenes(rig.settings, url, args.seed, console, args.per_scene, scene_end)
                )
        finally:
            console.close()
        if report.trials:
            scene_end(len(report.trials) - 1)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the rig did not start, a session failed: one line, as the demo
        print(f"mecharm eval: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        if rig is not None:
            rig.stop()
    if len(report.trials) < args.episodes:
        print(f"mecharm eval: the session ended after {len(report.trials)} of {args.episodes} "
              f"rollouts ({report.stopped_by or 'see the log'})", file=sys.stderr)  # fmt: skip
    return {t.run_stem: placed.get(i) for i, t in enumerate(report.trials)}


def run(args: argparse.Namespace) -> int:
    from mecharm.common.config import ConfigError, load_settings
    from mecharm.runtime.config import RuntimeSettings
    from mecharm.runtime.rollout.policies import PolicyError, load_policy, policy_spec_problem
    from mecharm.sim.profile import ProfileError, load_profile

    root = (args.data_root or default_demo_root()).expanduser().resolve()
    problem = policy_spec_problem(args.policy) or _json_problem(args.json)
    if problem:
        print(f"mecharm eval: {problem}", file=sys.stderr)
        return 2
    if args.no_run:
        if not root.is_dir():
            print(f"mecharm eval: no data root at {root}", file=sys.stderr)
            return 2
        truths: dict[str, bool | None] = {}
    else:
        if args.episodes < 1 or args.per_scene < 1:
            print("mecharm eval: --episodes and --per-scene take 1 or more", file=sys.stderr)
            return 2
        from mecharm.runtime.rollout.body import rate_problem

        try:  # the settings and the policy load before anything starts, or nothing does
            settings = load_settings(RuntimeSettings, None, _overrides(args))
            load_policy(args.policy, settings)
        except (ConfigError, PolicyError) as exc:
            print(f"mecharm eval: {exc}", file=sys.stderr)
            return 2
        problem = rate_problem(settings.rollout.rate_hz, args.time_scale)
        if problem:
            print(f"mecharm eval: {problem} (--time-scale)", file=sys.stderr)
            return 2
        if args.sim_python is not None and not (
            args.sim_python.is_file() and os.access(args.sim_python, os.X_OK)
        ):
            print(f"mecharm eval: --sim-python {args.sim_python}: not an executable file "
                  "(give a venv's bin/python)", file=sys.stderr)  # fmt: skip
            return 2
        try:
            load_profile(args.sim_profile)
        except ProfileError as exc:
            print(f"mecharm eval: {exc}", file=sys.stderr)
            return 2
        root.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        got = _run_episodes(args, root)
        if isinstance(got, int):
            return got
        truths = got
        print(f"\n{len(got)} rollouts in {time.monotonic() - t0:.0f} s", flush=True)
    try:
        rows = [r for r in _ledger_rows(root) if args.no_run or r.get("run_stem") in truths]
    except LedgerUnreadable as exc:
        print(f"mecharm eval: {exc}", file=sys.stderr)
        return 2
    summary = summarize(rows, args.policy, {k: v for k, v in truths.items() if v is not None})
    if not summary.overall.episodes:
        print(f"mecharm eval: no rollouts of {args.policy} in {DataRoot(root, TASK).ledger}",
              file=sys.stderr)  # fmt: skip
        return 1
    print(summary.table())
    out = args.json or DataRoot(root).logs / f"eval_{time.strftime('%Y%m%d_%H%M%S')}.json"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(summary.to_dict(), indent=2) + "\n", encoding="utf-8")
    except OSError as exc:  # the folder went away or filled up since the check
        print(f"mecharm eval: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"written: {out}")
    return 0


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.splitlines()[0] if __doc__ else None
    parser.add_argument("policy", help="episode:DATASET[#N], lerobot:PATH or python:MODULE:NAME")
    parser.add_argument("--episodes", type=int, default=10, help="rollouts to run (default 10)")
    parser.add_argument("--seed", type=int, default=7, help="the first scene's seed (default 7)")
    parser.add_argument(
        "--per-scene", type=int, default=1, help="rollouts per scene before the next seed"
    )
    parser.add_argument(
        "--time-scale", type=float, default=5.0, help="the simulated arm's speed-up (default 5)"
    )
    parser.add_argument("--sim-profile", default="rig", help="rig (default), ideal, harsh")
    parser.add_argument("--max-s", type=float, help="an episode's time limit (rollout.max_s)")
    parser.add_argument("--no-recorder", action="store_true", help="run without the side camera")
    parser.add_argument(
        "--sim-python",
        type=Path,
        help="the Python that runs the simulated rig and the recorder (default this one; "
        "the project's venv when this one is lerobot's, whose OpenCV is older)",
    )
    parser.add_argument(
        "--data-root", type=Path, help="where the rollouts are written (default: the demo's root)"
    )
    parser.add_argument(
        "--no-run", action="store_true", help="only summarise the rollouts of POLICY in --data-root"
    )
    parser.add_argument(
        "--json", type=Path, help="the summary file (default logs/eval_<time>.json)"
    )
    parser.set_defaults(func=run)
