"""Load a dataset with the real ``lerobot`` package and report what a LeRobot user sees.

Runs INSIDE the lerobot virtual environment (``make lerobot-check`` starts it there,
docs/lerobot-check.md): it imports only lerobot, torch and the standard library, never
the project's packages, so what it reports is lerobot's view of the files, not ours.

    python -I lerobot_probe.py --repo-id mecharm/a --root DIR --out FACTS.json [--filter]

It loads ``LeRobotDataset(repo_id, root=DIR)``, reads every frame through
``dataset[i]`` (every video frame decoded), and writes one JSON object of raw facts:
frame counts, camera keys, image tensor shapes, timestamp offsets, and per episode the
frame indices where ``next.success`` / ``next.done`` / ``next.reward`` are set, the
values of the per-frame ``mecharm.*`` strings and the ``mecharm/*`` columns of
``meta.episodes``. With ``--filter`` it then loads the episodes that succeeded (any
frame with ``next.success`` True) with ``LeRobotDataset(..., episodes=[...])`` and counts
their frames. Judging the facts against the project's contract is the caller's job
(``mecharm_dev/lerobot_check.py``). Exit 0 when the JSON was written, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
import time
import traceback
import warnings
from typing import Any

#: lerobot's own default tolerance when it decodes a frame by timestamp
TIMESTAMP_TOLERANCE_S = 1e-4
#: per-frame errors kept in the facts (the rest are counted)
MAX_ERRORS = 20
OUTCOME_KEYS = ("next.success", "next.done", "next.reward")


def _scalar(value: Any) -> Any:
    """A tensor / list / number of one element as a Python number or bool."""
    if hasattr(value, "numel") and value.numel() == 1:
        return value.reshape(-1)[0].item()
    if isinstance(value, list | tuple) and len(value) == 1:
        return _scalar(value[0])
    return value


def pick_backend(wanted: str) -> tuple[str, str]:
    """(video backend, why): torchcodec when its FFmpeg libraries load, else PyAV."""
    if wanted != "auto":
        return wanted, "asked for"
    try:
        importlib.import_module("torchcodec.decoders")
    except Exception as exc:  # torchcodec raises RuntimeError when no FFmpeg shared libs load
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        first = first.split(". ")[0].rstrip(" .:")[:100]
        # lerobot picks torchcodec whenever it is installed, and would fail on the first frame
        return "pyav", f"torchcodec does not load here: {first}; so video_backend='pyav'"
    return "torchcodec", "lerobot's default"


def _episode_facts(ds: Any) -> dict[int, dict[str, Any]]:
    """Per episode: meta length and the meta.episodes columns (mecharm/* kept verbatim)."""
    out: dict[int, dict[str, Any]] = {}
    eps = ds.meta.episodes
    for row in eps:
        idx = int(row["episode_index"])
        out[idx] = {
            "episode_index": idx,
            "length": int(row["length"]),
            "meta": {k: row[k] for k in row if str(k).startswith("mecharm/")},
            "frames": 0,
            "first_frame_index": None,
            "last_frame_index": None,
            "frame_index_gaps": 0,
            "max_timestamp_offset_s": 0.0,
            "success_frames": [],
            "done_frames": [],
            "reward_frames": [],
            "reward_values": [],
            "strings": {},
        }
    return out


def inspect(repo_id: str, root: str, backend: str, do_filter: bool) -> dict[str, Any]:
    """Facts about the dataset at ``root`` as lerobot loads it (see the module docstring)."""
    import lerobot
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    facts: dict[str, Any] = {
        "root": root,
        "repo_id": repo_id,
        "lerobot": getattr(lerobot, "__version__", "?"),
        "torch": torch.__version__,
        "errors": [],
        "errors_dropped": 0,
    }
    chosen, why = pick_backend(backend)
    facts["backend"] = chosen
    facts["backend_note"] = why
    t0 = time.monotonic()
    try:
        ds = LeRobotDataset(repo_id, root=root, video_backend=chosen)
    except Exception as exc:
        facts["load_error"] = f"{type(exc).__name__}: {exc}"
        return facts
    facts["load_error"] = None
    meta = ds.meta
    fps = float(meta.fps)
    facts["fps"] = fps
    facts["total_episodes"] = int(meta.total_episodes)
    facts["total_frames"] = int(meta.total_frames)
    facts["len"] = len(ds)
    facts["features"] = {
        k: {"dtype": v.get("dtype"), "shape": list(v.get("shape") or [])}
        for k, v in meta.features.items()
    }
    facts["cameras"] = list(meta.camera_keys)
    facts["episode_columns"] = list(meta.episodes.column_names)
    episodes = _episode_facts(ds)
    shapes: dict[str, set[tuple[int, ...]]] = {k: set() for k in facts["cameras"]}
    ranges: dict[str, list[float]] = {k: [math.inf, -math.inf] for k in facts["cameras"]}
    string_keys = [k for k, v in meta.features.items() if v.get("dtype") == "string"]
    present = [k for k in OUTCOME_KEYS if k in meta.features]
    seen_index: list[int] = []
    for i in range(len(ds)):
        try:
            item = ds[i]
        except Exception as exc:
            _error(facts, f"frame {i} of the dataset: {type(exc).__name__}: {exc}")
            continue
        ep = int(_scalar(item["episode_index"]))
        fi = int(_scalar(item["frame_index"]))
        seen_index.append(int(_scalar(item["index"])))
        e = episodes.get(ep)
        if e is None:
            _error(facts, f"frame {i}: episode_index {ep} is not in meta/episodes")
            continue
        if e["last_frame_index"] is not None and fi != e["last_frame_index"] + 1:
            e["frame_index_gaps"] += 1
        if e["first_frame_index"] is None:
            e["first_frame_index"] = fi
        e["last_frame_index"] = fi
        e["frames"] += 1
        ts = float(_scalar(item["timestamp"]))
        e["max_timestamp_offset_s"] = max(e["max_timestamp_offset_s"], abs(ts - fi / fps))
        for cam in facts["cameras"]:
            img = item.get(cam)
            if img is None or not hasattr(img, "shape"):
                _error(facts, f"episode {ep} frame {fi}: no image tensor for {cam}")
                continue
            shapes[cam].add(tuple(int(s) for s in img.shape))
            ranges[cam][0] = min(ranges[cam][0], float(img.min()))
            ranges[cam][1] = max(ranges[cam][1], float(img.max()))
        if "next.success" in present and bool(_scalar(item["next.success"])):
            e["success_frames"].append(fi)
        if "next.done" in present and bool(_scalar(item["next.done"])):
            e["done_frames"].append(fi)
        if "next.reward" in present:
            r = float(_scalar(item["next.reward"]))
            if r != 0.0:
                e["reward_frames"].append(fi)
                e["reward_values"].append(r)
        for k in string_keys:
            v = item.get(k)
            if isinstance(v, list | tuple) and len(v) == 1:
                v = v[0]
            vals = e["strings"].setdefault(k, [])
            if str(v) not in vals:
                vals.append(str(v))
    facts["frames_seen"] = sum(e["frames"] for e in episodes.values())
    facts["index_contiguous"] = seen_index == list(range(len(seen_index)))
    facts["image_shapes"] = {k: [list(s) for s in sorted(v)] for k, v in shapes.items()}
    facts["image_range"] = {k: v if v[0] <= v[1] else None for k, v in ranges.items()}
    facts["episodes"] = [episodes[k] for k in sorted(episodes)]
    facts["seconds"] = round(time.monotonic() - t0, 1)
    if do_filter:
        facts["filter"] = _filter(repo_id, root, chosen, facts)
    return facts


def _filter(repo_id: str, root: str, backend: str, facts: dict[str, Any]) -> dict[str, Any]:
    """Load only the episodes that succeeded, the way a user filters by success."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    if "next.success" not in facts["features"]:
        return {"skipped": "the dataset has no next.success feature"}
    wanted = [e["episode_index"] for e in facts["episodes"] if e["success_frames"]]
    out: dict[str, Any] = {
        "episodes": wanted,
        "expected_frames": sum(e["length"] for e in facts["episodes"] if e["success_frames"]),
    }
    if not wanted:
        out["skipped"] = "no episode succeeded"
        return out
    try:
        sub = LeRobotDataset(repo_id, root=root, episodes=wanted, video_backend=backend)
        seen: list[int] = []
        frames = 0
        for i in range(len(sub)):
            item = sub[i]
            frames += 1
            ep = int(_scalar(item["episode_index"]))
            if ep not in seen:
                seen.append(ep)
        out["frames"] = frames
        out["loaded_episodes"] = seen
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


def _error(facts: dict[str, Any], text: str) -> None:
    if len(facts["errors"]) < MAX_ERRORS:
        facts["errors"].append(text)
    else:
        facts["errors_dropped"] += 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--repo-id", required=True)
    p.add_argument("--root", required=True, help="the dataset folder")
    p.add_argument("--out", required=True, help="where to write the facts (JSON)")
    p.add_argument("--backend", default="auto", choices=("auto", "pyav", "torchcodec"))
    p.add_argument("--filter", action="store_true", help="also load the successful episodes alone")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")  # torchvision's deprecation notes are not findings
    try:
        facts = inspect(args.repo_id, args.root, args.backend, args.filter)
    except Exception as exc:  # report, do not crash: the caller prints one clear line
        facts = {
            "root": args.root,
            "load_error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc()[-2000:],
        }
    try:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(facts, fh, indent=1, default=str)
    except OSError as exc:
        print(f"lerobot_probe: cannot write {args.out}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
