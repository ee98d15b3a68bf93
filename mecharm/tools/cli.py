"""`mecharm` — the offline tools: fk, ledger, recording, export, replay, report, view, eval, doctor.

Each tool group lives in its own module and registers its sub-commands through
``register(subparsers)``; this file only dispatches. A group is imported only
when its command runs, so the tools stay independent.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ["main"]

#: command -> (module with ``register(subparsers)``, one-line help)
TOOL_GROUPS: dict[str, tuple[str, str]] = {
    "fk": (
        "mecharm.tools.fktable.cli",
        "FK table: build, import, adopt, lookup, adopt-arc, holes, clusters, fill",
    ),
    "ledger": ("mecharm.tools.ledger_cli", "trial ledger: verify, migrate"),
    "recording": (
        "mecharm.tools.recording_cli",
        "recordings: repair what a killed recorder left (status crashed)",
    ),
    "export": ("mecharm.tools.export.cli", "datasets: lerobot export, verify"),
    "replay": ("mecharm.tools.replay.cli", "re-run a dry-run trace and compare every decision"),
    "report": (
        "mecharm.tools.report.cli",
        "run report: one HTML page (success, failures, stages, memory, recordings)",
    ),
    "view": ("mecharm.tools.view.cli", "Rerun recording of a trial (open, --save, --follow live)"),
    "eval": (
        "mecharm.tools.evaluation",
        "a policy's rollouts on the simulated rig: success rate with its 95%% interval",
    ),
    "doctor": (
        "mecharm.tools.doctor",
        "check the whole rig (daemon, envelope, camera, recorder, data root, FK table, arcs)",
    ),
}


def build_parser(group: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mecharm", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(
        dest="group", required=True, metavar="{" + ",".join(TOOL_GROUPS) + "}"
    )
    for name, (module, help_text) in TOOL_GROUPS.items():
        gp = sub.add_parser(name, help=help_text)
        if name == group:
            importlib.import_module(module).register(gp)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    group = argv[0] if argv and argv[0] in TOOL_GROUPS else None
    args = build_parser(group).parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        build_parser(group).parse_args([*argv, "--help"])
        return 2
    return int(func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
