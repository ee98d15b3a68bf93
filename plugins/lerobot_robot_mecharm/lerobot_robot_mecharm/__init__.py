"""The mechArm 270 rig as a LeRobot robot (``--robot.type=mecharm270``).

Installed beside lerobot (``pip install ./plugins/lerobot_robot_mecharm``; never on the
Pi), this package is imported by lerobot's ``register_third_party_plugins()`` because of
its name; importing it registers ``MecharmConfig``. The robot itself is
``mecharm.runtime.robot.MecharmRobot``: the daemon over TCP with its token, every action
through the safe arm (docs/lerobot-robot.md).
"""

from lerobot_robot_mecharm.config_mecharm import MecharmConfig
from lerobot_robot_mecharm.mecharm import Mecharm

__all__ = ["Mecharm", "MecharmConfig"]
