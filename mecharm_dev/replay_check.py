"""Check that ``lerobot-replay`` of an exported episode moves the simulated arm along the
dataset's actions (docs/lerobot-robot.md, "Replaying an exported episode").

Run with the lerobot venv's Python (the project and the plugins installed in it); the
simulated rig, the demo and the export run in the project's venv (``--project-python``):

    .lerobot-venv/bin/python -m mecharm_dev.replay_check

Each step is a real command line, printing one line each and a JSON summary (exit 1 when
one fails):

1. ``make run``'s demo records one scripted trial on scene ``--seed`` in real time (time
   scale 1: the export refuses a faster recording's timing);
2. ``mecharm export lerobot --action measured --columns lerobot --cameras side``: the
   actions are the path the arm took (docs/lerobot.md, "Action");
3. a simulated rig started on its own on the same scene, the same profile, real time;
4. ``lerobot-replay --robot.type=mecharm270 --robot.max_relative_target=15`` of episode 0,
   the robot tracing every step it sends (``--robot.trace_path``);
5. the trace against the dataset: one sent step per action, each joint within
   ``--tol`` degrees of the action (none refused by the guards: every action inside the
   envelope), the gripper commands at the action's changes;
6. the simulator's truth: where the block ended, against where the scripted trial left it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from mecharm_dev.checksteps import add_common_args, lerobot_home_steps

TOKEN = "replay-check-token-0123456789abcdef"


def sent_steps(trace: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The robot's ``stream_step`` decisions and the gripper values it sent, in order."""
    steps: list[dict[str, Any]] = []
    grips: list[int] = []
    for line in trace.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec.get("event") != "decision":
            continue
        if rec.get("kind") == "stream_step":
            steps.append(rec["value"])
        elif rec.get("kind") == "gripper":
            grips.append(int(rec["value"]["value"]))
    return steps, grips


