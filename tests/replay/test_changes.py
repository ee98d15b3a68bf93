"""A changed decision is caught: the diff starts at the first differing decision and names
its stage and fields; a different FK table is refused before anything is compared."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mecharm.common.config import ConfigError
from mecharm.common.kinematics import fk_tip
from mecharm.runtime.config import REMOVED_SETTINGS, RuntimeSettings
from mecharm.runtime.lookup import descent, ensure_table, load_arc, load_table
from mecharm.runtime.lookup.table import write_table
from mecharm.runtime.pick_place import pick
from mecharm.tools.cli import main
from mecharm.tools.replay.runner import ReplayResult, replay, replay_settings
from mecharm.tools.replay.tracefile import read_recorded

from .conftest import ARC_PICK, ARC_PLACE, CORPUS

SUCCESS = CORPUS / "success_seed7.trace.jsonl"


def _replay(path: Path, fk_data_dir: Path, overrides: dict[str, Any] | None = None) -> ReplayResult:
    rec = read_recorded(path)
    settings, notes = replay_settings(rec, overrides)
    table = load_table(ensure_table(fk_data_dir))
    return asyncio.run(replay(rec, settings, table, load_arc(ARC_PICK), load_arc(ARC_PLACE), notes))


def test_place_band_change_names_stage8_and_the_band(
    replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # the place band is the height memory's target and the 30 mm below it: 10 mm instead
    rc = main(["replay", str(SUCCESS), *replay_args, "--set", "place_band_depth_m=0.01"])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert f"{SUCCESS}: different" in out
    first = out.split("first difference ", 1)[1].splitlines()
    assert "stage descend_place, place_band" in first[0]
    assert first[1].strip() == "band:"
    assert "recorded [0.085, 0.115]" in first[2] and "replayed [0.105" in first[3]
    # the commanded place pose changed too: before and after are both shown
    cmd = out.split("stage descend_place, command", 1)[1]
    assert "angles:" in cmd.splitlines()[1]
    assert "recorded [" in cmd and "replayed [" in cmd
    assert "input divergence:" in out  # the recorded arrival readings no longer fit the new pose


def test_pick_lookup_code_change_is_caught(
    fk_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A code change (here: the pick lookup searching a band 20 mm higher) alters the pick pose.

    (5 mm higher, the bounded pick from the hover still chose the same row: only the
    recorded band differed, which is caught too, but this test wants a different pose.)"""
    original = pick.fk_lookup

    def shifted(table: Any, phase: str, xz: Any, lo: float, hi: float, **kw: Any) -> Any:
        if phase == "pick":
            lo, hi = lo + 0.02, hi + 0.02
        return original(table, phase, xz, lo, hi, **kw)

    monkeypatch.setattr(pick, "fk_lookup", shifted)
    monkeypatch.setattr(descent, "fk_lookup", shifted)  # the bounded pick's lookups (hover)
    r = _replay(SUCCESS, fk_data_dir)
    assert not r.identical
    assert r.diff.first is not None
    x, y, fields = r.diff.changed[0]
    assert (x.stage, x.label) == ("descend_pick", "lookup") == (y.stage, y.label)
    paths = {f.path for f in fields}
    assert "band" in paths  # the direct lookup first (in this trace it finds no bounded row)
    commands = [
        (a, b) for a, b, _f in r.diff.changed if a.label == "command" and a.stage == "descend_pick"
    ]
    assert (
        commands
        and commands[0][0].event["value"]["angles"] != commands[0][1].event["value"]["angles"]
    )


def test_unchanged_code_in_process_is_identical(fk_data_dir: Path) -> None:
    r = _replay(SUCCESS, fk_data_dir)
    assert r.identical, r.diff
    assert r.status == "completed" and not r.unused_inputs and not r.skipped_inputs


def test_dist_max_change_aborts_the_replay_at_stage4(
    replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["replay", str(SUCCESS), *replay_args, "--set", "dist_max_m=0.00005"])
    out = capsys.readouterr().out
    assert rc == 1
    head = out.split("first difference ", 1)[1].splitlines()
    assert "stage descend_pick, lookup" in head[0]
    assert "transition descend_pick -> abort" in out


