"""The VLM judge at its true boundary: the vendor's SDK talking to a local Messages-API server.

The server (mecharm_dev.messages_api) answers as scripted: a verdict, or 429 / 529 /
500 / a hang / malformed text / a closed connection / a refusal. One whole trial on the
simulated rig (daemon + workcell as a real process, ``judge=vlm``) shows the runtime's
wiring: the adopted verdicts in the trace, where every verdict is an input, so a replay
needs no server. The fallbacks and the adoption rule are the judge's, tested judgement by
judgement on the hand-driven workcell's frames.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from mecharm.common.config import load_settings
from mecharm.common.kinematics import fk_tip
from mecharm.runtime.cli import EXIT_CONFIG
from mecharm.runtime.cli import main as runtime_main
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.perception import (
    GeometricJudge,
    HumanJudge,
    JudgeEvidence,
    detect_scene,
    estimate_homography,
)
from mecharm.runtime.perception.results import Verdict
from mecharm.runtime.perception.vlm import AnthropicVlm, DistanceOverride, VlmError, VlmJudge
from mecharm.runtime.records.trace import read_trace
from mecharm.runtime.rigsetup import open_rig
from mecharm.runtime.simcontrol import scene_next
from mecharm.runtime.trial import TrialSummary, run_trial
from mecharm.sim.scene import Pose, SceneLayout
from mecharm.tools.cli import main as tools_main
from mecharm.tools.simrig import SimRig, free_port, start_sim_daemon
from mecharm_dev.handheld import HandheldCell
from mecharm_dev.messages_api import MessagesApiServer

REPO = Path(__file__).resolve().parents[2]
SCALE = 20.0
SEED = (
    7  # a scene whose trial completes with both geometric verdicts yes (tests/runtime/test_e2e.py)
)
KEY = "sk-test-local"


@pytest.fixture(scope="module")
def sim_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimRig]:
    rig = start_sim_daemon(tmp_path_factory.mktemp("vlm_logs"), seed=SEED, time_scale=SCALE)
    yield rig
    rig.daemon.stop()


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[MessagesApiServer]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    with MessagesApiServer(api_key=KEY) as srv:
        yield srv


def _trial(
    tmp_path: Path, fk: Path, rig: SimRig, base_url: str, **extra: Any
) -> tuple[TrialSummary, dict[str, dict[str, Any]]]:
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    s = load_settings(
        RuntimeSettings,
        overrides={
            "data_root": root,
            "fk_data_dir": fk,
            "daemon_port": rig.daemon_port,
            "top_camera": rig.top_url,
            "recorder_enabled": False,
            "time_scale": SCALE,
            "judge": "vlm",
            "vlm_base_url": base_url,
            **extra,
        },
    )

    async def one() -> TrialSummary:
        async with open_rig(s) as (r, _client):
            return await run_trial(r, scene_seed=SEED)

    scene_next(rig.control_url, SEED)
    t = asyncio.run(one())
    verdicts = {
        e["kind"]: e["value"]
        for e in read_trace(t.trace_path)
        if e["event"] == "input" and e["kind"] in ("pick_verdict", "place_verdict")
    }
    return t, verdicts


def _api_calls(srv: MessagesApiServer) -> list[dict[str, Any]]:
    """The requests that passed the stand-in's checks and met a scripted behaviour."""
    return [r for r in srv.requests if not r["problem"]]


