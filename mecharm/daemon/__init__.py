"""The Pi arm daemon: serves the mechArm 270 (real or simulated) over TCP.

``protocol`` (wire models, imported by the runtime's client), ``server``
(ArmServer / run_server), ``backends`` (ArmBackend, sim, mycobot), ``sim``
(SimArm, firmware emulator, simulated workcell), ``cli`` (mecharm-daemon).
"""

from __future__ import annotations

__all__: list[str] = []
