"""The pieces of the release check and the height memory, without an arm.

Side view: frames the simulator's renderer draws for the side camera (the real
pipeline up to JPEG), across the lighting gains a scene may have. Height memory: the
measured rule and its bounds. The ``--confirm`` prompt: a real pipe as the terminal.
"""

from __future__ import annotations

import asyncio
import io
import os
from pathlib import Path

import cv2
import numpy as np
import pytest

from mecharm.common.config import ConfigError, load_settings
from mecharm.common.layout import DataRoot
from mecharm.runtime.config import REMOVED_SETTINGS, RuntimeSettings
from mecharm.runtime.memories import HEIGHT_LIMIT_MM, HeightMemory, learn_height
from mecharm.runtime.perception.side import side_view
from mecharm.runtime.pick_place.release import _release_verdict
from mecharm.runtime.ports import ReleaseView
from mecharm.runtime.terminal import ask_release
from mecharm.sim.render import SIDE_CAMERA, Renderer, SceneSnapshot

BOX = (-0.20, 0.18, 20.0)
HOME = (0.0, 0.0, 0.0, 0.0, 0.0, -30.0)
_VERSION = iter(range(10_000, 20_000))


def _side(block: tuple[float, float, float], resting: str, gain: float) -> np.ndarray:
    snap = SceneSnapshot(
        next(_VERSION), block, 30.0, BOX, resting == "gripper", resting, gain,
        (0.04, -0.04), 3.0, 0.02,
    )  # fmt: skip
    img = Renderer(SIDE_CAMERA.resized((640, 360)), seed=5).render(snap, HOME, 45.0)
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 80])
    assert ok
    return np.asarray(cv2.imdecode(buf, cv2.IMREAD_COLOR), np.uint8)


@pytest.mark.parametrize("gain", [0.8, 1.0, 1.2])
def test_side_view_sees_the_held_block_above_the_box(gain: float) -> None:
    v = side_view(_side((-0.20, 0.095, 0.18), "gripper", gain))
    assert v.seen, v


@pytest.mark.parametrize("gain", [0.8, 1.0, 1.2])
@pytest.mark.parametrize(
    ("block", "resting", "why"),
    [
        ((0.20, 0.0125, 0.26), "mat", "no white box below the red block"),  # dropped on the mat
        ((-0.20, 0.0155, 0.18), "box", "no red block"),  # already in the box: nothing held
    ],
)
def test_side_view_refuses_without_a_block_above_the_box(
    gain: float, block: tuple[float, float, float], resting: str, why: str
) -> None:
    v = side_view(_side(block, resting, gain))
    assert not v.seen and why in v.reason, v


def test_side_view_names_a_bad_image() -> None:
    v = side_view(np.zeros((10, 10), np.uint8))
    assert not v.seen and "not a BGR image" in v.reason


# ------------------------------------------------------------------ the verdict


def _s(**kw: object) -> RuntimeSettings:
    return RuntimeSettings(**kw)  # type: ignore[arg-type]


def test_release_verdict_needs_top_majority_margin_and_no_contrary_side_view() -> None:
    s = _s(release_side_check=True)
    good = ReleaseView(3, 3, (-0.2, 0.18), 2.0, 15.0, "seen", "")
    assert _release_verdict(s, good)[0]
    assert _release_verdict(s, ReleaseView(3, 3, (-0.2, 0.18), 2.0, 15.0, "no_frame", "x"))[0]
    ok, why = _release_verdict(s, ReleaseView(1, 3, (-0.2, 0.18), 2.0, 15.0, "seen", ""))
    assert not ok and "not visible near the box in 2 of 3 frames" in why
    ok, why = _release_verdict(s, ReleaseView(3, 3, (-0.2, 0.18), 30.0, 1.0, "seen", ""))
    assert not ok and "1.0 mm inside the opening (needs 3 mm)" in why
    ok, why = _release_verdict(s, ReleaseView(3, 3, (-0.2, 0.18), 2.0, 15.0, "not_seen", "n"))
    assert not ok and "side: not above the box (n)" in why
    assert not _release_verdict(s, ReleaseView(0, 0, side="no_frame"))[0]


def test_the_side_view_is_advisory_by_default_and_says_so() -> None:
    """A side view cannot tell a block inside the box below the rim from one in front of it
    (docs/release.md): by default it is traced and shown, and the top camera decides."""
    s = _s()
    assert s.pick_place.release_side_check is False
    ok, why = _release_verdict(s, ReleaseView(3, 3, (-0.2, 0.18), 2.0, 15.0, "not_seen", "n"))
    assert ok and "side: not above the box (n), advisory" in why
    # the top camera still refuses on its own
    ok, why = _release_verdict(s, ReleaseView(3, 3, (-0.2, 0.18), 30.0, 1.0, "seen", ""))
    assert not ok and "needs 3 mm" in why


