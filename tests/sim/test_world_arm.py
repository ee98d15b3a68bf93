"""The world's arm (mecharm/sim/world_arm.py): the ideal arm is the runtime's FK, every error
does what it says, seeds draw arms of one quality, and the rig's arm misses an uncorrected
pick as the rig did (docs/simulation-arm.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from mecharm.common.kinematics import JOINT_MAX, JOINT_MIN, fk_frames, fk_tip
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.lookup import FkTable, ensure_table, load_table
from mecharm.sim.arm import SimArm, SimArmConfig
from mecharm.sim.physics import GRIP_CONTACT
from mecharm.sim.profile import load_profile
from mecharm.sim.scene import Pose, SceneLayout
from mecharm.sim.workcell import Workcell
from mecharm.sim.world_arm import (
    ARM_TRUTHS,
    LEVER_REF_M,
    ArmTruth,
    ConcreteArm,
    WorldArm,
    chain_frames,
)
from mecharm_dev import armcheck
from mecharm_dev.handheld import exact_arm

PICK = (-31.93, 87.74, -38.33, 18.6, -45.11, -30.0)  # a pick pose of the rig's FK table
PLACE = (37.059, 66.65, 2.83, -1.4, -78.04, -29.53)


def _poses(n: int = 500, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(JOINT_MIN, JOINT_MAX, (n, 6))


def _exact(**kw: object) -> ArmTruth:
    """A truth with no seed scatter: the drawn arm holds exactly these values."""
    return ArmTruth(spread=0.0, **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------- the ideal arm


def test_ideal_arm_is_the_runtime_fk() -> None:
    q = _poses()
    w = WorldArm(ARM_TRUTHS["ideal"])
    assert np.abs(w.tip(q) - fk_tip(q)).max() <= 1e-12
    assert np.abs(w.frames(q) - fk_frames(q)).max() <= 1e-12
    assert w.tip(PICK).shape == (3,)
    assert load_profile("ideal").arm == ArmTruth()


def test_general_chain_with_nominal_values_is_the_runtime_fk() -> None:
    """The parametrised chain (not the ideal shortcut) reproduces fk_frames to float rounding:
    a truth whose only error is backlash, with no side known yet, changes nothing."""
    q = _poses()
    assert np.abs(chain_frames(q) - fk_frames(q)).max() <= 1e-12
    w = WorldArm(_exact(backlash_deg=(1, 1, 1, 1, 1, 1)))
    assert not w.truth.ideal
    assert np.abs(w.tip(q) - fk_tip(q)).max() <= 1e-12


# ---------------------------------------------------------------- each error


def test_zero_offset_turns_the_joint() -> None:
    w = WorldArm(_exact(zero_offset_deg=(2.0, 0, 0, 0, -1.0, 0)))
    q = _poses(50)
    want = fk_tip(q + np.array([2.0, 0, 0, 0, -1.0, 0]))
    assert np.abs(w.tip(q) - want).max() <= 1e-12


def test_tool_error_moves_the_tip_along_the_tool() -> None:
    w = WorldArm(_exact(tool_error_m=0.004))
    q = _poses(50)
    flange = fk_frames(q)[:, 6]
    d = np.linalg.norm(w.tip(q) - fk_tip(q), axis=1)
    assert d == pytest.approx(np.full(50, 0.004), abs=1e-12)
    assert np.linalg.norm(w.tip(q) - flange, axis=1) == pytest.approx(np.full(50, 0.104))


def test_base_link_error_lifts_everything() -> None:
    w = WorldArm(_exact(link_error_m=(0.003, 0, 0, 0, 0, 0)))
    q = _poses(50)
    assert w.tip(q) - fk_tip(q) == pytest.approx(np.tile([0.0, 0.003, 0.0], (50, 1)), abs=1e-12)


def test_backlash_lags_half_behind_the_last_motion() -> None:
    w = WorldArm(_exact(backlash_deg=(0, 1.0, 0, 0, 0.6, 0)))
    up = w.joint_angles(PICK, direction=(1, 1, 1, 1, 1, 1))
    down = w.joint_angles(PICK, direction=(-1, -1, -1, -1, -1, -1))
    assert up - np.array(PICK) == pytest.approx([0, -0.5, 0, 0, -0.3, 0])
    assert down - np.array(PICK) == pytest.approx([0, 0.5, 0, 0, 0.3, 0])


def test_sag_lowers_the_tip_and_more_with_a_block() -> None:
    w = WorldArm(_exact(sag_deg=(0, 1.0, 1.0, 0, 0.5, 0), load_sag_deg=(0, 0.5, 0.5, 0, 0, 0)))
    for pose in (PICK, PLACE):
        free = w.tip(pose, holding=False, direction=np.zeros(6)) - fk_tip(pose)
        held = w.tip(pose, holding=True, direction=np.zeros(6)) - fk_tip(pose)
        assert free[1] < -0.003  # mm-scale droop at the rig's reach
        assert held[1] < free[1] - 0.001
    # j1 alone, the tip LEVER_REF_M out horizontally from the shoulder: the joint turns by
    # exactly the figure (a small angle: the tip drops by about figure x lever)
    j1 = WorldArm(_exact(sag_deg=(0, 2.0, 0, 0, 0, 0)))
    drop = float(j1.tip(PICK, direction=np.zeros(6))[1] - fk_tip(PICK)[1])
    lever = abs(float(WorldArm(_exact())._lever_y(np.array([PICK]))[0, 1]))
    assert drop == pytest.approx(-np.radians(2.0) * lever**2 / LEVER_REF_M, rel=0.05)


def test_the_world_arm_follows_the_sim_arms_sends() -> None:
    arm = SimArm(SimArmConfig(time_scale=200, noise_deg=0, initial_angles=PICK))
    w = WorldArm(_exact(backlash_deg=(1, 1, 1, 1, 1, 1)), arm)
    assert list(w.direction) == [0] * 6
    arm.send_angles([PICK[0] + 10, PICK[1] - 5, *PICK[2:]], 100)
    assert list(w.direction) == [1, -1, 0, 0, 0, 0]
    arm.wait_idle()
    arm.send_angles([PICK[0] - 10, *arm.true_angles()[1:]], 100)
    assert list(w.direction) == [-1, -1, 0, 0, 0, 0]  # j1 held: it keeps its side
    w.detach()
    arm.send_angles(list(PICK), 100)
    assert list(w.direction) == [-1, -1, 0, 0, 0, 0]


# ---------------------------------------------------------------- the truth model


def test_arm_truth_rejects_bad_values_by_name() -> None:
    with pytest.raises(ValidationError, match="zero_offset_deg"):
        ArmTruth(zero_offset_deg=(0, 12, 0, 0, 0, 0))
    with pytest.raises(ValidationError, match=r"backlash_deg\[1\] = -1.0 outside"):
        ArmTruth(backlash_deg=(0, -1, 0, 0, 0, 0))
    with pytest.raises(ValidationError, match="tool_error_m"):
        ArmTruth(tool_error_m=0.05)
    with pytest.raises(ValidationError, match="extra"):
        ArmTruth(zero_offsets=(0,) * 6)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        ARM_TRUTHS["rig"].seed = 3  # type: ignore[misc]


def test_a_seed_draws_an_arm_of_the_same_kind() -> None:
    rig = ARM_TRUTHS["rig"]
    a, b = ConcreteArm.draw(rig), ConcreteArm.draw(rig.model_copy(update={"seed": 1}))
    assert ConcreteArm.draw(rig).zero_offset_deg.tolist() == a.zero_offset_deg.tolist()
    assert a.zero_offset_deg.tolist() != b.zero_offset_deg.tolist()
    for arm in (a, b):
        ratio = arm.zero_offset_deg / np.array(rig.zero_offset_deg)
        assert np.all((ratio >= 1 - rig.spread) & (ratio <= 1 + rig.spread))  # same signs
        assert np.all(arm.sag_deg >= 0)


def test_load_settle_stops_short_on_the_side_the_weight_pulls() -> None:
    """While the jaws hold something, moves end lower than commanded (the encoder sees it)."""

    def drops(holding: bool) -> list[float]:
        arm = exact_arm(initial=PLACE)
        arm.set_load_settle((0, 1.0, 1.0, 0, 0.5, 0))
        arm.block_gripper_at(GRIP_CONTACT if holding else None)
        out = []
        for k in range(6):
            target = [PLACE[0] + (k % 2) * 8, *PLACE[1:]]
            arm.send_angles(target, 100)
            arm.wait_idle()
            out.append(float(fk_tip(arm.true_angles())[1] - fk_tip(target)[1]))
        return out

    assert all(d < -0.003 for d in drops(holding=True))
    assert all(abs(d) < 1e-9 for d in drops(holding=False))
    with pytest.raises(ValidationError, match="settle_load_deg"):
        exact_arm().set_load_settle((0, 11, 0, 0, 0, 0))


# ---------------------------------------------------------------- in the workcell


@pytest.fixture
def rig_cell() -> Iterator[Workcell]:
    # the rig's arm with the rule engine, whose grasp events carry the tip's height over the
    # block (the MuJoCo engine's grasp is tested in tests/sim/test_contact.py)
    rig = load_profile("rig")
    profile = rig.model_copy(update={"contact": load_profile("ideal").contact})
    wc = Workcell(exact_arm(initial=PICK), "random", seed=3, profile=profile)
    yield wc
    wc.close()


def _lay_block(wc: Workcell, xz: tuple[float, float]) -> None:
    wc.next_scene(layout=SceneLayout(block=Pose(x=xz[0], z=xz[1]), box=Pose(x=-0.2, z=0.18)))


def test_rig_cell_grasps_where_the_world_arm_is(rig_cell: Workcell) -> None:
    arm, world = rig_cell.arm, rig_cell.world
    model, true = fk_tip(PICK), world.tip(PICK)
    assert 0.015 <= float(np.linalg.norm(true - model)) <= 0.025
    assert rig_cell.truth()["tip"] == pytest.approx(list(true), abs=1e-9)
    # the block under the world's tip is grasped; the arm then droops with the load
    _lay_block(rig_cell, (float(true[0]), float(true[2])))
    arm.set_gripper_value(20, 100)
    arm.wait_idle()
    t = rig_cell.truth()
    assert t["grasped"] is True
    assert world.tip(PICK)[1] < true[1] - 0.002  # held: more sag
    # the block where the runtime's model puts the tip: the physics judges the grasp by the
    # world's tip, 15-25 mm away, mostly lower (here still within the grasp tolerance)
    arm.set_gripper_state(0, 100)
    arm.wait_idle()
    _lay_block(rig_cell, (float(model[0]), float(model[2])))
    arm.set_gripper_value(20, 100)
    arm.wait_idle()
    ev = rig_cell.truth()["events"][-1]
    assert ev["tip"] == pytest.approx([round(float(v), 4) for v in true], abs=2e-4)
    assert ev["tip_above_block_bottom_mm"] < model[1] * 1000 - 15.0


# ---------------------------------------------------------------- the measuring tool


@pytest.fixture(scope="module")
def table(fk_data_dir: Path) -> FkTable:
    return load_table(ensure_table(fk_data_dir), j1_max=88.0)


@pytest.fixture(scope="module")
def cells(table: FkTable) -> list[armcheck.Cell]:
    return armcheck.cell_poses(table, RuntimeSettings())


def _figures(cells: list[armcheck.Cell], truth: ArmTruth) -> dict[str, dict]:
    err = armcheck.arm_errors(WorldArm(truth), cells)
    kinds = np.array([c.kind for c in cells])
    return {k: armcheck.summarize(err[kinds == k]) for k in ("pick", "place")}


@pytest.mark.slow
def test_uncorrected_pick_misses_as_on_the_rig(cells: list[armcheck.Cell]) -> None:
    assert sum(c.kind == "pick" for c in cells) >= 20
    assert sum(c.kind == "place" for c in cells) >= 10
    ideal = _figures(cells, ARM_TRUTHS["ideal"])
    assert ideal["pick"]["dist_mm"]["max"] == 0.0 and ideal["place"]["dist_mm"]["max"] == 0.0
    rig, harsh = ARM_TRUTHS["rig"], ARM_TRUTHS["harsh"]
    for seed in (0, 1, 2):
        f = _figures(cells, rig.model_copy(update={"seed": seed}))
        for kind in ("pick", "place"):
            assert 15.0 <= f[kind]["dist_mm"]["median"] <= 25.0, (seed, kind, f[kind])
            dy = abs(f[kind]["dy_mm"]["median"])
            assert dy > abs(f[kind]["dx_mm"]["median"]) and dy > abs(f[kind]["dz_mm"]["median"])
            assert f[kind]["dy_mm"]["median"] < 0  # low, as the rig's place height memory says
        h = _figures(cells, harsh.model_copy(update={"seed": seed}))
        assert h["pick"]["dist_mm"]["median"] > f["pick"]["dist_mm"]["median"] + 5.0
        assert h["pick"]["dist_mm"]["median"] >= 25.0
    # by the sim's grasp rule the ideal arm grasps every uncorrected pick; the rig's arm most
    # (its error is mostly height, inside the jaws' reach), as the rig's arm did
    n_pick = sum(c.kind == "pick" for c in cells)
    ok = armcheck.pick_outcomes(cells, armcheck.arm_errors(WorldArm(ARM_TRUTHS["ideal"]), cells))
    assert ok == {"grasp": n_pick, "miss_xz": 0, "miss_height": 0, "below_mat": 0}
    a = armcheck.arm_errors(WorldArm(rig), cells)
    assert n_pick / 2 < armcheck.pick_outcomes(cells, a)["grasp"] < n_pick
    b = armcheck.arm_errors(WorldArm(rig.model_copy(update={"seed": 1})), cells)
    assert np.abs(a - b).max() > 1.0  # another arm, not the same one


@pytest.mark.slow
def test_armcheck_cli(table: FkTable, capsys: pytest.CaptureFixture[str]) -> None:
    fk_dir = Path(table.path).parent.parent
    assert armcheck.main(["--profile", "rig", "--fk-dir", str(fk_dir), "--step", "0.04"]) == 0
    out = capsys.readouterr().out
    assert "profile rig, arm seed 0" in out and "|d|" in out and "dy" in out
    assert armcheck.main(["--profile", "nope", "--fk-dir", str(fk_dir)]) == 2
    assert "unknown name" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # argparse: exit 2, not a numpy traceback
        armcheck.main(["--seed", "-1", "--fk-dir", str(fk_dir)])
    assert exc.value.code == 2 and "an arm seed is 0 or more" in capsys.readouterr().err
