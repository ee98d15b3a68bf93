"""Trial time with and without the top camera's video (docs/top-camera.md).

Pairs of trials on the simulated rig (daemon + workcell as a real process, its top camera
over MJPEG as on the rig), the same scene seed and sim seed in both members, one with
``top_video`` on and one off, interleaved (the order alternates pair by pair) and each on a
fresh simulated rig so both members meet the same settle errors. Each pair must decide
the same (the trace's decision events, lookups' table rows, commanded angles within the
camera noise); the figure is the per-pair and median difference of the trial's time
(target < 1 %), with what the recording kept (frames, fps, drops, file size).

Run in real time (time scale 1, the rig's): at 20x a trial is CPU-bound on a 2-core
machine and measures the machine, not the observer, and even at 4x a shared machine's load
swings the trial time by tens of %. The CPU the recording adds to the runtime process (and
the writer thread's own CPU time, an upper bound of how long it can hold the GIL) is the
load-independent figure beside it.

The simulated camera renders in wall time, so two runs of one scene see different frames
(sensor noise, the arm caught at another instant) and a decision near a threshold (one more
servo step) can go either way with the recording on or off alike. A pair that decides
differently is therefore run again with the recording off in both members: when that
control differs too, the difference is the simulator's, reported as such; when it does not,
the bench fails.
"""

from __future__ import annotations

import asyncio
import csv
import itertools
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import Row, has
from mecharm.common.config import load_settings
from mecharm.common.layout import DataRoot
from mecharm.common.logging import configure_logging
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.records.trace import read_trace
from mecharm.runtime.rigsetup import open_rig
from mecharm.runtime.simcontrol import scene_next
from mecharm.runtime.trial import TrialSummary, run_trial
from mecharm.tools.simrig import start_sim_daemon

SCALE = 1.0
SEED0 = 700
#: run by name only (``python -m bench top_video``): bench_observer's pairs have the top
#: video on with every other observer, and ``--only top_video`` alone
IN_FULL_RUN = False


def _settings(root: Path, daemon_port: int, top_url: str, top_video: bool) -> RuntimeSettings:
    return load_settings(
        RuntimeSettings,
        overrides={
            "data_root": root,
            "daemon_port": daemon_port,
            "top_camera": top_url,
            "recorder_enabled": False,
            "time_scale": SCALE,
            "log_level": "warning",
            "top_video": top_video,
            # a second trial of a scene must decide as the first: a height step of 0 keeps the
            # place height where the first started
            "height_step_mm": 0.0,
        },
    )


async def _one(settings: RuntimeSettings, seed: int) -> tuple[TrialSummary, float, float, float]:
    """The trial, its run_trial wall time, the runtime process's CPU seconds in it and the
    top-video writer thread's share of them."""
    async with open_rig(settings) as (rig, _client):
        t0, c0 = time.perf_counter(), time.process_time()
        t = await run_trial(rig, scene_seed=seed)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        writer = rig.top_video.last_cpu_s if rig.top_video is not None else 0.0
        return t, wall, cpu, writer


def decisions(t: TrialSummary) -> list[tuple[Any, ...]]:
    """What must match within a pair: each decision, transition and result in order, the
    lookups' rows; commanded angles are compared to within half a degree separately."""
    out: list[tuple[Any, ...]] = []
    for e in read_trace(t.trace_path):
        if e["event"] not in ("decision", "transition", "result"):
            continue
        v = e.get("value") if isinstance(e.get("value"), dict) else {}
        row = v.get("selected_index") if e.get("kind") == "lookup" else None
        out.append((e["event"], e.get("kind"), e.get("stage"), e.get("outcome"), row))
    return out


def _commands(t: TrialSummary) -> list[list[float]]:
    return [
        e["value"]["angles"]
        for e in read_trace(t.trace_path)
        if e["event"] == "decision" and e.get("kind") == "command"
    ]


def same_decisions(a: TrialSummary, b: TrialSummary) -> str:
    """ "" when the two trials decided the same, else the first difference."""
    da, db = decisions(a), decisions(b)
    if da != db:
        k = next((i for i, (x, y) in enumerate(zip(da, db, strict=False)) if x != y), len(da))
        return f"decision {k}: {da[k] if k < len(da) else None} vs {db[k] if k < len(db) else None}"
    for k, (x, y) in enumerate(zip(_commands(a), _commands(b), strict=True)):
        if max(abs(p - q) for p, q in zip(x, y, strict=True)) >= 0.5:
            return f"command {k}: {x} vs {y}"
    if (a.status, a.pick_verdict, a.place_verdict) != (b.status, b.pick_verdict, b.place_verdict):
        return f"outcome {a.status} {a.pick_verdict}/{a.place_verdict} vs {b.status} ..."
    return ""


