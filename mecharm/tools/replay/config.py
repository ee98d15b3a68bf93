"""Replay settings (``MECHARM_REPLAY_`` env prefix, ``configs/replay.yaml``, CLI flags win).

Only where the replay finds the things a trace refers to by checksum or path: the
FK table and the two approach arcs. The decision constants are not here on purpose:
they come from the trace itself (``--set KEY=VALUE`` changes one for a what-if).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from mecharm.common.config import RigSettings
from mecharm.common.layout import default_data_root

__all__ = ["ReplaySettings"]


class ReplaySettings(RigSettings):
    model_config = SettingsConfigDict(env_prefix="MECHARM_REPLAY_")

    #: the FK table is ``{data_dir}/fk/fk_table.csv`` (the default table is built there when missing)
    data_dir: Path = Field(default_factory=default_data_root)
    #: an FK table CSV to use instead of the data dir's
    table: Path | None = None
    #: approach arcs; None = the paths the trace recorded (relative to the working directory)
    arc_pick: Path | None = None
    arc_place: Path | None = None
    #: replay even when the table checksum differs from the recorded one (the diff then shows the effect)
    allow_table_mismatch: bool = False
    #: how many differing decisions the diff prints after the first one
    max_shown: int = Field(10, ge=1, le=100000)
    #: the stage machine's own log lines during a replay (exit steps that fail after a divergence warn)
    log_level: str = "error"
