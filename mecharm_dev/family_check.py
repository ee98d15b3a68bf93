"""Check that an export and a ``lerobot-record`` dataset of this robot are one dataset family
(docs/lerobot-robot.md, "One dataset family"): same features, shapes and fps, each verified,
merged by lerobot's own tool.

Run with the lerobot venv's Python (the project and the plugins installed in it); the
simulated rig, the demo and the export run in the project's venv (``--project-python``):

    .lerobot-venv/bin/python -m mecharm_dev.family_check

Each step is a real command line, printing one line each and a JSON summary (exit 1 when
one fails):

1. ``make run``'s demo records scripted trials;
2. ``mecharm export lerobot --side-width 320 --top-width 320 --columns lerobot``: both
   cameras 320x180, only the columns lerobot-record writes;
3. ``lerobot-record --robot.type=mecharm270`` with the scripted leader on a simulated rig
   started on its own, both cameras as ``mjpeg_http`` at 320x180, ``--dataset.vcodec=h264``
   (lerobot's default is AV1; the export writes H.264);
4. the two ``info.json`` files' features compared: they are equal (names, shapes, dtypes,
   the video info);
5. ``lerobot-edit-dataset merge`` merges the two as they are; ``LeRobotDataset`` loads the
   result and ``mecharm export verify`` passes it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mecharm_dev.checksteps import add_common_args, lerobot_home_steps

TOKEN = "family-check-token-0123456789abcdef"
SIZE = 320  # both cameras' width in both datasets (16:9: 320x180)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mecharm_dev.family_check", description=__doc__)
    ap.add_argument("--trials", type=int, default=2, help="scripted trials to export")
    add_common_args(ap)
    a = ap.parse_args(argv)
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
    except ImportError as exc:
        print(f"family_check: lerobot is not importable here ({exc}); run it with the "
              "lerobot venv's python (docs/lerobot-robot.md)", file=sys.stderr)  # fmt: skip
        return 2
    from mecharm.tools.simrig import start_sim_daemon

    steps, home = lerobot_home_steps(a.work, "family_check_")
    work, bindir, proj = steps.work, Path(sys.executable).parent, str(a.project_python)
    run, say = steps.run, steps.say

    demo, exp, rec = work / "demo", home / "local" / "export", home / "local" / "recorded"
    go = run("demo", [proj, "-m", "mecharm.tools.demo", "--trials", str(a.trials),
                      "--data-root", str(demo)])  # fmt: skip
    go = go and run("export", [proj, "-m", "mecharm.tools.cli", "export", "lerobot", "--root",
                               str(demo), "--out", str(exp), "--allow-time-scaled",
                               "--side-width", str(SIZE), "--top-width", str(SIZE),
                               "--columns", "lerobot", "--no-progress"])  # fmt: skip
    if go:
        sim = start_sim_daemon(work / "logs", time_scale=1.0, token=TOKEN, python=proj)
        try:
            cams = ", ".join(
                f"{name}: {{type: mjpeg_http, url: {url}, width: {SIZE}, height: {SIZE * 9 // 16}, fps: 10}}"
                for name, url in (("side", sim.side_url), ("top", sim.top_url))
            )
            go = run("record", [
                str(bindir / "lerobot-record"), "--robot.type=mecharm270", "--robot.id=family",
                f"--robot.daemon_port={sim.daemon_port}", f"--robot.token_file={sim.token_file}",
                f"--robot.cameras={{{cams}}}", "--teleop.type=mecharm_scripted",
                "--teleop.id=script", "--teleop.period_s=4", "--dataset.repo_id=local/recorded",
                f"--dataset.root={rec}", "--dataset.single_task=follow the scripted leader",
                "--dataset.fps=10", "--dataset.num_episodes=1", "--dataset.episode_time_s=4",
                "--dataset.reset_time_s=1", "--dataset.push_to_hub=false",
                "--dataset.vcodec=h264", "--display_data=false", "--play_sounds=false",
            ])  # fmt: skip
        finally:
            sim.daemon.stop()
    if go:
        fe = json.loads((exp / "meta" / "info.json").read_text(encoding="utf-8"))["features"]
        fr = json.loads((rec / "meta" / "info.json").read_text(encoding="utf-8"))["features"]
        extra, missing = [k for k in fe if k not in fr], [k for k in fr if k not in fe]
        differ = [k for k in fr if k in fe and fe[k] != fr[k]]
        # equal as mappings: lerobot-record lists the action first, the export (as lerobot's
        # own writer given state then action) the state; no lerobot tool reads the order
        go = say("features", fe == fr,
                 f"{len(fe)} features in the export, {len(fr)} recorded; only in the export: "
                 f"{extra or 'none'}; only recorded: {missing or 'none'}; differing: "
                 f"{differ or 'none'}")  # fmt: skip
    edit = str(bindir / "lerobot-edit-dataset")
    go = go and run("merge", [edit, "--repo_id", "local/merged", "--operation.type", "merge",
                              "--operation.repo_ids", "['local/recorded', 'local/export']"])  # fmt: skip
    if go:
        merged = LeRobotDataset(
            "local/merged", root=home / "local" / "merged", video_backend="pyav"
        )
        item = merged[len(merged) - 1]
        shapes = {k: tuple(v.shape) for k, v in item.items() if k.startswith("observation.")}
        say("loaded", merged.meta.total_episodes == a.trials + 1,
            f"{merged.meta.total_episodes} episodes, {merged.meta.total_frames} frames; {shapes}")  # fmt: skip
        run("verify", [proj, "-m", "mecharm.tools.cli", "export", "verify",
                       str(home / "local" / "merged")])  # fmt: skip
    print(json.dumps(steps.summary, indent=2))
    return 0 if steps.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
