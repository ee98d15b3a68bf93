"""The tasks this runtime can run, by name: the one list a new task is added to.

A task is a package that makes an ``engine.Task`` (its stages, their bodies, its way out
after a stop, its context and its records). The runtime runs the task its settings name
(``task:``; ``mecharm-runtime --task``); the ledger, the export and the report find a
task's columns and success rule here by the name in a root's folders (docs/tasks.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mecharm.common.config import did_you_mean
from mecharm.common.layout import DEFAULT_TASK, LEDGER_SUFFIX
from mecharm.runtime.engine import Task
from mecharm.runtime.lift_return import TASK as LIFT_RETURN
from mecharm.runtime.pick_place import TASK as PICK_PLACE
from mecharm.runtime.records.outcome import TaskRecords
from mecharm.runtime.rollout import TASK as ROLLOUT

__all__ = ["TASKS", "UnknownTask", "get_task", "records_for_ledger", "task_records"]

#: every task, by name (``DEFAULT_TASK`` first)
TASKS: dict[str, Task[Any, Any]] = {t.name: t for t in (PICK_PLACE, LIFT_RETURN, ROLLOUT)}
assert DEFAULT_TASK in TASKS, "the default task must be registered"
for _name, _task in TASKS.items():
    assert _task.records.task == _name, f"task {_name}: its records name {_task.records.task}"


class UnknownTask(ValueError):
    """A task name that no package registers; the message lists the known ones."""


def get_task(name: str) -> Task[Any, Any]:
    """The task called ``name``; UnknownTask (with the names there are) when none is."""
    try:
        return TASKS[name]
    except KeyError:
        raise UnknownTask(
            f"unknown task {name!r}" + did_you_mean(name, list(TASKS), "tasks")
        ) from None


def task_records(name: str) -> TaskRecords:
    """The records of the task called ``name`` (UnknownTask when none is)."""
    return get_task(name).records


def records_for_ledger(path: Path) -> TaskRecords:
    """The records of the task whose ledger ``path`` is (``<task>_ledger.csv``); a file
    named otherwise is read as the default task's."""
    name = Path(path).name
    task = name[: -len(LEDGER_SUFFIX)] if name.endswith(LEDGER_SUFFIX) else DEFAULT_TASK
    return task_records(task if task in TASKS else DEFAULT_TASK)
