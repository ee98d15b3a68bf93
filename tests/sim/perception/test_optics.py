"""The sim profiles' camera optics (docs/simulation-optics.md) against the runtime's perception:
the rig camera lands the rig's logged points on the rig's pixels, the lens distortion drawn is
OpenCV's model, and with the operator's nominal calibration the runtime measures block, box and
tip within the issue's 3 mm under the rig camera (and does not without it)."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest

from mecharm.runtime.perception import PerceptionConfig, estimate_homography
from mecharm.runtime.perception.config import CameraCalibration
from mecharm.runtime.perception.homography import MatHomography, detect_markers
from mecharm.runtime.perception.tip import find_tip_marker
from mecharm.sim.optics import IDEAL_GAIN_RANGE, OPTICS_PROFILES
from mecharm.sim.profile import load_profile
from mecharm.sim.render import TOP_CAMERA, Renderer, SceneSnapshot, camera_of
from mecharm.sim.scene import MARKERS, SceneState, random_layout
from mecharm.sim.workcell import Workcell
from mecharm_dev.handheld import exact_arm
from mecharm_dev.judgecheck import perception_accuracy

#: the rig's log: top-camera pixel -> mat (x, z) (block twice, box by template)
RIG_REFERENCE = [
    ((0.1964, 0.2540), (632, 746)),
    ((0.2020, 0.2603), (622, 759)),
    ((-0.198, 0.178), (1404, 594)),
]
PICK = (-31.93, 87.74, -38.33, 18.6, -45.11, -30.0)


def _nominal(profile: str) -> PerceptionConfig:
    nominal = OPTICS_PROFILES[profile].top.nominal
    assert nominal is not None
    return PerceptionConfig(top_camera=CameraCalibration(**nominal.model_dump()))


def test_rig_camera_lands_the_rigs_reference_points() -> None:
    cam = camera_of("top", OPTICS_PROFILES["rig"].top)
    assert cam.size == (1920, 1080)
    uv, _ = cam.project(np.array([[x, 0.0, z] for (x, z), _ in RIG_REFERENCE]))
    err = np.hypot(*(uv - np.array([p for _, p in RIG_REFERENCE])).T)
    assert np.all(err < 3.0), err  # the brief allowed 15 px
    # oriented as the rig's: +x to the left, +z down; about 1960 px/m along x
    assert uv[0, 0] < uv[2, 0] and uv[0, 1] > uv[2, 1]
    assert (uv[2, 0] - uv[0, 0]) / 0.394 == pytest.approx(1960, rel=0.02)
    # the ideal camera is the mirrored one the runtime was built against (z runs up)
    uv_i, _ = TOP_CAMERA.project(np.array([[0.1964, 0.0, 0.254], [-0.198, 0.0, 0.178]]))
    assert uv_i[0, 1] < uv_i[1, 1]


def test_distortion_is_opencvs_model() -> None:
    cam = camera_of("top", OPTICS_PROFILES["harsh"].top)
    assert cam.dist is not None
    pts = np.array([[x, y, z] for x in (-0.3, 0.0, 0.3) for y in (0.0, 0.2) for z in (0.1, 0.4)])
    uv, _ = cam.project(pts)
    pc = pts @ cam.R.T + cam.t  # the mirrored camera's R is a reflection: no rvec for it
    ref, _ = cv2.projectPoints(pc, np.zeros(3), np.zeros(3), cam.K, np.array(cam.dist))
    assert np.abs(uv - ref.reshape(-1, 2)).max() < 1e-6


def test_distorted_render_puts_the_markers_where_the_lens_does() -> None:
    """The static layer is drawn pinhole and remapped: the detected marker corners must sit on
    the distorted projection of the mat's corners (the rig's mat is printed to read right)."""
    cam = camera_of("top", OPTICS_PROFILES["harsh"].top)
    r = Renderer(cam, seed=1)
    img = r.render(SceneSnapshot.of(SceneState(random_layout(4))), (0, 0, 0, 0, 0, -30), 100.0)
    found = detect_markers(img)
    assert sorted(found) == [0, 1, 2, 3]
    for mid, corners in MARKERS.items():
        uv, _ = cam.project(np.array([[x, 0.0, z] for x, z in corners]))
        # the detector reports the printed pattern's corner order: compare as sets
        d = np.linalg.norm(found[mid][:, None, :] - uv[None, :, :], axis=2).min(axis=1)
        assert d.max() < 1.5, (mid, d)


def test_undistort_inverts_distort() -> None:
    cal = _nominal("harsh").top_camera
    H = MatHomography(
        H=np.eye(3), image_size=(1920, 1080), focal_px=1.0, R=np.eye(3), t=np.ones(3),
        calibration=cal,
    )  # fmt: skip
    uv = np.array([[0.0, 0.0], [1919.0, 1079.0], [960.0, 540.0], [300.0, 900.0]])
    assert np.abs(H.distort(H.undistort(uv)) - uv).max() < 1e-3
    back = MatHomography.from_dict(H.to_dict())
    assert back.calibration == cal


def test_gain_spans_the_schema_under_rig_and_old_seeds_keep_their_scenes() -> None:
    for seed in range(20):
        assert random_layout(seed) == random_layout(seed, IDEAL_GAIN_RANGE)
    for name in ("rig", "harsh"):
        rng = OPTICS_PROFILES[name].gain_range
        gains = [random_layout(s, rng).lighting.gain for s in range(300)]
        assert min(gains) < 0.82 and max(gains) > 1.18, name
        # the block and the box stay where the ideal seed put them
        a, b = random_layout(7, rng), random_layout(7)
        assert (a.block, a.box) == (b.block, b.box)


@pytest.mark.slow
def test_rig_perception_within_3mm_with_the_nominal_calibration() -> None:
    """The issue's figure: median error <= 3 mm for block and box under the rig camera."""
    seeds = range(900, 906)
    cal = perception_accuracy("rig", seeds, calibrated=True, homography_frames=3)
    assert not cal["missed"], cal["missed"]
    assert cal["block_mm"]["median"] <= 3.0, cal
    assert cal["box_mm"]["median"] <= 3.0, cal
    # without the calibration the lens costs millimetres: the calibration is what closes it
    raw = perception_accuracy("rig", seeds, calibrated=False, homography_frames=3)
    assert raw["block_mm"]["median"] > cal["block_mm"]["median"] + 1.0, (raw, cal)


