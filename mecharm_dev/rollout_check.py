"""Check a learned policy's rollouts end to end with the real lerobot (docs/rollouts.md).

Run with the lerobot venv's Python (the project installed in it with its runtime, sim and
recorder extras); the simulated rig and the recorder run in the project's venv
(``--project-python``), whose OpenCV and rerun are newer than lerobot's pins:

    .lerobot-venv/bin/python -m mecharm_dev.rollout_check [--trials 3] [--steps 20]

Each step is a real command line, as a data collector would type it, printing one line
each and a JSON summary at the end (exit 1 when one fails):

1. ``make run``'s demo records scripted trials on the simulated rig;
2. ``mecharm export lerobot`` exports them (``--allow-time-scaled``: the demo runs at 5x);
3. ``lerobot-edit-dataset remove_feature`` drops the side camera (a rollout can give a
   policy the top camera only: the side camera is the recorder's);
4. ``lerobot-train`` trains ACT for a few steps on the CPU;
5. ``mecharm eval lerobot:CHECKPOINT`` runs rollouts of it on the simulated rig: each one
   recorded, judged, in the rollout ledger, with the success rate and its interval, and
   the simulator's truth beside the judge's;
6. ``mecharm report --task rollout`` shows them on the rollouts' page.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from mecharm_dev.checksteps import ROOT, Steps, add_common_args


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mecharm_dev.rollout_check", description=__doc__)
    ap.add_argument("--trials", type=int, default=3, help="scripted demonstrations to record")
    ap.add_argument("--steps", type=int, default=20, help="lerobot-train steps")
    ap.add_argument("--episodes", type=int, default=3, help="rollouts to evaluate")
    ap.add_argument("--max-s", type=float, default=20.0, help="a rollout's time limit")
    ap.add_argument(
        "--time-scale", type=float, default=1.0,
        help="the rollouts' simulated rig (default real time: the policy's inference and the "
        "top camera's 10 fps have a loop of 10 ticks a second to keep up with)",
    )  # fmt: skip
    add_common_args(ap)
    a = ap.parse_args(argv)
    try:
        import lerobot  # noqa: F401
    except ImportError as exc:
        print(f"rollout_check: lerobot is not importable here ({exc}); run it with the "
              "lerobot venv's python (docs/rollouts.md)", file=sys.stderr)  # fmt: skip
        return 2
    if not a.project_python.is_file():
        print(f"rollout_check: no project venv at {a.project_python}: make venv", file=sys.stderr)
        return 2
    work = a.work or Path(tempfile.mkdtemp(prefix="rollout_check_"))
    work.mkdir(parents=True, exist_ok=True)
    bindir = Path(sys.executable).parent
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    checks = Steps(work, env, {"work": str(work)})
    summary = checks.summary

    step = checks.run

    demo, ds, edit, train = work / "demo", work / "ds", work / "edit", work / "train"
    ev = work / "eval"
    proj = str(a.project_python)
    for d in (ds, edit, train, ev):
        shutil.rmtree(d, ignore_errors=True)
    go = step("demo", [proj, "-m", "mecharm.tools.demo", "--trials", str(a.trials),
                       "--data-root", str(demo)])  # fmt: skip
    go = go and step("export", [proj, "-m", "mecharm.tools.cli", "export", "lerobot", "--root",
                                str(demo), "--out", str(ds), "--allow-time-scaled",
                                "--top-width", "96", "--no-progress"])  # fmt: skip
    top_only = edit / "src" / "local" / "top_only"  # lerobot-edit-dataset writes under --root
    if go:
        shutil.copytree(ds, edit / "src")
    go = go and step("remove_side", [str(bindir / "lerobot-edit-dataset"), "--repo_id",
                                      "local/src", "--root", str(edit / "src"),
                                      "--operation.type", "remove_feature",
                                      "--operation.feature_names",
                                      "['observation.images.side']",
                                      "--new_repo_id", "local/top_only"])  # fmt: skip
    go = go and step("train", [
        str(bindir / "lerobot-train"), "--dataset.repo_id=local/top_only",
        f"--dataset.root={top_only}", "--dataset.video_backend=pyav", "--policy.type=act",
        "--policy.device=cpu", "--policy.pretrained_backbone_weights=null",
        "--policy.push_to_hub=false", "--policy.chunk_size=10", "--policy.n_action_steps=10",
        f"--steps={a.steps}", "--batch_size=2", f"--save_freq={a.steps}",
        f"--output_dir={train}", "--num_workers=0", "--eval_freq=0", "--log_freq=5",
        "--wandb.enable=false",
    ])  # fmt: skip
    ckpt = train / "checkpoints" / "last" / "pretrained_model"
    report = work / "eval.json"
    if go:
        ev.mkdir()
        shutil.copytree(demo / "fk", ev / "fk")  # the FK table the demo built
    go = go and step("eval", [sys.executable, "-m", "mecharm.tools.cli", "eval",
                              f"lerobot:{ckpt}", "--episodes", str(a.episodes),
                              "--max-s", str(a.max_s), "--data-root", str(ev),
                              "--time-scale", str(a.time_scale),
                              "--sim-python", proj, "--json", str(report)])  # fmt: skip
    if go:
        d = json.loads(report.read_text(encoding="utf-8"))
        with (ev / "runs" / "rollout_ledger.csv").open(encoding="utf-8", newline="") as fh:
            rows = list(csv.DictReader(fh))
        summary["rollouts"] = {k: d.get(k) for k in ("episodes", "successes", "stopped",
                                                     "success_rate", "ci95", "truth")}  # fmt: skip
        summary["ledger"] = [{k: r[k] for k in ("run_stem", "status", "place_verdict", "ticks",
                                                "missed_ticks", "clamped", "refused",
                                                "stopped_by", "put_back", "recording_status")}
                             for r in rows]  # fmt: skip
        judged = len(rows) == a.episodes and all(r["status"] == "completed" for r in rows)
        checks.say("ledger", judged, f"{len(rows)} rollouts, {d['successes']}/{d['episodes']} "
                   f"in the box by the judge, interval {d['ci95']}, truth {d.get('truth')}")  # fmt: skip
    go = go and step("report", [proj, "-m", "mecharm.tools.cli", "report", str(ev), "--task",
                                "rollout"])  # fmt: skip
    print(json.dumps(summary, indent=2))
    return 0 if checks.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
