"""Each stage module's ``SETTINGS_READ`` is what its code reads (docs/settings.md, "What
each stage reads"), and every module of a task's package that reads a setting declares."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from mecharm.runtime.config import setting_paths
from mecharm.runtime.tasks import TASKS
from mecharm_dev.settings_doc import SAFE_ARM_MODULE, reading_modules, settings_read_in

FIELDS = frozenset(setting_paths())


def test_the_scan_sees_each_way_a_stage_reads_a_setting() -> None:
    source = (
        "def body(ctx):\n"
        "    s, st = ctx.settings, ctx.state\n"
        "    a = s.motion.tol_home + ctx.settings.arm.speed\n"
        "    b = st.home  # the trial's state, not a setting\n"
        "    return settings.arm.j1_max, s.not_a_setting, s.arm.nothing, s.dry_run\n"
    )
    assert settings_read_in(source, FIELDS) == {
        "motion.tol_home",
        "arm.speed",
        "arm.j1_max",
        "dry_run",
    }


@pytest.mark.parametrize("module", [m for m, _ in reading_modules()])
def test_a_module_declares_exactly_what_it_reads(module: str) -> None:
    mod = importlib.import_module(module)
    read = settings_read_in(inspect.getsource(mod), FIELDS)
    declared = set(mod.SETTINGS_READ)
    assert declared == read, (
        f"{module}.SETTINGS_READ: add {sorted(read - declared)}, remove {sorted(declared - read)}"
    )


def test_every_task_module_that_reads_a_setting_declares_it() -> None:
    declaring = {m for m, _ in reading_modules()}
    assert SAFE_ARM_MODULE in declaring
    readers = []
    for task in TASKS:
        pkg = importlib.import_module(f"mecharm.runtime.{task}")
        for name in [pkg.__name__, *(f"{pkg.__name__}.{i.name}" for i in pkgutil.iter_modules(pkg.__path__))]:  # fmt: skip
            if settings_read_in(inspect.getsource(importlib.import_module(name)), FIELDS):
                readers.append(name)
    assert readers, "the scan found no stage module reading a setting"
    assert not [m for m in readers if m not in declaring], "declare SETTINGS_READ in these"
