"""A recording the exporter would refuse is never called ok, through the whole rig
(docs/recorder.md, "When a recording is not ok").

``make run``'s own set-up (``tools.demo.start_demo_rig``: the simulated rig, the recorder,
one runtime session with its log file), with the simulator's ``drop_frames`` fault on the
side camera (97 % of its frames lost) before the first trial; then the ledger, the report
and the exporter are asked what they make of it:

    .venv/bin/python -m mecharm_dev.stall_check [ROOT]

Exit 0 when the trial line, the ledger and the report all say ``stalled`` and the exporter
refuses the recording; 1 otherwise.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import sys
import tempfile
import urllib.request
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

from mecharm.common.layout import DataRoot
from mecharm.runtime.cli import session_logging
from mecharm.runtime.service import session_console
from mecharm.sim.profile import load_profile
from mecharm.tools.cli import main as mecharm
from mecharm.tools.demo import run_scenes, start_demo_rig


def post_fault(control_url: str, spec: dict[str, Any]) -> None:
    """Arm one of the simulator's faults (``POST {control_url}/faults``,
    docs/simulation-faults.md); an HTTP error raises."""
    req = urllib.request.Request(
        control_url + "/faults", data=json.dumps(spec).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    urllib.request.urlopen(req, timeout=10).close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else Path(tempfile.mkdtemp(prefix="stall_check_"))
    root.mkdir(parents=True, exist_ok=True)
    rig = start_demo_rig(root, trials=1, seed=7, time_scale=5.0, sim_profile="rig",
                         profile=load_profile("rig"))  # fmt: skip
    out = io.StringIO()
    try:
        post_fault(rig.control_url, {"fault": "drop_frames", "camera": "side", "fraction": 0.97})
        console = session_console(rig.settings, out)
        try:
            with session_logging(rig.settings, console):
                asyncio.run(run_scenes(rig.settings, rig.control_url, 7, console))
        finally:
            console.close()
    finally:
        rig.stop()
    line = next((x for x in out.getvalue().splitlines() if " rec " in x), "")
    with DataRoot(root).ledger.open(encoding="utf-8", newline="") as fh:
        row = list(csv.DictReader(fh))[-1]  # this session's trial: the root may hold others
    with redirect_stdout(io.StringIO()):
        mecharm(["report", str(root)])
        mecharm(["export", "lerobot", "--root", str(root), "--out", str(root / "dataset"),
                 "--select", "all", "--allow-time-scaled", "--no-progress"])  # fmt: skip
    page = DataRoot(root).report.read_text(encoding="utf-8")
    manifest = root / "dataset" / "meta" / "mecharm_export.json"
    exported = [
        e for e in (json.loads(manifest.read_text())["episodes"] if manifest.is_file() else [])
        if e["run_stem"] == row["run_stem"]
    ]  # fmt: skip
    checks = {
        "trial line": "rec stalled" in line and "NOT EXPORTABLE: camera stalled" in line,
        "ledger": row["recording_status"] == "stalled",
        "report": ">stalled<" in page,
        "export refuses": not exported,
    }
    print(f"trial line: {line.strip()}")
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'} {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
