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

from mecharm_common.layout import DataRoot
from mecharm_common.shutdown import ShutdownSignals
from mecharm_runtime.config import RuntimeSettings
from mecharm_runtime.console import RuntimeConsole
from mecharm_runtime.records.trace import read_trace
from mecharm_runtime.service import ServiceReport, run_service
from mecharm_runtime.viewjobs import ViewJobs
from mecharm_sim.workcell import Workcell, WorkcellConfig, start_workcell
from mecharm_tools.simrig import start_sim_daemon

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
        root, fk, daemon_port=d.port, top_camera=wc.urls["top"], **{"trials": 1, **kw}
    )


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


@pytest.mark.asyncio
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
@pytest.mark.asyncio
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
@pytest.mark.asyncio
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
@pytest.mark.asyncio
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
@pytest.mark.asyncio
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
                "mecharm_runtime.cli",
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


@pytest.mark.asyncio
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


@pytest.mark.asyncio
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
