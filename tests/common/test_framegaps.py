"""One rule for a recording's quality (docs/recorder.md, "When a recording is not ok"): the
recorder's ``stalled`` and the exporter's refusal are the same decision on the same frames."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mecharm.common.framegaps import MAX_FRAME_OFFSET_S, ROW_FPS, stall_problem
from mecharm.recorder.events import RecordingMeta
from mecharm.tools.export.align import align_recording
from mecharm.tools.export.config import ExportSettings
from mecharm.tools.export.recording import Recording, RecordingError


def _recording(frame_ts: np.ndarray) -> Recording:
    meta = RecordingMeta(run_stem="r", started_ts=0, ended_ts=1, elapsed_sec=1, frames_captured=len(frame_ts), frames_written=len(frame_ts),
                         effective_fps=25, container_fps=30, width=16, height=16, codec="h264", status="ok", recording_path="x")  # fmt: skip
    none = np.zeros(0)
    return Recording("r", Path("."), meta, frame_ts, np.array([frame_ts[0]]), np.zeros((1, 6)),
                     none, np.zeros((0, 6)), none, none, 16, 16)  # fmt: skip


def _exporter_refuses(frame_ts: np.ndarray) -> bool:
    try:
        align_recording(_recording(frame_ts), ROW_FPS, max_frame_offset_s=MAX_FRAME_OFFSET_S)
    except RecordingError as exc:
        assert "the camera stalled" in str(exc)
        return True
    return False


def test_the_defaults_are_the_exporter_s() -> None:
    s = ExportSettings(progress=False)
    assert (s.fps, s.max_frame_offset_s) == (ROW_FPS, MAX_FRAME_OFFSET_S)


def test_a_steady_camera_is_fine_and_a_stall_is_said_with_where_and_how_long() -> None:
    steady = 1000.0 + np.arange(300) / 25.0
    assert stall_problem(steady) is None
    stalled = np.concatenate([steady[:100], steady[100:] + 1.2])  # 1.24 s without a frame
    problem = stall_problem(stalled)
    assert problem is not None
    assert problem.startswith("camera stalled: 1.24 s without a frame at 4.0 s (a 10 Hz row 0.6")
    assert "limit 0.5 s); 22.7 fps over the trial" in problem
    assert _exporter_refuses(stalled) and not _exporter_refuses(steady)
    assert stall_problem([5.0]) is None and stall_problem([]) is None


@settings(max_examples=300, deadline=None)
@given(
    gaps=st.lists(st.one_of(st.floats(0.01, 0.2), st.floats(0.2, 2.5)), min_size=1, max_size=60),
    start=st.floats(1e9, 2e9),
)
def test_the_recorder_s_rule_is_the_exporter_s_on_any_timeline(
    gaps: list[float], start: float
) -> None:
    ts = start + np.concatenate([[0.0], np.cumsum(gaps)])
    assert (stall_problem(ts) is not None) == _exporter_refuses(ts)
