"""The feed: inputs in lockstep with the stage runs, port failures and forced stops
reproduced where the recorded trial had them, divergences reported."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mecharm.runtime.client import ArmNoReply, ArmRefused, ConnectionLost
from mecharm.runtime.engine import describe_error
from mecharm.tools.cli import main
from mecharm.tools.replay.feed import recorded_error

from .conftest import CORPUS

SUCCESS = CORPUS / "success_seed7.trace.jsonl"


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def _write(tmp_path: Path, events: list[dict[str, Any]]) -> Path:
    p = tmp_path / "edited.trace.jsonl"
    with open(p, "w", encoding="utf-8") as fh:
        for n, e in enumerate(events, 1):
            fh.write(json.dumps({**e, "seq": n}) + "\n")
    return p


def _cut_at_descend_pick_send(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Everything up to the pre-send reading of the pick descend (the send itself never returned)."""
    i = next(
        n
        for n, e in enumerate(events)
        if e["event"] == "decision" and e["kind"] == "command" and e["stage"] == "descend_pick"
    )
    assert events[i + 1]["kind"] == "angles" and events[i + 2]["kind"] == "sent"
    return events[: i + 2]


def _tail(reason: str, exit_value: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "event": "transition",
            "stage": "descend_pick",
            "frm": "descend_pick",
            "to": "abort",
            "outcome": "fail",
            "reason": reason,
            "ts": 0.0,
        },
        {"event": "decision", "stage": "abort", "kind": "exit", "value": exit_value, "ts": 0.0},
        {"event": "result", "stage": "end", "status": "stopped", "reason": reason, "ts": 0.0},
    ]


def _replay(
    path: Path, replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    rc = main(["replay", str(path), *replay_args])
    cap = capsys.readouterr()
    return rc, cap.out + cap.err


def test_daemon_lost_mid_send_replays_identical(
    tmp_path: Path, replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    reason = "descend_pick: daemon connection lost: connection reset by peer"
    events = _cut_at_descend_pick_send(_events(SUCCESS)) + _tail(
        reason, {"step": "arm actions skipped", "why": "daemon connection lost"}
    )
    rc, out = _replay(_write(tmp_path, events), replay_args, capsys)
    assert rc == 0, out
    assert "identical" in out and reason in out


def test_forced_stop_replays_identical(
    tmp_path: Path, replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    reason = "forced stop during descend_pick (operator)"
    events = _cut_at_descend_pick_send(_events(SUCCESS)) + _tail(
        reason,
        {
            "forced": True,
            "steps": [{"step": "stop", "ok": True}, {"step": "fresh mode off", "ok": True}],
        },
    )
    rc, out = _replay(_write(tmp_path, events), replay_args, capsys)
    assert rc == 0, out
    assert "identical" in out


def test_a_different_recorded_error_is_a_difference(
    tmp_path: Path, replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The failure is reproduced from the trace's own reason, so the exit step (arm alive or not) must fit it."""
    reason = "descend_pick: daemon timeout: no reply within 4.0 s"
    events = _cut_at_descend_pick_send(_events(SUCCESS)) + _tail(
        reason, {"forced": False, "steps": [{"step": "home", "ok": True}]}
    )
    rc, out = _replay(_write(tmp_path, events), replay_args, capsys)
    assert rc == 1
    assert "stage abort, exit" in out


def test_missing_input_is_a_named_divergence(
    tmp_path: Path, replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    events = _events(SUCCESS)
    i = next(
        n
        for n, e in enumerate(events)
        if e["event"] == "input" and e["kind"] == "block_xz" and e["stage"] == "servo_place"
    )
    del events[i]
    rc, out = _replay(_write(tmp_path, events), replay_args, capsys)
    assert rc == 1
    assert "input divergence: servo_place asks for input 'block_xz'" in out
    assert "first difference" in out and "stage servo_place" in out


def test_reordered_inputs_are_a_divergence(
    tmp_path: Path, replay_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    events = _events(SUCCESS)
    i = next(n for n, e in enumerate(events) if e["event"] == "input" and e["kind"] == "scene")
    j = next(
        n for n, e in enumerate(events) if n > i and e["event"] == "input" and e["kind"] == "tip"
    )
    events[i]["kind"], events[j]["kind"] = "tip", "scene"
    events[i]["value"], events[j]["value"] = events[j]["value"], events[i]["value"]
    rc, out = _replay(_write(tmp_path, events), replay_args, capsys)
    assert rc == 1
    assert "input divergence: detect asks for input 'scene', the trace has 'tip' next" in out


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionLost("socket closed"),
        ArmRefused("invalid_request", "angles out of range"),
        ArmNoReply("arm_no_reply", "no reply after 3 tries"),
        type("EyesError", (RuntimeError,), {})("top camera gave no frames"),
    ],
)
def test_recorded_error_words_the_same_reason(exc: Exception) -> None:
    reason = f"detect: {describe_error(exc)}"
    again = recorded_error(reason)
    assert again is not None
    assert f"detect: {describe_error(again)}" == reason


@pytest.mark.parametrize(
    "reason",
    [
        "descend_pick: fk lookup out_of_range: too far",
        "open_gripper_home: home: arrival timeout after 8.00s: moved 0.1°",
        "detect: detection failed: red block not found",
        "no colon at all",
    ],
)
def test_stage_failures_are_not_port_errors(reason: str) -> None:
    assert recorded_error(reason) is None


def test_code_that_crashes_outside_a_stage_is_a_difference(
    replay_args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import mecharm.tools.replay.runner as runner

    async def broken_exit(*_a: Any, **_k: Any) -> Any:
        raise KeyError("steps")

    monkeypatch.setattr(runner, "exit_path", broken_exit)
    rc, out = _replay(CORPUS / "abort_lookup.trace.jsonl", replay_args, capsys)
    assert rc == 1
    assert "different: the replay raised KeyError: 'steps'" in out


def test_code_that_waits_forever_is_a_difference(
    replay_args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    import mecharm.tools.replay.cli as cli
    import mecharm.tools.replay.runner as runner

    async def hangs(*_a: Any, **_k: Any) -> Any:
        await asyncio.Event().wait()

    monkeypatch.setattr(runner, "exit_path", hangs)
    monkeypatch.setattr(cli, "REPLAY_TIMEOUT_S", 0.2)
    rc, out = _replay(CORPUS / "abort_lookup.trace.jsonl", replay_args, capsys)
    assert rc == 1
    assert "did not finish within" in out