def test_bad_override_is_a_flag_error(
    replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(SUCCESS), *replay_args, "--set", "dist_max_m=-1"]) == 2
    err = capsys.readouterr().err
    assert "dist_max_m" in err and "the trace's constants or --set" in err
    assert main(["replay", str(SUCCESS), *replay_args, "--set", "no_such_knob=1"]) == 2
    assert "no_such_knob: unknown key" in capsys.readouterr().err
    assert main(["replay", str(SUCCESS), *replay_args, "--set", "novalue"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err


def _small_table(path: Path) -> Path:
    rng = np.random.default_rng(1)
    joints = rng.uniform(-40, 40, size=(200, 6))
    rows = np.array([[*fk_tip(j), *j] for j in joints])
    write_table(path, rows)
    return path


def test_other_table_is_refused_with_both_checksums(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = _small_table(tmp_path / "fk_table.csv")
    args = ["--table", str(table), "--arc-pick", str(ARC_PICK), "--arc-place", str(ARC_PLACE)]
    rc = main(["replay", str(SUCCESS), *args])
    err = capsys.readouterr().err
    assert rc == 3
    assert "FK table differs" in err and str(table) in err
    assert read_recorded(SUCCESS).table_checksum[:16] in err
    # asked to compare anyway: the lookups now differ, and the note says why
    rc = main(["replay", str(SUCCESS), *args, "--allow-table-mismatch"])
    out = capsys.readouterr().out
    assert rc == 1
    assert out.startswith("note: FK table differs")
    assert "stage descend_pick, lookup" in out


def test_missing_table_or_arc_cannot_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(
        [
            "replay",
            str(SUCCESS),
            "--table",
            str(tmp_path / "nope.csv"),
            "--arc-pick",
            str(ARC_PICK),
            "--arc-place",
            str(ARC_PLACE),
        ]
    )
    assert rc == 3
    assert "FK table" in capsys.readouterr().err
    rc = main(
        [
            "replay",
            str(SUCCESS),
            "--table",
            str(tmp_path / "nope.csv"),
            "--arc-pick",
            str(tmp_path / "a.json"),
            "--arc-place",
            str(ARC_PLACE),
        ]
    )
    assert rc == 3


def test_replay_opens_no_socket_camera_or_file(
    replay_args: list[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No arm, no camera, no recorder: any network or camera use would raise here."""
    import socket
    import urllib.request

    import cv2

    import mecharm.cameras

    def boom(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("replay must not touch the network or a camera")

    # no connect, no bind, no datagram: no network. (``send`` stays: asyncio wakes its loop
    # through a local socketpair when a worker thread, e.g. the pick planner, finishes)
    for name in ("connect", "connect_ex", "bind", "sendto"):
        monkeypatch.setattr(socket.socket, name, boom)
    monkeypatch.setattr(socket, "create_connection", boom)
    monkeypatch.setattr(urllib.request, "urlopen", boom)
    monkeypatch.setattr(cv2, "VideoCapture", boom)
    monkeypatch.setattr(mecharm.cameras, "open_camera", boom)
    monkeypatch.chdir(tmp_path)  # anything written relative to the cwd would land here
    traces = [str(p) for p in sorted(CORPUS.glob("*.trace.jsonl"))]
    assert main(["replay", *traces, *replay_args]) == 0, capsys.readouterr()
    assert list(tmp_path.iterdir()) == []


def test_a_trace_older_than_the_code_replays_with_todays_behaviour_and_says_what_it_lacks() -> None:
    """No older behaviour is kept for old traces (docs/replay.md, "Traces older than the
    code"): a removed setting, a rule recorded switched off (null) and a setting the trace
    lacks all replay with today's values, each named in a note."""
    rec = read_recorded(SUCCESS)
    consts = rec.header["constants"]  # the trial line's: edited as an older trace would read
    consts.update({"retry_open_at": "lift", "pick_recheck_mm": None})
    del consts["pick_redescend_mm"]
    settings, notes = replay_settings(rec)
    defaults = RuntimeSettings()
    assert settings.pick_place.pick_recheck_mm == defaults.pick_place.pick_recheck_mm
    assert settings.pick_place.pick_redescend_mm == defaults.pick_place.pick_redescend_mm
    said = "\n".join(notes)
    assert (
        "no longer has (replayed with today's behaviour" in said and "retry_open_at='lift'" in said
    )
    assert (
        "recorded switched off (null), always on in this code" in said and "pick_recheck_mm" in said
    )
    assert "settings not in the trace" in said and "pick_redescend_mm" in said
    assert set(REMOVED_SETTINGS).isdisjoint(RuntimeSettings.model_fields)
    with pytest.raises(ConfigError, match="tol_approach = null"):
        replay_settings(rec, {"tol_approach": None})
