"""`mecharm view`: a trial's Rerun recording, read back with Rerun's own reader.

A real demo trial (simulated rig, recorder, side video; the suite's shared demo root,
tests/conftest.py) is built into a .rrd; ``rerun.chunk.RrdReader`` reads it back and the entity counts are
checked against the trial's own files. The first-format and corpus traces (dry runs,
no video) must build too; bad input exits 2 with one line; follow mode streams lines
appended to a growing trace into a file until SIGINT.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from mecharm.common.layout import (
    META,
    RECORDING,
    RUNLOG_SUFFIX,
    TRACE_SUFFIX,
    DataRoot,
    RecordingFiles,
)
from mecharm.common.rerun_viewer import NOT_INSTALLED, viewer_executable, viewer_url_problem
from mecharm.runtime.records.trace import read_trace
from mecharm.tools.cli import main as mecharm_main
from mecharm.tools.replay.tracefile import TraceFormatError, read_recorded
from mecharm.tools.view.cli import EXIT_BAD_INPUT, EXIT_OK

REPO = Path(__file__).resolve().parents[2]
REPLAY = REPO / "tests" / "replay"
LEGACY = sorted((REPLAY / "legacy_v1").glob(f"*{TRACE_SUFFIX}"))
CORPUS = sorted((REPLAY / "corpus").glob(f"*{TRACE_SUFFIX}"))


def build(*a: Any, **kw: Any) -> tuple[int, str]:
    """``mecharm.tools.view.build.build``, imported when a test builds (it imports rerun)."""
    from mecharm.tools.view.build import build as _build

    return _build(*a, **kw)


def _rrd_reader(path: Path) -> Any:
    """rerun's reader of a .rrd file; rerun is imported here, not when the suite collects this
    module (0.34 s in each of its five workers)."""
    import rerun.chunk as rrc

    return rrc.RrdReader(path)


def read_rrd(path: Path) -> tuple[Counter[str], dict[str, list[str]]]:
    """(temporal rows per entity, TextLog texts per entity) of a .rrd, via RrdReader.

    ``rows`` also counts ``entity:Archetype:field`` keys: the rows where that field is set."""
    rows: Counter[str] = Counter()
    texts: dict[str, list[str]] = {}
    for chunk in _rrd_reader(path).stream().to_chunks():
        if chunk.is_static:
            continue
        rows[chunk.entity_path] += chunk.num_rows
        batch = chunk.to_record_batch()
        for name in batch.schema.names:
            if ":" in name:
                col = batch.column(name)
                rows[f"{chunk.entity_path}:{name}"] += len(col) - col.null_count
        if "TextLog:text" in batch.schema.names:
            col = batch.column("TextLog:text").to_pylist()
            texts.setdefault(chunk.entity_path, []).extend(str(v[0]) for v in col if v)
    return rows, texts


def entity_times(path: Path, entity: str) -> list[int]:
    """The ``time`` index (ns) of every temporal row of one entity."""
    out: list[int] = []
    for chunk in _rrd_reader(path).stream().to_chunks():
        if chunk.entity_path == entity and not chunk.is_static:
            out += chunk.to_record_batch().column("time").cast(pa.int64()).to_pylist()
    return sorted(out)


def series_shapes(path: Path) -> dict[str, str]:
    """Each time series' interpolation (its static ``SeriesLines`` style) in a .rrd."""
    import rerun as rr

    names = {m.value: m.name for m in rr.components.InterpolationMode}
    values = static_values(path, ("SeriesLines:interpolation_mode",))
    return {entity: names[int(str(v))] for (entity, _col), v in values.items()}


def static_values(path: Path, columns: tuple[str, ...]) -> dict[tuple[str, str], object]:
    """{(entity, column): its static value} of a .rrd, for the named columns."""
    out: dict[tuple[str, str], object] = {}
    for chunk in _rrd_reader(path).stream().to_chunks():
        if chunk.is_static:
            batch = chunk.to_record_batch()
            for col in columns:
                if col in batch.schema.names:
                    for value in batch.column(col).to_pylist():
                        if value:
                            out[(chunk.entity_path, col)] = value[0]
    return out


