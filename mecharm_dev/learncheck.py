"""Learning curve of the pick correction on the simulated rig (docs/simulation-learning.md).

Starts the simulated rig as a real daemon process with a sim profile (the world's arm
disagrees with the runtime's model), then runs N seeded trials through the real
runtime from an empty correction memory in a fresh data root. Per trial it writes
the first attempt's tip error (true, from the profile's arm and the scene's truth;
and as the top camera measured it), whether the first grasp held, the pick servo's
steps, the attempts and the verdicts; it prints the learning curve and the success
rate after a warm-up, and draws docs/img/learning_curve.png.

    python -m mecharm_dev.learncheck --profile rig --trials 40 --warmup 10 --seed 100
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import itertools
import json
import math
import re
import signal
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from mecharm.common.config import load_settings
from mecharm.common.defaults import RUNTIME_CONFIG
from mecharm.common.kinematics import fk_tip
from mecharm.common.layout import DataRoot
from mecharm.common.logging import configure_logging
from mecharm.runtime.config import MOVED_SETTINGS, RuntimeSettings, setting_paths
from mecharm.runtime.records.trace import read_trace
from mecharm.runtime.rigsetup import open_rig
from mecharm.runtime.simcontrol import scene_next
from mecharm.runtime.trial import TrialSummary, run_trial
from mecharm.sim.profile import ProfileError, SimProfile, load_profile
from mecharm.sim.world_arm import WorldArm
from mecharm.tools.simrig import Child, start_sim_daemon

__all__ = ["TrialRow", "draw_curve", "main", "trial_row"]

#: the simulated gripper holds a block whose centre is this close to the tip in x-z (docs/workcell.md)
GRASP_TOL_MM = 12.0


@dataclass
class TrialRow:
    """One trial of the learning curve (a CSV row)."""

    trial: int
    seed: int
    status: str
    reason: str
    #: first attempt, at the descent (before any servo step): true tip - block in x-z, mm, and
    #: the tip's true height minus the height the runtime's model gives (the camera cannot see it)
    true_dx_mm: float | None
    true_dz_mm: float | None
    height_err_mm: float | None
    true_xz_mm: float | None
    #: the same, as the top camera measured it (x-z only)
    measured_xz_mm: float | None
    #: the memory's correction applied on the first attempt, mm
    correction_dx_mm: float
    correction_dz_mm: float
    #: the world's first grasp: held, and the true tip-to-block distance then (after the servo)
    first_grasp: bool
    first_grasp_xz_mm: float | None
    servo_steps_first: int
    servo_steps_total: int
    attempts: int
    pick_verdict: str
    place_verdict: str
    #: the world at the trial's end (``GET /scene/truth``): where the block rests
    #: (mat, box, rim, gripper, air) and whether it is upright
    true_block_on: str = "-"
    #: the runtime's account disagrees with the world in a way it did not report: it judged
    #: the place yes while the block is not in the box (docs/simulation.md, "harsh")
    undetected_wrong: bool = False
    #: the runtime stopped saying it holds the block (in the hover) while the world's block
    #: is elsewhere: the stop and its reason were reported, the belief about the jaws was wrong
    held_claim_wrong: bool = False

    @property
    def success(self) -> bool:
        return (
            self.status == "completed"
            and self.pick_verdict == "yes"
            and self.place_verdict == "yes"
        )


def _get_json(url: str, timeout: float = 5.0) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        out = json.loads(r.read())
    return out if isinstance(out, dict) else {}


def trial_row(
    i: int, seed: int, t: TrialSummary, world: WorldArm, start: dict[str, Any], end: dict[str, Any]
) -> TrialRow:
    """The row of trial ``i`` from its trace, the scene's truth at its start and end, and the
    world's arm (the profile's, the same the daemon simulates)."""
    entries = list(read_trace(t.trace_path)) if t.trace_path.is_file() else []
    first_cmd = first_tip = corr = None
    servo_first = servo_total = 0
    detects = 0
    for e in entries:
        kind = e.get("kind")
        if e.get("event") == "input" and kind == "scene":
            detects += 1
        if e.get("event") == "decision" and kind == "correction" and corr is None:
            corr = e["value"].get("applied_mm")
        is_descent = kind == "command" and e["value"].get("note") == "pick descend"
        if e.get("event") == "decision" and is_descent and first_cmd is None:
            first_cmd = e["value"]["angles"]
        if e.get("event") == "input" and kind == "tip" and first_tip is None:
            first_tip = e["value"]
        if e.get("event") == "decision" and kind == "pick_servo" and e["value"]["action"] == "move":
            servo_total += 1
            servo_first += detects <= 1
    block = start.get("block", {})
    tdx = tdy = tdz = txz = None
    if first_cmd is not None and block:
        tip = world.tip(first_cmd)
        tdx = (float(tip[0]) - block["x"]) * 1000.0
        tdy = (float(tip[1]) - float(fk_tip(first_cmd)[1])) * 1000.0
        tdz = (float(tip[2]) - block["z"]) * 1000.0
        txz = math.hypot(tdx, tdz)
    mxz = None
    if isinstance(first_tip, dict) and first_tip.get("ok"):
        mxz = math.hypot(float(first_tip["dx_mm"]), float(first_tip["dz_mm"]))
    grasps = [ev for ev in end.get("events", []) if ev.get("kind") in ("grasp", "miss")]
    g0 = grasps[0] if grasps else None
    on = str(end.get("block", {}).get("resting_on", "-"))
    claims_placed = t.outcome["place_verdict"] == "yes"  # a completed trial judged "no" reported it
    return TrialRow(
        trial=i, seed=seed, status=t.status, reason=t.reason,
        true_dx_mm=tdx, true_dz_mm=tdz, height_err_mm=tdy, true_xz_mm=txz, measured_xz_mm=mxz,
        correction_dx_mm=float(corr[0]) if corr else 0.0,
        correction_dz_mm=float(corr[1]) if corr else 0.0,
        first_grasp=g0 is not None and g0["kind"] == "grasp",
        first_grasp_xz_mm=None if g0 is None else g0.get("dxz_mm"),
        servo_steps_first=servo_first, servo_steps_total=servo_total, attempts=t.outcome["pick_attempts"],
        pick_verdict=t.outcome["pick_verdict"] or "-", place_verdict=t.outcome["place_verdict"] or "-",
        true_block_on=on, undetected_wrong=claims_placed and on != "box",
        held_claim_wrong=bool(t.held) and on != "gripper",
    )  # fmt: skip


def draw_curve(rows: Sequence[TrialRow], warmup: int, title: str, path: Path) -> None:
    """Two panels drawn with OpenCV (no plotting library in the project's environment): the
    first attempt's true tip error per trial (before the servo) with the grasp tolerance, and
    first-grasp success with the trial outcome."""
    W, H, L, R = 1100, 620, 190, 20
    img = np.full((H, W, 3), 255, np.uint8)
    n = max(1, len(rows))
    font = cv2.FONT_HERSHEY_SIMPLEX

    def X(i: float) -> int:
        return int(L + (i - 0.5) / n * (W - L - R))

    def text(
        s: str, x: int, y: int, scale: float = 0.45, color: tuple[int, int, int] = (0, 0, 0)
    ) -> None:
        cv2.putText(img, s, (x, y), font, scale, color, 1, cv2.LINE_AA)

    for k, part in enumerate(title.split("; ")[:2]):  # the settings on a second line
        text(part, 8, 18 + 17 * k, 0.5)
    # panel 1: tip error
    top, bot = 50, 380
    ymax = max([30.0] + [r.true_xz_mm or 0 for r in rows] + [r.measured_xz_mm or 0 for r in rows])
    ymax = 5 * math.ceil(ymax / 5)

    def Y(v: float) -> int:
        return int(bot - v / ymax * (bot - top))

    for v in range(0, int(ymax) + 1, 5):
        cv2.line(img, (L, Y(v)), (W - R, Y(v)), (225, 225, 225), 1)
        text(f"{v}", L - 30, Y(v) + 4)
    text("tip error (mm)", 8, (top + bot) // 2, 0.42)
    cv2.line(img, (L, Y(GRASP_TOL_MM)), (W - R, Y(GRASP_TOL_MM)), (0, 0, 200), 1)
    text(f"grasp tolerance {GRASP_TOL_MM:g} mm", W - R - 190, Y(GRASP_TOL_MM) - 5, 0.4, (0, 0, 200))
    if 0 < warmup < n:
        xw = int((X(warmup) + X(warmup + 1)) / 2)
        cv2.line(img, (xw, top), (xw, H - 40), (150, 150, 150), 1)
        text("warm-up | measured", xw - 80, top + 12, 0.4, (120, 120, 120))
    for series, color in (("true_xz_mm", (200, 80, 0)), ("measured_xz_mm", (0, 160, 0))):
        pts = [(X(r.trial), Y(getattr(r, series))) for r in rows if getattr(r, series) is not None]
        for a, b in itertools.pairwise(pts):
            cv2.line(img, a, b, color, 1, cv2.LINE_AA)
        for p in pts:
            cv2.circle(img, p, 3, color, -1, cv2.LINE_AA)
    text("first attempt tip-to-block x-z (mm): true (blue), top camera (green)", L, bot + 18, 0.42)
    # panel 2: per trial, the memory had an entry for the block's cell / first grasp held /
    # trial placed
    for k, (label, ok) in enumerate(
        (
            ("memory knew the cell", lambda r: r.correction_dx_mm or r.correction_dz_mm),
            ("first grasp held", lambda r: r.first_grasp),
            ("trial placed", lambda r: r.success),
        )
    ):
        y = 425 + 32 * k
        text(label, 8, y + 5, 0.42)
        for r in rows:
            c = (0, 170, 0) if ok(r) else (0, 0, 220)
            cv2.rectangle(img, (X(r.trial) - 5, y - 8), (X(r.trial) + 5, y + 8), c, -1)
    step = max(1, n // 20)
    for r in rows:
        if (r.trial - 1) % step == 0 or r.trial == n:
            text(str(r.trial), X(r.trial) - 6, H - 45, 0.38)
    text("trial index (empty memory before trial 1)", L, H - 20, 0.45)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(path), img):
        raise OSError(f"cannot write {path}")


def _profile_file(spec: str, offsets: str | None, out_dir: Path) -> tuple[str, SimProfile]:
    """The daemon's ``--sim-profile`` value and the profile itself; ``offsets`` (six degrees)
    overrides the arm's joint zero offsets in a YAML written to ``out_dir``."""
    if offsets is None:
        return spec, load_profile(spec)
    try:
        vals = [float(v) for v in offsets.split(",")]
    except ValueError:
        vals = []
    if len(vals) != 6 or not all(math.isfinite(v) for v in vals):
        raise ProfileError(f"--zero-offset-deg {offsets!r}: give six numbers, e.g. 3,-1,-1,0,0,0")
    if spec.endswith((".yaml", ".yml")):
        raise ProfileError("--zero-offset-deg needs --profile to be a built-in name")
    path = out_dir / "learncheck_profile.yaml"
    path.write_text(f"base: {spec}\narm:\n  zero_offset_deg: {vals}\n", encoding="utf-8")
    return str(path), load_profile(str(path))


async def _trials(
    settings: RuntimeSettings, control_url: str, world: WorldArm, seed: int, n: int
) -> list[TrialRow]:
    rows: list[TrialRow] = []
    for i in range(1, n + 1):
        s = seed + i - 1
        try:
            start = await asyncio.to_thread(scene_next, control_url, s)
            async with open_rig(settings) as (rig, _client):
                t = await run_trial(rig, scene_seed=s)
            end = await asyncio.to_thread(_get_json, control_url.rstrip("/") + "/scene/truth")
        except Exception as exc:  # the rig is gone: keep the rows so far, say why it ended
            why = f"{type(exc).__name__}: {exc}"
            print(f"{i:>3} seed {s:<5} not run: {why}; stopping here", file=sys.stderr)
            rows.append(_error_row(i, s, why))
            break
        row = trial_row(i, s, t, world, start, end)
        rows.append(row)
        print(_line(row), flush=True)
    return rows


def _error_row(i: int, seed: int, why: str) -> TrialRow:
    return TrialRow(
        trial=i, seed=seed, status="error", reason=why, true_dx_mm=None, true_dz_mm=None,
        height_err_mm=None, true_xz_mm=None, measured_xz_mm=None, correction_dx_mm=0.0,
        correction_dz_mm=0.0, first_grasp=False, first_grasp_xz_mm=None, servo_steps_first=0,
        servo_steps_total=0, attempts=0, pick_verdict="-", place_verdict="-",
    )  # fmt: skip


def _fmt(v: float | None) -> str:
    return "   -" if v is None else f"{v:5.1f}"


def _line(r: TrialRow) -> str:
    return (
        f"{r.trial:>3} seed {r.seed:<5} tip xz true {_fmt(r.true_xz_mm)} (height {_fmt(r.height_err_mm)}) "
        f"cam {_fmt(r.measured_xz_mm)} mm  corr {r.correction_dx_mm:+5.1f}/{r.correction_dz_mm:+5.1f}"
        f"  servo {r.servo_steps_first}  first grasp {'held' if r.first_grasp else 'MISS'}"
        f" ({_fmt(r.first_grasp_xz_mm)} mm)  attempts {r.attempts}  pick {r.pick_verdict}"
        f" place {r.place_verdict}  {r.status}{'  ' + r.reason if r.reason else ''}"
    )


def summary(rows: Sequence[TrialRow], warmup: int) -> dict[str, Any]:
    after = [r for r in rows if r.trial > warmup]
    errs = [r.true_xz_mm for r in rows if r.true_xz_mm is not None]

    def rate(rs: Sequence[TrialRow], f: str) -> float | None:
        return None if not rs else sum(bool(getattr(r, f)) for r in rs) / len(rs)

    return {
        "trials": len(rows),
        "warmup": warmup,
        "first_trial_tip_xz_mm": errs[0] if errs else None,
        "tip_xz_mm_median_after_warmup": (
            float(np.median([r.true_xz_mm for r in after if r.true_xz_mm is not None]))
            if any(r.true_xz_mm is not None for r in after)
            else None
        ),
        "first_grasp_rate_warmup": rate([r for r in rows if r.trial <= warmup], "first_grasp"),
        "first_grasp_rate_after": rate(after, "first_grasp"),
        "success_after": rate(after, "success"),
        "successes_after": sum(r.success for r in after),
        "trials_after": len(after),
        "servo_steps_after": sum(r.servo_steps_total for r in after),
        "undetected_wrong": sum(r.undetected_wrong for r in rows),
        "held_claim_wrong": sum(r.held_claim_wrong for r in rows),
        # trials that did not place, by the reason the runtime gave (its first clause)
        "failure_reasons": dict(
            Counter(_reason_class(r) for r in rows if not r.success).most_common()
        ),
    }


def _reason_class(r: TrialRow) -> str:
    """The first clause of a failure's reason, numbers dropped, so like failures count as one."""
    if r.status == "completed":
        return f"completed, pick {r.pick_verdict} place {r.place_verdict}"
    text = (r.reason or r.status).split(";")[0]
    return re.sub(r"-?\d+(\.\d+)?", "N", text)[:120]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m mecharm_dev.learncheck", description=__doc__.splitlines()[0]
    )
    p.add_argument(
        "--profile", default="rig", help="sim profile: ideal, rig, harsh or a .yaml file"
    )
    p.add_argument(
        "--zero-offset-deg",
        default=None,
        help="six joint zero offsets (deg, comma separated) overriding the profile's arm",
    )
    p.add_argument("--trials", type=int, default=40)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--seed", type=int, default=100, help="scene seed of trial 1 (then +1 each)")
    p.add_argument("--time-scale", type=float, default=30.0)
    p.add_argument(
        "--data-root", type=Path, default=None, help="a fresh data root (default: a new temp dir)"
    )
    p.add_argument(
        "--fk-data-dir", type=Path, default=None, help="where the FK table is (default: data root)"
    )
    p.add_argument(
        "--plot",
        type=Path,
        default=None,
        help="the curve's PNG (default: the checkout's docs/img/learning_curve.png, from any "
        "directory; installed without the docs: learning_curve.png in the data root)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a runtime setting for every trial (YAML value), e.g. pick_servo_max_iter=0",
    )
    args = p.parse_args(argv)
    if args.trials < 1 or not 0 <= args.warmup < args.trials:
        print("learncheck: need --trials >= 1 and 0 <= --warmup < --trials", file=sys.stderr)
        return 2
    configure_logging("warning")

    def _term(_sig: int, _frame: object) -> None:  # SIGTERM: stop the daemon as on Ctrl-C
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _term)
    root = (args.data_root or Path(tempfile.mkdtemp(prefix="learncheck_"))).resolve()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file of that name, or no permission
        print(
            f"learncheck: --data-root {root}: cannot use it as a directory: {exc}", file=sys.stderr
        )
        return 2
    layout = DataRoot(root)
    if layout.correction_memory.exists() or layout.height_memory.exists():
        print(
            f"learncheck: {root} already has memories; the curve starts from an empty memory, "
            "so pass a fresh --data-root",
            file=sys.stderr,
        )
        return 2
    overrides: dict[str, Any] = {}
    import yaml

    for kv in args.set:
        key, sep, val = kv.partition("=")
        key = MOVED_SETTINGS.get(key, key)  # a flat name from before the groups
        if not sep or key not in setting_paths():
            print(f"learncheck: --set {kv!r}: not KEY=VALUE of a runtime setting", file=sys.stderr)
            return 2
        v = yaml.safe_load(val)
        # YAML reads yes/no/on/off as booleans; a setting whose values are such words (and a
        # boolean one, which accepts them too) gets the word itself
        overrides[key] = val if isinstance(v, bool) else v
    try:
        spec, profile = _profile_file(args.profile, args.zero_offset_deg, root)
    except ProfileError as exc:
        print(f"learncheck: {exc}", file=sys.stderr)
        return 2
    world = WorldArm(profile.arm)
    logs = root / "logs"
    daemon: Child | None = None
    t0 = time.monotonic()
    try:
        print(f"profile {profile.name}: arm zero offsets {list(profile.arm.zero_offset_deg)} deg")
        rig = start_sim_daemon(
            logs, seed=args.seed, time_scale=args.time_scale, extra_args=["--sim-profile", spec]
        )
        daemon = rig.daemon
        settings = load_settings(
            RuntimeSettings,
            RUNTIME_CONFIG,
            {
                **overrides,
                **rig.runtime_overrides(
                    root,
                    args.time_scale,
                    fk_data_dir=args.fk_data_dir.resolve() if args.fk_data_dir else None,
                    # the operator's calibration of this camera (docs/simulation-optics.md)
                    top_camera_calibration=profile.top_camera_calibration(),
                ),
            },
        )
        rows = asyncio.run(_trials(settings, rig.control_url, world, args.seed, args.trials))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        print(f"learncheck failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        if daemon is not None:
            daemon.stop()
    out_csv = root / "learncheck.csv"
    with open(out_csv, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(asdict(rows[0]).keys()))
        w.writeheader()
        for r in rows:
            w.writerow(asdict(r))
    if args.plot is None:
        docs_img = Path(__file__).resolve().parents[1] / "docs" / "img"
        args.plot = (docs_img if docs_img.is_dir() else root) / "learning_curve.png"
    sm = summary(rows, args.warmup)
    (root / "learncheck.json").write_text(
        json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, **sm}, indent=2),
        encoding="utf-8",
    )
    title = (
        f"profile {profile.name}"
        + (f" (arm zero offsets {args.zero_offset_deg} deg)" if args.zero_offset_deg else "")
        + f", scene seeds {args.seed}..{args.seed + args.trials - 1}, from an empty memory"
    )
    if args.set:
        title += "; " + ", ".join(args.set)
    draw_curve(rows, args.warmup, title, args.plot)
    print()
    print(f"first trial (empty memory): tip x-z error {_fmt(sm['first_trial_tip_xz_mm'])} mm")
    if sm["trials_after"]:
        print(
            f"after {args.warmup} warm-up trials: {sm['successes_after']}/{sm['trials_after']} "
            f"placed ({100 * sm['success_after']:.0f}%), first grasp held "
            f"{100 * (sm['first_grasp_rate_after'] or 0):.0f}%, median tip x-z error "
            f"{_fmt(sm['tip_xz_mm_median_after_warmup'])} mm, servo steps {sm['servo_steps_after']}"
        )
    print(f"ended in a wrong state the runtime did not report: {sm['undetected_wrong']}")
    print(f"stopped saying the block is held while it was not: {sm['held_claim_wrong']}")
    for why, n in sm["failure_reasons"].items():
        print(f"  not placed x{n}: {why}")
    print(f"rows: {out_csv}\nplot: {args.plot}\ntook {time.monotonic() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
