"""Judges: geometric verdicts against the simulator's ground truth; human (terminal) and VLM seams."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os

import cv2
import numpy as np
import pytest

from mecharm.runtime.perception import (
    GeometricJudge,
    HumanJudge,
    Judge,
    JudgeEvidence,
    Verdict,
    VlmJudge,
    detect_scene,
    estimate_homography,
    make_judge,
)
from mecharm.runtime.perception.judge import parse_vlm_answer

SWEPT = (85.0, 66.65, 2.83, -1.4, -78.04, -29.53)  # stage9b: j0 to 85° keeping the place approach


def _stage2(rig, block: tuple[float, float] | None = None, box: tuple[float, float] | None = None):
    tx, _, tz = rig.tip(rig.PICK)
    px, _, pz = rig.tip(rig.PLACE)
    rig.layout(block or (tx, tz), box or (px, pz))
    frames = [rig.wc.render("top") for _ in range(3)]
    H = estimate_homography(frames)
    return H, detect_scene(frames, H)


def _evidence(rig, H, scene, tip_height: float | None = None) -> JudgeEvidence:
    return JudgeEvidence(
        frames=[rig.wc.render("top") for _ in range(3)], H=H, scene=scene, tip_height_m=tip_height
    )


def _run(coro):
    return asyncio.run(coro)


def test_pick_yes_when_block_is_held_after_lift(rig) -> None:
    H, scene = _stage2(rig)
    rig.move(rig.PICK)
    rig.grip(close=True)
    rig.move(rig.HOME)
    assert rig.wc.truth()["grasped"]
    v = _run(GeometricJudge().judge_pick(_evidence(rig, H, scene, rig.tip(rig.HOME)[1])))
    assert v.verdict == "yes" and v.confidence > 0.9, v
    assert "held at the gripper tip in 3/3 frames" in v.reason
    assert json.loads(json.dumps(v.to_dict()))["judge"] == "geometric"


def test_pick_no_when_grasp_missed(rig) -> None:
    tx, _, tz = rig.tip(rig.PICK)
    H, scene = _stage2(rig, block=(tx + 0.02, tz))
    rig.move(rig.PICK)
    rig.grip(close=True)
    rig.move(rig.HOME)
    assert not rig.wc.truth()["grasped"]
    v = _run(GeometricJudge().judge_pick(_evidence(rig, H, scene, rig.tip(rig.HOME)[1])))
    assert v.verdict == "no" and v.confidence > 0.9, v
    assert "still at its mat position in 3/3 frames" in v.reason


def _place(rig, box_offset: tuple[float, float]):
    px, _, pz = rig.tip(rig.PLACE)
    H, scene = _stage2(rig, box=(px + box_offset[0], pz + box_offset[1]))
    rig.move(rig.PICK)
    rig.grip(close=True)
    rig.move(rig.PLACE)
    rig.grip(close=False)
    rig.move(SWEPT)
    return H, scene


@pytest.mark.parametrize(
    ("offset", "truth", "verdict"),
    [((0.008, -0.01), "box", "yes"), ((0.035, 0.0), "rim", "no"), ((0.0, 0.075), "mat", "no")],
)
def test_place_verdict_matches_where_the_block_landed(
    rig, offset, truth: str, verdict: str
) -> None:
    H, scene = _place(rig, offset)
    assert rig.wc.truth()["place_outcome"] == truth
    v = _run(GeometricJudge().judge_place(_evidence(rig, H, scene)))
    assert v.verdict == verdict, v
    assert v.confidence >= 0.6
    if verdict == "yes":
        assert "inside the box's inner footprint" in v.reason
    else:
        assert v.reason.startswith("place failed")


def test_geometric_judge_without_evidence(rig) -> None:
    H, scene = _stage2(rig)
    j = GeometricJudge()
    empty = JudgeEvidence(frames=[], H=H, scene=scene)
    assert _run(j.judge_pick(empty)).confidence == 0.0
    assert _run(j.judge_place(empty)).verdict == "no"
    no_block = type(scene)(block=None, box=scene.box, box_samples=scene.box_samples)
    v = _run(j.judge_pick(JudgeEvidence(frames=[rig.wc.render("top")], H=H, scene=no_block)))
    assert v.verdict == "no" and "no block was detected" in v.reason


# ---------------------------------------------------------------- human judge
@pytest.fixture
def pipe():
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        with contextlib.suppress(OSError):
            os.close(fd)


def _human(
    pipe,
    text: bytes | None,
    timeout: float = 2.0,
    fallback: Judge | None = None,
    close: bool = False,
):
    r, w = pipe
    out = io.StringIO()
    judge = HumanJudge(timeout=timeout, fallback=fallback, in_fd=r, out=out)

    async def go() -> Verdict:
        loop = asyncio.get_running_loop()
        if text is not None:
            loop.call_later(0.05, os.write, w, text)
        if close:
            loop.call_later(0.1, os.close, w)
        return await judge.judge_pick(JudgeEvidence(frames=[], H=None, scene=None))  # type: ignore[arg-type]

    return asyncio.run(go()), out.getvalue()


def test_human_yes_and_no(pipe) -> None:
    v, out = _human(pipe, b"y\n")
    assert (v.verdict, v.confidence, v.judge) == ("yes", 1.0, "human")
    assert "[y/n]" in out
    v, _ = _human(pipe, b"No\n")
    assert v.verdict == "no" and v.reason == "operator answered no"


def test_human_is_asked_again_on_a_bad_answer(pipe) -> None:
    v, out = _human(pipe, b"maybe\nyes\n")
    assert v.verdict == "yes"
    assert "please answer y or n (got 'maybe')" in out


def test_human_timeout_without_and_with_fallback(pipe) -> None:
    v, _ = _human(pipe, None, timeout=0.2)
    assert (v.verdict, v.confidence) == ("no", 0.0)
    assert "no answer within 0.2 s" in v.reason

    class Always:
        name = "stub"

        async def judge_pick(self, evidence):
            return Verdict("yes", 0.7, "stub says yes", "stub")

        async def judge_place(self, evidence):
            return Verdict("no", 0.7, "stub says no", "stub")

    v, _ = _human(pipe, None, timeout=0.2, fallback=Always())
    assert (v.verdict, v.confidence, v.judge) == ("yes", 0.7, "human->stub")
    assert "no answer" in v.reason and "stub says yes" in v.reason


def test_human_input_closed(pipe) -> None:
    v, _ = _human(pipe, b"", close=True)
    assert v.verdict == "no" and "terminal input closed" in v.reason


# ---------------------------------------------------------------- VLM seam
class FakeVlm:
    """Stands in for a remote model: records what it was sent, answers a fixed text or raises."""

    def __init__(self, answer: str | Exception) -> None:
        self.answer = answer
        self.calls: list[tuple[list[bytes], str]] = []

    async def ask(self, images: list[bytes], prompt: str) -> str:
        self.calls.append((images, prompt))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_vlm_judge_parses_the_answer_and_sends_jpegs(rig) -> None:
    H, scene = _stage2(rig)
    client = FakeVlm('Sure. {"verdict": "yes", "confidence": 0.82, "reason": "block in gripper"}')
    v = _run(VlmJudge(client).judge_pick(_evidence(rig, H, scene)))
    assert (v.verdict, v.confidence, v.reason, v.judge) == ("yes", 0.82, "block in gripper", "vlm")
    images, prompt = client.calls[0]
    assert len(images) == 3 and "red block" in prompt
    img = cv2.imdecode(np.frombuffer(images[0], np.uint8), cv2.IMREAD_COLOR)
    assert img.shape == (1080, 1920, 3)


@pytest.mark.parametrize(
    "answer",
    [
        "I think so",
        '{"verdict": "maybe", "confidence": 0.5}',
        '{"verdict": "yes", "confidence": 1.5}',
        '{"verdict": "yes"}',
        '{"verdict": "yes", "confidence": "high"}',
        "{broken",
    ],
)
def test_vlm_unparseable_answers_are_no_with_zero_confidence(answer: str) -> None:
    v = parse_vlm_answer(answer)
    assert (v.verdict, v.confidence) == ("no", 0.0)
    assert "unparseable" in v.reason


def test_vlm_failure_is_recorded_not_raised(rig) -> None:
    H, scene = _stage2(rig)
    v = _run(
        VlmJudge(FakeVlm(TimeoutError("model took too long"))).judge_place(_evidence(rig, H, scene))
    )
    assert (v.verdict, v.confidence) == ("no", 0.0)
    assert "vlm call failed: TimeoutError: model took too long" in v.reason


def test_make_judge_and_verdict_validation() -> None:
    assert isinstance(make_judge("geometric"), GeometricJudge)
    assert isinstance(make_judge("human", timeout=5), HumanJudge)
    assert isinstance(make_judge("vlm", client=FakeVlm("{}")), VlmJudge)
    assert isinstance(make_judge("geometric"), Judge)
    with pytest.raises(ValueError, match="unknown judge 'oracle'"):
        make_judge("oracle")
    with pytest.raises(ValueError, match="needs client="):
        make_judge("vlm")
    with pytest.raises(ValueError, match="timeout must be > 0"):
        HumanJudge(timeout=0)
    with pytest.raises(ValueError, match="verdict must be"):
        Verdict("maybe", 0.5, "", "x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="confidence"):
        Verdict("yes", 1.5, "", "x")


def test_a_block_where_the_box_was_pushed_away_is_not_placed(rig) -> None:
    """The harsh arm pushed the box into the mat's corner (over a marker, where neither the
    contour nor the template finds it) and the block fell on the mat where the box had been:
    judged against detect's box outline the block looked placed (a wrong state nobody
    reported). Now the judge sees the box is not where detect found it and says no."""
    tx, _, tz = rig.tip(rig.PICK)
    px, _, pz = rig.tip(rig.PLACE)
    rig.layout((tx, tz), (px, pz))
    frames = [rig.wc.render("top") for _ in range(3)]
    H = estimate_homography(frames)
    scene = detect_scene(frames, H)
    rig.layout((px, pz), (-0.31, 0.37))  # box pushed away, block on the mat at its old place
    assert rig.wc.truth()["block"]["resting_on"] == "mat"
    ev = _evidence(rig, H, scene)
    old = _run(GeometricJudge(height_aware=False).judge_place(ev))
    assert old.verdict == "yes"  # the defect: the old outline still frames the block
    v = _run(GeometricJudge().judge_place(ev))
    assert v.verdict == "no", v
    assert "the box is not where detect found it in 3/3 frames" in v.reason
