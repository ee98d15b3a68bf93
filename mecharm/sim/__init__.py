"""The simulated rig: the arm model (``arm``), the serial firmware emulator
(``firmware``) and the simulated workcell (scene, renderer, camera server)."""

from __future__ import annotations

from mecharm.sim.arm import HOME, SimArm, SimArmConfig, SimArmDataError, SimArmFaults

__all__ = ["HOME", "SimArm", "SimArmConfig", "SimArmDataError", "SimArmFaults"]
