"""Typed settings of the ``mecharm fk`` tools: where the table and the arcs are.

defaults < ``--config`` YAML < environment (``MECHARM_FK_`` prefix, e.g.
``MECHARM_FK_DATA_DIR=/mnt/ssd``) < command-line flags.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from mecharm.common.config import RigSettings
from mecharm.common.layout import default_data_root
from mecharm.runtime.lookup.j0 import DEFAULT_PICK_ARC, DEFAULT_PLACE_ARC
from mecharm.runtime.lookup.table import J1_SAFE_MAX, default_table_path

__all__ = ["FkToolSettings"]


class FkToolSettings(RigSettings):
    """Paths of the FK tools; ``table`` overrides the data dir's table (docs/data-root.md).

    ``j1_max`` is the runtime's limit (``MECHARM_FK_J1_MAX``): set it alike so that
    ``fk lookup`` and the hole map see the rows a trial may choose."""

    model_config = SettingsConfigDict(env_prefix="MECHARM_FK_")

    data_dir: Path = Field(default_factory=default_data_root)
    table: Path | None = None
    pick_arc: Path = DEFAULT_PICK_ARC
    place_arc: Path = DEFAULT_PLACE_ARC
    log_level: Literal["debug", "info", "warning", "error"] = "warning"
    j1_max: float = Field(J1_SAFE_MAX, le=90.7)

    @property
    def table_path(self) -> Path:
        return self.table if self.table is not None else default_table_path(self.data_dir)