def _recorded(root: Path, t: TrialSummary) -> dict[str, Any]:
    layout = DataRoot(root)
    with open(layout.top_frame_log(t.run_stem), newline="") as fh:
        rows = list(csv.DictReader(fh))
    ts = [float(r["capture_ts"]) for r in rows]
    gaps = sorted(b - a for a, b in itertools.pairwise(ts))
    return {
        "frames": len(rows),
        "fps": round((len(ts) - 1) / (ts[-1] - ts[0]), 2) if len(ts) > 1 else 0.0,
        "max_gap_s": round(gaps[-1], 3) if gaps else None,
        "mb": round(layout.top_video(t.run_stem).stat().st_size / 1e6, 2),
    }


def run(quick: bool = False) -> dict[str, Any]:
    configure_logging("warning")
    n = 2 if quick else 8
    load0 = os.getloadavg()[0]
    pairs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench_top_video_") as tmp:
        fk = Path(tmp) / "fk"  # one FK table for every trial (built once)
        for i in range(n):
            seed = SEED0 + i
            got: dict[bool, tuple[TrialSummary, float, float, float, Path]] = {}
            order = [True, False] if i % 2 == 0 else [False, True]
            for on in order:
                root = Path(tmp) / f"pair{i}_{'on' if on else 'off'}"
                root.mkdir()
                rig = start_sim_daemon(Path(tmp) / f"logs_{i}_{on}", seed=seed, time_scale=SCALE)
                try:
                    scene_next(rig.control_url, seed)
                    s = _settings(root, rig.daemon_port, rig.top_url, on)
                    s = s.model_copy(update={"fk_data_dir": fk})
                    t, wall, cpu, writer = asyncio.run(_one(s, seed))
                finally:
                    rig.daemon.stop()
                got[on] = (t, wall, cpu, writer, root)
            t_on, wall_on, cpu_on, writer_cpu, root_on = got[True]
            t_off, wall_off, cpu_off, _, _ = got[False]
            diff = same_decisions(t_on, t_off)
            control = _control(tmp, fk, seed) if diff else ""
            runlog = DataRoot(root_on).runlog(t_on.run_stem)
            tv = json.loads(runlog.read_text())["top_video"]
            pairs.append(
                {
                    "seed": seed,
                    "first": "on" if order[0] else "off",
                    "trial_s_on": round(t_on.duration_s, 3),
                    "trial_s_off": round(t_off.duration_s, 3),
                    "diff_pct": round(100 * (t_on.duration_s / t_off.duration_s - 1), 2),
                    "run_trial_wall_s_on": round(wall_on, 3),
                    "run_trial_wall_s_off": round(wall_off, 3),
                    "cpu_s_on": round(cpu_on, 3),
                    "cpu_s_off": round(cpu_off, 3),
                    "writer_cpu_s": round(writer_cpu, 3),
                    "status": f"{t_on.status}/{t_off.status}",
                    "same_decisions": diff == "",
                    "difference": diff,
                    "control_differs": bool(control),
                    "control_difference": control,
                    "top_video": tv,
                    "recorded": _recorded(root_on, t_on) if tv["frames"] else {},
                }
            )
            print(
                f"   pair {i} seed {seed}: on {t_on.duration_s:.3f} s, off {t_off.duration_s:.3f}"
                f" s ({pairs[-1]['diff_pct']:+.2f} %), decisions "
                f"{'same' if not diff else 'DIFFER: ' + diff}"
                f"{'' if not diff else (' (off/off control differs too: ' + control + ')' if control else ' (off/off control same)')}"
                f", top video {tv['status']} "
                f"{tv['frames']} frames",
                flush=True,
            )
    diffs = [p["diff_pct"] for p in pairs]
    ratios = [p["trial_s_on"] / p["trial_s_off"] for p in pairs]
    walls = [p["run_trial_wall_s_on"] / p["run_trial_wall_s_off"] for p in pairs]
    same = sum(p["same_decisions"] for p in pairs)
    result = {
        "time_scale": SCALE,
        "pairs": n,
        "loadavg_1m_at_start": round(load0, 2),
        "loadavg_1m_at_end": round(os.getloadavg()[0], 2),
        "median_diff_pct": round(100 * (statistics.median(ratios) - 1), 2),
        "mean_diff_pct": round(100 * (statistics.mean(ratios) - 1), 2),
        "per_pair_diff_pct": diffs,
        "median_run_trial_wall_diff_pct": round(100 * (statistics.median(walls) - 1), 2),
        "target": "median < 1 % (trial time, top video on vs off, same seeds)",
        # load-independent: CPU the recording adds to the runtime process, per second of trial
        "runtime_cpu_s_on_off": [(p["cpu_s_on"], p["cpu_s_off"]) for p in pairs],
        "median_extra_cpu_pct_of_trial": round(
            100
            * statistics.median((p["cpu_s_on"] - p["cpu_s_off"]) / p["trial_s_on"] for p in pairs),
            2,
        ),
        "writer_thread_cpu_pct_of_trial": round(
            100 * statistics.median(p["writer_cpu_s"] / p["trial_s_on"] for p in pairs), 3
        ),
        "decisions_identical": f"{same}/{n}",
        "differing_pairs_whose_off_off_control_differs_too": sum(
            p["control_differs"] for p in pairs
        ),
        "recorded_fps": [p["recorded"].get("fps") for p in pairs],
        "recorded_frames": [p["top_video"]["frames"] for p in pairs],
        "dropped": [p["top_video"]["dropped"] for p in pairs],
        "statuses": [p["top_video"]["status"] for p in pairs],
        "mb_per_trial": [p["recorded"].get("mb") for p in pairs],
        "pair_details": pairs,
    }
    bad = [p for p in pairs if not p["same_decisions"] and not p["control_differs"]]
    if bad:  # the figures are printed first: the caller sees what was measured
        for k, v in result.items():
            print(f"   {k}: {v}")
        raise AssertionError(
            f"{len(bad)} pair(s) decided differently with the top video on, and the same "
            "seed twice with it off did not: "
            + "; ".join(f"seed {p['seed']}: {p['difference']}" for p in bad)
        )
    return result


