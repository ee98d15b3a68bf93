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
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


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
    ap.add_argument(
        "--project-python", type=Path, default=ROOT / ".venv" / "bin" / "python",
        help="the project's venv (make venv): runs the demo, the export and the simulated rig",
    )  # fmt: skip
    ap.add_argument("--work", type=Path, help="keep everything here (default: a temp folder)")
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
    summary: dict[str, Any] = {"work": str(work)}
    ok = True

    def step(name: str, cmd: list[str], log: str) -> bool:
        nonlocal ok
        t0 = time.monotonic()
        with open(work / log, "w", encoding="utf-8") as fh:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                check=False).returncode  # fmt: skip
        took = time.monotonic() - t0
        passed = rc == 0
        ok = ok and passed
        summary[name] = {"ok": passed, "exit": rc, "s": round(took, 1), "log": log}
        print(f"{'PASS' if passed else 'FAIL'} {name}: exit {rc} in {took:.0f} s ({work / log})",
              flush=True)  # fmt: skip
        return passed

    demo, ds, edit, train = work / "demo", work / "ds", work / "edit", work / "train"
    ev = work / "eval"
    proj = str(a.project_python)
    for d in (ds, edit, train, ev):
        shutil.rmtree(d, ignore_errors=True)
    go = step("demo", [proj, "-m", "mecharm.tools.demo", "--trials", str(a.trials),
                       "--data-root", str(demo)], "demo.log")  # fmt: skip
    go = go and step("export", [proj, "-m", "mecharm.tools.cli", "export", "lerobot", "--root",
                                str(demo), "--out", str(ds), "--allow-time-scaled",
                                "--top-width", "96", "--no-progress"], "export.log")  # fmt: skip
    top_only = edit / "src" / "local" / "top_only"  # lerobot-edit-dataset writes under --root
    if go:
        shutil.copytree(ds, edit / "src")
    go = go and step("remove_side", [str(bindir / "lerobot-edit-dataset"), "--repo_id",
                                      "local/src", "--root", str(edit / "src"),
                                      "--operation.type", "remove_feature",
                                      "--operation.feature_names",
                                      "['observation.images.side']",
                                      "--new_repo_id", "local/top_only"], "edit.log")  # fmt: skip
    go = go and step("train", [
        str(bindir / "lerobot-train"), "--dataset.repo_id=local/top_only",
        f"--dataset.root={top_only}", "--dataset.video_backend=pyav", "--policy.type=act",
        "--policy.device=cpu", "--policy.pretrained_backbone_weights=null",
        "--policy.push_to_hub=false", "--policy.chunk_size=10", "--policy.n_action_steps=10",
        f"--steps={a.steps}", "--batch_size=2", f"--save_freq={a.steps}",
        f"--output_dir={train}", "--num_workers=0", "--eval_freq=0", "--log_freq=5",
        "--wandb.enable=false",
    ], "train.log")  # fmt: skip
    ckpt = train / "checkpoints" / "last" / "pretrained_model"
    report = work / "eval.json"
    if go:
        ev.mkdir()
        shutil.copytree(demo / "fk", ev / "fk")  # the FK table the demo built
    go = go and step("eval", [sys.executable, "-m", "mecharm.tools.cli", "eval",
                              f"lerobot:{ckpt}", "--episodes", str(a.episodes),
                              "--max-s", str(a.max_s), "--data-root", str(ev),
                              "--time-scale", str(a.time_scale),
                              "--sim-python", proj, "--json", str(report)], "eval.log")  # fmt: skip
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
        ok = ok and judged
        print(f"{'PASS' if judged else 'FAIL'} ledger: {len(rows)} rollouts, "
              f"{d['successes']}/{d['episodes']} in the box by the judge, "
              f"interval {d['ci95']}, truth {d.get('truth')}", flush=True)  # fmt: skip
    go = go and step("report", [proj, "-m", "mecharm.tools.cli", "report", str(ev), "--task",
                                "rollout"], "report.log")  # fmt: skip
    print(json.dumps(summary, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
