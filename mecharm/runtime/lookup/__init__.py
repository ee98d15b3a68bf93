"""Pose lookups of the rig (docs/lookup.md): the FK table, fk_lookup, j0_lookup and the hole map.

The runtime imports from here only; the modules behind it are: ``table`` (CSV,
checksum, cache, archive), ``build`` (lattices, default table), ``index`` (the
x-z grid), ``fk_lookup``, ``j0`` (adopted arc poses), ``holes`` and ``cli``.
"""

from __future__ import annotations

from mecharm.runtime.lookup.build import build_table, default_rows, ensure_table, warmed
from mecharm.runtime.lookup.fk_lookup import PHASES, FkLookupResult, fk_lookup
from mecharm.runtime.lookup.j0 import ArcPose, J0LookupResult, adopt_arc, j0_lookup, load_arc
from mecharm.runtime.lookup.table import (
    ChecksumMismatch,
    FkTable,
    TableError,
    adopt_table,
    default_table_path,
    load_table,
)

__all__ = [
    "PHASES",
    "ArcPose",
    "ChecksumMismatch",
    "FkLookupResult",
    "FkTable",
    "J0LookupResult",
    "TableError",
    "adopt_arc",
    "adopt_table",
    "build_table",
    "default_rows",
    "default_table_path",
    "ensure_table",
    "fk_lookup",
    "j0_lookup",
    "load_arc",
    "load_table",
    "warmed",
]
