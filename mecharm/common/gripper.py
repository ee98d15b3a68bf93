"""The gripper's numbers, in one place: what each command sends and how long it takes.

The SDK's gripper value runs 0 (closed) .. 100 (open). The rig opens with
``set_gripper_state(0, speed)``, which drives the jaws fully open (value 100), and
closes with ``set_gripper_value(20, 100)``; after either it waits 2.0 s for the
jaws to get there. The runtime sends these, the recorder writes the value sent,
and the exporter uses the same settle time for when the observed gripper follows
the command. See docs/runtime.md ("Gripper").
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "GRIPPER_CLOSE_VALUE",
    "GRIPPER_MAX",
    "GRIPPER_MIN",
    "GRIPPER_OPEN_VALUE",
    "GRIPPER_SETTLE_S",
]

GRIPPER_MIN: Final = 0
GRIPPER_MAX: Final = 100
#: where ``set_gripper_state(0)`` (open) drives the jaws
GRIPPER_OPEN_VALUE: Final = 100
#: the rig's close command: ``set_gripper_value(20, 100)``
GRIPPER_CLOSE_VALUE: Final = 20
#: real-rig seconds the jaws take to follow a command (the runtime waits this long)
GRIPPER_SETTLE_S: Final = 2.0
