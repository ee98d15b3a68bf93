"""How far an uncorrected pick or place misses on a sim profile's arm (docs/simulation-arm.md).

For a grid of pick cells (block positions) and place cells (box positions) it asks the
runtime's own lookups for the pose they would send with no correction memory (the j0
arc, then the bounded pick descent or the place lookup) and compares where the runtime's
model puts the tool tip (``fk_tip``) with where the profile's world arm puts it
(``WorldArm.tip``, the block held at place, each joint's play on the side it came from):

    python -m mecharm_dev.armcheck --profile rig
    python -m mecharm_dev.armcheck --profile harsh --seed 3 --json

The figure is the error the encoders cannot see; the sim arm's random settle errors come
on top of it (the runtime reads those back).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from mecharm.common.config import ConfigError, load_settings
from mecharm.common.defaults import RUNTIME_CONFIG
from mecharm.common.kinematics import fk_tip
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.lookup import (
    FkTable,
    TableError,
    ensure_table,
    fk_lookup,
    j0_lookup,
    load_arc,
    load_table,
)
from mecharm.runtime.lookup.descent import pick_descent_table, plan_pick_descent
from mecharm.sim.physics import GRASP_XZ_TOL_M, GRASP_Y_RANGE_M
from mecharm.sim.profile import ProfileError, load_profile
from mecharm.sim.scene import PICK_REACH_M, PICK_X, PICK_Z, PLACE_REACH_M, PLACE_X, PLACE_Z
from mecharm.sim.world_arm import WorldArm

__all__ = ["Cell", "arm_errors", "cell_poses", "main", "pick_outcomes", "summarize"]


@dataclass(frozen=True)
class Cell:
    """One uncorrected move: the pose the runtime sends and where it came from."""

    kind: str  # "pick" or "place"
    xz: tuple[float, float]
    angles: tuple[float, ...]
    came_from: tuple[float, ...]  # the pose before it (each joint's side of play)


def _grid(
    xs: tuple[float, float], zs: tuple[float, float], reach: tuple[float, float], step: float
):
    for x in np.arange(xs[0], xs[1] + 1e-9, step):
        for z in np.arange(zs[0], zs[1] + 1e-9, step):
            if reach[0] <= float(np.hypot(x, z)) <= reach[1]:
                yield float(x), float(z)


def cell_poses(table: FkTable, s: RuntimeSettings, step: float = 0.02) -> list[Cell]:
    """The runtime's uncorrected pick and place poses over a grid of the sim's pick and place
    regions (cells the lookups cannot serve are left out, as the runtime would abort there)."""
    arc_pick, arc_place = (
        load_arc(s.pick_place.approach_pick_arc),
        load_arc(s.pick_place.approach_place_arc),
    )
    descent = pick_descent_table(table, arc_pick)
    cells: list[Cell] = []
    for xz in _grid(PICK_X, PICK_Z, PICK_REACH_M, step):
        ap = j0_lookup(arc_pick, xz)
        if not ap.ok:
            continue
        plan = plan_pick_descent(
            descent, xz, ap.angles, pick_band=s.pick_place.pick_band, hover_band=s.pick_place.pick_hover_band,
            dist_max=s.pick_place.dist_max_m, hover_dist_max=s.pick_place.pick_hover_dist_m,
            resid_max=s.pick_place.pick_resid_max_m, step_max=s.arm.joint_step_max_deg,
        )  # fmt: skip
        pick = plan.pick
        if not pick.ok or pick.angles is None:
            continue
        hover = plan.hover.angles if plan.use_hover and plan.hover is not None else None
        came = tuple(hover) if hover is not None else tuple(ap.angles)
        cells.append(Cell("pick", xz, tuple(pick.angles), came))
    for xz in _grid(PLACE_X, PLACE_Z, PLACE_REACH_M, step):
        ap = j0_lookup(arc_place, xz)
        if not ap.ok:
            continue
        step_kw: dict[str, Any] = (
            {"step_ref": tuple(ap.angles), "step_max": s.arm.joint_step_max_deg}
            if s.arm.joint_step_max_deg > 0
            else {}
        )
        res = fk_lookup(
            table, "place_withblock", xz, s.pick_place.place_band[0], s.pick_place.place_band[1],
            dist_max=s.pick_place.dist_max_m, ref_joints=tuple(ap.angles), joint_tol=s.pick_place.place_joint_tol,
            ee_y_floor=s.pick_place.place_floor_m, **step_kw,
        )  # fmt: skip
        if res.ok and res.angles is not None:
            cells.append(Cell("place", xz, tuple(res.angles), tuple(ap.angles)))
    return cells


def arm_errors(world: WorldArm, cells: Sequence[Cell]) -> NDArray[np.float64]:
    """Per cell, true tip - model tip (x, y, z) in mm: the block held at place, each joint's
    play taken up on the side it moved to from ``came_from``."""
    out = np.empty((len(cells), 3))
    for i, c in enumerate(cells):
        side = np.sign(np.subtract(c.angles, c.came_from))
        true = world.tip(c.angles, holding=c.kind == "place", direction=side)
        out[i] = (true - fk_tip(c.angles)) * 1000.0
    return out


def pick_outcomes(cells: Sequence[Cell], err: NDArray[np.float64]) -> dict[str, int]:
    """What today's physics would make of each uncorrected pick, the block centred on its
    cell on the mat (mecharm/sim/physics.py's grasp rule; the table's own landing error
    included): grasped, missed beside it (x-z), missed in height, and tips below the mat."""
    out = {"grasp": 0, "miss_xz": 0, "miss_height": 0, "below_mat": 0}
    for c, e in zip(cells, err, strict=True):
        if c.kind != "pick":
            continue
        tip = fk_tip(c.angles) + e / 1000.0
        dxz = float(np.hypot(tip[0] - c.xz[0], tip[2] - c.xz[1]))
        out["below_mat"] += int(tip[1] < -0.002)
        if dxz > GRASP_XZ_TOL_M:
            out["miss_xz"] += 1
        elif not GRASP_Y_RANGE_M[0] <= tip[1] <= GRASP_Y_RANGE_M[1]:
            out["miss_height"] += 1
        else:
            out["grasp"] += 1
    return out


def summarize(err: NDArray[np.float64]) -> dict[str, Any]:
    """Median, p10, p90 and max of the error's length, and the same of each component."""

    def stats(v: NDArray[np.float64]) -> dict[str, float]:
        return {
            "median": round(float(np.median(v)), 2),
            "p10": round(float(np.percentile(v, 10)), 2),
            "p90": round(float(np.percentile(v, 90)), 2),
            "max": round(float(np.max(v)), 2),
        }

    if len(err) == 0:
        return {"n": 0}
    return {
        "n": len(err),
        "dist_mm": stats(np.linalg.norm(err, axis=1)),
        # signed components: which way the world's arm misses (y is height)
        **{f"d{a}_mm": stats(err[:, k]) for k, a in enumerate("xyz")},
    }


