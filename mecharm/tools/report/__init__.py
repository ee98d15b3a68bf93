"""`mecharm report ROOT`: one self-contained HTML page about a data root's trials (docs/report.md).

``collect`` reads the ledger, run logs, traces and recording metas; ``stats`` computes the
numbers; ``svg`` draws the charts; ``render`` writes the page; ``cli`` is the command. The
Chromium check of the page is a development check (``mecharm_dev.browser_check``,
``make report-check``).
"""

from __future__ import annotations

from mecharm.tools.report.collect import BadRootError, RunData, TrialData, collect
from mecharm.tools.report.render import render

__all__ = ["BadRootError", "RunData", "TrialData", "collect", "render"]
