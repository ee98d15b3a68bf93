"""Leaders for the mecharm270 robot (docs/lerobot-robot.md, "Leaders"):

- ``--teleop.type=mecharm_scripted``: a fixed joint-space path, the same every episode,
  so ``lerobot-record`` and ``lerobot-teleoperate`` run on the simulated rig with nobody
  at a leader arm;
- ``--teleop.type=mecharm_leader``: a second mechArm moved by hand (drag-teach), its
  servos released and its joints read through its own ``mecharm-daemon``;
- ``--teleop.type=mecharm_keyboard``: keys in the terminal nudge a pose from HOME.

The robot's safe arm bounds every step a leader asks and guards every pose.
"""

from lerobot_teleoperator_mecharm.config_leaders import MecharmKeyboardConfig, MecharmLeaderConfig
from lerobot_teleoperator_mecharm.config_scripted import MecharmScriptedConfig
from lerobot_teleoperator_mecharm.leaders import MecharmKeyboard, MecharmLeader
from lerobot_teleoperator_mecharm.scripted import MecharmScripted

__all__ = [
    "MecharmKeyboard",
    "MecharmKeyboardConfig",
    "MecharmLeader",
    "MecharmLeaderConfig",
    "MecharmScripted",
    "MecharmScriptedConfig",
]
