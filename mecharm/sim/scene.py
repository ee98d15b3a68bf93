"""The simulated workcell's objects and their true state: mat, corner markers, block, box.

Layouts come from a seeded random generator (block in the PICK region, box in
the PLACE region, lighting) or from a YAML scene file (``mecharm/sim/scenes/``).
``SceneState`` is the ground truth the physics updates and the renderer draws;
tests read it through ``truth()``; the runtime never sees it.
"""

from __future__ import annotations

import copy
import itertools
import math
import random
import threading
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from mecharm.common.config import describe_errors, did_you_mean

__all__ = [
    "BLOCK_SIZE_M",
    "BOX_FLOOR_M",
    "BOX_HEIGHT_M",
    "BOX_INNER_M",
    "BOX_OUTER_M",
    "BOX_WALL_M",
    "MARKERS",
    "MARKER_SIDE_M",
    "MAT_X",
    "MAT_Z",
    "PICK_REACH_M",
    "PICK_X",
    "PICK_Z",
    "PLACE_REACH_M",
    "PLACE_X",
    "PLACE_Z",
    "SCENES_DIR",
    "Lighting",
    "Pose",
    "SceneError",
    "SceneLayout",
    "SceneState",
    "block_upright",
    "load_layout",
    "random_layout",
    "yaw_rotation",
]

BLOCK_SIZE_M = 0.025
BOX_INNER_M = 0.070
BOX_WALL_M = 0.004
BOX_OUTER_M = BOX_INNER_M + 2 * BOX_WALL_M
BOX_HEIGHT_M = 0.043
BOX_FLOOR_M = 0.003
MAT_X = (-0.36, 0.36)
MAT_Z = (0.04, 0.42)
PICK_X = (0.14, 0.24)
PICK_Z = (0.20, 0.28)
PLACE_X = (-0.24, -0.14)
PLACE_Z = (0.14, 0.24)
#: Distance from the base axis the arm can serve (docs/lookup.md, coverage): the pick band with
#: j1 <= 88° reaches block centres out to 0.354 m; the place lookup (within ±15° of the adopted
#: approach_place pose) serves box centres 0.235-0.295 m out. Random layouts stay inside both.
PICK_REACH_M = (0.0, 0.350)
PLACE_REACH_M = (0.240, 0.290)
MARKER_SIDE_M = 0.040
SCENES_DIR = Path(__file__).resolve().parent / "scenes"
_VERSIONS = itertools.count(1)


def _marker_corners(
    cx: float, cz: float, s: float = MARKER_SIDE_M
) -> tuple[tuple[float, float], ...]:
    h = s / 2
    return ((cx + h, cz + h), (cx - h, cz + h), (cx - h, cz - h), (cx + h, cz - h))


#: ArUco DICT_4X4_50 id -> corner (x, z) in OpenCV order (the printed mat; perception's config matches).
MARKERS: dict[int, tuple[tuple[float, float], ...]] = {
    0: _marker_corners(-0.33, 0.07),
    1: _marker_corners(0.33, 0.07),
    2: _marker_corners(0.33, 0.39),
    3: _marker_corners(-0.33, 0.39),
}


class SceneError(ValueError):
    """A scene spec (name, file, values) is invalid; the message names what."""


