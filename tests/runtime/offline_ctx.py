"""A TrialContext with no rig behind it, for tests of one stage helper's decisions: the
settings, the shipped approach arcs, a TraceWriter that keeps its lines in memory, and
the scene's box; every port the helper must not touch is None (or the caller's stand-in)."""

from __future__ import annotations

from typing import Any

from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.lookup import load_arc
from mecharm.runtime.lookup.j0 import DEFAULT_PICK_ARC, DEFAULT_PLACE_ARC
from mecharm.runtime.memories import HeightMemory
from mecharm.runtime.pick_place import TrialContext
from mecharm.runtime.ports import SceneObservation
from mecharm.runtime.records.trace import TraceWriter


def offline_context(
    settings: RuntimeSettings,
    box_xz: tuple[float, float],
    *,
    arm: Any = None,
    heights: HeightMemory | None = None,
) -> TrialContext:
    ctx = TrialContext(
        settings=settings,
        arm=arm,
        eyes=None,  # type: ignore[arg-type]
        recorder=None,  # type: ignore[arg-type]
        clock=None,  # type: ignore[arg-type]
        trace=TraceWriter(None),
        table=None,  # type: ignore[arg-type]
        arc_pick=load_arc(DEFAULT_PICK_ARC),
        arc_place=load_arc(DEFAULT_PLACE_ARC),
        corrections=None,  # type: ignore[arg-type]
        heights=heights,  # type: ignore[arg-type]
    )
    ctx.state.scene = SceneObservation(ok=True, box_xz=box_xz)
    return ctx
