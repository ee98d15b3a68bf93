"""Confusion matrices of the geometric judges on outcomes the simulator's physics produced.

Each case lays out a scene, detects it from rendered top-camera frames, drives
an exact simulated arm through a pick or a place and lets the workcell's
physics decide where the block ends up (held, left on the mat, in the box, on
the rim, on the mat beside the box). Both judges then look at the same
rendered frames: the one from before the block's height counted
(``GeometricJudge(height_aware=False)``) and today's. docs/perception.md lists
the figures and the seeds:

    python -m mecharm_dev.judgecheck --seed 1000 --place 96 --pick 48

``--accuracy N --profile rig`` instead measures the block and box detection error
against the workcell's truth on random scenes SEED..SEED+N-1 under a sim profile's
camera, with and without the nominal calibration (docs/simulation-optics.md):

    python -m mecharm_dev.judgecheck --accuracy 30 --seed 500 --profile rig

``--lighting N`` instead sweeps the box detection over the scene schema's gains
(0.8..1.2) on random scenes 0..N-1 and counts trusted / untrusted detections and
the worst error of a trusted one (docs/perception.md, "Detections that doubt
themselves").
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from mecharm.common.kinematics import fk_tip
from mecharm.runtime.perception import (
    GeometricJudge,
    JudgeEvidence,
    detect_scene,
    estimate_homography,
)
from mecharm.sim.physics import classify_drop
from mecharm.sim.scene import BLOCK_SIZE_M, BOX_OUTER_M, Lighting, Pose, SceneLayout
from mecharm_dev.handheld import HandheldCell

__all__ = [
    "PICK_KINDS",
    "PLACE_KINDS",
    "Case",
    "SimRig",
    "lift_vertically",
    "main",
    "perception_accuracy",
    "pick_case",
    "place_case",
    "run_cases",
]

HOME = (0.0, 0.0, 0.0, 0.0, 0.0, -30.0)
# two poses of the real rig's FK table (the ones tests/sim use): a pick descend and a place pose
PICK = (-31.93, 87.74, -38.33, 18.6, -45.11, -30.0)
PLACE = (37.059, 66.65, 2.83, -1.4, -78.04, -29.53)
#: what the physics left, per task; "yes" is right only for held / box
PICK_KINDS = ("held_vertical", "held_home", "left", "missed")
PLACE_KINDS = ("box", "rim", "mat")
_RIGHT = {"held_vertical": "yes", "held_home": "yes", "left": "no", "missed": "no"}
_RIGHT.update({"box": "yes", "rim": "no", "mat": "no"})


@dataclass
class Case:
    task: str  # pick | place
    truth: str  # one of PICK_KINDS / PLACE_KINDS, as the physics left it
    seed: int
    old: str  # verdicts
    new: str
    new_reason: str
    info: dict[str, Any]


def lift_vertically(angles: tuple[float, ...], dy_m: float) -> tuple[float, ...]:
    """Joint angles with the tip ``dy_m`` higher at the same x/z (Newton on j0..j2)."""
    q = np.array(angles, dtype=np.float64)
    target = np.asarray(fk_tip(angles), dtype=np.float64) + np.array([0.0, dy_m, 0.0])
    for _ in range(30):
        err = np.asarray(fk_tip(q), dtype=np.float64) - target
        if float(np.linalg.norm(err)) < 1e-6:
            break
        J = np.empty((3, 3))
        for k in range(3):
            dq = q.copy()
            dq[k] += 1e-3
            J[:, k] = (np.asarray(fk_tip(dq), dtype=np.float64) - target - err) / 1e-3
        q[:3] -= np.linalg.lstsq(J, err, rcond=None)[0]
    return tuple(float(a) for a in q)


class SimRig(HandheldCell):
    """The hand-driven workcell (mecharm_dev/handheld.py) on random-scene seed 0."""

    def __init__(self) -> None:
        super().__init__(seed=0)


def _tip_xz(angles: tuple[float, ...]) -> tuple[float, float]:
    x, _, z = fk_tip(angles)
    return float(x), float(z)


def _lighting(rng: random.Random) -> Lighting:
    return Lighting(
        gain=rng.uniform(0.85, 1.15),
        gradient=(rng.uniform(-0.06, 0.06), rng.uniform(-0.06, 0.06)),
    )


def _place_layout(
    rng: random.Random, want: str, place: tuple[float, ...], pick_xz: tuple[float, float]
) -> SceneLayout | None:
    """A box around the place pose's tip so that the release lands the block ``want``."""
    px, pz = _tip_xz(place)
    block_yaw, box_yaw = rng.uniform(0, 90), rng.uniform(0, 90)
    lo, hi = {"box": (0.0, 0.016), "rim": (0.018, 0.052), "mat": (0.056, 0.075)}[want]
    for _ in range(200):
        r, a = rng.uniform(lo, hi), rng.uniform(0, 2 * math.pi)
        box = (px + r * math.cos(a), pz + r * math.sin(a), box_yaw)
        if classify_drop(px, pz, block_yaw, box) != want:
            continue
        try:
            return SceneLayout(
                block=Pose(x=pick_xz[0], z=pick_xz[1], yaw_deg=block_yaw),
                box=Pose(x=box[0], z=box[1], yaw_deg=box_yaw),
                lighting=_lighting(rng),
            )
        except ValueError:
            continue
    return None


