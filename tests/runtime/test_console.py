"""The operator's console on real trials: the real daemon + SimArm and the simulated workcell's
top camera, the session through ``run_service`` as ``mecharm-runtime`` runs it (docs/console.md)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from mecharm.common.layout import DataRoot
from mecharm.common.shutdown import ShutdownSignals
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.console import RuntimeConsole
from mecharm.runtime.records.trace import read_trace
from mecharm.runtime.service import ServiceReport, run_service
from mecharm.runtime.viewjobs import ViewJobs
from mecharm.sim.workcell import Workcell, WorkcellConfig, start_workcell
from mecharm.tools.simrig import start_sim_daemon

from .conftest import SimDaemon, trial_settings

NO_VIEW = "no_such_view_module_for_console_tests"
ANSI = re.compile(r"\x1b\[")


@pytest.fixture
def workcell(sim_daemon: SimDaemon) -> Any:
    wc = start_workcell(
        sim_daemon.arm, "standard", 1, camera_port=0, config=WorkcellConfig(top_fps=8.0)
    )
    yield wc
    wc.close()


def _settings(root: Path, fk: Path, d: SimDaemon, wc: Workcell, **kw: Any) -> RuntimeSettings:
    return trial_settings(
        root, fk, daemon_port=d.port, top_camera=wc.urls["top"],
        **{"trials": 1, "rerun_after_trial": True, **kw},  # the suite's default is off
    )  # fmt: skip


class Hooked(RuntimeConsole):
    """A console that also runs ``at[stage]()`` as that stage starts (a Ctrl-C, a daemon stop)."""

    def __init__(self, out: Any, at: dict[str, Any], **kw: Any) -> None:
        super().__init__(out, **kw)
        self.at = at

    def stage_start(self, stage: str) -> None:
        super().stage_start(stage)
        if stage in self.at:
            self.at.pop(stage)()


def _lines(text: str) -> list[str]:
    return text.splitlines()


def _index(lines: list[str], pred: Any, start: int = 0) -> int:
    return next(i for i in range(start, len(lines)) if pred(lines[i]))


def _state_statement(text: str) -> str:
    lines = _lines(text)
    i = _index(lines, lambda s: s.startswith("ARM STATE after the stop"))
    return "\n".join(lines[i : i + 5])


@pytest.mark.slow
@pytest.mark.anyio
async def test_stage_starts_with_targets_before_their_end_and_one_line_each(
    sim_daemon: SimDaemon, workcell: Workcell, tmp_path: Path, fk_data_dir: Path
) -> None:
    out = io.StringIO()
    report = await run_service(
        _settings(tmp_path, fk_data_dir, sim_daemon, workcell), out=out, view_module=NO_VIEW
    )
    (t,) = report.trials
    assert t.status == "completed", t.reason
    text = out.getvalue()
    assert not ANSI.search(text)  # not a terminal: plain lines, no status line
    lines = _lines(text)
    # every stage: its start line (with an expected duration), then its end line
    for stage in t.stage_times:
        start = _index(lines, lambda s, st=stage: s.startswith(f"  > {st} "))
        end = _index(lines, lambda s, st=stage: re.match(rf"  {st} +ok ", s) is not None, start)
        assert "expect ~" in lines[start] and "(nominal)" in lines[start]
        assert end > start
    # each move's target angles, as decided, between its stage's start and end
    commands = [
        e for e in read_trace(t.trace_path) if e["event"] == "decision" and e["kind"] == "command"
    ]
    for c in commands:
        angles = " ".join(f"{v:.1f}" for v in c["value"]["angles"])
        at = _index(lines, lambda s, c=c, a=angles: s.strip() == f"move {c['value']['note']}: {a}"
                    or s.strip().startswith(f"move {c['value']['note']}: {a}  (target x"))  # fmt: skip
        start = max(i for i in range(at) if lines[i].startswith(f"  > {c['stage']} "))
        end = _index(lines, lambda s, st=c["stage"]: re.match(rf"  {st} +ok ", s) is not None, at)
        assert start < at < end
    pick = next(c for c in commands if c["value"]["note"] == "approach_pick")
    assert any("move approach_pick:" in s and "(target x " in s for s in lines), (
        "the approach's target x,z from its lookup"
    )
    assert pick["stage"] == "approach_pick"
    # one line per event: no structured log lines on the console
    assert "stage_done" not in text and "trial_end" not in text
    # the Rerun builder failed (no such module): one warning line, the trial unchanged
    failed = [s for s in lines if "Rerun file of" in s and "failed" in s]
    assert len(failed) == 1 and t.run_stem in failed[0], failed
    assert (DataRoot(tmp_path).logs / f"view_{t.run_stem}.log").is_file()
    assert report.completed == 1 and report.stopped_by == ""


@pytest.mark.slow
@pytest.mark.anyio
async def test_live_status_on_a_terminal_and_the_builder_argv(
    sim_daemon: SimDaemon,
    workcell: Workcell,
    tmp_path: Path,
    fk_data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a stand-in for the view tool that records how it was started
    mod = tmp_path / "fakeview"
    mod.mkdir()
    (mod / "console_fake_view.py").write_text(
        "import json, os, sys\n"
        "with open(os.environ['CONSOLE_FAKE_VIEW_OUT'], 'a') as f:\n"
        "    f.write(json.dumps({'argv': sys.argv[1:], 'nice': os.nice(0)}) + '\\n')\n"
    )
    seen = tmp_path / "argv.jsonl"
    monkeypatch.setenv("CONSOLE_FAKE_VIEW_OUT", str(seen))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(mod), os.environ.get("PYTHONPATH", "")]))
    root = tmp_path / "root"
    root.mkdir()
    buf = io.StringIO()
    rc = Console(file=buf, force_terminal=True, width=240)
    con = RuntimeConsole(rc, heartbeat=lambda: "ok (probe stand-in)", refresh_per_second=20)
    report = await run_service(
        _settings(root, fk_data_dir, sim_daemon, workcell),
        console=con,
        view_module="console_fake_view",
    )
    (t,) = report.trials
    assert t.status == "completed", t.reason
    text = buf.getvalue()
    assert ANSI.search(text)  # the live status was drawn
    assert "recorder ok (probe stand-in)" in text and "trial 1/1" in text
    assert re.search(r"joints -?\d+\.\d", text) and "gripper closed (20)" in text
    assert "lift_and_judge" in text and "> detect" in text
    (run,) = [json.loads(s) for s in seen.read_text().splitlines()]
    assert run["argv"] == [
        str(t.run_dir),
        "--save",
        str(DataRoot(root).rerun(t.run_stem)),
        "--wait",
        "0",
    ]
    assert run["nice"] >= 10


@pytest.mark.slow
@pytest.mark.anyio
async def test_first_ctrl_c_is_acknowledged_at_once_and_the_trial_completes(
    sim_daemon: SimDaemon, workcell: Workcell, tmp_path: Path, fk_data_dir: Path
) -> None:
    sigs = ShutdownSignals()
    out = io.StringIO()
    con = Hooked(out, {"detect": lambda: sigs.trigger("SIGINT")})
    report = await run_service(
        _settings(tmp_path, fk_data_dir, sim_daemon, workcell, trials=3),
        signals=sigs,
        console=con,
        view_module=NO_VIEW,
    )
    lines = _lines(out.getvalue())
    start = _index(lines, lambda s: s.startswith("  > detect "))
    assert lines[start + 1] == "Ctrl-C: finishing this trial; Ctrl-C again stops the arm now"
    assert [t.status for t in report.trials] == ["completed"] and report.stopped_by == "signal"
    assert any(re.match(r"  return_home +ok", s) for s in lines)
    assert not any(s.startswith("ARM STATE") for s in lines)


@pytest.mark.slow
@pytest.mark.anyio
async def test_forced_stop_holding_the_block_ends_with_the_arms_last_known_state(
    sim_daemon: SimDaemon, workcell: Workcell, tmp_path: Path, fk_data_dir: Path
) -> None:
    sigs = ShutdownSignals()
    out = io.StringIO()

    def twice() -> None:
        sigs.trigger("SIGINT")
        sigs.trigger("SIGINT")

    con = Hooked(out, {"approach_place": twice})
    report = await run_service(
        _settings(tmp_path, fk_data_dir, sim_daemon, workcell, trials=2),
        signals=sigs,
        console=con,
        view_module=NO_VIEW,
    )
    (t,) = report.trials
    assert t.status == "stopped" and t.reason.startswith("forced stop"), t.reason
    text = out.getvalue()
    assert "Ctrl-C again: stopping the arm now" in text
    said = _state_statement(text)
    assert "(forced stop)" in said and "HOLDING THE BLOCK" in said
    assert "take the block out of the gripper by hand" in said
    assert re.search(r"tip x -?\d\.\d{3} y -?\d\.\d{3} z -?\d\.\d{3} m", said)
    assert text.count("ARM STATE after the stop") == 1
    assert report.completed == 0


@pytest.mark.slow
@pytest.mark.anyio
async def test_daemon_stopped_mid_trial_the_loss_is_told_once_then_the_state(
    sim_daemon: SimDaemon, workcell: Workcell, tmp_path: Path, fk_data_dir: Path
) -> None:
    out = io.StringIO()
    tasks: list[asyncio.Task[None]] = []

    def stop_daemon() -> None:
        tasks.append(asyncio.get_running_loop().create_task(sim_daemon.server.stop("test")))

    con = Hooked(out, {"descend_pick": stop_daemon})
    report: ServiceReport = await run_service(
        _settings(tmp_path, fk_data_dir, sim_daemon, workcell), console=con, view_module=NO_VIEW
    )
    await asyncio.gather(*tasks)
    (t,) = report.trials
    assert t.status == "stopped" and "daemon connection lost" in t.reason, t.reason
    text = out.getvalue()
    assert text.count("daemon connection lost") == 1, text  # the stage line; then "reason above"
    assert f"{t.run_stem}: stopped (reason above)" in text
    said = _state_statement(text)
    assert "(daemon lost)" in said and "not holding the block" in said
    assert "check the daemon" in said and "joints " in said


@pytest.mark.slow
def test_cli_exits_9_when_no_trial_completed_and_logs_to_a_file(
    tmp_path: Path, fk_data_dir: Path
) -> None:
    """``mecharm-runtime`` as a process: the daemon killed in the first trial."""
    rig = start_sim_daemon(tmp_path / "simlogs", seed=7, time_scale=20)
    root = tmp_path / "root"
    root.mkdir()
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mecharm.runtime.cli",
                "--trials",
                "1",
                "--data-root",
                str(root),
                "--top-camera",
                rig.top_url,
                "--daemon-port",
                str(rig.daemon_port),
                "--no-recorder",
                "--no-rerun",
                "--sim-control",
                rig.control_url,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "MECHARM_RUNTIME_FK_DATA_DIR": str(fk_data_dir)},
        )
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("  > approach_pick"):
                rig.daemon.kill()
        rc = proc.wait(60)
        assert proc.stderr is not None
        err = proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()
    finally:
        rig.daemon.stop()
    text = "".join(lines)
    assert rc == 9, text + err
    assert "0 completed" in text and "no trial completed (exit 9)" in err
    assert text.count("daemon connection lost") == 1, text
    assert "ARM STATE after the stop (daemon lost)" in text
    (log,) = DataRoot(root).logs.glob("runtime_*.log")
    events = [json.loads(s)["event"] for s in log.read_text().splitlines()]
    assert "stage_done" in events and "trial_end" in events
    assert f"log: {log}" in text


def _fake_module(tmp_path: Path, name: str, body: str, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = tmp_path / "fakemods"
    mod.mkdir(exist_ok=True)
    (mod / f"{name}.py").write_text(body)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(mod), os.environ.get("PYTHONPATH", "")]))


@pytest.mark.anyio
async def test_display_starts_the_follower_with_its_url_and_stops_it_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = tmp_path / "argv.json"
    _fake_module(
        tmp_path,
        "console_fake_follow",
        "import json, sys, time\n"
        f"open({str(seen)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
        "time.sleep(120)\n",
        monkeypatch,
    )
    root = tmp_path / "root"
    root.mkdir()
    said: list[str] = []
    jobs = ViewJobs(root, said.append, module="console_fake_follow")
    jobs.follow("rerun+http://127.0.0.1:9876/proxy")
    assert jobs.follower is not None
    while not seen.exists() and jobs.follower.proc.poll() is None:
        await asyncio.sleep(0.05)
    await jobs.finish(5.0)
    assert json.loads(seen.read_text()) == [
        "--follow", str(root), "--connect", "rerun+http://127.0.0.1:9876/proxy"
    ]  # fmt: skip
    assert jobs.follower.proc.returncode is not None  # stopped with the session
    assert said == []  # stopped by us: no warning
    assert list(DataRoot(root).logs.glob("view_follow_*.log"))


@pytest.mark.anyio
async def test_a_follower_that_fails_gives_one_warning_line(tmp_path: Path) -> None:
    said: list[str] = []
    jobs = ViewJobs(tmp_path, said.append, module=NO_VIEW)
    jobs.follow(None)
    assert jobs.follower is not None
    while jobs.follower.proc.poll() is None:
        await asyncio.sleep(0.05)
    jobs.reap()
    await jobs.finish(5.0)
    assert len(said) == 1 and "live view (--display) failed (exit 1)" in said[0], said


# ---------------------------------------------------------------- log lines: each thing once


def test_the_console_shows_only_log_events_marked_for_the_operator(tmp_path: Path) -> None:
    """No list of names to keep up to date: an event is on the console only when its call
    says so; the rest (errors included: the console tells stops in its own words) stays in
    the session's log file, counted at the end."""
    import structlog

    from mecharm.runtime.cli import session_logging

    out = io.StringIO()
    con = RuntimeConsole(out)
    settings = RuntimeSettings(data_root=tmp_path)
    log = structlog.get_logger(logger_name="test")
    with session_logging(settings, con) as log_path:
        log.error("block_held_at_stop", where="hover")  # the statement says it
        log.warning("release_refused", reason="not above the box")  # the stage line says it
        log.warning("a_new_event_nobody_listed")
        log.info("stage_done", stage="detect")
        log.warning("daemon_envelope_missing", reason="older daemon", operator=True)
    text = out.getvalue()
    lines = text.splitlines()
    assert lines[0] == f"log: {log_path}"
    for quiet in ("block_held_at_stop", "release_refused", "a_new_event_nobody_listed", "{"):
        assert quiet not in text, text
    assert lines[1] == "warning daemon_envelope_missing: reason=older daemon"
    assert lines[2] == f"log: 3 warning(s), 1 error(s) in the log file: {log_path}"
    assert len(lines) == 3
    assert log_path.parent == DataRoot(tmp_path).logs
    events = [json.loads(s)["event"] for s in log_path.read_text().splitlines()]
    assert events == [
        "block_held_at_stop", "release_refused", "a_new_event_nobody_listed", "stage_done",
        "daemon_envelope_missing",
    ]  # fmt: skip


