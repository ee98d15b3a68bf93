"""Whole sim trials through the daemon with a chosen contact engine (a profile file: base ideal
+ ``contact: {engine: ENGINE}``), one daemon at time scale 20, one trial per seed; prints one
JSON line per trial with the runtime's verdicts and the workcell's truth
(docs/simulation-contact.md, "Whole trials"):
``PYTHONPATH=. python -m bench.contact_trials mujoco 1 2 3 4 5`` (ENGINE: ``rules``, ``mujoco``,
or ``rig`` / ``harsh`` for that profile's whole contact part)."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

from mecharm.common.config import load_settings
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.lookup import ensure_table
from mecharm.runtime.rigsetup import open_rig
from mecharm.runtime.simcontrol import scene_next
from mecharm.runtime.trial import TrialSummary, run_trial
from mecharm.sim.contact import CONTACT_PROFILES
from mecharm.tools.simrig import start_sim_daemon

SCALE = 20.0
_ENGINES = ("rules", "mujoco", *CONTACT_PROFILES)
if len(sys.argv) < 3 or sys.argv[1] not in _ENGINES or not all(a.isdigit() for a in sys.argv[2:]):
    sys.exit(
        f"usage: python -m bench.contact_trials ENGINE SEED [SEED ...]; ENGINE one of "
        f"{list(_ENGINES)}, SEED a non-negative integer"
    )
engine = sys.argv[1]
seeds = [int(s) for s in sys.argv[2:]]
tmp = Path(tempfile.mkdtemp(prefix="contact_trials_"))
prof = tmp / "contact.yaml"
# ENGINE: rules | mujoco, or a built-in profile's contact part alone (rig | harsh)
contact = (
    CONTACT_PROFILES[engine].model_dump() if engine in CONTACT_PROFILES else {"engine": engine}
)
prof.write_text(yaml.safe_dump({"base": "ideal", "contact": contact}))
fk = tmp / "fk"
fk.mkdir()
ensure_table(fk)
rig = start_sim_daemon(
    tmp / "logs", seed=7, time_scale=SCALE, extra_args=["--sim-profile", str(prof)]
)
try:
    for seed in seeds:
        root = tmp / f"root{seed}"
        root.mkdir()
        s = load_settings(
            RuntimeSettings,
            overrides=rig.runtime_overrides(
                root, SCALE, fk_data_dir=fk, release_side_check=False, height_step_mm=0.0
            ),
        )
        scene_next(rig.control_url, seed)

        async def one(s: RuntimeSettings = s, seed: int = seed) -> TrialSummary:
            async with open_rig(s) as (r, _c):
                return await run_trial(r, scene_seed=seed)

        t0 = time.monotonic()
        t = asyncio.run(one())
        with urllib.request.urlopen(
            rig.control_url.rstrip("/") + "/scene/truth", timeout=10
        ) as resp:
            truth = json.loads(resp.read())
        ev = [{k: v for k, v in e.items() if k not in ("ts",)} for e in truth["events"]]
        print(
            json.dumps(
                {
                    "engine": engine,
                    "seed": seed,
                    "status": t.status,
                    "reason": t.reason,
                    "pick": t.pick_verdict,
                    "place": t.place_verdict,
                    "attempts": t.pick_attempts,
                    "place_outcome": truth["place_outcome"],
                    "upright": truth["block"]["upright"],
                    "collisions": [c["kind"] for c in truth["collisions"]],
                    "events": ev,
                    "wall_s": round(time.monotonic() - t0, 1),
                }
            ),
            flush=True,
        )
finally:
    rig.daemon.stop()