def _box_away(rng: random.Random, block_xz: tuple[float, float]) -> Pose:
    x, z = rng.uniform(-0.24, -0.14), rng.uniform(0.14, 0.24)
    if math.hypot(x - block_xz[0], z - block_xz[1]) < BOX_OUTER_M + BLOCK_SIZE_M:
        x -= 0.1
    return Pose(x=x, z=z, yaw_deg=rng.uniform(0, 90))


async def _judge_both(ev: JudgeEvidence, task: str) -> tuple[Any, Any]:
    old, new = GeometricJudge(height_aware=False), GeometricJudge()
    if task == "pick":
        return await old.judge_pick(ev), await new.judge_pick(ev)
    return await old.judge_place(ev), await new.judge_place(ev)


def _detect(rig: SimRig) -> tuple[Any, Any]:
    frames = rig.frames(3)
    H = estimate_homography(frames)
    return H, detect_scene(frames, H)


def place_case(rig: SimRig, seed: int, want: str) -> Case | None:
    rng = random.Random(seed)
    pick = (PICK[0] + rng.uniform(-4, 4), *PICK[1:])
    place = (PLACE[0] + rng.uniform(-6, 6), *PLACE[1:])
    layout = _place_layout(rng, want, place, _tip_xz(pick))
    if layout is None:
        return None
    rig.move(HOME)
    rig.grip(close=False)
    rig.wc.next_scene(layout=layout)
    H, scene = _detect(rig)
    rig.move(pick)
    rig.grip(close=True)
    if not rig.wc.truth()["grasped"]:
        return None
    rig.move(place)
    rig.grip(close=False)
    rig.move((85.0, *place[1:]))  # the swept retreat: j0 away, the rest kept
    truth = rig.wc.truth()
    ev = JudgeEvidence(frames=rig.frames(3), H=H, scene=scene)
    old, new = asyncio.run(_judge_both(ev, "place"))
    return Case(
        "place",
        str(truth["place_outcome"]),
        seed,
        old.verdict,
        new.verdict,
        new.reason,
        {"gain": round(layout.lighting.gain, 3), "new_conf": new.confidence},
    )


def pick_case(rig: SimRig, seed: int, want: str) -> Case | None:
    rng = random.Random(seed)
    pick = (PICK[0] + rng.uniform(-6, 6), *PICK[1:])
    tx, tz = _tip_xz(pick)
    if want == "missed":  # the block 15-25 mm beside the tip: the jaws close on air
        r, a = rng.uniform(0.015, 0.025), rng.uniform(0, 2 * math.pi)
        bxz = (tx + r * math.cos(a), tz + r * math.sin(a))
    else:
        r, a = rng.uniform(0.0, 0.004), rng.uniform(0, 2 * math.pi)
        bxz = (tx + r * math.cos(a), tz + r * math.sin(a))
    layout = SceneLayout(
        block=Pose(x=bxz[0], z=bxz[1], yaw_deg=rng.uniform(0, 90)),
        box=_box_away(rng, bxz),
        lighting=_lighting(rng),
    )
    rig.move(HOME)
    rig.grip(close=False)
    rig.wc.next_scene(layout=layout)
    H, scene = _detect(rig)
    rig.move(pick)
    if want != "left":  # "left": the gripper never closes (a lost close command)
        rig.grip(close=True)
    lift = HOME if want == "held_home" else lift_vertically(pick, rng.uniform(0.025, 0.06))
    rig.move(lift)
    truth = rig.wc.truth()
    grasped = bool(truth["grasped"])
    kind = want
    if (want.startswith("held") and not grasped) or (want in ("left", "missed") and grasped):
        return None
    tip_h = float(fk_tip(lift)[1])
    ev = JudgeEvidence(frames=rig.frames(3), H=H, scene=scene, tip_height_m=tip_h)
    old, new = asyncio.run(_judge_both(ev, "pick"))
    return Case(
        "pick",
        kind,
        seed,
        old.verdict,
        new.verdict,
        new.reason,
        {"gain": round(layout.lighting.gain, 3), "tip_h": round(tip_h, 3)},
    )


