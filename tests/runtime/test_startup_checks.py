"""Start-up checks of `mecharm-runtime`: a ledger the trials could not append to stops
the run before any trial and before the daemon is even contacted (docs/runtime.md,
"Start-up checks"); a trial whose row did not reach the ledger stops the service."""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import structlog

from mecharm.common.layout import DataRoot
from mecharm.runtime import service
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.lookup import build_table, load_table
from mecharm.runtime.lookup.build import APPROACH_PLACE_BASE, lattice, rows_from_angles
from mecharm.runtime.lookup.table import file_checksum
from mecharm.runtime.pick_place.records import RECORDS
from mecharm.runtime.recorder_link import RecorderLink
from mecharm.runtime.records.backlog import Backlog
from mecharm.runtime.records.ledger import LedgerError, RecordingInfo, append_row
from mecharm.runtime.trial import TrialSummary
from mecharm.tools.cli import main as mecharm_main


def _row(i: int) -> dict[str, Any]:
    return {
        "run_stem": f"run_{i:04d}_20260101_1200{i:02d}",
        "status": "completed",
        "dry_run": True,
        "recording_status": "none",
    }


def _runtime(
    root: Path, daemon_port: int, fk_dir: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mecharm.runtime.cli",
            "--data-root",
            str(root),
            "--daemon-port",
            str(daemon_port),
            "--trials",
            "1",
            "--no-recorder",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MECHARM_RUNTIME_FK_DATA_DIR": str(fk_dir or root / "no_fk_needed")},
    )