def _control(tmp: str, fk: Path, seed: int) -> str:
    """The same seed twice with the recording off: "" when they decide alike."""
    runs = []
    for k in range(2):
        root = Path(tmp) / f"control{seed}_{k}"
        root.mkdir()
        rig = start_sim_daemon(Path(tmp) / f"logs_c{seed}_{k}", seed=seed, time_scale=SCALE)
        try:
            scene_next(rig.control_url, seed)
            s = _settings(root, rig.daemon_port, rig.top_url, False)
            runs.append(asyncio.run(_one(s.model_copy(update={"fk_data_dir": fk}), seed))[0])
        finally:
            rig.daemon.stop()
    return same_decisions(runs[0], runs[1])


def _member(args: list[str]) -> None:
    """One member of a concurrent pair, in its own process: prints its figures as JSON."""
    root, fk, port, top, seed, on = args
    configure_logging("warning")
    s = _settings(Path(root), int(port), top, on == "on")
    s = s.model_copy(update={"fk_data_dir": Path(fk)})
    t, wall, cpu, writer = asyncio.run(_one(s, int(seed)))
    out = {"trace": str(t.trace_path), "run_dir": str(t.run_dir), "duration_s": t.duration_s,
           "status": t.status, "pick": t.pick_verdict, "place": t.place_verdict,
           "cpu_s": cpu, "writer_cpu_s": writer, "wall_s": wall}  # fmt: skip
    print("MEMBER " + json.dumps(out), flush=True)