def compare(actions: list[list[float]], steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Per action, the largest joint difference between what the dataset asks and what the
    robot sent (matched by the step number the robot's note carries: ``lerobot step N``);
    refusals and clamps counted. An action with no step was held while a gripper command
    held the link: how far it was from the pose held (the motion a hold would skip)."""
    by_step: dict[int, dict[str, Any]] = {}
    for s in steps:
        note = str(s.get("note", ""))
        tail = note.rsplit(" ", 1)[-1]
        if tail.isdigit():
            by_step[int(tail)] = s
    worst, worst_at, skipped, skipped_at = 0.0, -1, 0.0, -1
    held: list[int] = []
    pose: list[float] | None = None  # the pose the arm was last sent
    for i, want in enumerate(actions):
        step = by_step.get(i)
        if step is None:
            held.append(i)
            if pose is not None:
                d = max(abs(a - b) for a, b in zip(want[:6], pose, strict=True))
                if d > skipped:
                    skipped, skipped_at = d, i
            continue
        if step.get("sent") is None:
            continue
        pose = list(step["sent"])
        d = max(abs(a - b) for a, b in zip(want[:6], pose, strict=True))
        if d > worst:
            worst, worst_at = d, i
    refused = [i for i, s in by_step.items() if s.get("sent") is None]
    clamped = [i for i, s in by_step.items() if s.get("clamped")]
    return {"actions": len(actions), "sent": len(by_step) - len(refused), "refused": refused,
            "clamped": clamped, "held": held, "max_diff_deg": round(worst, 3), "at": worst_at,
            "held_skipped_deg": round(skipped, 3), "held_at": skipped_at,
            "unmatched": len(steps) - len(by_step)}  # fmt: skip


def gripper_changes(actions: list[list[float]]) -> list[int]:
    """The gripper values a replay must send: each change of the action's gripper."""
    out: list[int] = []
    last: float | None = None
    for a in actions:
        if last is None or a[6] != last:
            out.append(int(a[6]))
        last = a[6]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mecharm_dev.replay_check", description=__doc__)
    ap.add_argument("--seed", type=int, default=11, help="the scene of the trial and the replay")
    ap.add_argument("--sim-profile", default="rig", help="the simulated rig's profile")
    ap.add_argument("--tol", type=float, default=0.5, help="degrees a sent joint may differ")
    ap.add_argument("--max-step", type=float, default=15.0,
                    help="--robot.max_relative_target (the runtime's joint_step_max_deg)")  # fmt: skip
    add_common_args(ap)
    a = ap.parse_args(argv)
    try:
        import pyarrow.parquet as pq
        from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: F401
    except ImportError as exc:
        print(f"replay_check: lerobot is not importable here ({exc}); run it with the "
              "lerobot venv's python (docs/lerobot-robot.md)", file=sys.stderr)  # fmt: skip
        return 2
    from mecharm.runtime.simcontrol import scene_truth
    from mecharm.tools.simrig import start_sim_daemon

    steps, home = lerobot_home_steps(a.work, "replay_check_")
    work, bindir, proj = steps.work, Path(sys.executable).parent, str(a.project_python)
    run, say = steps.run, steps.say

    demo, ds = work / "demo", home / "local" / "replayed"
    shutil.rmtree(demo, ignore_errors=True)
    go = run("demo", [proj, "-m", "mecharm.tools.demo", "--trials", "1", "--time-scale", "1",
                      "--seed", str(a.seed), "--sim-profile", a.sim_profile,
                      "--data-root", str(demo)])  # fmt: skip
    go = go and run("export", [proj, "-m", "mecharm.tools.cli", "export", "lerobot", "--root",
                               str(demo), "--out", str(ds), "--select", "all", "--action",
                               "measured", "--columns", "lerobot", "--cameras", "side",
                               "--side-width", "320", "--no-progress"])  # fmt: skip
    actions: list[list[float]] = []
    if go:
        table = pq.read_table(ds / "data").to_pydict()
        actions = [
            a for a, e in zip(table["action"], table["episode_index"], strict=True) if e == 0
        ]
        manifest = json.loads((ds / "meta" / "mecharm_export.json").read_text(encoding="utf-8"))
        scripted = manifest["episodes"][0]
        go = say("dataset", len(actions) > 0,
                 f"episode 0 of {scripted['run_stem']}: {len(actions)} actions at "
                 f"{manifest['fps']} fps, time scale {scripted['time_scale']}, scripted trial "
                 f"{'placed' if scripted['success'] else 'not placed'} "
                 f"(place verdict {scripted.get('place_verdict')})")  # fmt: skip
    trace = work / "replay_trace.jsonl"
    truth: dict[str, Any] = {}
    if go:
        sim = start_sim_daemon(work / "logs", seed=a.seed, time_scale=1.0, token=TOKEN,
                               python=proj, extra_args=["--sim-profile", a.sim_profile])  # fmt: skip
        try:
            go = run("replay", [
                str(bindir / "lerobot-replay"), "--robot.type=mecharm270", "--robot.id=replay",
                f"--robot.daemon_port={sim.daemon_port}", f"--robot.token_file={sim.token_file}",
                f"--robot.max_relative_target={a.max_step}", f"--robot.trace_path={trace}",
                "--dataset.repo_id=local/replayed", f"--dataset.root={ds}",
                "--dataset.episode=0", "--play_sounds=false",
            ])  # fmt: skip
            time.sleep(2.0)  # the last step's motion and a falling block settle
            truth = scene_truth(sim.control_url)
        finally:
            sim.daemon.stop()
    if go:
        sent, grips = sent_steps(trace)
        cmp = compare(actions, sent)
        ok = (
            cmp["sent"] + len(cmp["held"]) == len(actions)
            and not cmp["refused"]
            and not cmp["unmatched"]
            and cmp["max_diff_deg"] <= a.tol
            and cmp["held_skipped_deg"] <= a.tol
        )
        say("path", ok,
            f"{cmp['sent']} of {len(actions)} actions sent, {len(cmp['held'])} held while a "
            f"gripper command held the link (at most {cmp['held_skipped_deg']}° from the pose "
            f"held), {len(cmp['refused'])} refused, {len(cmp['clamped'])} clamped; largest "
            f"joint difference {cmp['max_diff_deg']}° (action {cmp['at']}; limit {a.tol}°)")  # fmt: skip
        want = gripper_changes(actions)
        say("gripper", grips == want[1:] or grips == want,
            f"sent {grips}, the actions change to {want}")  # fmt: skip
        block = truth.get("block") or {}
        resting = block.get("resting_on")
        say("truth", resting == "box" or not scripted["success"],
            f"after the replay the block rests on {resting!r} (the scripted trial "
            f"{'placed it in the box' if scripted['success'] else 'did not place it'})")  # fmt: skip
        steps.summary["compare"] = cmp
    print(json.dumps(steps.summary, indent=2))
    return 0 if steps.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
