"""The simulated lens's remap tables come from the disk cache exactly as worked out, and a
bad cache never stops a camera (mecharm/sim/lensmaps.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from structlog.testing import capture_logs

from mecharm.sim import lensmaps
from mecharm.sim.optics import OPTICS_PROFILES
from mecharm.sim.render import Renderer, SceneSnapshot, camera_of
from mecharm.sim.scene import SceneState, random_layout

SIZE = (96, 64)
K = (80.0, 81.0, 47.5, 31.5)
DIST = (-0.2, 0.05, 0.001, -0.002, 0.0)


@pytest.fixture(autouse=True)
def _cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    lensmaps.distortion_maps.cache_clear()
    yield tmp_path / "cache"
    lensmaps.distortion_maps.cache_clear()


def _same(a: lensmaps.Maps, b: lensmaps.Maps) -> bool:
    return a[0] == b[0] and np.array_equal(a[1], b[1]) and np.array_equal(a[2], b[2])


def test_the_second_start_reads_the_maps_the_first_worked_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fresh = lensmaps.compute_maps(SIZE, K, DIST)
    first = lensmaps.distortion_maps(SIZE, K, DIST)
    path = lensmaps.cache_file(SIZE, K, DIST)
    assert path is not None and path.is_file() and _same(first, fresh)
    lensmaps.distortion_maps.cache_clear()  # a new process: nothing in memory

    def no(*_a: object) -> lensmaps.Maps:
        raise AssertionError("worked out again although the disk cache holds them")

    monkeypatch.setattr(lensmaps, "compute_maps", no)
    assert _same(lensmaps.distortion_maps(SIZE, K, DIST), fresh)


def test_another_lens_gets_another_file() -> None:
    paths = {
        lensmaps.cache_file(SIZE, K, DIST),
        lensmaps.cache_file(SIZE, K, (-0.2, 0.05, 0.001, -0.002, 1e-9)),
        lensmaps.cache_file(SIZE, (80.0, 81.0, 47.5, 31.500001), DIST),
        lensmaps.cache_file((95, 64), K, DIST),
    }
    assert len(paths) == 4


@pytest.mark.parametrize(
    "damage",
    [
        b"not a zip at all",
        b"",
        "other-shape",
        "truncated",
    ],
)
def test_a_bad_cache_file_is_worked_out_again_and_replaced(damage: bytes | str) -> None:
    fresh = lensmaps.compute_maps(SIZE, K, DIST)
    path = lensmaps.cache_file(SIZE, K, DIST)
    assert path is not None
    path.parent.mkdir(parents=True)
    if damage == "other-shape":  # a well-formed file that does not fit this lens
        np.savez(path, scale=np.float64(0.9), m1=fresh[1][:-1], m2=fresh[2][:-1])
    elif damage == "truncated":
        lensmaps.distortion_maps(SIZE, K, DIST)
        lensmaps.distortion_maps.cache_clear()
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    else:
        path.write_bytes(damage)  # type: ignore[arg-type]
    with capture_logs() as logs:
        got = lensmaps.distortion_maps(SIZE, K, DIST)
    assert _same(got, fresh)
    assert [e["event"] for e in logs] == ["lens_maps_unreadable"]
    lensmaps.distortion_maps.cache_clear()
    assert _same(lensmaps._load(path, SIZE) or (0.0, None, None), fresh)  # replaced, whole


def test_a_cache_folder_that_cannot_be_made_only_costs_the_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "/proc/mecharm-cache")  # not even root makes it
    with capture_logs() as logs:
        got = lensmaps.distortion_maps(SIZE, K, DIST)
    assert _same(got, lensmaps.compute_maps(SIZE, K, DIST))
    assert [e["event"] for e in logs] == ["lens_maps_not_kept"]


def test_a_relative_cache_home_is_ignored_as_the_xdg_rule_says(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = lensmaps.cache_file(SIZE, K, DIST)
    assert path is not None and path.is_relative_to(tmp_path / "home" / ".cache" / "mecharm")


def test_a_cache_home_that_is_a_file_only_costs_the_time(_cache_home: Path) -> None:
    _cache_home.parent.mkdir(parents=True, exist_ok=True)
    _cache_home.write_text("a file where the cache folder would be\n")
    with capture_logs() as logs:
        got = lensmaps.distortion_maps(SIZE, K, DIST)
    assert _same(got, lensmaps.compute_maps(SIZE, K, DIST))
    assert [e["event"] for e in logs] == ["lens_maps_not_kept"]


def test_the_rig_camera_draws_the_same_frame_from_the_cached_maps() -> None:
    optics = OPTICS_PROFILES["rig"].side
    cam = camera_of("side", optics)
    assert cam.dist is not None
    snap = SceneSnapshot.of(SceneState(random_layout(3, OPTICS_PROFILES["rig"].gain_range)))
    pose = (10.0, 20.0, -10.0, 0.0, -30.0, -30.0)
    worked_out = Renderer(cam, seed=4, optics=optics).render(snap, pose, 100.0)
    lensmaps.distortion_maps.cache_clear()
    read = Renderer(cam, seed=4, optics=optics).render(snap, pose, 100.0)
    assert np.array_equal(worked_out, read)