@pytest.fixture
def daemon_listener() -> Any:
    """A listening socket standing where the daemon would be: nobody may connect to it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(4)
        s.setblocking(False)
        yield s


def _nobody_connected(s: socket.socket) -> bool:
    try:
        conn, _ = s.accept()
    except BlockingIOError:
        return True
    conn.close()
    return False


def test_edited_header_stops_the_run_before_any_trial(
    tmp_path: Path, daemon_listener: socket.socket
) -> None:
    layout = DataRoot(tmp_path)
    layout.runs.mkdir()
    header = [c if c != "pick_verdict" else "pick_ok" for c in RECORDS.ledger_columns]
    with open(layout.ledger, "w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerow(header)
    before = layout.ledger.read_bytes()
    r = _runtime(tmp_path, daemon_listener.getsockname()[1])
    assert r.returncode == 4, r.stderr
    assert "Traceback" not in r.stderr
    assert "ledger refused" in r.stderr and "missing pick_verdict" in r.stderr
    assert "extra 'pick_ok'" in r.stderr and "Move it aside" in r.stderr
    assert layout.ledger.read_bytes() == before
    assert not layout.run_folders.exists()  # no trial was started
    assert _nobody_connected(daemon_listener)  # the arm was never reached


def test_older_header_names_the_migrate_command(
    tmp_path: Path, daemon_listener: socket.socket
) -> None:
    layout = DataRoot(tmp_path)
    layout.runs.mkdir()
    layout.ledger.write_text(",".join(RECORDS.ledger_columns[:17]) + "\n")
    r = _runtime(tmp_path, daemon_listener.getsockname()[1])
    assert r.returncode == 4 and "Traceback" not in r.stderr
    assert f"mecharm ledger migrate {layout.ledger}" in r.stderr
    assert _nobody_connected(daemon_listener)


def test_duplicate_run_stems_stop_the_run_naming_them(
    tmp_path: Path, daemon_listener: socket.socket
) -> None:
    layout = DataRoot(tmp_path)
    append_row(layout.ledger, _row(1))
    append_row(layout.ledger, _row(2))
    lines = layout.ledger.read_bytes().splitlines(keepends=True)
    layout.ledger.write_bytes(b"".join([*lines, lines[1]]))
    r = _runtime(tmp_path, daemon_listener.getsockname()[1])
    assert r.returncode == 4 and "Traceback" not in r.stderr
    assert f"{_row(1)['run_stem']} (lines 2, 4)" in r.stderr
    assert "mecharm ledger verify" in r.stderr
    assert not layout.run_folders.exists()
    assert _nobody_connected(daemon_listener)


def test_a_changed_fk_table_is_refused_until_adopted(
    tmp_path: Path, daemon_listener: socket.socket, capsys: pytest.CaptureFixture[str]
) -> None:
    fk_dir = tmp_path / "fkdata"
    path = DataRoot(fk_dir).fk_table
    rows = rows_from_angles(lattice((40.0, *APPROACH_PLACE_BASE), steps=3))
    recorded = build_table(path, rows)
    rows[0, 8] += 1.0  # j5 of row 0: a hand edit
    path.write_text(
        path.read_text().replace(_first_row(path), ",".join(repr(float(v)) for v in rows[0]), 1)
    )
    actual = file_checksum(path)
    root = tmp_path / "root"
    root.mkdir()
    r = _runtime(root, daemon_listener.getsockname()[1], fk_dir)
    assert r.returncode == 5 and "Traceback" not in r.stderr, r.stderr
    assert "FK table refused" in r.stderr and recorded in r.stderr and actual in r.stderr
    assert f"mecharm fk adopt --table {path}" in r.stderr
    assert _nobody_connected(daemon_listener)
    capsys.readouterr()
    saved = structlog.get_config()  # the tool configures logging onto the captured stderr
    try:
        assert mecharm_main(["fk", "adopt", "--table", str(path)]) == 0
    finally:
        structlog.configure(**saved)
    assert json.loads(capsys.readouterr().out)["sha256"] == actual
    assert load_table(path).checksum == actual  # what the runtime loads next


def _first_row(path: Path) -> str:
    return path.read_text().splitlines()[1]


@pytest.mark.anyio
async def test_service_stops_when_a_trials_row_did_not_reach_the_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The append of trial 2 fails (its row is missing): the service stops before trial 3."""
    layout = DataRoot(tmp_path)
    ran: list[int] = []

    @asynccontextmanager
    async def fake_rig(settings: RuntimeSettings, guard: Any) -> AsyncIterator[tuple[Any, None]]:
        yield (
            SimpleNamespace(
                guard=None, backlog=Backlog(), recorder=RecorderLink(None), settings=settings
            ),
            None,
        )

    async def fake_trial(rig: Any, **kw: Any) -> TrialSummary:
        i = len(ran) + 1
        ran.append(i)
        if i != 2:
            append_row(layout.ledger, _row(i))
        return TrialSummary(
            run_stem=str(_row(i)["run_stem"]), status="completed", reason="", dry_run=True,
            duration_s=1.0, task="pick_place",
            outcome={"pick_verdict": "yes", "place_verdict": "yes", "pick_attempts": 1},
            succeeded=True, verdicts="pick yes place yes", moves=0,
            recording=RecordingInfo(),
            run_dir=tmp_path, trace_path=tmp_path / "t",
        )  # fmt: skip

    monkeypatch.setattr(service, "open_rig", fake_rig)
    monkeypatch.setattr(service, "run_trial", fake_trial)
    out = open(os.devnull, "w")  # noqa: SIM115
    try:
        settings = RuntimeSettings(data_root=tmp_path, trials=5)
        with pytest.raises(LedgerError, match=rf"{_row(2)['run_stem']} is not in"):
            await service.run_service(settings, out=out)
    finally:
        out.close()
    assert ran == [1, 2]


@pytest.mark.parametrize("linked", ["folder", "one file"])
def test_memories_symlinked_out_of_the_root_stop_the_run_before_any_trial(
    tmp_path: Path, daemon_listener: socket.socket, linked: str
) -> None:
    """A `memories/` folder (or one memory file) that is a symlink out of the data root: the
    runtime refuses to start (exit 3, naming it) and writes 0 bytes outside the root
    (docs/data-root.md, "Nothing outside the root")."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    layout = DataRoot(root)
    if linked == "folder":
        layout.memories.symlink_to(outside, target_is_directory=True)
    else:
        layout.memories.mkdir()
        layout.correction_memory.symlink_to(outside / "corrections.json")
    r = _runtime(root, daemon_listener.getsockname()[1])
    assert r.returncode == 3, r.stderr
    assert "outside the data root" in r.stderr and "Traceback" not in r.stderr
    assert list(outside.iterdir()) == []
    assert not layout.run_folders.exists()
    assert _nobody_connected(daemon_listener)