def test_the_demo_uses_the_runtimes_log_file_and_console(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's session (its rig stood in for): no raw log lines on the console, the
    runtime's log file under the root's logs folder."""
    import structlog

    from mecharm.tools import demo

    class _Stub:
        def stop(self) -> None:
            pass

    class _Rig:
        daemon, daemon_port, top_url, side_url = _Stub(), 1, "synthetic", "synthetic"
        control_url = "http://127.0.0.1:1"

    async def session(*_a: Any, **_k: Any) -> ServiceReport:
        log = structlog.get_logger(logger_name="test")
        log.error("block_held_at_stop", where="hover")
        log.warning("release_refused", reason="not above the box")
        return ServiceReport()

    monkeypatch.setattr(demo, "start_sim_daemon", lambda *a, **k: _Rig())
    monkeypatch.setattr(demo, "run_scenes", session)
    root = tmp_path / "demo"
    demo.main(["--no-recorder", "--trials", "1", "--data-root", str(root)])
    out = capsys.readouterr()
    assert "block_held_at_stop" not in out.out + out.err and "{" not in out.out + out.err
    (log_path,) = DataRoot(root).logs.glob("runtime_*.log")
    assert f"log: {log_path}" in out.out
    assert f"log: 1 warning(s), 1 error(s) in the log file: {log_path}" in out.out
    assert "block_held_at_stop" in log_path.read_text()


# ---------------------------------------------------------------- Rerun: checked at the start


def test_no_rerun_sdk_one_line_at_the_start_then_no_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "rerun", None)  # as in a runtime-only install
    said: list[str] = []
    jobs = ViewJobs(tmp_path, said.append, module=NO_VIEW)
    jobs.start(build=True, display=True, url=None)
    assert said == [
        "Rerun files off: rerun-sdk not installed (pip install '.[tools]'), or --no-rerun",
        "live view off (--display): rerun-sdk not installed (pip install '.[tools]')",
    ]
    jobs.build(tmp_path / "run_0001", "run_0001", 0.0)
    jobs.reap()
    assert jobs.builds == [] and jobs.follower is None
    assert not DataRoot(tmp_path).logs.exists()  # nothing was started
    said.clear()
    ViewJobs(tmp_path, said.append).start(build=False, display=False, url=None)
    assert said == []  # --no-rerun: nothing to say


def test_display_without_a_viewer_says_so_before_the_first_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mecharm.runtime.viewjobs import viewer_missing

    bare = tmp_path / "venv" / "bin"
    bare.mkdir(parents=True)
    python = str(bare / "python")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    said: list[str] = []
    jobs = ViewJobs(tmp_path, said.append, module=NO_VIEW, python=python)
    jobs.start(build=False, display=True, url=None)
    assert jobs.follower is None
    assert said == [
        f"live view off (--display): no Rerun viewer (rerun) beside {python} or on PATH "
        "(pip install '.[tools]'); or --display-url URL of a running viewer, or after a "
        "trial `mecharm view RUN --web` (a browser)"
    ]
    # the venv's own viewer, beside its python, although the venv is not activated
    (bare / "rerun").write_text("#!/bin/sh\n")
    (bare / "rerun").chmod(0o755)
    assert viewer_missing(python) is None


def test_display_without_a_screen_says_so_before_the_first_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A viewer installed but no X11 or Wayland: the spawned viewer would die at once, so
    the live view is off with one line saying why and what works instead."""
    bare = tmp_path / "venv" / "bin"
    bare.mkdir(parents=True)
    (bare / "rerun").write_text("#!/bin/sh\n")
    (bare / "rerun").chmod(0o755)
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    said: list[str] = []
    jobs = ViewJobs(tmp_path, said.append, module=NO_VIEW, python=str(bare / "python"))
    jobs.start(build=False, display=True, url=None)
    assert jobs.follower is None
    assert said == [
        "live view off (--display): no display (neither DISPLAY nor WAYLAND_DISPLAY is set); "
        "or --display-url URL of a running viewer, or after a trial `mecharm view RUN --web` "
        "(a browser)"
    ]


@pytest.mark.anyio
async def test_display_url_needs_no_local_viewer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = tmp_path / "argv.json"
    _fake_module(
        tmp_path,
        "console_fake_follow2",
        f"import json, sys\nopen({str(seen)!r}, 'w').write(json.dumps(sys.argv[1:]))\n",
        monkeypatch,
    )
    said: list[str] = []
    jobs = ViewJobs(tmp_path, said.append, module="console_fake_follow2", python=sys.executable)
    monkeypatch.setattr("mecharm.runtime.viewjobs.viewer_missing", lambda *_: "no viewer")
    jobs.start(build=False, display=True, url="rerun+http://127.0.0.1:9876/proxy")
    assert jobs.follower is not None and said == []
    jobs.follower.proc.wait(60)
    assert json.loads(seen.read_text())[-1] == "rerun+http://127.0.0.1:9876/proxy"


@pytest.mark.anyio
async def test_rerun_builders_run_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each builder takes a few hundred MB: fast trials queue them, never two at once."""
    spans = tmp_path / "spans.txt"
    _fake_module(
        tmp_path,
        "console_fake_build",
        "import os, sys, time\n"
        f"with open({str(spans)!r}, 'a') as f: f.write(f'start {{sys.argv[1]}}\\n')\n"
        "time.sleep(0.3)\n"
        f"with open({str(spans)!r}, 'a') as f: f.write(f'end {{sys.argv[1]}}\\n')\n",
        monkeypatch,
    )
    said: list[str] = []
    jobs = ViewJobs(tmp_path, said.append, module="console_fake_build")
    for n in (1, 2, 3):
        jobs.build(tmp_path / f"run_000{n}", f"run_000{n}", 0.0)
        assert len(jobs.outstanding) <= 1
    assert len(jobs.queue) >= 1  # the builds after the first wait their turn
    await jobs.finish(120.0)
    runs = [tmp_path / f"run_000{n}" for n in (1, 2, 3)]
    assert spans.read_text().splitlines() == [f"{w} {r}" for r in runs for w in ("start", "end")]
    assert [s for s in said if "written" in s] == [
        f"Rerun file of run_000{n} written: {DataRoot(tmp_path).rerun(f'run_000{n}')}"
        for n in (1, 2, 3)
    ]


# ---------------------------------------------------------------- the status line


def test_the_status_line_keeps_the_recorder_at_80_columns_in_its_own_colours() -> None:
    buf = io.StringIO()
    rc = Console(file=buf, force_terminal=True, width=80, color_system="standard")
    con = RuntimeConsole(rc, live=False, heartbeat=lambda: "NOT RECORDING (no answer)")
    con.start(3)
    con.trial_start(2)
    con.stage_start("approach_place")
    con.arm.measured = (-12.34, 45.6, -78.9, 0.1, 60.2, -30.0)
    con.arm.gripper = "closed (20)"
    buf.truncate(0)
    buf.seek(0)
    rc.print(con._status())
    out = buf.getvalue()
    plain = ANSI.sub("", re.sub(r"\x1b\[[0-9;]*m", "", out))
    assert plain.count("\n") == 1, plain  # one row, never wrapped
    assert "recorder NOT RECORDING (no answer)" in plain, plain
    # its own colours (black on white), not the terminal's current ones (reverse video)
    assert out.startswith("\x1b[30;47m"), repr(out)


def test_a_pending_stop_leads_the_status_line_until_the_session_ends() -> None:
    buf = io.StringIO()
    rc = Console(file=buf, force_terminal=True, width=60, color_system="standard")
    con = RuntimeConsole(rc, live=False, heartbeat=lambda: "ok")
    con.start(3)
    con.trial_start(1)
    con.stage_start("approach_pick")
    assert "STOP" not in con._status().plain
    con.stop_requested()
    status = con._status().plain
    assert status.startswith("STOP PENDING: this trial ends the session | trial 1/3"), status
    con.force_requested()
    assert con._status().plain.startswith("STOPPING THE ARM | "), con._status().plain


# ---------------------------------------------------------------- dry run; no fresh scene


@pytest.mark.anyio
async def test_a_dry_run_stop_says_the_arm_did_not_move_and_a_lost_scene_server_ends_the_session(
    tmp_path: Path, fk_data_dir: Path
) -> None:
    """A top camera without the mat: the dry trial stops at detect. Then the scene server is
    gone: the session ends with its report (the CLI's summary line), not an exception."""
    from mecharm.runtime.simcontrol import SimControlError

    async def between(i: int) -> int | None:
        if i == 1:
            raise SimControlError("sim control http://127.0.0.1:1 does not answer (refused)")
        return None

    out = io.StringIO()
    settings = trial_settings(
        tmp_path, fk_data_dir, dry_run=True, trials=2, rerun_after_trial=False,
        top_camera="synthetic?fps=30&w=320&h=240",
    )  # fmt: skip
    report = await run_service(settings, out=out, between_trials=between)
    text = out.getvalue()
    (t,) = report.trials
    assert t.status == "stopped", text
    said = _state_statement(text)
    assert "where:    where it was: a dry run sends no motion" in said, said
    assert "at HOME" not in text
    assert report.stopped_by.startswith("no fresh scene: sim control"), report.stopped_by
    assert text.count("ARM STATE after the stop") == 1
    assert "no fresh scene: sim control http://127.0.0.1:1 does not answer" in text


@pytest.mark.anyio
async def test_a_first_start_says_it_builds_the_fk_table_before_it_does(
    sim_daemon: SimDaemon, workcell: Workcell, tmp_path: Path
) -> None:
    """No table yet: one line says the build is under way (seconds here, minutes on a Pi)
    before the console would otherwise be silent for it. The table's folder is made
    unusable (a file where the folder goes), so the build fails at once after the line."""
    fresh = tmp_path / "fresh_fk"
    fresh.mkdir()
    (fresh / "fk").write_text("a file where the table's folder goes\n")
    out = io.StringIO()
    with pytest.raises(OSError):
        await run_service(
            _settings(tmp_path, fresh, sim_daemon, workcell), out=out, view_module=NO_VIEW
        )
    assert (
        f"building the FK table (first start, {DataRoot(fresh).fk_table}): seconds here, "
        "minutes on a Pi ..." in out.getvalue()
    )