def test_the_verdict_names_a_box_that_moved_or_was_not_found_again() -> None:
    s = _s()
    moved = ReleaseView(3, 3, (-0.1, 0.18), 90.0, -40.0, "no_frame", "", "", (-0.11, 0.18),
                        "template", 90.0, True)  # fmt: skip
    ok, why = _release_verdict(s, moved)
    assert not ok and "the box was found 90 mm from where detect saw it" in why
    hidden = ReleaseView(3, 3, (-0.2, 0.18), 2.0, 15.0, "no_frame", "", "", (-0.2, 0.18),
                         "hidden", 0.0, False)  # fmt: skip
    ok, why = _release_verdict(s, hidden)
    assert ok and "box not found again (hidden, detect's position)" in why
    # nothing white where the box was: a block over that spot is over nothing
    gone = ReleaseView(3, 3, (-0.2, 0.18), 2.0, 15.0, "no_frame", "", "", (-0.2, 0.18),
                       "gone", 0.0, False)  # fmt: skip
    ok, why = _release_verdict(s, gone)
    assert not ok and "the box is gone from where detect saw it" in why


def test_release_view_round_trips_through_the_trace_form() -> None:
    v = ReleaseView(2, 3, (-0.2, 0.18), 4.5, 12.0, "not_seen", "why", "c.jpg")
    assert ReleaseView.from_dict(v.to_dict()) == v
    refound = ReleaseView(2, 3, (-0.2, 0.18), 4.5, 12.0, "seen", "", "c.jpg", (-0.21, 0.19),
                          "template", 14.1, True)  # fmt: skip
    assert ReleaseView.from_dict(refound.to_dict()) == refound
    # a view traced before the box was looked for again reads with its defaults
    old = {k: val for k, val in v.to_dict().items() if not k.startswith("box_")}
    assert ReleaseView.from_dict(old) == v
    with pytest.raises(ValueError, match=r"seen\|not_seen\|no_frame"):
        ReleaseView.from_dict({**v.to_dict(), "side": "maybe"})


def test_the_release_defaults_check_re_aim_and_put_back() -> None:
    defaults = _s()
    assert (
        defaults.pick_place.release_reaim_max == 2
        and defaults.pick_place.release_refused == "put_back"
    )
    assert defaults.pick_place.release_check