def run_concurrent(quick: bool = False) -> dict[str, Any]:
    """Both members of a pair at once, each in its own process against its own simulated rig
    (same seeds): the machine's load, which swings a sequential pair by tens of % here, is
    then the same for both. What the recording costs its own process (the GIL, its thread)
    shows in full; its CPU share of the machine is split between the two (the CPU figures
    of ``run`` give it)."""
    import subprocess
    import sys

    from mecharm.runtime.lookup import ensure_table

    configure_logging("warning")
    n = 2 if quick else 8
    load0 = os.getloadavg()[0]
    pairs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench_top_video_cc_") as tmp:
        fk = Path(tmp) / "fk"
        ensure_table(fk)  # built once, before both members load it
        for i in range(n):
            seed = SEED0 + i
            rigs = {}
            procs = {}
            try:
                for on in ("on", "off"):
                    rigs[on] = start_sim_daemon(
                        Path(tmp) / f"logs_{i}_{on}", seed=seed, time_scale=SCALE
                    )
                    scene_next(rigs[on].control_url, seed)
                for on in ("on", "off") if i % 2 == 0 else ("off", "on"):
                    root = Path(tmp) / f"pair{i}_{on}"
                    root.mkdir()
                    procs[on] = subprocess.Popen(
                        [sys.executable, "-m", "bench.bench_top_video", "--member", str(root),
                         str(fk), str(rigs[on].daemon_port), rigs[on].top_url, str(seed), on],
                        stdout=subprocess.PIPE, text=True,
                    )  # fmt: skip
                got = {}
                for on, proc in procs.items():
                    text, _ = proc.communicate(timeout=1800)
                    line = next(x for x in text.splitlines() if x.startswith("MEMBER "))
                    got[on] = json.loads(line[len("MEMBER ") :])
            finally:
                for rig in rigs.values():
                    rig.daemon.stop()
            a, b = got["on"], got["off"]
            ta = _Trace(Path(a["trace"]), a)
            tb = _Trace(Path(b["trace"]), b)
            diff = same_decisions(ta, tb)  # type: ignore[arg-type]
            pairs.append(
                {
                    "seed": seed,
                    "trial_s_on": round(a["duration_s"], 3),
                    "trial_s_off": round(b["duration_s"], 3),
                    "diff_pct": round(100 * (a["duration_s"] / b["duration_s"] - 1), 2),
                    "cpu_s_on": round(a["cpu_s"], 3),
                    "cpu_s_off": round(b["cpu_s"], 3),
                    "writer_cpu_s": round(a["writer_cpu_s"], 3),
                    "same_decisions": diff == "",
                    "difference": diff,
                }
            )
            print(
                f"   concurrent pair {i} seed {seed}: on {a['duration_s']:.3f} s, off "
                f"{b['duration_s']:.3f} s ({pairs[-1]['diff_pct']:+.2f} %), decisions "
                f"{'same' if not diff else 'DIFFER: ' + diff}",
                flush=True,
            )
    ratios = [p["trial_s_on"] / p["trial_s_off"] for p in pairs]
    return {
        "mode": "concurrent pairs (both members at once, separate processes and rigs)",
        "time_scale": SCALE,
        "pairs": n,
        "loadavg_1m_at_start": round(load0, 2),
        "loadavg_1m_at_end": round(os.getloadavg()[0], 2),
        "median_diff_pct": round(100 * (statistics.median(ratios) - 1), 2),
        "mean_diff_pct": round(100 * (statistics.mean(ratios) - 1), 2),
        "per_pair_diff_pct": [p["diff_pct"] for p in pairs],
        "decisions_identical": f"{sum(p['same_decisions'] for p in pairs)}/{n}",
        "writer_thread_cpu_pct_of_trial": round(
            100 * statistics.median(p["writer_cpu_s"] / p["trial_s_on"] for p in pairs), 3
        ),
        "pair_details": pairs,
    }


class _Trace:
    """What ``same_decisions`` reads of a trial run in another process."""

    def __init__(self, trace: Path, d: dict[str, Any]) -> None:
        self.trace_path = trace
        self.status, self.pick_verdict, self.place_verdict = d["status"], d["pick"], d["place"]


def rows(result: dict[str, Any]) -> list[Row]:
    """The table's lines: trial time with the top video on vs off, and the CPU it adds."""
    r, out = result, []
    if has(r, "median_diff_pct", "pairs"):
        out.append(
            Row(
                "runtime",
                f"trial time, top video on vs off ({r['pairs']} pairs, real time)",
                f"median pair {r['median_diff_pct']:+} %, mean {r.get('mean_diff_pct', '?')} %, "
                f"decisions identical {r.get('decisions_identical', '?')}",
                "median < 1 %",
                "the same seeds with the top video off",
            )
        )
    if has(r, "median_extra_cpu_pct_of_trial", "writer_thread_cpu_pct_of_trial"):
        out.append(
            Row(
                "runtime",
                "CPU the top video adds to the runtime process",
                f"{r['median_extra_cpu_pct_of_trial']} % of the trial "
                f"(writer thread {r['writer_thread_cpu_pct_of_trial']} %)",
                "—",
                "the same trial's CPU with the top video off",
            )
        )
    return out


if __name__ == "__main__":
    import sys

    if "--member" in sys.argv:
        _member(sys.argv[sys.argv.index("--member") + 1 :])
    elif "--concurrent" in sys.argv:
        res = run_concurrent(quick="--quick" in sys.argv)
        out = Path(__file__).resolve().parent / "results" / "top_video_concurrent.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=2, default=str) + "\n")
        print(json.dumps({k: v for k, v in res.items() if k != "pair_details"}, indent=2))
    else:
        print(json.dumps(run(quick="--quick" in sys.argv), indent=2, default=str))