def run_cases(seed: int, n_place: int, n_pick: int) -> Iterator[Case]:
    """``n_place`` place and ``n_pick`` pick cases; case k uses seed ``seed + k``. The place cases
    ask for box / rim / rim / mat in turn (rim drops are what the old judge got wrong)."""
    rig = SimRig()
    try:
        place_wants = ("box", "rim", "rim", "mat")
        for k in range(n_place):
            c = place_case(rig, seed + k, place_wants[k % len(place_wants)])
            if c is not None:
                yield c
        for k in range(n_pick):
            c = pick_case(rig, seed + n_place + k, PICK_KINDS[k % len(PICK_KINDS)])
            if c is not None:
                yield c
    finally:
        rig.close()


LIGHTING_GAINS = (0.8, 0.9, 1.0, 1.1, 1.2)


def lighting_sweep(n_seeds: int, detects: int = 2) -> dict[str, Any]:
    """Box detections (combined and single samples) over ``LIGHTING_GAINS`` x seeds 0..n-1."""
    from mecharm.sim.render import TOP_CAMERA, Renderer, SceneSnapshot
    from mecharm.sim.scene import SceneState, random_layout

    renderer = Renderer(TOP_CAMERA, 0)
    counts: Counter[str] = Counter()
    worst = 0.0
    untrusted_combined: list[str] = []
    for seed in range(n_seeds):
        lay = random_layout(seed)
        for gain in LIGHTING_GAINS:
            lit = lay.model_copy(
                update={"lighting": lay.lighting.model_copy(update={"gain": gain})}
            )
            state = SceneState(lit)
            t = state.truth()["box"]

            def frames(n: int, state: SceneState = state) -> list[Any]:
                snap = SceneSnapshot.of(state)
                return [renderer.render(snap, HOME, 100.0) for _ in range(n)]

            H = estimate_homography(frames(3))
            for _ in range(detects):
                scene = detect_scene(frames(3), H)
                if not scene.box.trusted:
                    untrusted_combined.append(f"seed {seed} gain {gain}: {scene.box.doubt}")
                for kind, boxes in (("combined", [scene.box]), ("sample", scene.box_samples)):
                    for b in boxes:
                        e = math.hypot(b.x - t["x"], b.z - t["z"]) * 1000.0
                        counts[f"{kind} {b.method} {'trusted' if b.trusted else 'untrusted'}"] += 1
                        if b.trusted:
                            worst = max(worst, e)
                            if e > 10.0:
                                counts[f"{kind} trusted > 10 mm"] += 1
    return {
        "counts": dict(sorted(counts.items())),
        "worst_trusted_mm": round(worst, 2),
        "untrusted_combined": untrusted_combined,
    }


def confusion(cases: list[Case], task: str, which: str) -> str:
    kinds = PICK_KINDS if task == "pick" else PLACE_KINDS
    counts = Counter((c.truth, getattr(c, which)) for c in cases if c.task == task)
    lines = [f"  {'truth':<14} {'yes':>4} {'no':>4}   (right answer)"]
    for k in kinds:
        lines.append(f"  {k:<14} {counts[(k, 'yes')]:>4} {counts[(k, 'no')]:>4}   ({_RIGHT[k]})")
    return "\n".join(lines)


def wrong(cases: list[Case], which: str) -> list[Case]:
    return [c for c in cases if getattr(c, which) != _RIGHT[c.truth]]