# ---------------------------------------------------------------- whole trials
@pytest.mark.slow
def test_vlm_verdicts_adopted_and_the_trace_replays_without_the_api(
    sim_rig: SimRig,
    api: MessagesApiServer,
    tmp_path: Path,
    fk_data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the reference run's confidences; the place answer contradicts the geometry on purpose
    api.script(
        None,
        {"answer": {"verdict": "yes", "confidence": 0.82, "reason": "block between the jaws"}},
        {"answer": {"verdict": "no", "confidence": 0.97, "reason": "block rests on the rim"}},
    )
    t, v = _trial(tmp_path, fk_data_dir, sim_rig, api.url)
    assert t.status == "completed", t.reason
    pick, place = v["pick_verdict"], v["place_verdict"]
    assert (pick["verdict"], pick["confidence"], pick["judge"]) == ("yes", 0.82, "vlm")
    assert pick["reason"] == "block between the jaws"
    d = pick["details"]
    assert d["adopted"] == "vlm" and d["vlm_verdict"]["confidence"] == 0.82
    assert d["model"] == "claude-sonnet-4-6" and '"confidence": 0.82' in d["raw"]
    assert d["human_verdict"] is None and d["dist_override"] is None and d["fallback"] is None
    assert d["latency_s"] is not None and d["geometric"]["verdict"] == "yes"
    # the model's "no" (0.97 >= 0.7) wins over the geometric "yes": the rule, not the geometry
    assert (place["verdict"], place["confidence"], place["judge"]) == ("no", 0.97, "vlm")
    assert place["details"]["geometric"]["verdict"] == "yes"
    assert t.outcome["pick_verdict"] == "yes" and t.outcome["place_verdict"] == "no"
    calls = _api_calls(api)
    assert len(calls) == 2 and all(c["images"] == 3 for c in calls)
    assert all(c["model"] == "claude-sonnet-4-6" for c in calls)

    # replay: the server is gone and the environment points nowhere; the verdicts come from
    # the trace, so the decisions are identical and no request is made
    api.stop()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{free_port()}")
    rc = tools_main(
        ["replay", str(t.trace_path), "--data-dir", str(fk_data_dir),
         "--arc-pick", str(REPO / "configs/poses/approach_pick.json"),
         "--arc-place", str(REPO / "configs/poses/approach_place.json")]
    )  # fmt: skip
    out = capsys.readouterr()
    assert rc == 0, out.out + out.err
    assert f"{t.trace_path}: identical (" in out.out
    assert len(api.requests) == 2


# ---------------------------------------------------------------- the fallbacks, judge by judge
# A pick and a place judged by one VlmJudge, as a trial's two judgements are (its call budget
# is per trial), on the hand-driven workcell's frames: the fallbacks are the judge's, so
# they are tested here; how the runtime builds the judge from its settings is the whole
# trial's above.
def _pick_and_place(
    cell: _Cell, base_url: str, *, timeout_s: float = 5.0, max_calls: int = 4
) -> dict[str, Verdict]:
    H, scene = cell.scene(_tip(PICK), _tip(PLACE))
    cell.move(PICK)
    cell.grip(close=True)
    cell.move(HOME)
    picked = cell.evidence(H, scene)
    cell.move(PLACE)
    cell.grip(close=False)
    cell.move(SWEPT)
    placed = cell.evidence(H, scene)

    async def both() -> dict[str, Verdict]:
        client = AnthropicVlm(KEY, base_url=base_url, timeout_s=timeout_s)
        j = VlmJudge(client, fallback=GeometricJudge(), override=DistanceOverride(), human=None,
                     confidence_min=0.7, max_calls=max_calls, timeout_s=timeout_s)  # fmt: skip
        try:
            return {
                "pick_verdict": await j.judge_pick(picked),
                "place_verdict": await j.judge_place(placed),
            }
        finally:
            await j.aclose()

    return asyncio.run(both())


@pytest.mark.parametrize(
    ("pick_b", "place_b", "pick_why", "place_why"),
    [
        ({"status": 429, "retry_after": 2}, {"status": 529}, "rate_limited: HTTP 429, retry-after 2 s",
         "overloaded: HTTP 529: overloaded_error"),
        ({"status": 500}, {"text": "The block seems fine."}, "server_error: HTTP 500: api_error",
         "malformed: vlm answer unparseable: 'The block seems fine.'"),
        ({"close": True}, {"refusal": True}, "connection: ",
         "refused: the model declined to answer"),
    ],
    ids=["429-529", "500-malformed", "closed-refusal"],
)  # fmt: skip
def test_api_errors_fall_back_to_the_geometric_judge(
    cell: _Cell,
    api: MessagesApiServer,
    pick_b: dict[str, Any],
    place_b: dict[str, Any],
    pick_why: str,
    place_why: str,
) -> None:
    api.script(None, pick_b, place_b)
    v = _pick_and_place(cell, api.url)
    for kind, why in (("pick_verdict", pick_why), ("place_verdict", place_why)):
        got = v[kind]
        d = got.details
        assert got.judge == "vlm->geometric" and d["adopted"] == "geometric"
        assert d["fallback"].startswith(why), d["fallback"]
        assert got.reason.startswith(f"vlm judge: {why}")
        assert d["vlm_verdict"] is None
        # the adopted verdict is the geometric one, as recorded beside it
        assert (got.verdict, got.confidence) == (
            d["geometric"]["verdict"],
            d["geometric"]["confidence"],
        )
    assert len(_api_calls(api)) == 2  # one call per judgement: the SDK's retries are off


def test_connection_refused_falls_back(cell: _Cell, api: MessagesApiServer) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    v = _pick_and_place(cell, nobody)
    for kind in ("pick_verdict", "place_verdict"):
        d = v[kind].details
        # the SDK's own words changed between releases ("Connection error." in 2.16,
        # "Connection to HOST failed: ..." in 2.17): ours are the kind and the cause's type
        assert d["fallback"].startswith("connection: "), d
        assert ": ConnectError (" in d["fallback"], d
        assert v[kind].judge == "vlm->geometric"


@pytest.mark.slow  # two timeouts of 1.5 s
def test_a_hanging_api_costs_one_timeout_per_judgement(cell: _Cell, api: MessagesApiServer) -> None:
    timeout = 1.5
    api.script({"hang": 60})
    v = _pick_and_place(cell, api.url, timeout_s=timeout)
    for kind in ("pick_verdict", "place_verdict"):
        d = v[kind].details
        assert d["fallback"] == f"timeout: no answer within {timeout:g} s", d
        # waited the timeout, and once: a retry (the SDK's default is 2) would take 2x or 3x
        assert timeout <= d["latency_s"] < 2 * timeout, d["latency_s"]
    assert len(_api_calls(api)) == 2


def test_budget_and_confidence_threshold(cell: _Cell, api: MessagesApiServer) -> None:
    api.script({"answer": {"verdict": "yes", "confidence": 0.55, "reason": "probably"}})
    v = _pick_and_place(cell, api.url, max_calls=1)
    pick, place = v["pick_verdict"].details, v["place_verdict"].details
    # pick: the model answered below the threshold -> the geometric verdict, both recorded
    assert pick["adopted"] == "geometric" and pick["vlm_verdict"]["confidence"] == 0.55
    assert pick["fallback"] == "low_confidence: 0.55 < 0.70"
    # place: the budget of one call per trial is spent -> geometric without asking
    assert place["fallback"] == "budget: 1 VLM call(s) per trial used"
    assert place["latency_s"] is None and place["calls"] == 1
    assert len(_api_calls(api)) == 1


# ---------------------------------------------------------------- configuration
def test_missing_key_is_a_config_error_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    args = ["--judge", "vlm", "--data-root", str(tmp_path), "--no-recorder", "--trials", "1"]
    assert runtime_main(args) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "set ANTHROPIC_API_KEY" in err and "Traceback" not in err
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    assert runtime_main([*args, "--vlm-base-url", "localhost:8089"]) == EXIT_CONFIG
    assert "is not an http(s) URL" in capsys.readouterr().err
    for bad in ("http://[::1", "http://host:99999", "http://host:port"):
        assert runtime_main([*args, "--vlm-base-url", bad]) == EXIT_CONFIG
        err = capsys.readouterr().err
        assert f"VLM base URL {bad!r} is not a valid URL" in err and "Traceback" not in err, err


# ---------------------------------------------------------------- the rule, judgement by judgement
PICK = (-31.93, 87.74, -38.33, 18.6, -45.11, -30.0)
PLACE = (37.059, 66.65, 2.83, -1.4, -78.04, -29.53)
HOME = (0.0, 0.0, 0.0, 0.0, 0.0, -30.0)
SWEPT = (85.0, 66.65, 2.83, -1.4, -78.04, -29.53)


class _Cell(HandheldCell):
    """The hand-driven workcell (mecharm_dev/handheld.py), with the detect a judge starts from."""

    def scene(self, block: tuple[float, float], box: tuple[float, float]) -> Any:
        self.wc.next_scene(
            layout=SceneLayout(block=Pose(x=block[0], z=block[1]), box=Pose(x=box[0], z=box[1]))
        )
        frames = [self.wc.render("top") for _ in range(3)]
        H = estimate_homography(frames)
        return H, detect_scene(frames, H)

    def evidence(self, H: Any, scene: Any) -> JudgeEvidence:
        frames = [self.wc.render("top") for _ in range(3)]
        return JudgeEvidence(frames=frames, H=H, scene=scene, tip_height_m=float(fk_tip(HOME)[1]))


@pytest.fixture
def cell() -> Iterator[_Cell]:
    c = _Cell()
    try:
        yield c
    finally:
        c.wc.close()


def _tip(a: tuple[float, ...]) -> tuple[float, float]:
    x, _y, z = fk_tip(a)
    return float(x), float(z)


def _judge(
    srv: MessagesApiServer, what: str, ev: JudgeEvidence, human: HumanJudge | None = None
) -> Verdict:
    """One judgement by the rig's VLM judge against the local server."""

    async def once() -> Verdict:
        client = AnthropicVlm(KEY, base_url=srv.url, timeout_s=5.0)
        j = VlmJudge(client, fallback=GeometricJudge(), override=DistanceOverride(), human=human,
                     confidence_min=0.7, max_calls=4, timeout_s=5.0)  # fmt: skip
        try:
            v: Verdict = await getattr(j, f"judge_{what}")(ev)
            return v
        finally:
            await j.aclose()

    return asyncio.run(once())


def test_distance_override_beats_a_confident_model_on_a_missed_pick(
    cell: _Cell, api: MessagesApiServer
) -> None:
    tx, tz = _tip(PICK)
    H, scene = cell.scene((tx + 0.02, tz), _tip(PLACE))  # the jaws close 20 mm beside the block
    cell.move(PICK)
    cell.grip(close=True)
    cell.move(HOME)
    assert not cell.wc.truth()["grasped"]
    api.script({"answer": {"verdict": "yes", "confidence": 0.95, "reason": "held"}})
    v = _judge(api, "pick", cell.evidence(H, scene))
    assert (v.verdict, v.judge) == ("no", "vlm->distance"), v
    d = v.details
    assert d["adopted"] == "dist_override" and d["dist_override"] is not None
    assert d["dist_override"] <= 5.0 and d["vlm_verdict"]["verdict"] == "yes"


def test_held_block_is_left_to_the_model(cell: _Cell, api: MessagesApiServer) -> None:
    H, scene = cell.scene(_tip(PICK), _tip(PLACE))
    cell.move(PICK)
    cell.grip(close=True)
    cell.move(HOME)
    assert cell.wc.truth()["grasped"]
    api.script({"answer": {"verdict": "yes", "confidence": 0.82, "reason": "held"}})
    v = _judge(api, "pick", cell.evidence(H, scene))
    assert (v.verdict, v.confidence, v.judge) == ("yes", 0.82, "vlm"), v
    assert v.details["dist_override"] is None


@pytest.mark.parametrize(
    ("offset", "truth", "decisive"),
    [((0.008, -0.01), "box", False), ((0.035, 0.0), "rim", False), ((0.0, 0.075), "mat", True)],
)
def test_place_override_only_far_outside_the_box(
    cell: _Cell, api: MessagesApiServer, offset: tuple[float, float], truth: str, decisive: bool
) -> None:
    px, pz = _tip(PLACE)
    H, scene = cell.scene(_tip(PICK), (px + offset[0], pz + offset[1]))
    cell.move(PICK)
    cell.grip(close=True)
    cell.move(PLACE)
    cell.grip(close=False)
    cell.move(SWEPT)
    assert cell.wc.truth()["place_outcome"] == truth
    api.script({"answer": {"verdict": "yes", "confidence": 0.98, "reason": "in the box"}})
    v = _judge(api, "place", cell.evidence(H, scene))
    if decisive:
        assert (v.verdict, v.judge) == ("no", "vlm->distance"), v
        assert v.details["dist_override"] >= 20.0
    else:  # the rim is the model's to judge: no measurement here is decisive about it
        assert (v.verdict, v.judge) == ("yes", "vlm"), v
        assert v.details["dist_override"] is None


def test_an_operator_answer_wins(cell: _Cell, api: MessagesApiServer) -> None:
    H, scene = cell.scene(_tip(PICK), _tip(PLACE))
    r, w = os.pipe()
    try:
        os.write(w, b"n\n")
        human = HumanJudge(timeout=10, in_fd=r, out=io.StringIO())
        api.script({"answer": {"verdict": "yes", "confidence": 0.99, "reason": "held"}})
        v = _judge(api, "pick", cell.evidence(H, scene), human)
    finally:
        os.close(r)
        os.close(w)
    assert (v.verdict, v.judge) == ("no", "vlm->human"), v
    assert v.details["human_verdict"] == "no" and v.details["adopted"] == "human"
    assert v.details["vlm_verdict"]["confidence"] == 0.99


# ---------------------------------------------------------------- the stand-in checks what the API checks
def _post(srv: MessagesApiServer, body: object, headers: dict[str, str]) -> tuple[int, Any]:
    req = urllib.request.Request(
        srv.url + "/v1/messages", data=json.dumps(body).encode(), method="POST",
        headers={"content-type": "application/json", **headers},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_stand_in_refuses_what_the_api_refuses(api: MessagesApiServer) -> None:
    jpeg = cv2.imencode(".jpg", np.zeros((8, 8, 3), np.uint8))[1].tobytes()
    png = cv2.imencode(".png", np.zeros((8, 8, 3), np.uint8))[1].tobytes()

    def body(img: bytes, media: str = "image/jpeg") -> dict[str, Any]:
        src = {"type": "base64", "media_type": media, "data": base64.b64encode(img).decode()}
        content = [{"type": "image", "source": src}, {"type": "text", "text": "q"}]
        return {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": content}]}

    ok = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    status, answer = _post(api, body(jpeg), ok)
    assert status == 200 and answer["type"] == "message" and answer["content"][0]["type"] == "text"
    assert _post(api, body(jpeg), {"x-api-key": "wrong", "anthropic-version": "1"})[0] == 401
    status, err = _post(api, body(jpeg), {"x-api-key": KEY})
    assert status == 400 and "anthropic-version" in err["error"]["message"]
    status, err = _post(api, body(png), ok)
    assert status == 400 and err["error"]["message"].endswith("not a JPEG")
    status, err = _post(api, body(jpeg, "image/png"), ok)
    assert status == 400 and "media_type" in err["error"]["message"]
    assert [r["status"] for r in api.requests] == [200, 401, 400, 400, 400]

    async def through_the_sdk() -> str:
        client = AnthropicVlm(KEY, base_url=api.url, timeout_s=5.0)
        try:
            await client.ask([png], "q")
        except VlmError as exc:
            return str(exc)
        finally:
            await client.aclose()
        return "no error"

    assert asyncio.run(through_the_sdk()).startswith("bad_request: HTTP 400: invalid_request_error")
