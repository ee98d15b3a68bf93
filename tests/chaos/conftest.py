"""Chaos suite fixtures (docs/reliability.md): real mounts, real processes, real faults.

The ``tmpfs`` fixture lives in tests/conftest.py (the export's disk-full test uses it too).

Every test here is marked ``chaos`` (``make test`` and CI run them; ``-m "not chaos"``
skips them). Faults that need privileges (a tmpfs that fills up, ``umount -l`` under a
running trial) skip with a printed reason where they are not available; CI runs as
root on Linux, where they are. Traffic goes only to 127.0.0.1.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.chaos)
