"""A pick that never lifted the block (docs/release.md): a block found lost that still lies
where the top camera saw it right after the lift was never in the jaws, and the pick
judgement is revised to "no" — in the trial's state, its trace, its run log and a ledger
row rebuilt from the trace."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from mecharm.common.layout import DataRoot
from mecharm.runtime import engine
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.pick_place import TRANSITIONS, Stage, context, pick, place, release
from mecharm.runtime.ports import VerdictObservation
from mecharm.runtime.records.reconcile import reconcile_run_folders
from mecharm.runtime.records.runlog import build_runlog
from tests.runtime.offline_ctx import offline_context

BOX = (-0.199, 0.173)
LIFTED = (0.1987, 0.2849)  # where a harsh block lay beside the jaws at the lift (seed 9510)
YES = VerdictObservation(
    "yes", 0.63, "block left its mat position and is held at the tip", "geometric"
)


class MatEyes:
    """The top camera's answer to "where is the red block on the mat's plane, near here?"."""

    def __init__(self, at: tuple[float, float] | None) -> None:
        self.at = at
        self.asked: list[tuple[float, tuple[float, float], str]] = []

    async def locate_block(
        self, lift_m: float, near_xz: tuple[float, float], tag: str
    ) -> tuple[float, float] | None:
        self.asked.append((lift_m, near_xz, tag))
        return self.at


def _ctx(tmp_path: Path, lost_at: tuple[float, float] | None, **settings: Any) -> Any:
    ctx = offline_context(RuntimeSettings(data_root=tmp_path, **settings), BOX)
    ctx.eyes = MatEyes(lost_at)
    ctx.state.pick_verdict = YES
    ctx.state.lifted_block_xz = LIFTED
    return ctx


def _decisions(ctx: Any, kind: str) -> list[dict[str, Any]]:
    return [
        e["value"] for e in ctx.trace.lines if e.get("event") == "decision" and e["kind"] == kind
    ]


@pytest.mark.anyio
@pytest.mark.parametrize("moved_mm", [0.0, 1.7, 9.1, 24.0])
async def test_a_lost_block_still_where_it_lay_after_the_lift_revises_the_pick_to_no(
    tmp_path: Path, moved_mm: float
) -> None:
    """1.7-9.1 mm: the harsh blocks that lay on the mat beside the jaws when the lift was
    judged "yes" (the truth: nothing in the jaws)."""
    ctx = _ctx(tmp_path, (LIFTED[0] + moved_mm / 1000.0, LIFTED[1]))
    await place._recheck_pick(ctx, (0.176, 0.254))
    v = ctx.state.pick_verdict
    assert v.verdict == "no" and v.judge == "pick_recheck"
    assert "never left the mat" in v.reason and YES.reason in v.reason
    assert v.details["first"] == YES.to_dict()
    # the mat's plane (lift 0), near where the watch last saw the block
    assert ctx.eyes.asked == [(0.0, (0.176, 0.254), "lost_mat")]
    (d,) = _decisions(ctx, "pick_recheck")
    assert d["revised"] and d["pick_verdict"]["verdict"] == "no"
    assert d["moved_mm"] == pytest.approx(moved_mm, abs=1e-6)


@pytest.mark.anyio
@pytest.mark.parametrize("moved_mm", [26.0, 260.1, 481.4])
async def test_a_block_that_slipped_out_on_the_way_keeps_the_pick_yes(
    tmp_path: Path, moved_mm: float
) -> None:
    """260-481 mm: the harsh blocks that were held at the lift (the truth) and slipped out
    against the box later; the pick did happen."""
    ctx = _ctx(tmp_path, (LIFTED[0], LIFTED[1] - moved_mm / 1000.0))
    await place._recheck_pick(ctx, (-0.19, 0.17))
    assert ctx.state.pick_verdict is YES
    (d,) = _decisions(ctx, "pick_recheck")
    assert not d["revised"] and "pick_verdict" not in d


@pytest.mark.anyio
async def test_no_revision_without_the_evidence(tmp_path: Path) -> None:
    # the block not found on the mat now: nothing says where it lies
    ctx = _ctx(tmp_path, None)
    await place._recheck_pick(ctx, (0.176, 0.254))
    assert ctx.state.pick_verdict is YES
    assert _decisions(ctx, "pick_recheck")[0]["lost_xz"] is None
    # nothing seen after the lift (a judge that saw no block there), or a pick judged no
    for state in (
        {"lifted_block_xz": None},
        {"pick_verdict": VerdictObservation("no", 0.9, "r", "g")},
    ):
        ctx = _ctx(tmp_path, LIFTED)
        for k, val in state.items():
            setattr(ctx.state, k, val)
        before = ctx.state.pick_verdict
        await place._recheck_pick(ctx, (0.176, 0.254))
        assert ctx.state.pick_verdict is before and ctx.eyes.asked == []


