"""Every config mistake ends in one clear message and exit 2, never a traceback, for
every process that loads settings through ``mecharm.common.config`` (docs/architecture.md,
"Configuration"): through each CLI's real ``main`` and, for the case testers hit, as
real processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from mecharm.common.config import MAX_CONFIG_BYTES, ConfigError, load_settings
from mecharm.daemon.cli import main as daemon_main
from mecharm.recorder.cli import main as recorder_main
from mecharm.runtime.cli import main as runtime_main
from mecharm.runtime.config import RuntimeSettings

CLIS: dict[str, tuple[Callable[[list[str]], int], str, str]] = {
    # name: (main, module for `python -m`, a key of its settings whose value must be an int)
    "mecharm-runtime": (runtime_main, "mecharm.runtime.cli", "trials"),
    "mecharm-recorder": (recorder_main, "mecharm.recorder.cli", "udp_port"),
    "mecharm-daemon": (daemon_main, "mecharm.daemon.cli", "port"),
}

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)


def _cases(int_key: str) -> list[tuple[str, bytes | None, str]]:
    """(case, file content or None for a special file, what the message must say)."""
    return [
        ("not-utf8", f"{int_key}: 5\ncomment: caf\xe9\n".encode("latin1"), "not UTF-8 text (byte 0xe9"),
        ("utf16", "port: 1\n".encode("utf-16"), "not UTF-8 text"),
        ("missing", None, "does not exist"),
        ("directory", None, "is a directory"),
        ("fifo", None, "not a regular file"),
        ("list", b"- a\n- b\n", "top level must be a mapping"),
        ("scalar", b"just words\n", "top level must be a mapping"),
        ("int-key", b"1: 2\n", "keys must be setting names, got 1"),
        ("unknown-key", b"no_such_setting: 1\n", "no_such_setting: unknown key"),
        ("wrong-type", f"{int_key}: lots\n".encode(), f"{int_key}: Input should be a valid integer"),
        ("duplicate-key", f"{int_key}: 1\n{int_key}: 2\n".encode(), f"key '{int_key}' given twice (lines 1 and 2)"),
        ("broken-yaml", b"a: [1\n", "not valid YAML at line 2"),
        ("python-tag", b"a: !!python/object:os.system ls\n", "not valid YAML at line 1"),
        ("deep", b"a: " + b"[" * 4000 + b"]" * 4000 + b"\n", "nested too deeply"),
        ("deep-30", b"a: " + b"[" * 30 + b"]" * 30 + b"\n", "nested more than 20 levels"),
        ("alias-bomb", BOMB.encode(), "more than 100000 values"),
        ("huge", b"#" * (MAX_CONFIG_BYTES + 10), "more than a settings file has"),
    ]  # fmt: skip


def _make(tmp_path: Path, case: str, content: bytes | None) -> Path:
    path = tmp_path / "settings.yaml"
    if case == "directory":
        path.mkdir()
    elif case == "fifo":
        os.mkfifo(path)  # reading it would block for ever: refused before any read
    elif content is not None:
        path.write_bytes(content)
    return path


@pytest.mark.parametrize("cli", list(CLIS))
@pytest.mark.parametrize("case", [c for c, _, _ in _cases("x")])
def test_every_config_mistake_is_one_message_and_exit_2(
    cli: str, case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main, _, int_key = CLIS[cli]
    [(_, content, needle)] = [c for c in _cases(int_key) if c[0] == case]
    path = _make(tmp_path, case, content)
    assert main(["--config", str(path)]) == 2
    out = capsys.readouterr()
    assert out.err.startswith(f"{cli}: "), out.err
    assert needle in out.err and "Traceback" not in out.err + out.out
    if case not in ("unknown-key", "wrong-type"):  # those name the key and its source instead
        assert str(path) in out.err and "--config" in out.err
    assert len(out.err.strip().splitlines()) == 1  # one line, what and where and what to do


@pytest.mark.parametrize("cli", list(CLIS))
def test_non_utf8_config_as_a_real_process(cli: str, tmp_path: Path) -> None:
    _, module, int_key = CLIS[cli]
    path = tmp_path / "settings.yaml"
    path.write_bytes(f"{int_key}: 5\nnote: caf\xe9\n".encode("latin1"))
    r = subprocess.run(
        [sys.executable, "-m", module, "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "not UTF-8 text" in r.stderr and str(path) in r.stderr
    assert "line 2" in r.stderr and "save it as UTF-8" in r.stderr


def test_environment_value_that_is_not_json_names_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MECHARM_RUNTIME_ARM__HOME", "[0, 0")
    with pytest.raises(ConfigError, match=r"MECHARM_RUNTIME_ARM__HOME.*variables are JSON"):
        load_settings(RuntimeSettings)


@pytest.mark.parametrize(
    ("var", "value", "needle"),
    [
        ("MECHARM_RUNTIME_SPEED", "30", "moved to arm.speed: rename it MECHARM_RUNTIME_ARM__SPEED"),
        ("MECHARM_RUNTIME_JUDGE", "vlm", "moved to judge.by: rename it MECHARM_RUNTIME_JUDGE__BY"),
        ("MECHARM_RUNTIME_DAEMON_PORT", "1", "moved to daemon.port"),
    ],
)
def test_a_variable_of_the_flat_layout_is_refused_with_its_new_name(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str, needle: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError, match=re.escape(needle)):
        load_settings(RuntimeSettings)


def test_flat_keyword_arguments_and_dotted_flags_land_in_their_groups() -> None:
    # code and older constants use flat names (translated); flags may name a group's key
    s = load_settings(RuntimeSettings, overrides={"speed": 30, "motion.tol_home": 2.0})
    assert (s.arm.speed, s.motion.tol_home) == (30, 2.0)
    assert RuntimeSettings(judge="vlm", daemon_port=6000).judge.by == "vlm"


def test_benign_aliases_and_the_shipped_configs_still_load(tmp_path: Path) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text(
        "pick_place:\n  pick_band: &band [0.010, 0.040]\n  place_band: [0.070, 0.100]\n"
    )
    assert load_settings(RuntimeSettings, path).pick_place.pick_band == (0.010, 0.040)
    shipped = Path(__file__).parents[2] / "configs" / "runtime.yaml"
    assert load_settings(RuntimeSettings, shipped).arm.speed == 20


def test_dev_null_means_defaults_only() -> None:
    """`--config /dev/null` is how scripts and tests say "no file": not a mistake."""
    from mecharm.common.config import read_yaml

    assert read_yaml(Path(os.devnull)) == {}


@pytest.mark.parametrize(
    ("yaml_text", "needle"),
    [
        ("pick_place:\n  swept_j0: .nan\n", "pick_place.swept_j0: Input should be a finite number"),
        ("arm:\n  home: [0, .nan, 0, 0, 0, -30]\n", "arm.home.1: Input should be a finite number"),
        ("arm:\n  home: [170, 0, 0, 0, 0, -30]\n", "home j0 = 170.0 is outside the SDK limits"),
        ("pick_place:\n  swept_j0: 170\n", "swept_j0 = 170.0 is outside j0's SDK limits"),
        ("log_level: loud\n", "log_level: Input should be 'debug', 'info', 'warning' or 'error'"),
        ("arm:\n  path_sample_deg: 0.000001\n", "arm.path_sample_deg: Input should be greater than or equal to 0.1"),
        ("arm:\n  joint_step_max_deg: -1\n", "joint_step_max_deg"),
        ("pick_place:\n  release_refused: drop\n", "pick_place.release_refused: Input should be"),
        ("retry_open_at: mat\n", "retry_open_at: removed setting: a missed pick always opens"),
        ("speed: 20\ntol_home: 2\n", "speed is now arm.speed; tol_home is now motion.tol_home"),
        ("judge: vlm\n", "judge is now judge.by"),
        ("arm:\n  sped: 20\n", "arm.sped: unknown key; did you mean 'speed'?"),
    ],
)  # fmt: skip
def test_runtime_values_that_would_pass_every_comparison_are_refused(
    yaml_text: str, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """NaN in a pose, a pose outside the SDK, a sample step that would allocate gigabytes:
    refused at start (exit 2), not met at the first move."""
    path = tmp_path / "runtime.yaml"
    path.write_text(yaml_text)
    assert runtime_main(["--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    "cli, var, suggestion",
    [
        ("mecharm-runtime", "MECHARM_RUNTIME_TIME_SCAL", "MECHARM_RUNTIME_TIME_SCALE"),
        ("mecharm-daemon", "MECHARM_DAEMON_PROT", "MECHARM_DAEMON_PORT"),
        ("mecharm-recorder", "MECHARM_RECORDER_UDP_PROT", "MECHARM_RECORDER_UDP_PORT"),
    ],
)
def test_a_mistyped_environment_variable_is_refused_with_its_closest_name(
    cli: str, var: str, suggestion: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # pydantic-settings ignores a variable that names no field: the setting would silently
    # keep its default
    main, _module, _key = CLIS[cli]
    os.environ[var] = "1"
    try:
        assert main([]) == 2
    finally:
        del os.environ[var]
    err = capsys.readouterr().err
    assert var in err and f"did you mean {suggestion}?" in err and "Traceback" not in err


def test_variables_of_nested_keys_and_other_prefixes_are_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MECHARM_RUNTIME_ARM__HOME", "[0, 0, 0, 0, 0, -30]")  # a real key
    monkeypatch.setenv("MECHARM_CHAOS_SEED", "3")  # a test's own variable, no settings prefix
    monkeypatch.setenv("MECHARM_RUNTIMEX", "1")  # no underscore after the prefix: not ours
    s = load_settings(RuntimeSettings)
    assert s.arm.home[5] == -30


def test_a_display_url_that_is_no_viewer_url_is_refused_at_start() -> None:
    # the live view's follower would otherwise fail after the first trial, in its own log
    with pytest.raises(ConfigError, match=r"display_url: .*'notaurl' is not a viewer URL"):
        load_settings(RuntimeSettings, overrides={"display_url": "notaurl"})
    ok = load_settings(
        RuntimeSettings, overrides={"display_url": "rerun+http://127.0.0.1:9876/proxy"}
    )
    assert ok.viewing.display_url == "rerun+http://127.0.0.1:9876/proxy"
