"""The test modules' asserts rewritten once, before xdist starts its workers.

pytest rewrites each test module's ``assert`` statements when it imports the module and
keeps the result in ``__pycache__`` (keyed by the source's hash). In a fresh clone the
workers start together and each rewrites every module before any has written its cache:
five workers, about 3 s of CPU each (docs/testing.md, "Why a fresh clone runs slower").
Called from tests/conftest.py's ``pytest_sessionstart`` in the xdist controller, this
writes the missing caches with pytest's own rewriter and format, in two processes; a warm
tree only reads them. It uses pytest's private rewriter (``_pytest.assertion.rewrite``):
where that changed it says so on the terminal and the workers rewrite as before.
"""

from __future__ import annotations

import fnmatch
import os
import sys
from pathlib import Path

import pytest


def rewritable_test_modules(config: pytest.Config, tests_dir: Path) -> list[Path]:
    """The files under ``tests_dir`` whose asserts pytest rewrites when it imports them:
    every conftest.py and every file its ``python_files`` patterns match."""
    patterns = [str(p) for p in config.getini("python_files")]
    return sorted(
        p for p in tests_dir.rglob("*.py")
        if "__pycache__" not in p.parts
        and (p.name == "conftest.py" or any(fnmatch.fnmatch(p.name, pat) for pat in patterns))
    )  # fmt: skip


def rewrite_missing(config: pytest.Config, files: list[Path]) -> int:
    """Rewrite and cache each of ``files`` whose cache is missing or out of date, as a
    worker's import would; returns how many were written. A file that cannot be read or
    parsed is left to the worker, which reports it as that file's collection error."""
    from _pytest.assertion import rewrite

    state = config.stash[rewrite.assertstate_key]
    written = 0
    for fn in files:
        cache_dir = rewrite.get_cache_dir(fn)
        pyc = cache_dir / (fn.name[:-3] + rewrite.PYC_TAIL)
        if rewrite._read_pyc(fn, pyc) is not None or not rewrite.try_makedirs(cache_dir):
            continue
        try:
            source_hash, co = rewrite._rewrite_test(fn, config)
        except (SyntaxError, ValueError, OSError):
            continue  # the worker's import reports it, as a collection error of that file
        written += rewrite._write_pyc(state, co, source_hash, pyc)
    return written


def rewrite_ahead(config: pytest.Config, tests_dir: Path) -> None:
    """In the xdist controller only, and only where a worker would write the caches too
    (assert rewriting on, byte-code writing allowed): half the files in a forked child,
    half here."""
    if (
        hasattr(config, "workerinput")
        or not getattr(config.option, "numprocesses", None)
        or config.getoption("assertmode") != "rewrite"
        or sys.dont_write_bytecode
    ):
        return
    files = rewritable_test_modules(config, tests_dir)
    try:
        child = os.fork()
        if child == 0:  # leaves without pytest's teardown or the parent's buffered output
            code = 1
            try:
                rewrite_missing(config, files[1::2])
                code = 0
            finally:
                os._exit(code)
        try:
            rewrite_missing(config, files[::2])
        finally:
            os.waitpid(child, 0)
    except (ImportError, AttributeError, KeyError, TypeError) as exc:
        config.get_terminal_writer().line(f"test modules not rewritten ahead: {exc!r}")
