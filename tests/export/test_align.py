"""The state/action/image definitions on hand-made timelines (docs/lerobot.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mecharm.common.framegaps import nearest_frames
from mecharm.recorder.events import RecordingMeta
from mecharm.tools.export.align import align_recording
from mecharm.tools.export.recording import Recording, RecordingError, parse_gripper


def _rec(
    frame_ts: list[float],
    measured: list[tuple[float, float]],
    commanded: list[tuple[float, float]] = (),
    gripper: list[tuple[float, float]] = (),
) -> Recording:  # type: ignore[assignment]
    def arr(rows: list[tuple[float, float]], width: int) -> tuple[np.ndarray, np.ndarray]:
        if not rows:
            return np.zeros(0), np.zeros((0, width))
        a = np.asarray(rows, dtype=float)
        return a[:, 0], np.repeat(a[:, 1:2], width, axis=1)

    m_ts, m = arr(measured, 6)
    c_ts, c = arr(list(commanded), 6)
    g_ts, g = arr(list(gripper), 1)
    meta = RecordingMeta(run_stem="r", started_ts=0, ended_ts=1, elapsed_sec=1, frames_captured=len(frame_ts), frames_written=len(frame_ts),
                         effective_fps=25, container_fps=30, width=16, height=16, codec="h264", status="ok", recording_path="x")  # fmt: skip
    return Recording(
        "r",
        Path("."),
        meta,
        np.asarray(frame_ts, float),
        m_ts,
        m,
        c_ts,
        c,
        g_ts,
        g[:, 0] if len(g) else g.reshape(0),
        16,
        16,
    )


def test_rows_at_constant_rate_from_first_frame() -> None:
    ep = align_recording(_rec([100.0, 100.04, 100.13, 100.31], [(100.0, 1.0)]), 10)
    assert len(ep) == 4  # rows at 0, .1, .2, .3 (the last frame is at .31)
    np.testing.assert_array_equal(ep.timestamps, [0.0, 0.1, 0.2, 0.3])
    # nearest frame by capture time: .0->0, .1->2 (.13), .2->2 (.13 vs .31), .3->3
    np.testing.assert_array_equal(ep.source_frames, [0, 2, 2, 3])


def test_state_interpolates_during_moves_and_holds_at_rest() -> None:
    frames = [100.0 + 0.04 * i for i in range(40)]
    measured = [(100.0, 0.0), (100.2, 10.0), (101.0, 50.0)]  # 0.8 s gap: arm at rest
    ep = align_recording(_rec(frames, measured), 10, max_interp_gap_s=0.25)
    j0 = ep.state[:, 0]
    assert j0[0] == 0.0 and j0[1] == pytest.approx(5.0)  # interpolated at 0.1
    assert j0[2] == 10.0 and j0[5] == 10.0 and j0[9] == 10.0  # held across the long gap


def test_action_is_the_target_in_force_and_the_pose_before_any_command() -> None:
    frames = [100.0 + 0.04 * i for i in range(30)]
    ep = align_recording(
        _rec(frames, [(100.0, 3.0)], commanded=[(100.25, 40.0), (100.75, -5.0)]), 10
    )
    np.testing.assert_allclose(ep.action[:, 0], [3, 3, 3, 40, 40, 40, 40, 40, -5, -5, -5, -5])
    assert ep.state.dtype == np.float32 and ep.action.shape == (12, 7)


def test_measured_action_is_the_next_rows_state_and_the_gripper_still_the_command() -> None:
    """``action="measured"``: the joints one row later (the last row holds its own), the
    commanded targets ignored; the gripper as commanded, at the command."""
    frames = [100.0 + 0.04 * i for i in range(30)]
    rec = _rec(
        frames,
        [(100.0, 0.0), (100.2, 10.0), (100.4, 20.0), (101.2, 20.0)],
        commanded=[(100.05, 40.0)],
        gripper=[(100.0, 100.0), (100.55, 20.0)],
    )
    ep = align_recording(rec, 10, action="measured")
    np.testing.assert_allclose(ep.action[:-1, :6], ep.state[1:, :6])
    np.testing.assert_allclose(ep.action[-1, :6], ep.state[-1, :6])
    np.testing.assert_allclose(ep.action[:5, 0], [5, 10, 15, 20, 20])
    assert ep.action[5, 6] == 100.0 and ep.action[6, 6] == 20.0
    command = align_recording(rec, 10)
    np.testing.assert_array_equal(ep.state, command.state)  # only the action differs
    assert command.action[1, 0] == 40.0


def test_gripper_action_at_command_state_after_settle() -> None:
    frames = [100.0 + 0.05 * i for i in range(80)]
    ep = align_recording(
        _rec(frames, [(100.0, 0.0)], gripper=[(100.0, 100.0), (100.5, 20.0)]),
        10,
        gripper_settle_s=2.0,
    )
    g_act, g_obs = ep.action[:, 6], ep.state[:, 6]
    assert g_act[4] == 100.0 and g_act[5] == 20.0
    assert g_obs[24] == 100.0 and g_obs[25] == 20.0


def test_camera_stall_refuses() -> None:
    with pytest.raises(RecordingError, match="from the nearest frame"):
        align_recording(_rec([100.0, 100.04, 101.5], [(100.0, 0.0)]), 10, max_frame_offset_s=0.5)


@given(st.lists(st.floats(0.001, 0.2), min_size=2, max_size=60), st.floats(-1.0, 10.0))
@settings(max_examples=200, deadline=None)
def test_nearest_frame_is_nearest(gaps: list[float], t: float) -> None:
    ts = np.concatenate([[0.0], np.cumsum(gaps)])
    got = nearest_frames(ts, np.array([t]))[0]
    assert abs(ts[got] - t) == pytest.approx(np.min(np.abs(ts - t)), abs=1e-12)


def test_parse_gripper_takes_the_value_sent_only() -> None:
    assert (
        parse_gripper("100") == 100.0
        and parse_gripper("20") == 20.0
        and parse_gripper("35.5") == 35.5
    )
    for bad in ("half", "nan", "150", "-1"):
        with pytest.raises(ValueError, match="gripper_state"):
            parse_gripper(bad)
    with pytest.raises(ValueError, match="re-record"):  # words were never the value sent
        parse_gripper("close")
