"""Check the rig as a LeRobot robot with the real lerobot (docs/lerobot-robot.md).

Run with the lerobot venv's Python, the project and the plugin installed in it:

    .lerobot-venv/bin/pip install -e . -e ./plugins/lerobot_robot_mecharm \
        -e ./plugins/lerobot_camera_mecharm -e ./plugins/lerobot_teleoperator_mecharm
    .lerobot-venv/bin/python -m mecharm_dev.robot_check [--ticks 60]

Against a simulated daemon process (with a token) it checks, printing one line each and a
JSON summary at the end (exit 1 when one fails):

1. lerobot's ``register_third_party_plugins()`` finds the plugin: ``mecharm270`` is a
   robot type;
   and ``lerobot_camera_mecharm``'s ``mjpeg_http`` camera reads the simulated top camera
   through ``make_cameras_from_configs``;
2. ``make_robot_from_config`` builds it, it connects, and its features are lerobot's kind;
3. a session records one episode with lerobot's own ``LeRobotDataset`` (the robot's
   features through ``hw_to_dataset_features``, frames through ``build_dataset_frame``),
   at the loop's measured rate;
4. ``lerobot-replay`` (the real command line, ``--robot.type=mecharm270``) replays that
   episode on the arm; afterwards the arm is within one bounded step of where the
   episode's last action put it;
5. ``lerobot-record`` with the scripted leader (``--teleop.type=mecharm_scripted``, the
   third plugin) records 3 episodes that ``LeRobotDataset`` loads; ``mecharm export
   verify``'s verdict on them is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mecharm.runtime.client import DaemonClient
from mecharm.tools.simrig import start_sim_daemon

TOKEN = "robot-check-token-0123456789abcdef"


def _sway(i: int) -> dict[str, float]:
    j0 = 20.0 * math.sin(i / 8.0)
    pose = (j0, 10.0, -10.0, 0.0, 0.0, -30.0)
    return {f"j{k}.pos": v for k, v in enumerate(pose)} | {"gripper.pos": 100.0}


async def _angles(port: int) -> list[float]:
    async with DaemonClient("127.0.0.1", port, token=TOKEN) as c:
        return await c.get_angles()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mecharm_dev.robot_check", description=__doc__)
    ap.add_argument("--ticks", type=int, default=60, help="ticks of the recorded episode")
    ap.add_argument("--fps", type=int, default=10, help="the episode's rate")
    a = ap.parse_args(argv)
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
        from lerobot.datasets.utils import build_dataset_frame, hw_to_dataset_features
        from lerobot.robots.config import RobotConfig
        from lerobot.robots.utils import make_robot_from_config
        from lerobot.utils.import_utils import register_third_party_plugins
    except ImportError as exc:
        print(f"robot_check: lerobot is not importable here ({exc}); run it with the lerobot "
              "venv's python (docs/lerobot-robot.md)", file=sys.stderr)  # fmt: skip
        return 2
    summary: dict[str, Any] = {}
    ok = True

    def say(name: str, passed: bool, detail: str) -> None:
        nonlocal ok
        ok = ok and passed
        summary[name] = {"ok": passed, "detail": detail}
        print(f"{'PASS' if passed else 'FAIL'} {name}: {detail}", flush=True)

    with tempfile.TemporaryDirectory(prefix="robot_check_") as tmp:
        base = Path(tmp)
        sim = start_sim_daemon(base / "logs", time_scale=1.0, token=TOKEN)
        assert sim.token_file is not None
        token = sim.token_file
        try:
            register_third_party_plugins()
            known = RobotConfig.get_known_choices()
            say(
                "discovered",
                "mecharm270" in known,
                f"robot types include mecharm270: {'mecharm270' in known}",
            )
            from lerobot.cameras.configs import CameraConfig
            from lerobot.cameras.utils import make_cameras_from_configs

            cam_known = "mjpeg_http" in CameraConfig.get_known_choices()
            cams = make_cameras_from_configs({
                "top": CameraConfig.get_choice_class("mjpeg_http")(
                    url=sim.top_url, width=320, height=180, fps=10
                )
            })  # fmt: skip
            cams["top"].connect()
            shapes = [cams["top"].async_read(timeout_ms=1000).shape for _ in range(3)]
            latest = cams["top"].read_latest().shape
            cams["top"].disconnect()
            say("camera", cam_known and shapes == [(180, 320, 3)] * 3 and latest == (180, 320, 3),
                f"mjpeg_http discovered: {cam_known}; async_read {shapes[0]}, read_latest {latest}")  # fmt: skip
            cls = RobotConfig.get_choice_class("mecharm270")
            cfg = cls(
                id="check", daemon_port=sim.daemon_port, token_file=str(token),
                cameras={"top": CameraConfig.get_choice_class("mjpeg_http")(
                    url=sim.top_url, width=320, height=180, fps=10)},
            )  # fmt: skip
            robot = make_robot_from_config(cfg)
            robot.connect()
            feats = robot.observation_features
            say("features", feats.get("top") == (180, 320, 3) and feats.get("j0.pos") is float,
                f"{sorted(feats)}")  # fmt: skip
            ds_root = base / "ds"
            features = {
                **hw_to_dataset_features(robot.action_features, "action"),
                **hw_to_dataset_features(robot.observation_features, "observation", use_video=True),
            }
            ds = LeRobotDataset.create(
                "local/mecharm_check", a.fps, root=ds_root, robot_type=robot.name,
                features=features, use_videos=True,
            )  # fmt: skip
            t0 = time.perf_counter()
            for i in range(a.ticks):
                tick = time.perf_counter()
                obs = robot.get_observation()
                sent = robot.send_action(_sway(i))
                frame = {
                    **build_dataset_frame(ds.features, obs, "observation"),
                    **build_dataset_frame(ds.features, sent, "action"),
                    "task": "sway the base",
                }
                ds.add_frame(frame)
                time.sleep(max(0.0, 1.0 / a.fps - (time.perf_counter() - tick)))
            hz = a.ticks / (time.perf_counter() - t0)
            robot.disconnect()
            ds.save_episode()
            ds.finalize()
            say("recorded", hz >= 0.9 * a.fps, f"{a.ticks} frames at {hz:.1f} Hz (asked {a.fps})")
            summary["record_hz"] = round(hz, 2)
            last = sent
            cmd = [
                str(Path(sys.executable).with_name("lerobot-replay")),
                "--robot.type=mecharm270", "--robot.id=check",
                f"--robot.daemon_port={sim.daemon_port}", f"--robot.token_file={token}",
                "--dataset.repo_id=local/mecharm_check", f"--dataset.root={ds_root}",
                "--dataset.episode=0", "--play_sounds=false",
                # the robot's camera as lerobot's command line names it
                f"--robot.cameras={{top: {{type: mjpeg_http, url: {sim.top_url}, width: 320, "
                "height: 180, fps: 10}}",
            ]  # fmt: skip
            t0 = time.perf_counter()
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            took = time.perf_counter() - t0
            time.sleep(1.0)  # the last step's motion ends
            now = asyncio.run(_angles(sim.daemon_port))
            err = max(abs(now[k] - last[f"j{k}.pos"]) for k in range(6))
            # each replayed send is bounded against the arm's reading (max_relative_target,
            # 5°): an arm that lags the episode (a loaded machine) ends within one step of it
            say("replayed", r.returncode == 0 and err <= 5.0,
                f"lerobot-replay exit {r.returncode} in {took:.1f} s; arm {err:.2f}° from the "
                f"episode's last action" + ("" if r.returncode == 0 else f": {r.stderr[-800:]}"))  # fmt: skip
            summary["replay_s"] = round(took, 1)
            summary["replay_final_error_deg"] = round(err, 2)
            rec_root = base / "rec"
            cmd = [
                str(Path(sys.executable).with_name("lerobot-record")),
                "--robot.type=mecharm270", "--robot.id=check",
                f"--robot.daemon_port={sim.daemon_port}", f"--robot.token_file={token}",
                f"--robot.cameras={{top: {{type: mjpeg_http, url: {sim.top_url}, width: 320, "
                "height: 180, fps: 10}}",
                "--teleop.type=mecharm_scripted", "--teleop.id=script", "--teleop.period_s=4",
                "--dataset.repo_id=local/mecharm_teleop", f"--dataset.root={rec_root}",
                "--dataset.single_task=follow the scripted leader", "--dataset.fps=10",
                "--dataset.num_episodes=3", "--dataset.episode_time_s=4",
                "--dataset.reset_time_s=1", "--dataset.push_to_hub=false",
                "--display_data=false", "--play_sounds=false",
            ]  # fmt: skip
            t0 = time.perf_counter()
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
            took = time.perf_counter() - t0
            episodes, frames, names = 0, 0, []
            if r.returncode == 0:
                rec = LeRobotDataset("local/mecharm_teleop", root=rec_root)
                episodes, frames = rec.meta.total_episodes, rec.meta.total_frames
                names = rec.meta.features["action"]["names"]
            say("teleop_recorded", r.returncode == 0 and episodes == 3,
                f"lerobot-record with the scripted leader: exit {r.returncode} in {took:.0f} s, "
                f"{episodes} episodes, {frames} frames, action names {names}"
                + ("" if r.returncode == 0 else f": {r.stderr[-1200:]}"))  # fmt: skip
            summary["teleop_record_s"] = round(took, 1)
            if r.returncode == 0:
                v = subprocess.run(
                    [sys.executable, "-m", "mecharm.tools.cli", "export", "verify", str(rec_root)],
                    capture_output=True, text=True, timeout=300,
                )  # fmt: skip
                summary["teleop_verify"] = {
                    "exit": v.returncode,
                    "out": (v.stdout + v.stderr)[-1500:],
                }
                print(f"INFO mecharm export verify on it: exit {v.returncode}", flush=True)
        finally:
            sim.daemon.stop()
    print(json.dumps(summary, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
