import pytest
from pydantic_settings import SettingsConfigDict

from mecharm.common.config import ConfigError, RigSettings, load_settings
from mecharm.common.fsutil import UnsafeNameError, check_data_root, safe_join, validate_name


class DemoSettings(RigSettings):
    model_config = SettingsConfigDict(env_prefix="MECHARM_TEST_", extra="forbid")
    port: int = 5555
    host: str = "127.0.0.1"


def test_priority_defaults_yaml_env_cli(tmp_path, monkeypatch):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("port: 6000\nhost: 0.0.0.0\n")
    assert load_settings(DemoSettings).port == 5555
    assert load_settings(DemoSettings, cfg).port == 6000
    monkeypatch.setenv("MECHARM_TEST_PORT", "7000")
    s = load_settings(DemoSettings, cfg)
    assert (s.port, s.host) == (7000, "0.0.0.0")
    assert load_settings(DemoSettings, cfg, {"port": 8000, "host": None}).port == 8000


def test_bad_values_name_the_key(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("port: lots\n")
    with pytest.raises(ConfigError, match="port"):
        load_settings(DemoSettings, cfg)
    cfg.write_text("prot: 1\n")
    with pytest.raises(ConfigError, match="prot: unknown key"):
        load_settings(DemoSettings, cfg)
    cfg.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_settings(DemoSettings, cfg)
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(DemoSettings, tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    "bad", ["", "..", "../../etc", "/abs", "a/b", "a\x00b", "x" * 5000, 5, None, ".hidden"]
)
def test_validate_name_rejects(bad):
    with pytest.raises(UnsafeNameError):
        validate_name(bad)


def test_safe_join_stays_inside(tmp_path):
    assert (
        safe_join(tmp_path, "run_0001_20261130_120000", "x.jpg").parent.parent == tmp_path.resolve()
    )
    with pytest.raises(UnsafeNameError):
        safe_join(tmp_path, "..", "etc")


def test_mount_guard(tmp_path):
    assert check_data_root(tmp_path) is None
    assert "does not exist" in check_data_root(tmp_path / "nope")
    assert "not a mount point" in check_data_root(tmp_path, require_mount=True)