def perception_accuracy(
    profile: str, seeds: range, calibrated: bool, homography_frames: int = 10
) -> dict[str, Any]:
    """Block and box detection error (mm) against the truth on random scenes ``seeds`` under the
    profile's top camera; frames go through the stream's JPEG as the runtime receives them.
    ``calibrated``: the runtime is configured with the profile's nominal calibration."""
    import cv2

    from mecharm.runtime.perception import PerceptionConfig
    from mecharm.runtime.perception.config import CameraCalibration
    from mecharm.sim.arm import SimArm
    from mecharm.sim.profile import load_profile
    from mecharm.sim.workcell import Workcell

    prof = load_profile(profile)
    nominal = prof.optics.top.nominal
    config = PerceptionConfig(
        top_camera=CameraCalibration(**nominal.model_dump()) if calibrated and nominal else None
    )
    wc = Workcell(SimArm(), "random", seeds[0], profile=prof)
    block_mm: list[float] = []
    box_mm: list[float] = []
    missed: list[str] = []

    def frames(n: int) -> list[Any]:
        return [
            cv2.imdecode(np.frombuffer(wc.jpeg("top"), np.uint8), cv2.IMREAD_COLOR)
            for _ in range(n)
        ]

    try:
        for i, seed in enumerate(seeds):
            if i:
                wc.next_scene(seed)
            truth = wc.truth()
            H = estimate_homography(frames(homography_frames), config)
            det = detect_scene(frames(3), H, config=config)
            if det.block is None:
                missed.append(f"seed {seed}: block not found")
            else:
                block_mm.append(
                    math.hypot(det.block.x - truth["block"]["x"], det.block.z - truth["block"]["z"])
                    * 1000.0
                )
            if det.box.method == "fallback":
                missed.append(f"seed {seed}: box not found ({det.box.reason})")
            else:
                box_mm.append(
                    math.hypot(det.box.x - truth["box"]["x"], det.box.z - truth["box"]["z"])
                    * 1000.0
                )
    finally:
        wc.close()

    def stats(v: list[float]) -> dict[str, float | int | None]:
        if not v:
            return {"n": 0, "median": None, "p90": None, "max": None}
        a = np.array(v)
        return {
            "n": len(v),
            "median": round(float(np.median(a)), 2),
            "p90": round(float(np.percentile(a, 90)), 2),
            "max": round(float(a.max()), 2),
        }

    return {
        "profile": profile,
        "calibrated": bool(calibrated and nominal),
        "block_mm": stats(block_mm),
        "box_mm": stats(box_mm),
        "missed": missed,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m mecharm_dev.judgecheck",
        description="Old vs new geometric judge on physics-produced pick and place outcomes.",
    )
    ap.add_argument("--seed", type=int, default=1000, help="first seed (default 1000)")
    ap.add_argument("--place", type=int, default=48, help="place cases (default 48)")
    ap.add_argument("--pick", type=int, default=40, help="pick cases (default 40)")
    ap.add_argument("--verbose", action="store_true", help="print every case")
    ap.add_argument(
        "--lighting",
        type=int,
        metavar="N",
        help="instead: box detection over gains 0.8..1.2 on random scenes 0..N-1",
    )
    ap.add_argument(
        "--accuracy",
        type=int,
        metavar="N",
        help="instead: block/box detection error vs truth on random scenes SEED..SEED+N-1",
    )
    ap.add_argument(
        "--profile",
        default="rig",
        help="sim profile of --accuracy: ideal, rig, harsh or a profile YAML (default rig)",
    )
    a = ap.parse_args(argv)
    if a.accuracy is not None:
        if a.accuracy < 1:
            print("--accuracy needs at least 1 scene", file=sys.stderr)
            return 2
        from mecharm.sim.profile import ProfileError

        for calibrated in (False, True):
            try:
                r = perception_accuracy(a.profile, range(a.seed, a.seed + a.accuracy), calibrated)
            except ProfileError as exc:
                print(str(exc), file=sys.stderr)
                return 2
            if calibrated and not r["calibrated"]:
                print(f"profile {a.profile} has no nominal calibration of its top camera")
                break
            cal = "nominal calibration" if r["calibrated"] else "no calibration (pinhole)"
            print(f"profile {a.profile}, {cal}, seeds {a.seed}..{a.seed + a.accuracy - 1}:")
            for what in ("block_mm", "box_mm"):
                st = r[what]
                print(
                    f"  {what[:-3]:<6} n={st['n']:<3} median {st['median']} mm  "
                    f"p90 {st['p90']} mm  max {st['max']} mm"
                )
            for line in r["missed"]:
                print(f"  {line}")
        return 0
    if a.lighting is not None:
        if a.lighting < 1:
            print("--lighting needs at least 1 scene", file=sys.stderr)
            return 2
        r = lighting_sweep(a.lighting)
        print(
            f"box detection, gains {LIGHTING_GAINS}, random scenes 0..{a.lighting - 1}, "
            "2 detects of 3 captures each:"
        )
        for k, v in r["counts"].items():
            print(f"  {k:<32} {v}")
        print(f"  worst error of a trusted box: {r['worst_trusted_mm']} mm")
        for line in r["untrusted_combined"]:
            print(f"  untrusted: {line}")
        return 0
    if a.place < 0 or a.pick < 0:
        print("--place and --pick must be >= 0", file=sys.stderr)
        return 2
    cases = []
    for c in run_cases(a.seed, a.place, a.pick):
        cases.append(c)
        if a.verbose:
            print(
                f"{c.task} seed {c.seed} {c.truth}: old {c.old} new {c.new} {c.info} {c.new_reason}"
            )
    for task in ("place", "pick"):
        n = sum(c.task == task for c in cases)
        for which, title in (("old", "old judge (mat/floor plane)"), ("new", "new judge (height)")):
            print(f"{task}, {n} cases, {title}:")
            print(confusion(cases, task, which))
    for which in ("old", "new"):
        bad = wrong(cases, which)
        print(
            f"{which} judge wrong in {len(bad)}/{len(cases)}: "
            + ", ".join(f"{c.task} seed {c.seed} ({c.truth} -> {getattr(c, which)})" for c in bad)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
