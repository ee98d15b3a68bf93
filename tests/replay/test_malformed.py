"""A trace that is not a well-formed trial trace exits 2 with a message naming the line;
nothing is replayed from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mecharm.tools.cli import main

from .conftest import CORPUS

SOURCE = CORPUS / "dry_run.trace.jsonl"


def _lines() -> list[str]:
    return SOURCE.read_text(encoding="utf-8").splitlines(keepends=True)


def _write(tmp_path: Path, lines: list[str], name: str = "t.trace.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join(lines), encoding="utf-8")
    return p


def _edit(line: str, **changes: object) -> str:
    obj = json.loads(line)
    obj.update(changes)
    return json.dumps(obj) + "\n"


def _first(lines: list[str], event: str, kind: str | None = None) -> int:
    for i, raw in enumerate(lines):
        e = json.loads(raw)
        if e["event"] == event and (kind is None or e.get("kind") == kind):
            return i
    raise AssertionError(f"no {event} {kind} in the corpus trace")


def _run(path: Path, replay_args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = main(["replay", str(path), *replay_args])
    cap = capsys.readouterr()
    return rc, cap.err + cap.out


def test_not_json(
    tmp_path: Path, replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _lines()
    lines[4] = '{"seq": 5, "event": "input", "kind": "angles", "value": {"angles": [1, 2\n'
    rc, msg = _run(_write(tmp_path, lines), replay_args, capsys)
    assert rc == 2
    assert "t.trace.jsonl:5: not JSON" in msg and "malformed trace" in msg


def test_missing_result_line(
    tmp_path: Path, replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _lines()[:-1]
    rc, msg = _run(_write(tmp_path, lines), replay_args, capsys)
    assert rc == 2
    assert f"t.trace.jsonl:{len(lines)}: no result line" in msg and "truncated" in msg


def test_truncated_mid_line(
    tmp_path: Path, replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _lines()[:30]
    lines[-1] = lines[-1][
        : len(lines[-1]) // 2
    ]  # the crash cut the line: no newline, half an object
    rc, msg = _run(_write(tmp_path, lines), replay_args, capsys)
    assert rc == 2
    assert "t.trace.jsonl:30:" in msg


def test_unknown_event_and_input_kind(
    tmp_path: Path, replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _lines()
    i = _first(lines, "decision")
    bad = list(lines)
    bad[i] = _edit(bad[i], event="thought")
    rc, msg = _run(_write(tmp_path, bad), replay_args, capsys)
    assert rc == 2 and f":{i + 1}: unknown event 'thought'" in msg
    j = _first(lines, "input", "angles")
    bad = list(lines)
    bad[j] = _edit(bad[j], kind="lidar")
    rc, msg = _run(_write(tmp_path, bad), replay_args, capsys)
    assert rc == 2 and f":{j + 1}: unknown input kind 'lidar'" in msg


def test_bad_input_value(
    tmp_path: Path, replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _lines()
    j = _first(lines, "input", "angles")
    lines[j] = _edit(lines[j], value={"angles": [0, 0, 0], "t": 1.0})
    rc, msg = _run(_write(tmp_path, lines), replay_args, capsys)
    assert rc == 2 and f":{j + 1}: input angles: bad value: expected 6 angles" in msg
    lines = _lines()  # the time a reading was asked for, when a trace carries it
    lines[j] = _edit(lines[j], value={"angles": [0] * 6, "t": 1.0, "t_asked": "soon"})
    rc, msg = _run(_write(tmp_path, lines), replay_args, capsys)
    assert rc == 2 and f":{j + 1}: input angles: bad value" in msg and "soon" in msg
    j = _first(lines, "input", "pick_verdict")
    lines = _lines()
    lines[j] = _edit(lines[j], value={"verdict": "yes"})
    rc, msg = _run(_write(tmp_path, lines), replay_args, capsys)
    assert rc == 2 and f":{j + 1}: input pick_verdict: bad value" in msg


def test_bad_sent_input_and_log_line(
    tmp_path: Path, replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _lines()
    j = _first(lines, "input", "sent")
    lines[j] = _edit(lines[j], value={"t": 1.0, "angles": [0, 0, 0]})
    rc, msg = _run(_write(tmp_path, lines), replay_args, capsys)
    assert rc == 2 and f":{j + 1}: input sent: bad value: expected 6 sent angles" in msg
    lines = _lines()
    lines[j] = _edit(lines[j], value={"angles": [0, 0, 0, 0, 0, 0]})
    rc, msg = _run(_write(tmp_path, lines), replay_args, capsys)
    assert rc == 2 and f":{j + 1}: input sent: bad value" in msg
    lines = _lines()
    k = _first(lines, "log")
    lines[k] = _edit(lines[k], section=None)
    rc, msg = _run(_write(tmp_path, lines), replay_args, capsys)
    assert rc == 2 and f":{k + 1}: log line without a section" in msg


def test_lines_missing_or_reordered(
    tmp_path: Path, replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _lines()
    del lines[10]
    rc, msg = _run(_write(tmp_path, lines), replay_args, capsys)
    assert rc == 2 and ":11: seq 12 after 10" in msg


def test_not_a_trial_trace(
    tmp_path: Path, replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    rc, msg = _run(_write(tmp_path, []), replay_args, capsys)
    assert rc == 2 and "empty file" in msg
    rc, msg = _run(_write(tmp_path, _lines()[1:]), replay_args, capsys)
    assert rc == 2 and ":1: seq 2 after 0" in msg
    rc, msg = _run(_write(tmp_path, ["[1, 2, 3]\n"]), replay_args, capsys)
    assert rc == 2 and ":1: not a JSON object" in msg
    rc, msg = _run(tmp_path / "absent.trace.jsonl", replay_args, capsys)
    assert rc == 2 and "cannot read" in msg
    (tmp_path / "bin.trace.jsonl").write_bytes(b"\xff\xfe\x00garbage\n")
    rc, msg = _run(tmp_path / "bin.trace.jsonl", replay_args, capsys)
    assert rc == 2 and "not UTF-8" in msg


def test_event_after_result(
    tmp_path: Path, replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _lines()
    last = json.loads(lines[-1])
    lines.append(json.dumps({**last, "seq": last["seq"] + 1}) + "\n")
    rc, msg = _run(_write(tmp_path, lines), replay_args, capsys)
    assert rc == 2 and f":{len(lines)}: result after the result line" in msg


def test_worst_exit_code_wins(
    tmp_path: Path, replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    broken = _write(tmp_path, _lines()[:-1])
    rc = main(["replay", str(SOURCE), str(broken), *replay_args])
    cap = capsys.readouterr()
    assert rc == 2
    assert f"{SOURCE}: identical" in cap.out and "no result line" in cap.err
