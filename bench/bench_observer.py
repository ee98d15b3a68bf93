"""Observer overhead: trial time with every observer on and with none, quiet and with the
cores busy (docs/observer.md).

The observers are what records a trial without deciding anything in it: the recorder
process (side camera video, joint states; the runtime's events and its one side-frame
request) and the runtime's own top-camera video. A pair is two trials of the same scene on
fresh simulated rigs with the same sim seed, one with the observers on and one with them
off, in alternating order. The side camera streams in both members: a real side camera runs
whether or not anyone records it, and the simulator renders it only while someone watches,
so in the "off" member a plain reader (its own process, reading the bytes) keeps it on.

Each condition runs ``PAIRS`` pairs: quiet, and with ``BURNERS`` CPU-bound processes beside
the rig (an operator's computer is never idle: a browser, a viewer). Per pair: both trial
times and their difference, the stages' differences, whether both members decided the same
(the trace's decisions, lookups' rows, commanded angles within half a degree: pairs must,
the bench fails otherwise), what the observers recorded (side frames and drops, top frames)
and the time the runtime spent inside its observer calls. The figure is the median pair
difference (target < 1 % in both conditions).

Real time (time scale 1, the rig's): at 4x the arm's motions take a quarter of the time but
the cameras' frame intervals and the recorder's encoding do not, so a frame that arrives
late under contention weighs four times as much in the trial's time, and the runtime's work
is packed into fewer seconds (at 4x the same pairs differed by +2 to +7 % with two burners;
docs/observer.md). A condition's 8 pairs take about 14 minutes.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import Row, process_cpu_s
from bench.__main__ import cpu_burners
from bench.bench_top_video import same_decisions
from mecharm.common.config import load_settings
from mecharm.common.layout import DataRoot
from mecharm.common.logging import configure_logging
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.recorder_link import RecorderLink
from mecharm.runtime.rigsetup import open_rig
from mecharm.runtime.simcontrol import scene_next
from mecharm.runtime.trial import TrialSummary, run_trial
from mecharm.tools.simrig import start_recorder, start_sim_daemon

__all__ = ["rows", "run"]

SCALE = 1.0
SEED0 = 500
PAIRS = 8
BURNERS = 2
#: what "on" turns on; ``python -m bench.bench_observer --only recorder`` (or ``top_video``)
#: measures one observer alone
OBSERVERS = ("recorder", "top_video")

#: a side-camera viewer that is not the recorder: reads the MJPEG bytes and drops them
_READER = (
    "import sys, urllib.request\n"
    "with urllib.request.urlopen(sys.argv[1], timeout=30) as r:\n"
    "    while r.read(1 << 16):\n"
    "        pass\n"
)


class TimedLink(RecorderLink):
    """The real recorder link, with the time spent in its event calls summed up."""

    def __init__(self, inner: RecorderLink) -> None:
        super().__init__(inner.sender, inner.frame_timeout_s, data_root=inner.data_root)
        self.last_probe = inner.last_probe
        self.spent = 0.0
        self.calls = 0

    def _send(self, event: object) -> None:
        t0 = time.perf_counter()
        super()._send(event)
        self.spent += time.perf_counter() - t0
        self.calls += 1


async def _trial(
    settings: RuntimeSettings, seed: int, timed: bool
) -> tuple[TrialSummary, float, int]:
    async with open_rig(settings) as (rig, _client):
        link = TimedLink(rig.recorder) if timed else None
        if link is not None:
            rig.recorder = link
        cpu0 = time.process_time()
        t = await run_trial(rig, scene_seed=seed)
        cpu = time.process_time() - cpu0
        return t, (link.spent if link else 0.0), (link.calls if link else 0), cpu


def _member(tmp: Path, fk: Path, seed: int, on: bool, tag: str) -> dict[str, Any]:
    """One trial on a fresh rig; the observers on or off, the side camera streaming either way."""
    root = tmp / f"{tag}_{'on' if on else 'off'}"
    root.mkdir()
    logs = tmp / f"logs_{tag}_{'on' if on else 'off'}"
    rig = start_sim_daemon(logs, seed=seed, time_scale=SCALE)
    rec = reader = None
    try:
        scene_next(rig.control_url, seed)
        udp = None
        if on and "recorder" in OBSERVERS:
            rec, udp = start_recorder(logs, root, rig.side_url, key_file=tmp / "recorder.key")
        else:  # the side camera runs whether or not the recorder records it
            reader = subprocess.Popen(  # a program of its own, as a viewer is
                [sys.executable, "-c", _READER, rig.side_url], start_new_session=True
            )
        overrides = rig.runtime_overrides(
            root,
            SCALE,
            udp,
            log_level="warning",
            top_video=on and "top_video" in OBSERVERS,
            recorder_key_file=tmp / "recorder.key",
            fk_data_dir=fk,
            # a second trial of a scene must decide as the first: a height step of 0 keeps the
            # place height where the first started
            height_step_mm=0.0,
        )
        watched = {"sim": rig.daemon.proc.pid}
        if rec is not None:
            watched["recorder"] = rec.proc.pid
        cpu0 = {k: process_cpu_s(pid) for k, pid in watched.items()}
        t, spent, calls, runtime_cpu = asyncio.run(
            _trial(load_settings(RuntimeSettings, overrides=overrides), seed, on)
        )
        cpu = {k: round(process_cpu_s(pid) - cpu0[k], 2) for k, pid in watched.items()}
        cpu["runtime"] = round(runtime_cpu, 2)
    finally:
        if reader is not None:
            reader.kill()
            reader.wait()
        if rec is not None:
            rec.stop()
        rig.daemon.stop()
    runlog = json.loads(DataRoot(root).runlog(t.run_stem).read_text())
    return {
        "trial": t,
        "observer_calls_s": spent,
        "observer_calls": calls,
        "cpu_s": cpu,
        "side": {
            "status": t.recording.status,
            "frames": t.recording.frames,
            "fps": t.recording.fps,
        },
        "top": runlog.get("top_video", {}),
    }


def _pairs(tmp: Path, fk: Path, n: int, burners: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    label = f"{burners} burners" if burners else "quiet"
    with cpu_burners(burners):
        for i in range(n):
            seed = SEED0 + i
            order = (True, False) if i % 2 == 0 else (False, True)
            got = {on: _member(tmp, fk, seed, on, f"b{burners}_p{i}") for on in order}
            a, b = got[True], got[False]
            ta, tb = a["trial"], b["trial"]
            diff = same_decisions(ta, tb)
            stages = {
                k: round(ta.stage_times[k] - tb.stage_times[k], 3)
                for k in ta.stage_times
                if k in tb.stage_times
            }
            p = {
                "seed": seed,
                "first": "on" if order[0] else "off",
                "trial_s_on": round(ta.duration_s, 3),
                "trial_s_off": round(tb.duration_s, 3),
                "diff_pct": round(100 * (ta.duration_s / tb.duration_s - 1), 2),
                "stage_diff_s": stages,
                "same_decisions": diff == "",
                "difference": diff,
                "status": f"{ta.status}/{tb.status}",
                "observer_calls": a["observer_calls"],
                "cpu_s_on": a["cpu_s"],
                "cpu_s_off": b["cpu_s"],
                "observer_calls_pct_of_trial": round(
                    100 * a["observer_calls_s"] / ta.duration_s, 3
                ),
                "side": a["side"],
                "top": a["top"],
            }
            out.append(p)
            print(
                f"   {label} pair {i} seed {seed}: on {ta.duration_s:.3f} s, off {tb.duration_s:.3f} s"
                f" ({p['diff_pct']:+.2f} %), decisions {'same' if not diff else 'DIFFER: ' + diff}, "
                f"side {a['side']['status']} {a['side']['frames']} frames, top "
                f"{a['top'].get('status')} {a['top'].get('frames')} frames; CPU s on "
                f"{a['cpu_s']} off {b['cpu_s']}; stages "
                + ", ".join(
                    f"{k} {v:+.2f}"
                    for k, v in sorted(stages.items(), key=lambda kv: -abs(kv[1]))[:3]
                ),
                flush=True,
            )
    return out


def _summary(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    ratios = [p["trial_s_on"] / p["trial_s_off"] for p in pairs]
    stage_keys = sorted({k for p in pairs for k in p["stage_diff_s"]})
    return {
        "median_diff_pct": round(100 * (statistics.median(ratios) - 1), 2),
        "mean_diff_pct": round(100 * (statistics.mean(ratios) - 1), 2),
        "max_diff_pct": round(100 * (max(ratios) - 1), 2),
        "per_pair_diff_pct": [p["diff_pct"] for p in pairs],
        "decisions_identical": f"{sum(p['same_decisions'] for p in pairs)}/{len(pairs)}",
        "stage_median_diff_s": {
            k: round(statistics.median(p["stage_diff_s"].get(k, 0.0) for p in pairs), 3)
            for k in stage_keys
        },
        "observer_calls_pct_of_trial": round(
            statistics.median(p["observer_calls_pct_of_trial"] for p in pairs), 3
        ),
        "side_frames": [p["side"]["frames"] for p in pairs],
        "side_statuses": sorted({p["side"]["status"] for p in pairs}),
        "top_frames": [p["top"].get("frames") for p in pairs],
        "top_dropped": sum(int(p["top"].get("dropped") or 0) for p in pairs),
        "pairs": pairs,
    }


def run(quick: bool = False, conditions: tuple[str, ...] = ("quiet", "loaded")) -> dict[str, Any]:
    configure_logging("warning")
    n = 2 if quick else PAIRS
    out: dict[str, Any] = {
        "observers": list(OBSERVERS),
        "time_scale": SCALE,
        "pairs_per_condition": n,
        "burners": BURNERS,
        "target": "median pair difference < 1 % quiet and with the cores busy; decisions identical",
    }
    with tempfile.TemporaryDirectory(prefix="bench_observer_") as tmp:
        from mecharm.runtime.lookup import ensure_table

        fk = Path(tmp) / "fk"
        ensure_table(fk)  # built once, outside every trial
        for key, burners in (("quiet", 0), ("loaded", BURNERS)):
            if key not in conditions:
                continue
            load0 = os.getloadavg()[0]
            out[key] = _summary(_pairs(Path(tmp), fk, n, burners))
            out[key]["loadavg_1m"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    bad = [
        (key, p["seed"], p["difference"])
        for key in conditions
        for p in out[key]["pairs"]
        if not p["same_decisions"]
    ]
    if bad:  # the figures are printed first: the caller sees what was measured
        for k, v in out.items():
            print(f"   {k}: {v}")
        raise AssertionError(
            "pairs decided differently with the observers on and off: "
            + "; ".join(f"{key} seed {seed}: {d}" for key, seed, d in bad)
        )
    return out


def rows(result: dict[str, Any]) -> list[Row]:
    out = []
    for key, label in (
        ("quiet", "quiet"),
        ("loaded", f"{result.get('burners', 2)} CPU burners beside"),
    ):
        r = result.get(key)
        if not isinstance(r, dict):
            continue
        out.append(
            Row(
                "runtime",
                f"trial time, every observer on vs off ({label}; "
                f"{result.get('pairs_per_condition')} same-seed pairs at {result.get('time_scale')}x)",
                f"median pair {r['median_diff_pct']:+.2f} % (max {r['max_diff_pct']:+.2f} %), "
                f"decisions identical {r['decisions_identical']}",
                "< 1 %, decisions identical",
                "the same scene and sim seed with the observers off",
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.bench_observer [--quick] [--quiet|--loaded] [--only OBSERVER]``."""
    import argparse

    global OBSERVERS
    p = argparse.ArgumentParser(prog="python -m bench.bench_observer")
    p.add_argument("--quick", action="store_true", help="2 pairs per condition")
    p.add_argument("--quiet", action="store_true", help="only the quiet pairs")
    p.add_argument("--loaded", action="store_true", help="only the pairs beside the burners")
    p.add_argument("--only", choices=OBSERVERS, help="turn on this observer alone")
    args = p.parse_args(argv)
    if args.only:
        OBSERVERS = (args.only,)
    conds = tuple(c for c in ("quiet", "loaded") if getattr(args, c)) or ("quiet", "loaded")
    print(json.dumps(run(quick=args.quick, conditions=conds), indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