@pytest.mark.slow
def test_harsh_perception_finds_everything_with_its_calibration() -> None:
    r = perception_accuracy("harsh", range(910, 914), calibrated=True, homography_frames=3)
    assert not r["missed"], r["missed"]
    assert r["block_mm"]["median"] <= 3.0 and r["box_mm"]["median"] <= 3.0, r


def test_tip_marker_under_the_rig_camera() -> None:
    """The green tip marker, seen through the rig's lens, maps to the world's true tip."""
    wc = Workcell(exact_arm(), "random", 5, profile=load_profile("rig"))
    try:
        config = _nominal("rig")
        H = estimate_homography([wc.render("top") for _ in range(3)], config)
        assert H.camera_center[1] == pytest.approx(0.69, abs=0.02)  # above the mat, not under
        if wc.arm.send_angles(list(PICK), 100) != 1 or not wc.arm.wait_idle(timeout=10):
            raise RuntimeError("simulated arm did not reach the pick pose")
        truth = wc.truth()
        tip = truth["tip"]
        found = find_tip_marker(wc.render("top"), H, tip[1], config)
        assert found is not None
        assert math.hypot(found[2] - tip[0], found[3] - tip[2]) * 1000 < 3.0
    finally:
        wc.close()


def test_motion_blur_only_while_the_arm_moves() -> None:
    t = [0.0]
    optics = OPTICS_PROFILES["rig"].top
    cam = camera_of("top", optics)
    r = Renderer(cam, seed=2, optics=optics, clock=lambda: t[0])
    snap = SceneSnapshot.of(SceneState(random_layout(3)))
    home = (0.0, 0.0, 0.0, 0.0, 0.0, -30.0)
    assert r._exposure_poses(home) == [home]
    t[0] = 0.1
    assert r._exposure_poses(home) == [home]  # still: one pose, no blur
    t[0] = 0.2
    moved = (20.0, 0.0, 0.0, 0.0, 0.0, -30.0)  # 200 deg/s
    poses = r._exposure_poses(moved)
    assert len(poses) > 2 and poses[0] == moved
    assert poses[-1][0] == pytest.approx(20.0 - 20.0 * 0.033 / 0.1)
    t[0] = 0.3
    img = r.render(snap, (40.0, 0.0, 0.0, 0.0, 0.0, -30.0), 100.0)
    assert img.shape == (1080, 1920, 3)


@pytest.mark.parametrize("profile", ["ideal", "rig"])
def test_a_still_arm_frame_drawn_again_or_from_the_last_one_is_the_same_to_the_pixel(
    profile: str,
) -> None:
    """From the second frame of a still arm on, a frame starts from a copy of the last one
    before the sensor's noise (the scene, the pose, the jaws and the joints' play unchanged);
    the frames are those a renderer that draws every frame makes, noise included: the same
    seed, one with that copy and one without, through a still arm, a send that turns the
    joints' play before the arm moves, the jaws closing, a move, a new scene."""
    t = [0.0]
    optics = OPTICS_PROFILES[profile].top if profile != "ideal" else None
    cam = camera_of("top", optics) if optics is not None else TOP_CAMERA
    world = Workcell(exact_arm(), "random", seed=3, profile=load_profile(profile)).physics.world
    kw = {"optics": optics, "clock": lambda: t[0], "world": world}
    cached, drawn = Renderer(cam, seed=5, **kw), Renderer(cam, seed=5, **kw)  # type: ignore[arg-type]
    scene = SceneState(random_layout(3))
    home, pick = (0.0, 0.0, 0.0, 0.0, 0.0, -30.0), PICK
    steps: list[tuple[tuple[float, ...], float]] = [(home, 100.0)] * 4
    steps += [("play", 0.0), (home, 100.0), (home, 100.0), (home, 40.0), (home, 40.0)]
    steps += [(pick, 40.0), (pick, 40.0), (pick, 40.0), ("scene", 0.0), (pick, 40.0), (pick, 40.0)]
    draws = 0
    static_layer = cached._static_layer

    def counted(snap: SceneSnapshot) -> np.ndarray:
        nonlocal draws
        draws += 1
        return static_layer(snap)

    cached._static_layer = counted  # type: ignore[method-assign]
    frames = 0
    for pose, jaws in steps:
        if pose == "play":  # a send towards +j0: the play turns before the arm moves
            world.note_move(home, (10.0, 0.0, 0.0, 0.0, 0.0, -30.0))
            continue
        if pose == "scene":
            scene.reset(random_layout(4))
            continue
        t[0] += 0.1
        snap = SceneSnapshot.of(scene)
        a = cached.render(snap, pose, jaws)
        frames += 1
        drawn._last_key = drawn._still_key = drawn._still = None  # draws every frame
        b = drawn.render(snap, pose, jaws)
        assert np.array_equal(a, b)
    # drawn: each run's first two frames (home, home after the play, the jaws, the pick, the
    # new scene); on the rig profile the first at the pick is the move's blur, a third; the
    # other frames started from the copy
    assert (frames, draws) == (13, 10 if optics is None else 11)