def measure(
    profile: str, seed: int | None, table: FkTable, s: RuntimeSettings, step: float
) -> dict[str, Any]:
    prof = load_profile(profile)
    truth = prof.arm if seed is None else prof.arm.model_copy(update={"seed": seed})
    cells = cell_poses(table, s, step)
    err = arm_errors(WorldArm(truth), cells)
    kinds = np.array([c.kind for c in cells])
    return {
        "profile": prof.name,
        "seed": truth.seed,
        "pick": {**summarize(err[kinds == "pick"]), "outcomes": pick_outcomes(cells, err)},
        "place": summarize(err[kinds == "place"]),
    }


def _print(fig: dict[str, Any]) -> None:
    print(f"profile {fig['profile']}, arm seed {fig['seed']}: true tip - model tip, mm")
    for kind in ("pick", "place"):
        f = fig[kind]
        print(f"  {kind}: {f['n']} cells")
        if not f["n"]:
            continue
        print(f"    {'':5} {'median':>7} {'p10':>7} {'p90':>7} {'max':>7}")
        for key, label in (("dist_mm", "|d|"), ("dx_mm", "dx"), ("dy_mm", "dy"), ("dz_mm", "dz")):
            v = f[key]
            print(
                f"    {label:5} {v['median']:7.1f} {v['p10']:7.1f} {v['p90']:7.1f} {v['max']:7.1f}"
            )
        if "outcomes" in f:
            o = f["outcomes"]
            print(
                f"    by the sim's grasp rule: {o['grasp']} grasped, {o['miss_xz']} missed "
                f"beside, {o['miss_height']} missed in height; {o['below_mat']} tips below the mat"
            )


def _seed(text: str) -> int:
    """An arm seed as ``ArmTruth`` takes it (``measure`` copies it in unvalidated)."""
    try:
        seed = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if seed < 0:
        raise argparse.ArgumentTypeError(f"{seed} is negative; an arm seed is 0 or more")
    return seed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m mecharm_dev.armcheck",
        description="Uncorrected tip error of a sim profile's arm over the pick and place "
        "regions, with the runtime's own lookups (y is height).",
    )
    p.add_argument("--profile", default="rig", help="ideal, rig, harsh or a profile YAML (rig)")
    p.add_argument(
        "--seed", type=_seed, default=None, help="draw another arm of the profile (>= 0)"
    )
    p.add_argument(
        "--fk-dir", type=Path, default=None, help="the runtime's FK data dir (its fk_dir)"
    )
    p.add_argument(
        "--config",
        type=Path,
        default=RUNTIME_CONFIG,
        help="the runtime's settings file: bands and limits of its lookups "
        "(default: the shipped runtime.yaml, docs/setup.md)",
    )
    p.add_argument("--step", type=float, default=0.02, help="grid step, m (0.02)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    from mecharm.common.logging import configure_logging

    configure_logging("error")
    if not 0.005 <= args.step <= 0.1:
        print(f"armcheck: --step {args.step} must be within 0.005..0.1 m", file=sys.stderr)
        return 2
    try:
        s = load_settings(RuntimeSettings, args.config if args.config.exists() else None)
    except ConfigError as exc:
        print(f"armcheck: {exc}", file=sys.stderr)
        return 2
    fk_dir = args.fk_dir if args.fk_dir is not None else s.fk_dir
    try:
        table = load_table(ensure_table(fk_dir), j1_max=s.arm.j1_max)
        fig = measure(args.profile, args.seed, table, s, args.step)
    except ProfileError as exc:
        print(f"armcheck: {exc}", file=sys.stderr)
        return 2
    except (OSError, TableError) as exc:
        print(f"armcheck: FK table under {fk_dir}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(fig, indent=2))
    else:
        _print(fig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
