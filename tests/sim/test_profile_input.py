"""Sim profile files and the operator's calibration: bad numbers are refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from mecharm.runtime.perception.config import CameraCalibration
from mecharm.sim.profile import ProfileError, load_profile


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("1: 2", "1: Keys should be strings"),
        ("optics: {top: {roll_deg: .nan}}", "optics.top.roll_deg"),
        ("optics: {top: {pos: [.inf, 0.8, 0.0]}}", "optics.top.pos.0"),
        ("optics: {top: {fx: 1400, fy: 1400, cx: .inf, cy: 540}}", "optics.top.cx"),
        ("optics: {top: {dist: [1.0e9, 0, 0, 0, 0]}}", "optics.top.dist.0"),
        (
            "optics: {top: {nominal: {fx: 1.0e-9, fy: 1400, cx: 960, cy: 540}}}",
            "optics.top.nominal.fx",
        ),
        ("timing: {judge: {tokens_per_s: .inf}}", "timing.judge.tokens_per_s"),
        ("contact: {friction: .nan}", "contact.friction"),
        ("arm: {zero_offset_deg: [.nan, 0, 0, 0, 0, 0]}", "arm.zero_offset_deg"),
    ],
)
def test_bad_profile_file_is_a_profile_error_naming_the_key(
    tmp_path: Path, text: str, needle: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(f"base: rig\n{text}\n")
    with pytest.raises(ProfileError) as exc:
        load_profile(str(path))
    assert needle in str(exc.value), str(exc.value)


@pytest.mark.parametrize(
    "bad",
    [
        {"cx": float("inf")},
        {"cy": float("nan")},
        {"fx": 1e-9},
        {"fy": 1e9},
        {"dist": (1e9, 0.0, 0.0, 0.0, 0.0)},
        {"dist": (0.0, float("nan"), 0.0, 0.0, 0.0)},
    ],
)
def test_top_camera_calibration_refuses_impossible_numbers(bad: dict[str, object]) -> None:
    good = {"fx": 1391.0, "fy": 1386.0, "cx": 968.0, "cy": 534.0}
    CameraCalibration.model_validate(good)
    with pytest.raises(ValidationError) as exc:
        CameraCalibration.model_validate({**good, **bad})
    assert next(iter(bad)) in str(exc.value)


def test_builtin_profiles_calibrations_are_valid() -> None:
    for name in ("ideal", "rig", "harsh"):
        cal = load_profile(name).top_camera_calibration()
        if cal is not None:
            CameraCalibration.model_validate(cal)


def test_the_demo_refuses_an_unknown_profile_before_starting_anything(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from mecharm.tools import demo

    with pytest.raises(SystemExit) as exc:
        demo.main(["--sim-profile", "rgi", "--data-root", str(tmp_path / "root")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "sim profile 'rgi': unknown name" in err and "'rig'" in err
    assert not (tmp_path / "root").exists()  # nothing was started or created
