"""LeRobot v3.0 dataset export of recorded trials, and its torch-free verifier.

The recordings stay the source of truth: a dataset is derived from them and can be
regenerated at will (``mecharm export lerobot``, ``mecharm export verify``).
"""

from __future__ import annotations

__all__: list[str] = []