@pytest.mark.anyio
async def test_lost_stage_ends_rechecks_the_pick_before_judging_the_place(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, LIFTED)
    out = await place._lost(ctx, context.BlockLost("lost at servo 2", block_xz=(0.176, 0.254)))
    assert out is engine.Outcome.LOST and ctx.state.pick_verdict.verdict == "no"
    kinds = [e["kind"] for e in ctx.trace.lines if e.get("event") == "decision"]
    assert kinds.index("pick_recheck") < kinds.index("block_lost")


@pytest.mark.parametrize(
    ("key", "bad"),
    [
        ("pick_recheck_mm", 0.0),
        ("pick_recheck_mm", 150.0),
        ("pick_recheck_mm", "x"),
    ],
)
def test_bad_recheck_distances_are_refused_naming_the_key(key: str, bad: Any) -> None:
    with pytest.raises(ValueError, match=key):
        RuntimeSettings(**{key: bad})


def test_the_revision_reaches_the_run_log_and_a_ledger_row_rebuilt_from_the_trace(
    tmp_path: Path,
) -> None:
    revised = {
        "verdict": "no",
        "confidence": 0.57,
        "reason": "revised: ...",
        "judge": "pick_recheck",
    }
    lines = [
        {"event": "trial", "stage": "start", "dry_run": False, "scene_seed": 9510, "ts": 100.0,
         "run_stem": "run_0011_20261203_104729", "constants": {}},
        {"event": "input", "stage": "lift_and_judge", "kind": "pick_verdict", "ts": 104.0,
         "value": YES.to_dict()},
        {"event": "decision", "stage": "servo_place", "kind": "pick_recheck", "ts": 107.0,
         "value": {"lifted_xz": list(LIFTED), "lost_xz": list(LIFTED), "moved_mm": 0.0,
                   "revised": True, "pick_verdict": revised}},
        {"event": "transition", "stage": "servo_place", "frm": "servo_place",
         "to": "retreat_and_judge", "ts": 107.5},
    ]  # fmt: skip
    log = build_runlog(lines, trace_name="t.jsonl")
    picks = [j for j in log["judgements"] if j["what"] == "pick"]
    assert [p["verdict"] for p in picks] == ["yes", "no"] and picks[1]["revised"]
    layout = DataRoot(tmp_path)
    stem = "run_0011_20261203_104729"
    layout.run_dir(stem).mkdir(parents=True)
    layout.trace(stem).write_text(
        "".join(json.dumps({"seq": i, **e}) + "\n" for i, e in enumerate(lines))
    )
    (row,) = reconcile_run_folders(tmp_path)
    assert row.run_stem == stem
    (ledger_row,) = csv.DictReader(layout.ledger.read_text().splitlines())
    assert ledger_row["pick_verdict"] == "no" and ledger_row["pick_confidence"] == "0.57"


# ---- a revised pick is tried again (docs/release.md, "A pick that never lifted the block")

REVISED = VerdictObservation("no", 0.57, "revised: ...", place.PICK_RECHECK)
APPROACH = (45.0, 56.0, 16.8, 0.1, -90.2, -29.4)
HOVER_POSE = (-33.5, 87.7, -38.3, 3.6, -70.1, -30.0)


def _after_the_place(tmp_path: Path, **settings: Any) -> Any:
    ctx = _ctx(tmp_path, LIFTED, **settings)
    st = ctx.state
    st.pick_verdict, st.block_lost, st.pick_attempts = REVISED, True, 1
    st.place_key, st.place_approach, st.place_pose = "place_x-200_z180", APPROACH, APPROACH
    st.place_path = [APPROACH]
    st.place_verdict = VerdictObservation("no", 0.99, "block on the mat", "geometric")
    return ctx


