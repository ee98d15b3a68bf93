"""Scene layouts: seeded random generator, scene files, validation, and the mat shared with perception."""

from __future__ import annotations

from pathlib import Path

import pytest

from mecharm.runtime.perception.config import DEFAULT_CONFIG
from mecharm.sim.scene import (
    MARKERS,
    MAT_X,
    MAT_Z,
    PICK_X,
    PICK_Z,
    PLACE_X,
    PLACE_Z,
    SCENES_DIR,
    SceneError,
    load_layout,
    random_layout,
)


def test_random_layout_is_seeded_and_inside_the_regions() -> None:
    assert random_layout(7) == random_layout(7)
    assert random_layout(7) != random_layout(8)
    for seed in range(300):
        lt = random_layout(seed)
        assert PICK_X[0] <= lt.block.x <= PICK_X[1] and PICK_Z[0] <= lt.block.z <= PICK_Z[1]
        assert PLACE_X[0] <= lt.box.x <= PLACE_X[1] and PLACE_Z[0] <= lt.box.z <= PLACE_Z[1]
        assert lt.seed == seed and lt.source == "random"


def test_scene_files_load() -> None:
    names = sorted(p.stem for p in SCENES_DIR.glob("*.yaml"))
    assert "standard" in names
    for name in names:
        lt = load_layout(name)
        assert lt.source.endswith(f"{name}.yaml")
    std = load_layout("standard")
    assert (std.block.x, std.block.z) == (0.20, 0.26)
    assert (std.box.x, std.box.z) == (-0.20, 0.18)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("block: {x: 0.2, z: 0.26}\n", "box: Field required"),
        (
            "block: {x: 0.2, z: 0.26}\nbox: {x: -0.2, z: 0.18}\ncolour: red\n",
            "colour: unknown key",
        ),
        (
            "block: {x: 0.9, z: 0.26}\nbox: {x: -0.2, z: 0.18}\n",
            "block at (0.9, 0.26) is not on the mat",
        ),
        ("block: {x: zero, z: 0.26}\nbox: {x: -0.2, z: 0.18}\n", "block.x"),
        ("block: {x: -0.2, z: 0.2}\nbox: {x: -0.2, z: 0.18}\n", "they overlap"),
        ("- 1\n- 2\n", "top level must be a mapping"),
        ("block: [\n", "cannot read"),
    ],
)
def test_bad_scene_file_names_the_problem(tmp_path: Path, text: str, needle: str) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(SceneError) as ei:
        load_layout(str(p))
    assert needle in str(ei.value)
    assert str(p) in str(ei.value)


def test_unknown_scene_lists_the_choices() -> None:
    with pytest.raises(SceneError, match=r"'nope'.*random.*standard"):
        load_layout("nope")


def test_mat_markers_match_the_perception_config() -> None:
    """The printed mat and the runtime's description of it must agree."""
    assert {m.id: m.corners_xz for m in DEFAULT_CONFIG.markers} == MARKERS
    assert (DEFAULT_CONFIG.mat_x, DEFAULT_CONFIG.mat_z) == (MAT_X, MAT_Z)
