"""The shared-secret key file: created private and atomically, refused when too open."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mecharm.common.keyfile import (
    KeyFileError,
    config_dir,
    default_recorder_key_file,
    load_or_create_key,
    read_key,
)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_default_path_is_per_user(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert default_recorder_key_file() == tmp_path / "cfg" / "mecharm" / "recorder.key"
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/is/ignored")
    assert config_dir() == Path.home() / ".config" / "mecharm"


def test_created_0600_in_a_0700_folder_even_with_a_permissive_umask(tmp_path):
    path = tmp_path / "new" / "recorder.key"
    old = os.umask(0)
    try:
        key = load_or_create_key(path)
    finally:
        os.umask(old)
    assert _mode(path) == 0o600 and _mode(path.parent) == 0o700
    assert len(key) == 64 and int(key, 16) >= 0
    assert load_or_create_key(path) == key  # read back, not replaced
    assert [p.name for p in path.parent.iterdir()] == ["recorder.key"]  # no temp file left


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o644, 0o610])
def test_group_or_other_bits_are_refused_with_the_chmod(tmp_path, mode):
    path = tmp_path / "recorder.key"
    load_or_create_key(path)
    path.chmod(mode)
    with pytest.raises(KeyFileError) as err:
        load_or_create_key(path)
    assert f"run: chmod 600 {path}" in str(err.value) and f"{mode:04o}" in str(err.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"", "one line"), (b"short\n", "one line"), (b"a" * 40 + b" b" * 20, "without spaces"),
     (b"\xff" * 40, "ASCII")],
)  # fmt: skip
def test_a_file_that_is_not_a_key_is_refused(tmp_path, content, message):
    path = tmp_path / "recorder.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, content)
    os.close(fd)
    with pytest.raises(KeyFileError, match=message):
        read_key(path)


def test_an_operator_key_is_accepted_as_written(tmp_path):
    path = tmp_path / "recorder.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"my-own-secret-of-more-than-32-characters\n")
    os.close(fd)
    assert load_or_create_key(path) == b"my-own-secret-of-more-than-32-characters"


def test_a_symlink_or_a_folder_is_not_followed(tmp_path):
    real = tmp_path / "real.key"
    load_or_create_key(real)
    link = tmp_path / "link.key"
    link.symlink_to(real)
    with pytest.raises(KeyFileError, match="cannot open"):
        load_or_create_key(link)
    (tmp_path / "dir.key").mkdir()
    with pytest.raises(KeyFileError):
        load_or_create_key(tmp_path / "dir.key")


def test_an_unwritable_folder_is_a_clear_error(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    with pytest.raises(KeyFileError, match="cannot create"):
        load_or_create_key(ro / "recorder.key")


def test_processes_starting_together_agree_on_one_key(tmp_path):
    """Runtime and recorder started at once: one of them creates the key, both read it."""
    path = tmp_path / "race" / "recorder.key"
    code = (
        "import sys; from pathlib import Path; from mecharm.common.keyfile import load_or_create_key;"
        "print(load_or_create_key(Path(sys.argv[1])).decode())"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
        for _ in range(6)
    ]
    keys = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert len(keys) == 1 and len(next(iter(keys))) == 64
    assert _mode(path) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["recorder.key"]


def test_a_key_in_a_folder_others_may_write_is_refused(tmp_path):
    """Anyone who can write the folder can swap the key for theirs: refused, naming the fix."""
    shared = tmp_path / "shared"
    shared.mkdir()
    path = shared / "recorder.key"
    load_or_create_key(path)
    shared.chmod(0o777)
    with pytest.raises(KeyFileError, match=r"folder group or others may write.*chmod go-w"):
        read_key(path)
    shared.chmod(0o700)
    assert read_key(path)