def test_a_revised_pick_with_attempts_left_is_tried_again(tmp_path: Path) -> None:
    ctx = _after_the_place(tmp_path)
    assert release._retry_never_lifted(ctx) is engine.Outcome.RETRY
    (d,) = _decisions(ctx, "pick_retry")
    assert d == {"attempt": 1, "of": 3, "why": "never lifted"}
    assert TRANSITIONS[(Stage.RETREAT_AND_JUDGE, engine.Outcome.RETRY)] is Stage.RETRY_PICK
    # no attempt left, or a pick the judge said no to itself: the trial ends
    ctx.state.pick_attempts = 3
    assert release._retry_never_lifted(ctx) is engine.Outcome.OK
    assert _decisions(ctx, "pick_retry")[-1]["why"] == "never lifted; no attempt left"
    judged_no = _after_the_place(tmp_path)
    judged_no.state.pick_verdict = VerdictObservation(
        "no", 0.9, "held at the tip in 0/3", "geometric"
    )
    assert release._retry_never_lifted(judged_no) is engine.Outcome.OK


@pytest.mark.anyio
async def test_the_retry_goes_back_over_the_box_opens_goes_home_and_forgets_the_place(
    tmp_path: Path,
) -> None:
    ctx = _after_the_place(tmp_path)
    st = ctx.state
    st.pick_pose, st.pick_approach = (-30.0, 87.7, -28.3, 3.6, -55.1, -30.0), HOVER_POSE
    done: list[tuple[str, Any]] = []

    async def move(target: Any, tol: float, note: str, **kw: Any) -> None:
        done.append(("move", note))
        ctx.last_commanded = tuple(target)

    async def gripper(action: str, note: str) -> None:
        done.append(("gripper", action))

    ctx.safe.move = move  # type: ignore[method-assign]
    ctx.safe.gripper = gripper  # type: ignore[method-assign]
    assert await pick.retry_pick(ctx) is engine.Outcome.OK
    # never lowered onto the mat (the block lies there, the jaws are empty): over the box,
    # open, HOME
    assert done == [
        ("move", "retry: back over the box"),
        ("gripper", "open"),
        ("move", "home before re-detect"),
    ]
    assert not st.block_lost and not st.holding
    assert st.place_approach is None and st.place_pose is None and st.place_path == []
    assert st.place_verdict is None and st.place_key == "" and st.lifted_block_xz is None
    assert st.pick_verdict is REVISED and st.pick_attempts == 1  # the attempt still counts


@pytest.mark.anyio
async def test_a_revised_pick_teaches_the_height_memory_nothing(tmp_path: Path) -> None:
    """A block lost on the box raises its place cell (it hung too low); one that never left
    the mat says nothing about the height, and the cell stays."""
    from mecharm.runtime.memories import HeightMemory

    for lost_at, raised in ((LIFTED, False), ((-0.19, 0.17), True)):
        s = RuntimeSettings(data_root=tmp_path)
        ctx = offline_context(s, BOX, heights=HeightMemory(tmp_path / f"h{raised}.json"))
        ctx.eyes = MatEyes(lost_at)
        ctx.state.pick_verdict, ctx.state.lifted_block_xz = YES, LIFTED
        ctx.state.place_key = "place_x-200_z180"
        await place._lost(ctx, context.BlockLost("lost", block_xz=(0.176, 0.254)))
        assert bool(_decisions(ctx, "height_update")) is raised


@pytest.mark.anyio
async def test_a_block_lost_on_the_box_raises_the_lower_cells_to_its_cell(tmp_path: Path) -> None:
    """The arm that held the block low over one cell holds it as low over the others: every
    cell below the lost cell's new height is raised to it (counts kept, higher cells
    untouched), and the memory file keeps it."""
    from mecharm.runtime.memories import HeightMemory

    path = tmp_path / "heights.json"
    heights = HeightMemory(path)
    heights.entries.update({
        "place_x-200_z180": {"dee_y_mm": 30.0, "n": 4},  # the cell that loses the block
        "place_x-180_z180": {"dee_y_mm": 30.0, "n": 2},
        "place_x-220_z160": {"dee_y_mm": 15.0, "n": 1},
        "place_x-160_z200": {"dee_y_mm": 60.0, "n": 7},
    })  # fmt: skip
    s = RuntimeSettings(data_root=tmp_path)
    ctx = offline_context(s, BOX, heights=heights)
    ctx.eyes = MatEyes((-0.19, 0.17))  # lost on the box: not where it lay after the lift
    ctx.state.pick_verdict, ctx.state.lifted_block_xz = YES, LIFTED
    ctx.state.place_key = "place_x-200_z180"
    await place._lost(ctx, context.BlockLost("lost", block_xz=(0.176, 0.254)))
    (up,) = _decisions(ctx, "height_update")
    assert up["old_mm"] == 30.0 and up["dee_y_mm"] == 45.0
    got = {k: (e["dee_y_mm"], e["n"]) for k, e in heights.entries.items()}
    assert got == {"place_x-200_z180": (45.0, 5), "place_x-180_z180": (45.0, 2),
                   "place_x-220_z160": (45.0, 1), "place_x-160_z200": (60.0, 7)}  # fmt: skip
    (f,) = _decisions(ctx, "height_floor")
    assert f["floor_mm"] == 45.0 and set(f["raised"]) == {"place_x-180_z180", "place_x-220_z160"}
    heights.save()
    again = HeightMemory(path)
    assert {k: e["dee_y_mm"] for k, e in again.entries.items()} == {k: v[0] for k, v in got.items()}