def run_view(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mecharm.tools.view", *args],
        capture_output=True, text=True, cwd=REPO, timeout=timeout, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def demo_run_dir(demo_root: Path) -> Path:
    """The first trial of the suite's shared demo root (tests/conftest.py)."""
    return sorted(p for p in DataRoot(demo_root).run_folders.iterdir() if p.is_dir())[0]


def _held_block(path: Path) -> list[tuple[int, list[float]]]:
    """(time ns, centre) of every ``block (held)`` row of ``/world/block``."""
    out: list[tuple[int, list[float]]] = []
    for chunk in _rrd_reader(path).stream().to_chunks():
        if chunk.entity_path != "/world/block" or chunk.is_static:
            continue
        b = chunk.to_record_batch()
        times = b.column("time").cast(pa.int64()).to_pylist()
        for t, c, lab in zip(times, b.column("Boxes3D:centers").to_pylist(),
                             b.column("Boxes3D:labels").to_pylist(), strict=True):  # fmt: skip
            if lab == ["block (held)"]:
                out.append((t, c[0]))
    return sorted(out)


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow
def test_the_demo_leaves_a_rerun_file_in_every_run_folder_that_rerun_reads(
    demo_root: Path,
) -> None:
    # built by the runtime after each trial (mecharm/runtime/viewjobs.py), as `make run` does
    layout = DataRoot(demo_root)
    runs = sorted(p for p in layout.run_folders.iterdir() if p.is_dir())
    assert runs
    for run in runs:
        rrd = layout.rerun(run.name)
        assert rrd.is_file(), sorted(q.name for q in run.iterdir())
        rows, texts = read_rrd(rrd)
        frames = _csv_rows(RecordingFiles(run / RECORDING).frame_log)
        assert rows["/camera/side"] == len(frames) > 0  # the side video, frame by frame
        assert rows["/camera/top"] == len(list(run.glob("*.jpg"))) > 0
        for entity in ("/joints/j0/measured", "/joints/j0/commanded", "/world/arm", "/stage"):
            assert rows[entity] > 0, (entity, sorted(rows))
        assert texts["/events/verdicts"] and texts["/events/guards"]


@pytest.mark.slow
def test_demo_trial_recording_has_every_entity(demo_run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "trial.rrd"
    proc = run_view(str(demo_run_dir), "--save", str(out))
    assert proc.returncode == EXIT_OK, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"wrote {out}" in proc.stdout
    rows, texts = read_rrd(out)
    assert _rrd_reader(out).blueprints()  # the default layout travels with the file

    rec = RecordingFiles(demo_run_dir / RECORDING)
    states = _csv_rows(rec.states)
    frames = _csv_rows(rec.frame_log)
    measured = sum(1 for r in states if r["event_type"] == "measured")
    commanded = sum(1 for r in states if r["event_type"] == "commanded")
    images = sorted(demo_run_dir.glob("*.jpg"))
    assert measured > 20 and frames and images
    for i in range(6):
        # the trace's readings are the ones the recorder wrote as states rows
        assert abs(rows[f"/joints/j{i}/measured"] - measured) <= 2, (i, rows, measured)
        # one point per command (the series style draws it as a step)
        assert rows[f"/joints/j{i}/commanded"] == commanded
    assert rows["/world/arm"] == rows["/joints/j0/measured"]
    assert rows["/camera/side"] == len(frames)  # one frame reference per frame_log row
    assert rows["/camera/top"] == len(images)
    assert rows["/camera/top/markers"] == rows["/camera/top/mat_grid"] == 1  # fixed camera
    # drawn with the first image, so the viewer shows it on every image
    assert entity_times(out, "/camera/top/mat_grid") == entity_times(out, "/camera/top")[:1]
    for overlay in ("block", "box", "tip", "servo_error"):  # drawn or cleared at each image
        assert rows[f"/camera/top/{overlay}"] == len(images), overlay
    trace_text = next(demo_run_dir.glob(f"*{TRACE_SUFFIX}")).read_text(encoding="utf-8")
    trace = [json.loads(x) for x in trace_text.splitlines()]
    tips = sum(1 for e in trace if e.get("kind") == "tip" and e["value"].get("ok"))
    assert rows["/camera/top/tip:Points2D:positions"] == tips > 0
    assert rows["/camera/top/servo_error:Arrows2D:vectors"] >= tips
    assert rows["/camera/top/block:Points2D:positions"] == len(images)
    assert rows["/gripper/commanded"] >= 2
    assert rows["/world/box"] == 1
    # as detected, then in the jaws at every reading from the grasp to the release, then
    # where the jaws let it go
    held = _held_block(out)
    assert len(held) > 20 and rows["/world/block"] == 1 + len(held) + 1
    stages = "\n".join(texts["/events/stages"])
    for stage in ("open_gripper_home", "detect", "approach_pick", "descend_pick", "grasp"):
        assert f"▶ {stage}" in stages and f"■ {stage} ok" in stages
    assert "result: " in stages
    runlog = json.loads(next(demo_run_dir.glob(f"*{RUNLOG_SUFFIX}")).read_text())
    spans = re.findall(r"^■ (\w+) \w+ in ([\d.]+) s", stages, flags=re.M)
    assert [name for name, _s in spans] == [st["stage"] for st in runlog["stages"]]
    for (name, took), st in zip(spans, runlog["stages"], strict=True):
        # transition to transition vs the runtime's own stage timer: equal but for the
        # bookkeeping between two stages (a loaded box stretches that, not the stage)
        assert float(took) == pytest.approx(st["duration_s"], abs=0.3), name
    assert any(t.startswith("lookup:") for t in texts["/events/lookups"])
    assert any(t.startswith("guard:") for t in texts["/events/guards"])
    assert any(t.startswith("pick_verdict:") for t in texts["/events/verdicts"])


@pytest.mark.slow
def test_the_block_rides_in_the_jaws_and_commands_are_steps(
    demo_run_dir: Path, tmp_path: Path
) -> None:
    """Between the grasp the pick judge said yes to and the release, the 3D block is at
    the tool tip of each reading (the FK), not at its mat position; each command and
    gripper value holds until the next (their series are drawn as steps by the viewer)."""
    from mecharm.common.kinematics import fk_tip

    out = tmp_path / "trial.rrd"
    assert run_view(str(demo_run_dir), "--save", str(out)).returncode == EXIT_OK
    trace = [json.loads(x) for x in next(demo_run_dir.glob(f"*{TRACE_SUFFIX}")).read_text().splitlines()]  # fmt: skip
    grips = [(e["ts"], e["value"]["value"]) for e in trace
             if e.get("kind") == "gripper" and e["event"] == "decision"]  # fmt: skip
    close = next(t for t, v in grips if v < 60)
    release = next(t for t, v in grips if t > close and v >= 60)
    readings = {round(e["ts"] * 1e9): e["value"]["angles"] for e in trace
                if e.get("kind") == "angles" and e["value"].get("angles")}  # fmt: skip
    held = _held_block(out)
    assert held and all(close * 1e9 - 1e3 <= t <= release * 1e9 + 1e3 for t, _c in held)
    matched = 0
    for t, centre in held:
        q = readings.get(t)
        if q is not None:
            tip = fk_tip(q)
            assert centre[0] == pytest.approx(tip[0], abs=1e-4)
            assert centre[2] == pytest.approx(tip[2], abs=1e-4)
            assert centre[1] < tip[1]  # it hangs below the tip
            matched += 1
    assert matched > 20
    # it moved with the arm: from over the block's place to over the box
    assert math.dist(held[0][1], held[-1][1]) > 0.2
    # commands and the gripper drawn as steps, measured joints as lines (the series' style)
    shapes = series_shapes(out)
    for i in range(6):
        assert shapes[f"/joints/j{i}/commanded"] == "StepAfter", shapes
        assert shapes[f"/joints/j{i}/measured"] == "Linear", shapes
    assert shapes["/gripper/commanded"] == "StepAfter", shapes
    # the 3D view in a right-handed world (the viewer refuses a left-handed one): each entity
    # in the rig's frame, mirrored in z
    statics = static_values(out, ("ViewCoordinates:xyz", "Transform3D:scale"))
    assert statics[("/world", "ViewCoordinates:xyz")] == [3, 1, 6]  # right, up, back
    for name in ("mat", "arm", "arm_target", "block", "box"):
        assert statics[(f"/world/{name}", "Transform3D:scale")] == [1.0, 1.0, -1.0], name


@pytest.mark.slow
def test_side_frames_give_the_side_video_as_images_a_viewer_without_ffmpeg_shows(
    demo_run_dir: Path, tmp_path: Path
) -> None:
    """``--side-frames``: the side video decoded here (PyAV) and logged as JPEG images, ten a
    second at their frames' capture times, instead of the H.264 asset."""
    from mecharm.tools.view.sidevideo import SIDE_IMAGE_FPS

    out = tmp_path / "frames.rrd"
    proc = run_view(str(demo_run_dir), "--save", str(out), "--side-frames")
    assert proc.returncode == EXIT_OK, proc.stderr
    rows, _texts = read_rrd(out)
    assert rows["/camera/side:EncodedImage:blob"] > 0
    assert not rows.get("/camera/side:VideoFrameReference:timestamp")
    frames = _csv_rows(RecordingFiles(demo_run_dir / RECORDING).frame_log)
    times = [float(r["capture_ts"]) for r in frames]
    # ten a second while frames came: a loaded machine's recording has gaps (3.4 s of 30.6 once,
    # beside two CPU burners), and no image is made where there is no frame
    step = 1.0 / SIDE_IMAGE_FPS
    gaps = sum(b - a - step for a, b in itertools.pairwise(times) if b - a > step)
    covered = times[-1] - times[0] - gaps
    images = rows["/camera/side:EncodedImage:blob"]
    assert abs(images - covered * SIDE_IMAGE_FPS) <= 0.1 * covered * SIDE_IMAGE_FPS + 2, (
        images,
        covered,
        gaps,
    )
    assert f"{rows['/camera/side:EncodedImage:blob']} side images" in proc.stdout


@pytest.mark.slow
def test_mecharm_view_saves_through_the_tools_cli(
    demo_run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = next(demo_run_dir.glob(f"*{TRACE_SUFFIX}"))
    out = tmp_path / "by_trace.rrd"
    assert mecharm_main(["view", str(trace), "--save", str(out)]) == EXIT_OK
    assert "joint readings" in capsys.readouterr().out
    rows, _ = read_rrd(out)
    assert rows["/camera/side"] > 0 and rows["/joints/j0/measured"] > 0


@pytest.mark.slow
def test_wait_builds_without_video_when_the_recording_never_finishes(
    demo_run_dir: Path, tmp_path: Path
) -> None:
    copy = tmp_path / demo_run_dir.name
    shutil.copytree(demo_run_dir, copy)
    RecordingFiles(copy / RECORDING).meta.unlink()
    out = tmp_path / "no_meta.rrd"
    code, text = build(copy, out, wait_s=0.3)
    assert code == EXIT_OK
    assert f"waited 0.3 s for {META}; built without the side video" in text
    rows, texts = read_rrd(out)
    assert "/camera/side" not in rows
    assert rows["/joints/j0/measured"] > 0 and rows["/camera/top"] > 0
    assert any("built without the side video" in t for t in texts["/events/notes"])


@pytest.mark.parametrize("trace", LEGACY + CORPUS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_older_and_dry_run_traces_build(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "old.rrd"
    code, text = build(trace, out)
    assert code == EXIT_OK, text
    assert "note: no side recording" in text  # says what was missing
    if trace in LEGACY:
        assert "note: first-format trace" in text
    rows, texts = read_rrd(out)
    angles = sum(
        1 for line in trace.read_text().splitlines() if json.loads(line).get("kind") == "angles"
    )
    assert rows["/joints/j0/measured"] == angles > 0
    assert rows["/joints/j3/commanded"] > 0
    assert "/camera/side" not in rows and "/camera/top" not in rows
    assert any(t.startswith("result: ") for t in texts["/events/stages"])
    assert any("no side recording" in t for t in texts["/events/notes"])
    # the stage span document: one per stage start, transition and the result
    spans = [t for t in texts["/events/stages"] if t[:1] in "▶■" or t.startswith("result: ")]
    assert rows["/stage:TextDocument:text"] == len(spans) > 2


@pytest.fixture
def bad_inputs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """name -> (path, what the message must say)."""
    trace = CORPUS[0]
    stem = trace.name[: -len(TRACE_SUFFIX)]
    runlog = tmp_path / f"{stem}.json"
    runlog.write_text("{}\n")
    shutil.copy(trace, tmp_path / trace.name)
    lines = trace.read_text().splitlines(keepends=True)
    corrupt = tmp_path / "corrupt" / trace.name
    corrupt.parent.mkdir()
    corrupt.write_text("".join(lines[:5]) + '{"seq": 6, "event": \n' + "".join(lines[6:]))
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    return {
        "missing": (tmp_path / "nope", "no such file or folder"),
        "runlog": (runlog, f"is the run log; view takes the trace: {trace.name} beside it"),
        "not_a_trial": (empty_dir, "not a trial folder"),
        "corrupt": (corrupt, f"{corrupt}:6: not JSON ("),
    }  # fmt: skip


@pytest.mark.parametrize("case", ["missing", "runlog", "not_a_trial", "corrupt"])
def test_bad_input_is_one_line_and_exit_2(
    case: str, bad_inputs: dict[str, tuple[Path, str]], tmp_path: Path
) -> None:
    path, message = bad_inputs[case]
    out = tmp_path / "never.rrd"
    proc = run_view(str(path), "--save", str(out))
    assert proc.returncode == EXIT_BAD_INPUT
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert message in proc.stderr
    assert not out.exists()


@pytest.mark.slow
def test_follow_streams_lines_appended_to_a_growing_trace(tmp_path: Path) -> None:
    """Follow a trial whose trace grows, then a second trial; SIGINT; the file holds both."""
    root = DataRoot(tmp_path / "root")
    src = CORPUS[0].read_text().splitlines(keepends=True)
    angles = sum(1 for line in src if json.loads(line).get("kind") == "angles")
    stems = ["run_0001_20261201_100000", "run_0002_20261201_100100"]
    traces = [root.trace(s) for s in stems]
    traces[0].parent.mkdir(parents=True)
    half = len(src) // 2
    traces[0].write_text("".join(src[:half]))
    out = tmp_path / "live.rrd"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mecharm.tools.view", "--follow", str(root.root), "--save", str(out)],
        stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        said = _stderr_lines(proc)
        assert f"following {stems[0]}" in _until(said, f"following {stems[0]}")
        with open(traces[0], "a") as fh:  # the trial goes on: written in pieces, one cut mid-line
            fh.write("".join(src[half:-1]) + src[-1][:10])
            fh.flush()
            time.sleep(0.5)
            fh.write(src[-1][10:])
        assert f"{stems[0]}: " in _until(said, f"{stems[0]}: ")
        traces[1].parent.mkdir(parents=True)
        traces[1].write_text("".join(src))
        assert f"following {stems[1]}" in _until(said, f"following {stems[1]}")
        assert f"{stems[1]}: " in _until(said, f"{stems[1]}: ")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        rest = proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
    assert "Traceback" not in rest and f"{2 * len(src)} trace lines streamed" in rest
    rows, texts = read_rrd(out)
    assert rows["/joints/j0/measured"] == 2 * angles
    results = [t for t in texts["/events/stages"] if t.startswith("result: ")]
    assert len(results) == 2  # the result line was among the appended ones, for both trials
    assert not texts.get("/events/notes")  # the line cut mid-write was read whole


def _stderr_lines(proc: subprocess.Popen[str]) -> Iterator[str]:
    assert proc.stderr is not None
    yield from proc.stderr


def _until(lines: Iterator[str], needle: str) -> str:
    """Read the process's stderr until a line contains ``needle`` (the suite timeout bounds it)."""
    seen = []
    for line in lines:
        seen.append(line)
        if needle in line:
            return line
    raise AssertionError(f"{needle!r} never said; stderr: {''.join(seen)}")


@pytest.mark.slow
def test_no_display_serves_the_web_viewer_instead_of_waiting_for_a_dead_window(
    tmp_path: Path,
) -> None:
    """Without DISPLAY or WAYLAND_DISPLAY the desktop viewer would die and leave the command
    waiting: it says so and serves the recording to a browser on loopback; the page loads;
    SIGTERM ends it with exit 0 and its summary."""
    import socket
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mecharm.tools.view", str(CORPUS[0]), "--web-port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env,
    )  # fmt: skip
    try:
        said = _stderr_lines(proc)
        first = _until(said, "mecharm view:")
        assert "no display (neither DISPLAY nor WAYLAND_DISPLAY is set): serving the web" in first
        line = _until(said, "all of it served")
        url = line.split("open ", 1)[1].split(" ", 1)[0]
        assert url.startswith(f"http://127.0.0.1:{port}/?url=rerun%2Bhttp%3A%2F%2F")
        with urllib.request.urlopen(url, timeout=60) as resp:
            assert resp.status == 200 and b"<html" in resp.read().lower()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        out = proc.stdout.read() if proc.stdout else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for f in (proc.stdout, proc.stderr):
            if f:
                f.close()
    assert f"served at {url} until stopped" in out


def test_save_and_web_together_are_refused(tmp_path: Path) -> None:
    proc = run_view(str(CORPUS[0]), "--web", "--save", str(tmp_path / "t.rrd"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == "mecharm view: give either --save FILE.rrd or --web, not both"
    proc = run_view(str(CORPUS[0]), "--web-port", "70000")
    assert proc.returncode == 2 and "a port is 1-65535, got 70000" in proc.stderr


def test_unwritable_save_path_is_exit_1_and_leaves_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder\n")
    for save, said in (
        (blocker / "t.rrd", "no such folder"),  # as `mecharm report --out`: no folder made
        (tmp_path / "missing" / "t.rrd", "no such folder"),
        (tmp_path, "it is a folder; give a file name"),
    ):
        proc = run_view(str(CORPUS[0]), "--save", str(save))
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr.count("\n") == 1 and said in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and ".tmp" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_negative_wait_is_refused(tmp_path: Path) -> None:
    proc = run_view(str(CORPUS[0]), "--save", str(tmp_path / "t.rrd"), "--wait", "-5")
    assert proc.returncode == 2 and "must be 0 or more seconds" in proc.stderr
    assert not (tmp_path / "t.rrd").exists()


def test_viewer_is_found_beside_python_without_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An unactivated venv: PATH lacks its bin, the viewer is still the one beside python."""
    monkeypatch.setenv("PATH", str(tmp_path))
    exe = viewer_executable()
    assert exe is not None and Path(exe).parent == Path(sys.executable).parent
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert version.returncode == 0 and "rerun" in version.stdout.lower()
    spawned: list[dict[str, object]] = []
    from mecharm.tools.view import build as view_build

    monkeypatch.setattr(view_build.rr, "spawn", lambda **kw: spawned.append(kw))
    code, text = build(CORPUS[0], None)
    assert code == EXIT_OK, text
    assert "sent to the viewer" in text
    assert [kw["executable_path"] for kw in spawned] == [exe]
    monkeypatch.setattr(view_build, "viewer_executable", lambda: None)
    code, text = build(CORPUS[0], None)
    assert code == 1 and "no Rerun viewer (rerun) beside python" in text


_NO_RERUN = "import sys; sys.modules['rerun'] = None; "


@pytest.mark.parametrize(
    "entry",
    [
        "import runpy; sys.argv = ['view', {t!r}]; runpy.run_module('mecharm.tools.view', run_name='__main__')",
        "from mecharm.tools.cli import main; raise SystemExit(main(['view', {t!r}]))",
        "from mecharm.tools.cli import main; raise SystemExit(main(['view', '--follow', {r!r}]))",
    ],
    ids=["python -m", "mecharm view", "mecharm view --follow"],
)
def test_without_rerun_one_line_and_exit_2(entry: str, tmp_path: Path) -> None:
    code = _NO_RERUN + entry.format(t=str(CORPUS[0]), r=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == f"mecharm view: {NOT_INSTALLED}\n"
    assert NOT_INSTALLED == "rerun-sdk is not installed: pip install '.[tools]'"


def test_rerun_available_does_not_import_rerun() -> None:
    code = (
        "import sys; from mecharm.common.rerun_viewer import rerun_available, viewer_executable; "
        "assert rerun_available() and viewer_executable(); assert 'rerun' not in sys.modules; "
        + _NO_RERUN
        + "assert not rerun_available()"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "url",
    [
        "notaurl",
        "http://127.0.0.1:9876/proxy",
        "rerun+http://127.0.0.1:9876",
        "rerun+http://:9876/proxy",
        "rerun+http://127.0.0.1:99999/proxy",
        "rerun+http://127.0.0.1:9876/foo",
        "rerun+http://127.0.0.1:9876/proxy",
        "rerun://10.0.0.2:9876/proxy",
        "rerun+https://viewer.local/proxy/",
    ],
)
def test_viewer_url_check_agrees_with_rerun(url: str) -> None:
    """The runtime checks --display-url with this before its first trial: it must refuse
    exactly what rerun refuses."""
    import rerun as rr

    try:
        rr.GrpcSink(url)
        rerun_ok = True
    except RuntimeError:
        rerun_ok = False
    assert (viewer_url_problem(url) is None) == rerun_ok, viewer_url_problem(url)


def test_bad_connect_url_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = run_view("--follow", str(tmp_path), "--connect", "notaurl")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "--connect 'notaurl' is not a viewer URL" in proc.stderr
    assert "rerun+http://127.0.0.1:9876/proxy" in proc.stderr


def test_follow_refuses_a_folder_inside_the_data_root(tmp_path: Path) -> None:
    root = DataRoot(tmp_path / "root")
    stem = "run_0001_20261201_100000"
    root.run_dir(stem).mkdir(parents=True)
    for inside in (root.runs, root.run_folders, root.run_dir(stem)):
        proc = run_view("--follow", str(inside), "--save", str(tmp_path / "never.rrd"))
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and f"--follow {root.root}" in proc.stderr
    assert not (tmp_path / "never.rrd").exists()


def _cut(trace: Path, dest: Path) -> Path:
    """A copy of ``trace`` whose writer died mid-line (no result line, a half last line)."""
    lines = trace.read_text(encoding="utf-8").splitlines(keepends=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text("".join(lines[:-3]) + lines[-3][:15], encoding="utf-8")
    return dest


def test_view_and_replay_read_and_resolve_a_trial_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One reader (records/trace.py read_lines), one "which file did you mean"
    (replay/tracefile.py find_trace): the same answers, in the tool's own words."""
    trace = CORPUS[0]
    stem = trace.name[: -len(TRACE_SUFFIX)]
    run_dir = tmp_path / stem
    run_dir.mkdir()
    shutil.copy(trace, run_dir / trace.name)
    (run_dir / f"{stem}{RUNLOG_SUFFIX}").write_text("{}\n")
    (run_dir / f"{stem}.rrd").write_bytes(b"RRF2\x00\x01")
    # a run folder is the trial for both
    assert read_recorded(run_dir).path == run_dir / trace.name
    code, _text = build(run_dir, tmp_path / "f.rrd")
    assert code == EXIT_OK
    for other, said in ((f"{stem}{RUNLOG_SUFFIX}", "is the run log"), (f"{stem}.rrd", "is a Rerun recording")):  # fmt: skip
        for tool in ("replay", "view"):
            assert mecharm_main([tool, str(run_dir / other)]) == 2
            err = capsys.readouterr().err
            assert f"{said}" in err and f"{tool} takes the trace: {trace.name} beside it" in err
            assert "not UTF-8" not in err and "not JSON" not in err
    # a trace cut mid-line: the viewer shows what is there, replay refuses it, same line number
    cut = _cut(trace, tmp_path / "cut" / trace.name)
    n = len(trace.read_text().splitlines()) - 2
    code, text = build(cut, tmp_path / "cut.rrd")
    assert code == EXIT_OK and f"trace line {n} is cut short" in text
    with pytest.raises(TraceFormatError, match=f":{n}: last line has no newline"):
        read_recorded(cut)
    assert [e["seq"] for e in read_trace(cut)] == list(range(1, n))


def test_one_bad_value_costs_its_line_not_the_recording(tmp_path: Path) -> None:
    """A time in ms, a time of 1e30, NaN angles: those lines are skipped with a note; the
    rest is built, and the summary counts only what was logged."""
    lines = [json.loads(x) for x in CORPUS[0].read_text().splitlines()]
    angles = [i for i, e in enumerate(lines) if e.get("kind") == "angles"]
    lines[angles[1]]["ts"] *= 1000.0  # ms
    lines[angles[2]]["ts"] = 1e30
    lines[angles[3]]["value"]["angles"][2] = float("nan")
    bad = tmp_path / CORPUS[0].name
    bad.write_text("".join(json.dumps(e) + "\n" for e in lines))  # NaN as JSON's NaN
    out = tmp_path / "bad.rrd"
    code, text = build(bad, out)  # a RerunWarning would fail here (warnings are errors)
    assert code == EXIT_OK, text
    assert "3 trace line(s) skipped" in text and "is not a wall-clock time in seconds" in text
    assert "not 6 finite numbers" in text
    assert f"{len(angles) - 3} joint readings" in text
    rows, texts = read_rrd(out)
    assert rows["/joints/j2/measured"] == len(angles) - 3
    assert any("3 trace line(s) skipped" in t for t in texts["/events/notes"])


def test_follow_skips_a_bad_line_with_a_note(tmp_path: Path) -> None:
    """In follow mode too one bad value costs its line only, and the note says so live."""
    import rerun as rr

    from mecharm.tools.view.follow import follow

    root = DataRoot(tmp_path / "root")
    stem = "run_0001_20261201_100000"
    lines = [json.loads(x) for x in CORPUS[0].read_text().splitlines()]
    angles = [i for i, e in enumerate(lines) if e.get("kind") == "angles"]
    lines[angles[1]]["ts"] = 1e30
    root.trace(stem).parent.mkdir(parents=True)
    root.trace(stem).write_text("".join(json.dumps(e) + "\n" for e in lines))
    out = tmp_path / "live.rrd"
    rec = rr.RecordingStream("mecharm")
    rec.save(out)
    polls: list[int] = []
    said: list[str] = []

    def stopped() -> bool:
        polls.append(1)
        return len(polls) > 2

    assert follow(rec, root, stopped, said.append) == len(lines)
    rec.flush()
    rec.disconnect()
    assert any(s.startswith(f"{stem}: ") for s in said), said  # its result line was read
    rows, texts = read_rrd(out)
    assert rows["/joints/j0/measured"] == len(angles) - 1
    assert any("is not a wall-clock time in seconds" in t for t in texts["/events/notes"])
