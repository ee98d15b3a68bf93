"""The rig id rule, in one place: the runtime writes the id into every run log and the
export writes it into every dataset episode, so both must accept the same names.

A rig id is 1-64 characters of letters, digits, '.', '_' or '-' (safe in file names,
URLs and logs); docs/lerobot-outcomes.md says where it is used.
"""

from __future__ import annotations

import re
from typing import TypeGuard

__all__ = ["RIG_ID_RE", "check_rig_id", "is_rig_id", "rig_id_from"]

RIG_ID_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")


def is_rig_id(value: object) -> TypeGuard[str]:
    """``value`` is a valid rig id."""
    return isinstance(value, str) and RIG_ID_RE.fullmatch(value) is not None


def check_rig_id(value: str) -> str:
    """``value`` if it is a valid rig id; else ValueError saying the rule (for validators)."""
    if not is_rig_id(value):
        raise ValueError(
            f"rig_id {value[:80]!r} must be 1-64 characters of letters, digits, '.', '_' or '-' "
            "(it names the rig in run logs and datasets); set rig_id to such a name"
        )
    return value


def rig_id_from(name: str, empty: str = "rig") -> str:
    """A valid rig id made from any name (a host or folder name): other characters
    become '-', cut to 64; ``empty`` when nothing is left."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", name)[:64] or empty