@pytest.mark.parametrize("key", sorted(REMOVED_SETTINGS))
def test_a_removed_setting_is_refused_saying_what_happens_now(
    key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A configuration written for an older version still names a removed setting: the
    loader refuses it with what the runtime now always does, in a file and in a variable."""
    cfg = tmp_path / "runtime.yaml"
    cfg.write_text(f"{key}: true\n")
    with pytest.raises(ConfigError, match=rf"{key}: removed setting: .+; delete it"):
        load_settings(RuntimeSettings, cfg)
    monkeypatch.setenv(f"MECHARM_RUNTIME_{key.upper()}", "1")
    with pytest.raises(ConfigError, match=rf"MECHARM_RUNTIME_{key.upper()}: removed setting"):
        load_settings(RuntimeSettings)
    assert key not in RuntimeSettings.model_fields


# ------------------------------------------------------------------ height memory


def test_height_rule_raises_after_a_measured_good_place_lowers_after_a_failure() -> None:
    kw = {"step_mm": 5.0, "max_mm": 30.0, "raise_margin_mm": 10.0}
    assert learn_height(15.0, True, 12.0, **kw)[:2] == (20.0, "raise")  # the rig's 15 → 20
    assert learn_height(20.0, True, 12.0, **kw)[:2] == (25.0, "raise")  # … → 25
    assert learn_height(20.0, True, 4.0, **kw)[:2] == (20.0, "keep")  # narrow margin
    assert learn_height(20.0, True, None, **kw)[:2] == (20.0, "keep")  # unmeasured
    assert learn_height(20.0, False, 12.0, **kw)[:2] == (15.0, "lower")
    assert learn_height(20.0, False, None, **kw)[:2] == (15.0, "lower")


def test_height_rule_stays_within_its_bounds() -> None:
    kw = {"step_mm": 5.0, "raise_margin_mm": 10.0}
    assert learn_height(30.0, True, 20.0, max_mm=30.0, **kw)[:2] == (30.0, "keep")
    assert learn_height(2.0, False, None, max_mm=30.0, **kw)[:2] == (0.0, "lower")
    assert learn_height(0.0, False, None, max_mm=30.0, **kw)[:2] == (0.0, "keep")
    # max_mm beyond the plausibility bound is held at the bound
    top = HEIGHT_LIMIT_MM[1]
    assert learn_height(top, True, 20.0, max_mm=top + 10, **kw)[0] == top


def test_height_memory_learns_saves_and_loads_again(tmp_path: Path) -> None:
    path = DataRoot(tmp_path).height_memory
    mem = HeightMemory(path)
    kw = {"step_mm": 5.0, "max_mm": 30.0, "raise_margin_mm": 10.0}
    seen = [mem.learn("place_x-200_z180", True, 15.0, **kw).dee_y_mm for _ in range(8)]
    assert seen == [5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 30.0, 30.0]
    up = mem.learn("place_x-200_z180", False, 15.0, **kw)
    assert (up.old_mm, up.dee_y_mm, up.n, up.change) == (30.0, 25.0, 9, "lower")
    mem.save()
    again = HeightMemory(path)
    assert again.get("place_x-200_z180") == 25.0 and not again.skipped


# ------------------------------------------------------------------ the --confirm prompt


async def _ask(text: bytes | None, timeout: float = 5.0) -> tuple[bool | None, str]:
    r, w = os.pipe()
    out = io.StringIO()
    try:
        if text is not None:
            os.write(w, text)
        else:
            os.close(w)
            w = -1
        answer = await ask_release("block not seen", timeout, in_fd=r, out=out)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    return answer, out.getvalue()


@pytest.mark.anyio
async def test_confirm_prompt_release_abort_and_retry_on_nonsense() -> None:
    assert (await _ask(b"r\n"))[0] is True
    assert (await _ask(b"abort\n"))[0] is False
    answer, said = await _ask(b"maybe\na\n")
    assert answer is False and "please answer r (release) or a (abort)" in said
    assert "RELEASE REFUSED: block not seen" in said


@pytest.mark.anyio
async def test_confirm_prompt_without_an_answer_aborts() -> None:
    assert (await _ask(b"", timeout=0.2))[0] is None  # nothing typed: the timeout
    assert (await _ask(None))[0] is None  # the terminal closed


def test_confirm_prompt_runs_in_the_event_loop() -> None:
    assert asyncio.run(_ask(b"r\n"))[0] is True


@pytest.mark.anyio
async def test_side_check_reads_the_recorders_frame_file(tmp_path: Path) -> None:
    from mecharm.runtime.camera_eyes import side_check

    held, mat = tmp_path / "held.jpg", tmp_path / "mat.jpg"
    cv2.imwrite(str(held), _side((-0.20, 0.095, 0.18), "gripper", 1.0))
    cv2.imwrite(str(mat), _side((0.20, 0.0125, 0.26), "mat", 1.0))
    assert (await side_check(str(held)))[0] == "seen"
    assert (await side_check(str(mat)))[0] == "not_seen"
    assert await side_check(None) == ("no_frame", "no side frame")
    side, why = await side_check(str(tmp_path / "missing.jpg"))
    assert side == "no_frame" and "unreadable" in why


#: place poses and boxes the runtime reached on the simulator (test_release.py, sim_normal)
PLACES = [
    ((-0.2001, 0.1798), (45.0, 59.89, 19.99, -4.92, -86.7, -29.44)),
    ((-0.2031, 0.2002), (40.0, 72.39, 2.49, -9.92, -84.2, -29.44)),
    ((-0.1605, 0.2342), (40.0, 67.39, 7.49, 10.08, -79.2, -29.44)),
    ((-0.2316, 0.1646), (60.0, 57.39, 12.49, 10.08, -74.2, -29.44)),
]


@pytest.mark.parametrize(("box", "pose"), PLACES)
def test_side_view_with_the_arm_at_a_real_place_pose(
    box: tuple[float, float], pose: tuple[float, ...]
) -> None:
    from mecharm.common.kinematics import fk_tip

    tip = [float(v) for v in fk_tip(pose)]
    r = Renderer(SIDE_CAMERA, seed=3)  # the recorder's 1280x720 side view

    def frame(block: tuple[float, float, float], held: bool) -> np.ndarray:
        snap = SceneSnapshot(
            next(_VERSION), block, 30.0, (*box, 20.0), held, "gripper" if held else "mat",
            1.0, (0.0, 0.0), 3.0, 0.02,
        )  # fmt: skip
        return np.asarray(r.render(snap, pose, 45.0 if held else 100.0), np.uint8)

    # held just under the tip (grasped 10-25 mm below it): above the box
    for below in (0.010, 0.025):
        v = side_view(frame((tip[0], tip[1] - below, tip[2]), True))
        assert v.seen, (below, v)
    # dropped in transit: the jaws are empty, the block lies on the mat far from the box
    v = side_view(frame((0.05, 0.0125, 0.33), False))
    assert not v.seen, v


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("release_refused", "drop"),
        ("release_reaim_max", 9),
        ("release_reaim_max", -1),
        ("height_start_mm", -1.0),
        ("height_start_mm", 90.0),
        ("height_lost_step_mm", -5.0),
        ("height_lost_max_mm", -1.0),
        ("height_lost_max_mm", 90.0),
        ("height_lost_max_mm", "high"),
        ("servo_drop_still_mm", 0.0),
        ("servo_drop_still_mm", 60.0),
        ("servo_drop_still_mm", float("nan")),
        ("place_approach_above_band_mm", -1.0),
        ("pick_redescend_mm", 0.0),
        ("pick_redescend_mm", 150.0),
        ("pick_redescend_mm", float("nan")),
        ("pick_redescend_mm", "far"),
    ],
)
def test_the_recovery_settings_refuse_bad_values_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key):
        load_settings(RuntimeSettings, overrides={key: value})
