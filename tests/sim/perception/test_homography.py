"""Mat homography from the ArUco corners: accuracy against the true camera, failures named."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from mecharm.runtime.perception import (
    DEFAULT_CONFIG,
    HomographyError,
    MatHomography,
    PerceptionConfig,
    estimate_homography,
)
from mecharm.sim.render import MAT_BGR, TOP_CAMERA
from mecharm.sim.scene import MARKERS


def _hide_marker(frame: np.ndarray, mid: int) -> np.ndarray:
    """Cover marker ``mid`` (paper and all) with mat colour, as if a hand lay on it."""
    c = np.array(MARKERS[mid])
    centre = c.mean(axis=0)
    big = centre + (c - centre) * 1.6
    uv, _ = TOP_CAMERA.project(np.column_stack([big[:, 0], np.zeros(4), big[:, 1]]))
    out = frame.copy()
    cv2.fillConvexPoly(out, np.round(uv).astype(np.int32), MAT_BGR)
    return out


def _px(x: float, h: float, z: float) -> tuple[float, float]:
    uv, _ = TOP_CAMERA.project(np.array([[x, h, z]]))
    return float(uv[0, 0]), float(uv[0, 1])


@pytest.fixture(scope="module")
def frames() -> list[np.ndarray]:
    from mecharm.sim.render import Renderer, SceneSnapshot
    from mecharm.sim.scene import SceneState, random_layout

    r = Renderer(TOP_CAMERA, 5)
    snap = SceneSnapshot.of(SceneState(random_layout(5)))
    return [r.render(snap, (0, 0, 0, 0, 0, -30), 100) for _ in range(4)]


def test_maps_points_at_any_height_like_the_true_camera(frames) -> None:
    H = estimate_homography(frames)
    assert H.n_frames == 4
    assert H.reproj_error_px < 1.0
    assert H.focal_px == pytest.approx(TOP_CAMERA.f, rel=0.03)
    assert np.linalg.norm(H.camera_center - TOP_CAMERA.pos) < 0.03
    rng = np.random.default_rng(0)
    for _ in range(50):
        x, z, h = rng.uniform(-0.3, 0.3), rng.uniform(0.08, 0.38), rng.uniform(0.0, 0.12)
        u, v = _px(x, h, z)
        ex, ez = H.pixel_to_xz(u, v, h)
        assert abs(ex - x) < 0.0008 and abs(ez - z) < 0.0008, (x, z, h, ex, ez)
        pu, pv = H.xz_to_pixel(x, z, h)
        assert np.hypot(pu - u, pv - v) < 1.5
    assert 0.3 < H.mm_per_px(0.2, 0.25) < 0.5


def test_round_trip_and_serialization(frames) -> None:
    H = estimate_homography(frames[:1])
    d = json.loads(json.dumps(H.to_dict()))
    H2 = MatHomography.from_dict(d)
    for x, z, h in [(0.2, 0.26, 0.0), (-0.2, 0.18, 0.043), (0.0, 0.3, 0.1)]:
        u, v = H.xz_to_pixel(x, z, h)
        assert H2.pixel_to_xz(u, v, h) == pytest.approx((x, z), abs=1e-6)
    assert d["markers_seen"] == {m.name: 1 for m in DEFAULT_CONFIG.markers}


def test_configured_focal_length_is_used(frames) -> None:
    H = estimate_homography(frames[:2], PerceptionConfig(focal_px=TOP_CAMERA.f))
    assert H.focal_px == TOP_CAMERA.f
    u, v = _px(0.2, 0.025, 0.26)
    assert H.pixel_to_xz(u, v, 0.025) == pytest.approx((0.2, 0.26), abs=0.001)


def test_missing_marker_is_named(frames) -> None:
    hidden = [_hide_marker(f, 2) for f in frames[:3]]
    with pytest.raises(HomographyError) as ei:
        estimate_homography(hidden)
    assert ei.value.missing == ["far_plus_x"]
    assert "far_plus_x (id 2, seen in 0/3 frames)" in str(ei.value)


def test_two_missing_markers_are_both_named(frames) -> None:
    hidden = [_hide_marker(_hide_marker(f, 0), 3) for f in frames[:2]]
    with pytest.raises(HomographyError) as ei:
        estimate_homography(hidden)
    assert ei.value.missing == ["near_minus_x", "far_minus_x"]


def test_marker_seen_in_too_few_frames_counts_as_missing(frames) -> None:
    # seen in 1 of 4 frames (< 50 %): missing; seen in 2 of 4: enough, averaged over those two
    one = [frames[0]] + [_hide_marker(f, 1) for f in frames[1:]]
    with pytest.raises(HomographyError, match=r"near_plus_x \(id 1, seen in 1/4 frames\)"):
        estimate_homography(one)
    two = frames[:2] + [_hide_marker(f, 1) for f in frames[2:]]
    H = estimate_homography(two)
    assert H.markers_seen["near_plus_x"] == 2


def test_bad_inputs(frames) -> None:
    with pytest.raises(HomographyError, match="no frames"):
        estimate_homography([])
    small = cv2.resize(frames[1], (960, 540))
    with pytest.raises(HomographyError, match="frame 1 is 960x540, frame 0 is 1920x1080"):
        estimate_homography([frames[0], small])
    with pytest.raises(ValueError, match="frame 1 must be a BGR uint8 image"):
        estimate_homography([frames[0], frames[0][:, :, 0]])
    blank = np.full_like(frames[0], 90)
    with pytest.raises(HomographyError) as ei:
        estimate_homography([blank])
    assert len(ei.value.missing) == 4
