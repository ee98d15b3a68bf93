"""A scripted leader for the mecharm270 robot (``--teleop.type=mecharm_scripted``).

It plays a fixed joint-space path, the same every episode, so ``lerobot-record`` and
``lerobot-teleoperate`` run on the simulated rig started on its own, with nobody at a
leader arm (docs/lerobot-robot.md). The robot's safe arm bounds every step it asks.
"""

from lerobot_teleoperator_mecharm.config_scripted import MecharmScriptedConfig
from lerobot_teleoperator_mecharm.scripted import MecharmScripted

__all__ = ["MecharmScripted", "MecharmScriptedConfig"]
