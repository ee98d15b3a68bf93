"""``python -m mecharm.recorder`` = ``mecharm-recorder``."""

from __future__ import annotations

import sys

from mecharm.recorder.cli import main

__all__: list[str] = []

sys.exit(main())
