"""What the pick-and-place stages share: ``TrialState`` (what they learn and hand on)
and ``TrialContext`` (the ports, the safe arm, the lookups and memories of one trial).

Every outside value comes through a port, already traced (trial.py), so ``mecharm
replay`` can drive the same stages from a trace; every motion goes through the safe arm
(safe_arm.py). No decision reads the wall clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mecharm.common.envelope import Envelope
from mecharm.common.logging import get_logger
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.engine import StageFailed
from mecharm.runtime.lookup.j0 import ArcPose
from mecharm.runtime.lookup.table import FkTable
from mecharm.runtime.memories import CorrectionMemory, HeightMemory
from mecharm.runtime.motion import MoveResult
from mecharm.runtime.perception.config import DEFAULT_CONFIG, PerceptionConfig
from mecharm.runtime.pick_place.stages import Stage
from mecharm.runtime.ports import (
    ArmPort,
    Clock,
    EyesPort,
    ReleaseView,
    SceneObservation,
    TipObservation,
    VerdictObservation,
)
from mecharm.runtime.recorder_link import RecorderLink
from mecharm.runtime.records.trace import TraceWriter
from mecharm.runtime.safe_arm import SafeArm

log = get_logger("mecharm.runtime.pick_place.context")

#: the settings this module reads (docs/settings.md, "What each stage reads"; a test
#: checks it against the code)
SETTINGS_READ: frozenset[str] = frozenset({"motion.tol_approach", "motion.tol_pick_place"})


class BlockLost(StageFailed):
    """The held block left the jaws: it no longer moves with the tip (``_HeldBlockWatch``), or
    the release check finds it neither near the box nor at the tip. The stage ends ``LOST``
    and the place is judged where the block went (docs/release.md, "A block that left the
    jaws"). ``block_xz``: where the block was last seen (on the plane of a held block)."""

    def __init__(self, message: str, block_xz: tuple[float, float] | None = None) -> None:
        super().__init__(message)
        self.block_xz = block_xz


@dataclass
class TrialState:
    """What the stages learn and hand on to each other."""

    scene: SceneObservation | None = None
    aim_xz: tuple[float, float] | None = None
    correction_key: str = ""
    correction_used_mm: tuple[float, float] = (0.0, 0.0)
    #: what the pick servo added to the aim on this attempt (mm, subtracted like the correction)
    pick_servo_mm: tuple[float, float] = (0.0, 0.0)
    #: the last pick missed with the tip seen on the block in x-z: a miss in height, which the
    #: top camera cannot see; the next descent keeps to pick_retry_band
    height_miss: bool = False
    #: poses commanded at the block on this attempt (descent, then servo steps): the way back up
    pick_path: list[tuple[float, ...]] = field(default_factory=list)
    pick_approach: tuple[float, ...] | None = None
    pick_hover: bool = False  # pick_approach is the hover above the block, not the arc's pose
    #: where the lift ended and the pick was judged, holding the block (approach_place leaves
    #: from here; a put-back comes back through it)
    lifted_at: tuple[float, ...] | None = None
    #: poses commanded in the box, in order (place descent, servo and depth steps): the way back up
    place_path: list[tuple[float, ...]] = field(default_factory=list)
    pick_pose: tuple[float, ...] | None = None
    pick_ee_y: float | None = None
    tip: TipObservation | None = None
    pick_attempts: int = 0
    pick_verdict: VerdictObservation | None = None
    #: where the top camera saw the block (on the mat's plane) right after a lift judged
    #: "yes"; a block later lost that still lies there never left the mat
    lifted_block_xz: tuple[float, float] | None = None
    place_key: str = ""
    #: the place band's dee_y when the cell was new and started from the learnt cells (else 0)
    place_dee_start_mm: float = 0.0
    place_approach: tuple[float, ...] | None = None
    place_pose: tuple[float, ...] | None = None
    place_ee_y: float | None = None
    side_frame: str | None = None
    release_view: ReleaseView | None = None
    #: the release check confirmed the block above the opening (False: refused, or released anyway)
    release_confirmed: bool = False
    #: the arm holds the block in the hover above the place (the release was refused)
    hovering: bool = False
    #: why the release was refused ("" : not refused, or released anyway)
    release_refused: str = ""
    #: the exit path put the refused block back on the mat (docs/release.md)
    put_back: bool = False
    #: the held block left the jaws before the release (``held_block_lost``)
    block_lost: bool = False
    #: ... found so by the release check: seen neither near the box nor at the tip
    lost_at_release: bool = False
    #: at a stop believing the block held: what the top camera saw at the tip (seen,
    #: not_seen, unknown; "" : not looked)
    held_evidence: str = ""
    place_verdict: VerdictObservation | None = None
    holding: bool = False
    fresh_mode_on: bool = False
    stage_times: dict[str, float] = field(default_factory=dict)


@dataclass
class TrialContext:
    """Everything a stage may use. Ports are already traced (see trial.py)."""

    settings: RuntimeSettings
    arm: ArmPort
    eyes: EyesPort
    recorder: RecorderLink
    clock: Clock
    trace: TraceWriter
    table: FkTable
    arc_pick: ArcPose
    arc_place: ArcPose
    corrections: CorrectionMemory
    heights: HeightMemory
    run_dir: Path | None = None
    state: TrialState = field(default_factory=TrialState)
    stage: Stage = Stage.OPEN_GRIPPER_HOME
    on_stage: Callable[[str, str, str], None] | None = None  # (stage, outcome, detail) status lines
    #: told the stage's name as it starts (the operator's console, docs/console.md); never a decision
    on_stage_start: Callable[[str], None] | None = None
    #: the data root's fault, if any (records/trace.py); read before each stage (docs/reliability.md)
    storage_fault: Callable[[], str | None] = lambda: None
    #: the daemon's safety envelope as the trial started (None: none announced); every guard
    #: verdict keeps to the narrower of it and the settings (docs/daemon.md, "Safety envelope")
    envelope: Envelope | None = None
    #: box geometry for the path check (docs/safety.md); the runtime's ``perception:`` config
    workcell: PerceptionConfig = DEFAULT_CONFIG
    #: every motion of the trial goes through it (safe_arm.py); built from the fields above
    safe: SafeArm = field(init=False)

    def __post_init__(self) -> None:
        self.safe = SafeArm(
            settings=self.settings,
            arm=self.arm,
            clock=self.clock,
            trace=self.trace,
            recorder=self.recorder,
            where=lambda: self.stage.value,
            box_xz=lambda: None if self.state.scene is None else self.state.scene.box_xz,
            envelope=self.envelope,
            workcell=self.workcell,
        )

    # ------------------------------------------- what the stage driver needs (engine.py)
    def enter(self, stage: Stage) -> None:
        self.stage = stage

    @property
    def stage_times(self) -> dict[str, float]:
        return self.state.stage_times

    # ------------------------------------------- the safe arm, as the stages call it
    @property
    def last_commanded(self) -> tuple[float, ...] | None:
        return self.safe.last_commanded

    @last_commanded.setter
    def last_commanded(self, pose: tuple[float, ...] | None) -> None:
        self.safe.last_commanded = pose

    @property
    def last_measured(self) -> tuple[float, ...] | None:
        return self.safe.last_measured

    @last_measured.setter
    def last_measured(self, pose: tuple[float, ...] | None) -> None:
        self.safe.last_measured = pose

    @property
    def approach_tol(self) -> float:
        """Arrival tolerance of a move up to an approach pose or between them: the rig's 2°
        (``tol_approach``) with the gripper empty; holding the block it is a carrying move
        under the block's load and arrives within ``tol_pick_place`` (3°): on harsh such
        moves stalled 2.03-2.24° short (docs/safety.md, "Joint continuity")."""
        s = self.settings
        return s.motion.tol_pick_place if self.state.holding else s.motion.tol_approach

    async def sleep(self, real_rig_seconds: float) -> None:
        await self.safe.sleep(real_rig_seconds)

    async def read(self) -> tuple[float, ...]:
        return await self.safe.read()

    async def at_rest(self, note: str) -> None:
        await self.safe.at_rest(note)

    async def move(
        self,
        target: Sequence[float],
        tol: float,
        note: str,
        *,
        lookup_ok: bool | None = None,
        lookup_reason: str = "",
        near_work: bool = False,
        into_box: bool = False,
    ) -> MoveResult:
        return await self.safe.move(
            target, tol, note, lookup_ok=lookup_ok, lookup_reason=lookup_reason,
            near_work=near_work, into_box=into_box,
        )  # fmt: skip

    async def retrace(
        self, waypoints: Sequence[Sequence[float]], tol: float, note: str, *, into_box: bool = True
    ) -> None:
        await self.safe.retrace(waypoints, tol, note, into_box=into_box)

    def motion_checks(
        self, target: Sequence[float], *, near_work: bool, into_box: bool
    ) -> tuple[dict[str, Any], str | None]:
        return self.safe.motion_checks(target, near_work=near_work, into_box=into_box)

    async def gripper(self, action: str, note: str) -> None:
        await self.safe.gripper(action, note)
