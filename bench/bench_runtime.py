"""Runtime benchmark on the simulated rig (daemon + workcell as a real process).

Figures:
* sim success rate over random scenes (pick and place both judged yes; target >= 90 %);
* stage timings of those trials (mean seconds per stage, time-scaled run).

The observers' cost (recorder and top video on vs off, quiet and with the cores busy) is
``bench_observer``'s.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench import Row
from mecharm.common.config import load_settings
from mecharm.common.logging import configure_logging
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.rigsetup import open_rig
from mecharm.runtime.simcontrol import scene_next
from mecharm.runtime.trial import TrialSummary, run_trial
from mecharm.tools.simrig import SimRig, start_sim_daemon

SCALE = 20.0


async def _trials(
    settings: RuntimeSettings, rig_urls: SimRig, seeds: list[int]
) -> list[TrialSummary]:
    out: list[TrialSummary] = []
    async with open_rig(settings) as (rig, _client):
        for seed in seeds:
            await asyncio.to_thread(scene_next, rig_urls.control_url, seed)
            out.append(await run_trial(rig, scene_seed=seed))
    return out


def run(quick: bool = False) -> dict[str, Any]:
    configure_logging("warning")
    n_rate = 5 if quick else 20
    with tempfile.TemporaryDirectory(prefix="bench_runtime_") as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        rig = start_sim_daemon(Path(tmp) / "logs_rate", seed=500, time_scale=SCALE)
        try:
            settings = load_settings(
                RuntimeSettings,
                overrides=rig.runtime_overrides(root, SCALE, None, log_level="warning"),
            )
            rate = asyncio.run(_trials(settings, rig, [1000 + i for i in range(n_rate)]))
        finally:
            rig.daemon.stop()
    ok = [t for t in rate if t.succeeded]  # the task's own rule: both verdicts yes
    stages: dict[str, list[float]] = {}
    for t in rate:
        for k, v in t.stage_times.items():
            stages.setdefault(k, []).append(v)
    failures = [f"seed {t.scene_seed}: {t.reason or t.verdicts}" for t in rate if t not in ok]
    return {
        "time_scale": SCALE,
        "success_rate": round(len(ok) / len(rate), 3),
        "success_scenes": f"{len(ok)}/{len(rate)}",
        "success_target": ">= 0.90",
        "failures": failures,
        "stage_mean_s": {k: round(statistics.mean(v), 3) for k, v in stages.items()},
        "trial_s_mean": round(statistics.mean(t.duration_s for t in rate), 2),
    }


def rows(result: dict[str, Any]) -> list[Row]:
    if "success_scenes" not in result:
        return []
    scale = result.get("time_scale")
    return [
        Row(
            "runtime",
            f"pick and place on random simulated scenes ({scale:g}x)",
            f"{result['success_scenes']} placed, trial mean {result['trial_s_mean']} s",
            ">= 90 %",
            "—",
        )
    ]


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
