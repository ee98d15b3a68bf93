"""`mecharm replay`: re-run a recorded trial's decisions from its trace and compare them.

Modules: ``tracefile`` (read and check a trace), ``feed`` (ports serving the recorded
inputs), ``runner`` (the stage machine on those ports), ``compare`` (decision diff),
``cli`` (the command), ``config`` (ReplaySettings). The test corpus is recorded by
``mecharm_dev.make_corpus``.
"""

from __future__ import annotations

__all__: list[str] = []