def test_the_floor_never_lowers_a_cell_and_stays_in_the_memory_s_bounds(tmp_path: Path) -> None:
    from mecharm.runtime.memories import HEIGHT_LIMIT_MM, HeightMemory

    h = HeightMemory(tmp_path / "h.json")
    h.entries.update({"a": {"dee_y_mm": 10.0, "n": 1}, "b": {"dee_y_mm": 50.0, "n": 3}})
    assert h.raise_floor(20.0) == {"a": (10.0, 20.0)}
    assert h.entries["b"]["dee_y_mm"] == 50.0 and h.entries["a"]["n"] == 1
    h.raise_floor(10_000.0)
    assert all(e["dee_y_mm"] == HEIGHT_LIMIT_MM[1] for e in h.entries.values())


class JudgeEyes:
    """The place judge says "no"; the jaws' look finds a red block at ``at`` (None: none)."""

    def __init__(self, at: tuple[float, float] | None) -> None:
        self.at = at

    async def judge_place(self, side_frame: str | None, tag: str) -> VerdictObservation:
        return VerdictObservation("no", 0.99, "block not inside the box's footprint", "geometric")

    async def locate_block(
        self, lift_m: float, near_xz: tuple[float, float], tag: str
    ) -> tuple[float, float] | None:
        return None if self.at is None else (near_xz[0] + self.at[0], near_xz[1] + self.at[1])


@pytest.mark.anyio
@pytest.mark.parametrize("seen", [True, False])
async def test_a_block_judged_lost_but_seen_in_the_jaws_is_not_carried_home(
    tmp_path: Path, seen: bool
) -> None:
    """harsh seeds 10434 and 10532: the held-block watch called a block pressed against the
    box lost (it lagged the tip); the place judge found no block in the box, and the trial
    went HOME with it in the jaws. Now the jaws are looked at: a block seen at the tip is held
    after all, and the trial ends as a refused release does (back over the box, then the exit
    path puts it back on the mat); a block not seen there keeps the old account."""
    ctx = _after_the_place(tmp_path)
    st = ctx.state
    st.pick_verdict = YES  # judged yes at the lift and never revised
    st.pick_ee_y, st.lifted_at = 0.03, HOVER_POSE
    st.place_path = [APPROACH, APPROACH]
    ctx.eyes = JudgeEyes((0.004, -0.006) if seen else None)
    done: list[str] = []

    async def move(target: Any, tol: float, note: str, **kw: Any) -> None:
        done.append(note)
        ctx.last_commanded = tuple(target)

    async def retrace(points: Any, tol: float, note: str, **kw: Any) -> None:
        done.append(note)
        ctx.last_commanded = tuple(points[-1])

    async def at_rest(note: str) -> None:
        return None

    ctx.safe.move = move  # type: ignore[method-assign]
    ctx.safe.retrace = retrace  # type: ignore[method-assign]
    ctx.safe.at_rest = at_rest  # type: ignore[method-assign]
    if not seen:
        assert await release.retreat_and_judge(ctx) is engine.Outcome.OK
        assert st.block_lost and not st.holding and _decisions(ctx, "lost_block_held") == []
        assert done == ["retreat up", "swept retreat"]
        return
    with pytest.raises(engine.StageFailed, match="still in the gripper"):
        await release.retreat_and_judge(ctx)
    assert done == ["retreat up", "swept retreat", "held after all: back over the box"]
    assert st.holding and not st.block_lost and st.hovering
    assert "still in the gripper" in st.release_refused  # the exit path puts it back
    (check,) = _decisions(ctx, "held_block_check")
    assert check["seen"] is True
