"""The viewer's default layout for a trial recording (a Rerun blueprint).

Without one the viewer guesses a view per top-level entity; this puts the two
cameras, the arm in 3D, one plot per joint (commanded vs measured on the same axes)
and the text logs where an operator looks for them. The viewer's own layout edits
win over it (docs/viewing.md).
"""

from __future__ import annotations

import rerun.blueprint as rrb

__all__ = ["default_blueprint"]


def default_blueprint() -> rrb.Blueprint:
    joints = [rrb.TimeSeriesView(origin=f"joints/j{i}", name=f"j{i} (deg)") for i in range(6)]
    return rrb.Blueprint(
        rrb.Horizontal(
            rrb.Vertical(
                rrb.Spatial2DView(origin="camera/top", name="top camera"),
                rrb.Spatial2DView(origin="camera/side", name="side camera"),
            ),
            rrb.Vertical(
                rrb.TextDocumentView(origin="stage", name="stage at the time cursor"),
                rrb.Spatial3DView(origin="world", name="arm (forward kinematics)"),
                rrb.Grid(
                    *joints, rrb.TimeSeriesView(origin="gripper", name="gripper"), grid_columns=2
                ),
                row_shares=[0.4, 2, 3],
            ),
            rrb.Tabs(
                rrb.TextLogView(origin="events", name="all events"),
                *[
                    rrb.TextLogView(origin=f"events/{k}", name=k)
                    for k in ("stages", "verdicts", "lookups", "guards", "notes")
                ],
            ),
            column_shares=[2, 2, 1.5],
        ),
        collapse_panels=True,
    )
