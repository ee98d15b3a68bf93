"""The runtime's settings in groups (docs/settings.md): one place per key, one translation
from the flat layout of older files, traces and keyword arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from mecharm.common.config import ConfigError, load_settings
from mecharm.runtime.config import (
    MOVED_SETTINGS,
    NOT_CONSTANTS,
    RuntimeSettings,
    dotted,
    nest_flat,
    recorded_constant,
    setting_paths,
)


def test_every_flat_key_has_exactly_one_new_place_and_every_grouped_key_one_old_name() -> None:
    paths = setting_paths()
    assert all(new in paths for new in MOVED_SETTINGS.values())
    assert len(set(MOVED_SETTINGS.values())) == len(MOVED_SETTINGS)
    # groups and keys that came after the flat layout had gone have no old names
    born_grouped = {"arm.stream_speed"}
    grouped = {
        p for p in paths
        if "." in p and p.split(".")[0] not in ("rollout",) and p not in born_grouped
    }  # fmt: skip
    # each key of a group that was flat once came from the flat layout
    assert grouped == set(MOVED_SETTINGS.values())


def test_the_flat_layout_reads_into_the_same_settings_as_the_groups() -> None:
    flat = {"speed": 30, "judge": "vlm", "daemon_port": 6000, "release_refused": "hold"}
    grouped = {
        "arm": {"speed": 30},
        "judge": {"by": "vlm"},
        "daemon": {"port": 6000},
        "pick_place": {"release_refused": "hold"},
    }
    assert nest_flat(flat) == grouped
    a, b = RuntimeSettings(**flat), RuntimeSettings(**grouped)
    assert a.model_dump() == b.model_dump()
    # a flat key merges into a group given as a mapping, and wins over it
    mixed = RuntimeSettings(arm={"speed": 10, "j1_max": 80.0}, speed=40)
    assert (mixed.arm.speed, mixed.arm.j1_max) == (40, 80.0)


def test_constants_are_nested_without_what_shapes_no_decision() -> None:
    c = RuntimeSettings(speed=30).constants()
    assert c["arm"]["speed"] == 30  # type: ignore[index]
    assert "viewing" not in c and "rig_id" not in c and "trials" not in c
    assert "token_file" not in c["daemon"] and "key_file" not in c["recorder"]  # type: ignore[operator]
    flat_paths = dotted(c)
    assert not [p for p in flat_paths if p in NOT_CONSTANTS]


def test_a_recorded_constant_is_found_in_either_layout() -> None:
    nested = RuntimeSettings(judge="human").constants()
    old = {"judge": "human", "top_camera_calibration": None, "dist_max_m": 0.02}
    assert recorded_constant(nested, "judge.by") == "human" == recorded_constant(old, "judge.by")
    assert recorded_constant(old, "pick_place.dist_max_m") == 0.02
    assert recorded_constant(old, "arm.nothing", "dflt") == "dflt"
    assert recorded_constant({"judge": 3}, "judge.by") is None  # not a mapping: no value


def test_updated_validates_and_model_copy_refuses_a_flat_key() -> None:
    s = RuntimeSettings()
    assert s.updated({"viewing.top_video": False, "arm.speed": 50}).arm.speed == 50
    with pytest.raises(ValueError, match="less than or equal to 100"):
        s.updated({"arm.speed": 500})
    with pytest.raises(ValueError, match=r"\['speed'\] are no top-level settings"):
        s.model_copy(update={"speed": 5})
    assert s.model_copy(update={"trials": 3}).trials == 3


def test_a_file_in_the_flat_layout_is_refused_with_every_key_s_new_place(tmp_path: Path) -> None:
    path = tmp_path / "old.yaml"
    path.write_text("daemon_port: 5555\nspeed: 20\ntrials: 2\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_settings(RuntimeSettings, path)
    msg = str(err.value)
    assert "daemon_port is now daemon.port" in msg and "speed is now arm.speed" in msg
    assert "trials" not in msg.split("grouped now")[1]  # a top-level key is fine
    path.write_text("daemon:\n  port: 5555\narm:\n  speed: 20\ntrials: 2\n", encoding="utf-8")
    s = load_settings(RuntimeSettings, path)
    assert (s.daemon.port, s.arm.speed, s.trials) == (5555, 20, 2)


def test_the_environment_wins_over_the_file_and_flags_over_both_inside_a_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("arm:\n  speed: 20\n  j1_max: 80\n", encoding="utf-8")
    monkeypatch.setenv("MECHARM_RUNTIME_ARM__SPEED", "40")
    s = load_settings(RuntimeSettings, path)
    assert (s.arm.speed, s.arm.j1_max) == (40, 80.0)  # the group merges, key by key
    s = load_settings(RuntimeSettings, path, {"arm.speed": 60})
    assert (s.arm.speed, s.arm.j1_max) == (60, 80.0)