class Pose(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    x: float = Field(ge=-1.0, le=1.0)
    z: float = Field(ge=-1.0, le=1.0)
    yaw_deg: float = Field(default=0.0, ge=-360, le=360)


#: gain change across the image along one axis: beyond ±0.5 one edge would be black or blown out
_Gradient = Annotated[float, Field(ge=-0.5, le=0.5)]


class Lighting(BaseModel):
    """Scene lighting: overall gain, a linear gradient across the image, sensor noise."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    gain: float = Field(default=1.0, ge=0.8, le=1.2)
    gradient: tuple[_Gradient, _Gradient] = Field(
        default=(0.0, 0.0), description="gain change across x / z of the image"
    )
    noise_sigma: float = Field(default=3.0, ge=0, le=15)
    flicker: float = Field(
        default=0.02, ge=0, le=0.1, description="per-frame random gain change (fraction)"
    )


class SceneLayout(BaseModel):
    """Where things start for one trial."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    block: Pose
    box: Pose
    lighting: Lighting = Field(default_factory=Lighting)
    seed: int | None = None
    source: str = "file"
    #: faults armed when this scene is laid out, each ``{"fault": NAME, ...}``
    #: (docs/simulation-faults.md); checked here so a bad one fails at load time
    faults: list[dict[str, Any]] = Field(default_factory=list)

    @field_validator("faults")
    @classmethod
    def _known_faults(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from mecharm.sim.faults import FaultError, parse_fault  # it imports this module

        for i, spec in enumerate(v):
            try:
                parse_fault(spec)
            except FaultError as exc:
                raise ValueError(f"faults[{i}]: {exc}") from None
        return v

    @model_validator(mode="after")
    def _on_mat(self) -> SceneLayout:
        for name, p, half in (
            ("block", self.block, BLOCK_SIZE_M / 2),
            ("box", self.box, BOX_OUTER_M / 2),
        ):
            if not (
                MAT_X[0] + half <= p.x <= MAT_X[1] - half
                and MAT_Z[0] + half <= p.z <= MAT_Z[1] - half
            ):
                raise ValueError(f"{name} at ({p.x}, {p.z}) is not on the mat x {MAT_X}, z {MAT_Z}")
        # the block must stand clear of the box whatever their yaws (half diagonals + 5 mm)
        clear = (BOX_OUTER_M + BLOCK_SIZE_M) / 2 * 2**0.5 + 0.005
        gap = ((self.block.x - self.box.x) ** 2 + (self.block.z - self.box.z) ** 2) ** 0.5
        if gap < clear:
            raise ValueError(
                f"block and box centres are {gap * 1000:.0f} mm apart; they overlap "
                f"(need >= {clear * 1000:.0f} mm)"
            )
        return self


def _sample_in_reach(
    rng: random.Random, xs: tuple[float, float], zs: tuple[float, float], reach: tuple[float, float]
) -> tuple[float, float]:
    """Uniform in the rectangle, restricted to the ring the arm can serve (rejection sampling)."""
    while True:
        x, z = rng.uniform(*xs), rng.uniform(*zs)
        if reach[0] <= (x * x + z * z) ** 0.5 <= reach[1]:
            return x, z


def random_layout(seed: int, gain_range: tuple[float, float] = (0.9, 1.08)) -> SceneLayout:
    """Block uniform in the PICK region, box uniform in the PLACE region, random yaw and lighting
    (gain uniform in ``gain_range``: the sim profile's; the default keeps old seeds' scenes)."""
    rng = random.Random(seed)
    block_x, block_z = _sample_in_reach(rng, PICK_X, PICK_Z, PICK_REACH_M)
    box_x, box_z = _sample_in_reach(rng, PLACE_X, PLACE_Z, PLACE_REACH_M)
    return SceneLayout(
        block=Pose(x=block_x, z=block_z, yaw_deg=rng.uniform(0, 90)),
        box=Pose(x=box_x, z=box_z, yaw_deg=rng.uniform(0, 90)),
        lighting=Lighting(
            gain=rng.uniform(*gain_range),
            gradient=(rng.uniform(-0.06, 0.06), rng.uniform(-0.06, 0.06)),
        ),
        seed=seed,
        source="random",
    )


def load_layout(
    scene: str, seed: int = 0, gain_range: tuple[float, float] = (0.9, 1.08)
) -> SceneLayout:
    """``"random"`` (seeded, lighting gain from ``gain_range``), a scene name in ``scenes/``
    (without .yaml) or a path to a YAML file."""
    if scene == "random":
        return random_layout(seed, gain_range)
    path = Path(scene)
    if not path.suffix:
        path = SCENES_DIR / f"{scene}.yaml"
    if not path.is_file():
        known = ["random", *sorted(p.stem for p in SCENES_DIR.glob("*.yaml"))]
        if path.parent == SCENES_DIR:  # a name, not a path: suggest the closest known one
            hint = did_you_mean(scene, known)
            raise SceneError(
                f"unknown scene {scene!r}{hint or ';'} known: {', '.join(known)} "
                "(or a scene file path)"
            )
        raise SceneError(f"scene file {path} does not exist (or use one of {', '.join(known)})")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SceneError(f"scene file {path}: cannot read: {exc}") from exc
    if not isinstance(data, dict):
        raise SceneError(f"scene file {path}: top level must be a mapping")
    try:  # model_validate: a non-string key (``1: 2``) is an error naming it, not a TypeError
        return SceneLayout.model_validate({**data, "source": str(path)})
    except ValidationError as exc:
        raise SceneError(f"scene file {path}: {describe_errors(exc, SceneLayout)}") from None


def yaw_rotation(yaw_deg: float) -> tuple[float, ...]:
    """Row-major 3x3 rotation (Unity frame) of a block standing upright at ``yaw_deg``: its
    local x axis goes to (cos, 0, sin) in (x, y, z), as the renderer's footprint turns."""
    a = math.radians(yaw_deg)
    c, s = math.cos(a), math.sin(a)
    return (c, 0.0, -s, 0.0, 1.0, 0.0, s, 0.0, c)


#: a block counts as upright when one of its faces is within this angle of flat
UPRIGHT_TOL_DEG = 10.0


def block_upright(rot: tuple[float, ...] | list[float]) -> bool:
    """One of the cube's axes within ``UPRIGHT_TOL_DEG`` of vertical (any face down is upright)."""
    return max(abs(rot[3]), abs(rot[4]), abs(rot[5])) >= math.cos(math.radians(UPRIGHT_TOL_DEG))


class SceneState:
    """Mutable ground truth, guarded by ``lock``. ``version`` changes whenever a static object moves."""

    def __init__(self, layout: SceneLayout) -> None:
        self.lock = threading.RLock()
        self.version = 0
        self.reset(layout)

    def bump(self) -> None:
        """A static object moved: new version (unique in the process, so render caches never alias)."""
        self.version = next(_VERSIONS)

    def reset(self, layout: SceneLayout) -> None:
        with self.lock:
            self.layout = layout
            self.block_xyz = [layout.block.x, BLOCK_SIZE_M / 2, layout.block.z]  # centre
            self.block_yaw_deg = layout.block.yaw_deg
            # full orientation (row-major 3x3, Unity frame); the rules engine keeps it upright
            self.block_rot: tuple[float, ...] = yaw_rotation(layout.block.yaw_deg)
            self.box = (layout.box.x, layout.box.z, layout.box.yaw_deg)
            self.grasped = False
            self.grasp_offset = (0.0, 0.0, 0.0)  # block centre - tip while held
            self.resting_on = "mat"  # mat | box | rim | gripper | air (falling, mujoco)
            self.collisions: list[dict[str, Any]] = []
            self.events: list[dict[str, Any]] = []
            self.place_outcome: str | None = None
            self.tip_xyz: tuple[float, float, float] | None = None
            self.gripper = 100.0
            self.bump()

    def truth(self) -> dict[str, Any]:
        """Everything a test may want to compare against (JSON-serializable)."""
        with self.lock:
            return {
                "layout": self.layout.model_dump(),
                "block": {
                    "x": self.block_xyz[0],
                    "y": self.block_xyz[1],
                    "z": self.block_xyz[2],
                    "yaw_deg": self.block_yaw_deg,
                    "rot": [list(self.block_rot[i : i + 3]) for i in (0, 3, 6)],
                    "upright": block_upright(self.block_rot),
                    "resting_on": self.resting_on,
                },
                "box": {
                    "x": self.box[0],
                    "z": self.box[1],
                    "yaw_deg": self.box[2],
                    "inner_m": BOX_INNER_M,
                    "outer_m": BOX_OUTER_M,
                    "height_m": BOX_HEIGHT_M,
                },
                "grasped": self.grasped,
                "tip": None if self.tip_xyz is None else list(self.tip_xyz),
                "gripper": self.gripper,
                "collisions": copy.deepcopy(self.collisions),
                "events": copy.deepcopy(self.events[-50:]),
                "place_outcome": self.place_outcome,
            }
