"""mecharm_dev.asserts_ahead: the test modules' asserts rewritten before the workers start,
into the cache the workers read, exactly as a worker would have rewritten them."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from _pytest.assertion import rewrite

from mecharm_dev.asserts_ahead import rewritable_test_modules, rewrite_missing

REPO = Path(__file__).resolve().parents[2]

MODULE = """
def two():
    return 2

def test_one_is_two():
    assert 1 == two()
"""


def _pyc(fn: Path) -> Path:
    return rewrite.get_cache_dir(fn) / (fn.name[:-3] + rewrite.PYC_TAIL)


def test_the_cache_written_is_the_workers_own_rewrite_and_is_kept_until_the_source_changes(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    fn = tmp_path / "test_a.py"
    fn.write_text(MODULE, encoding="utf-8")
    assert rewrite_missing(request.config, [fn]) == 1
    cached = rewrite._read_pyc(fn, _pyc(fn))  # what a worker's import accepts
    assert cached is not None
    # byte for byte the file the worker's own rewrite would have written
    source_hash, own = rewrite._rewrite_test(fn, request.config)
    buf = io.BytesIO()
    rewrite._write_pyc_fp(buf, source_hash, own)
    assert _pyc(fn).read_bytes() == buf.getvalue()
    assert any(name.startswith("@py_assert") for name in _names(cached))  # rewritten
    # up to date: nothing written again, the file untouched
    ino = _pyc(fn).stat().st_ino
    assert rewrite_missing(request.config, [fn]) == 0
    assert _pyc(fn).stat().st_ino == ino
    # the source changed: the cache is out of date and written again
    fn.write_text(MODULE.replace("1 ==", "3 =="), encoding="utf-8")
    assert rewrite_missing(request.config, [fn]) == 1
    again = rewrite._read_pyc(fn, _pyc(fn))
    assert again is not None and 3 in _consts(again)


def _names(co: types.CodeType) -> list[str]:
    out = list(co.co_names) + list(co.co_varnames)
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            out += _names(c)
    return out


def _consts(co: types.CodeType) -> list[object]:
    out: list[object] = []
    for c in co.co_consts:
        out += _consts(c) if isinstance(c, types.CodeType) else [c]
    return out


def test_a_module_that_does_not_parse_is_left_to_the_worker_and_the_others_are_written(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A syntax error, a null byte or an unreadable file must not stop the session before
    it starts: the worker's import reports it as that file's collection error."""
    broken = tmp_path / "test_broken.py"
    broken.write_text("def test_x(:\n    pass\n", encoding="utf-8")
    nul = tmp_path / "test_nul.py"
    nul.write_bytes(b"x = 1\0\n")
    gone = tmp_path / "test_gone.py"
    gone.symlink_to(tmp_path / "nowhere.py")
    good = tmp_path / "test_good.py"
    good.write_text(MODULE, encoding="utf-8")
    assert rewrite_missing(request.config, [broken, nul, gone, good]) == 1
    assert rewrite._read_pyc(good, _pyc(good)) is not None
    assert not _pyc(broken).exists() and not _pyc(nul).exists() and not _pyc(gone).exists()


def test_the_files_are_the_conftests_and_the_test_modules(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    for rel in ("conftest.py", "test_a.py", "sub/conftest.py", "sub/test_b.py", "helpers.py",
                "sub/data_test.txt", "__pycache__/test_c.py"):  # fmt: skip
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("", encoding="utf-8")
    found = [
        p.relative_to(tmp_path).as_posix()
        for p in rewritable_test_modules(request.config, tmp_path)
    ]
    assert found == ["conftest.py", "sub/conftest.py", "sub/test_b.py", "test_a.py"]


def test_an_xdist_worker_reads_the_cache_the_controller_wrote(tmp_path: Path) -> None:
    """Through pytest and xdist: the controller writes the cache before the worker starts,
    the worker imports from it (the file is the same one after the run) and its failing
    assert still explains itself."""
    (tmp_path / "test_a.py").write_text(MODULE, encoding="utf-8")
    (tmp_path / "conftest.py").write_text(
        "from pathlib import Path\n"
        "from mecharm_dev.asserts_ahead import rewrite_ahead\n"
        "def pytest_sessionstart(session):\n"
        "    here = Path(__file__).parent\n"
        "    rewrite_ahead(session.config, here)\n"
        "    pyc = next(here.glob('__pycache__/test_a.*pytest*.pyc'))\n"
        "    (here / 'ino').write_text(str(pyc.stat().st_ino))\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "MECHARM_TESTCPU")) and k != "PYTHONDONTWRITEBYTECODE"}  # fmt: skip
    env["PYTHONPATH"] = str(REPO)  # not an xdist worker itself: a controller
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "1", "-p", "no:cacheprovider", "-q", "test_a.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "where 2 = two()" in proc.stdout, proc.stdout
    (pyc,) = (tmp_path / "__pycache__").glob("test_a.*pytest*.pyc")
    assert pyc.stat().st_ino == int((tmp_path / "ino").read_text())
