"""Prove our LeRobot datasets against the real ``lerobot`` package (``make lerobot-check``).

Outside ``make test``: it needs lerobot 0.4.x and torch, which live in their own virtual
environment (created here once, ~15 min; docs/lerobot-check.md). Steps:

1. the lerobot venv: ``--venv`` (default ``$MECHARM_LEROBOT_VENV`` or the checkout's
   ``.lerobot-venv``), created with ``pip install 'lerobot>=0.4.4,<0.5'`` when missing;
2. two data roots (``--root`` / ``--merge-root``, default: fresh demo roots of two
   simulated rigs), each exported with ``mecharm export lerobot --select recorded``
   (mixed outcomes) and checked with ``mecharm export verify``;
3. ``lerobot_probe.py`` in the lerobot venv loads each dataset with ``LeRobotDataset``,
   reads every frame, and reports raw facts; this module judges them: frame counts,
   cameras, image shapes, timestamps, the outcome columns, the per-episode ``mecharm``
   fields, and the episodes whose ``next.success`` is set against the ledger's placed
   trials; then the successful episodes are loaded alone (``episodes=[...]``);
4. ``lerobot-edit-dataset`` deletes one episode; the result loads, keeps every other
   episode's fields and outcome, and passes ``mecharm export verify``;
5. ``lerobot-edit-dataset`` merges the two rigs' datasets; every episode keeps its rig id
   and outcome, and the result passes ``mecharm export verify``.

    python -m mecharm_dev.lerobot_check [--venv DIR] [--root DIR] [--merge-root DIR] ...

Prints a report; exit 0 only when every check holds, 1 when one fails, 2 when the run
could not start (no lerobot venv and no way to make one, bad arguments).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "EXPORT_STRINGS",
    "LEROBOT_SPEC",
    "META_FIELDS",
    "Check",
    "EpisodeRecord",
    "compare_success",
    "dataset_checks",
    "default_venv",
    "delete_check",
    "delete_source",
    "episode_records",
    "filter_check",
    "format_report",
    "lerobot_version_ok",
    "main",
    "merge_check",
    "parse_args",
    "placed_stems",
]

LEROBOT_SPEC = "lerobot>=0.4.4,<0.5"
VENV_ENV = "MECHARM_LEROBOT_VENV"
PROBE = Path(__file__).with_name("lerobot_probe.py")
CHECKOUT = Path(__file__).resolve().parents[1]
SIDE, TOP = "observation.images.side", "observation.images.top"
#: per-frame strings every exported episode carries (constant within the episode)
EXPORT_STRINGS = (
    "mecharm.run_stem",
    "mecharm.rig_id",
    "mecharm.pick_verdict",
    "mecharm.place_verdict",
    "mecharm.judge",
    "mecharm.recording_status",
)
#: the same fields as meta/episodes columns, plus the episode's success
META_FIELDS = (*(k.replace("mecharm.", "mecharm/") for k in EXPORT_STRINGS), "mecharm/success")
OUTCOMES = {"next.success": "bool", "next.done": "bool", "next.reward": "float32"}
#: lerobot decodes a frame by timestamp within this tolerance
TIMESTAMP_TOLERANCE_S = 1e-4
#: what a run writes into its work folder (cleared when --work is reused)
WORK_PARTS = ("roots", "lerobot_home", "facts", "logs", "hf_datasets_cache")
#: problems listed per check before "and N more"
MAX_LINES = 6


@dataclass(frozen=True)
class Check:
    """One verdict of the report: its name, whether it holds, and what was seen / where."""

    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class EpisodeRecord:
    """One episode as lerobot shows it: identity, verdicts and outcome (None: not in the data)."""

    index: int
    rig_id: str | None
    run_stem: str | None
    pick_verdict: str | None
    place_verdict: str | None
    judge: str | None
    recording_status: str | None
    success: bool | None
    meta_success: bool | None
    length: int

    def kept(self) -> tuple[Any, ...]:
        """What must survive lerobot's tools unchanged (everything but the index)."""
        return (
            self.rig_id,
            self.run_stem,
            self.pick_verdict,
            self.place_verdict,
            self.judge,
            self.recording_status,
            self.success,
            self.length,
        )

    def label(self) -> str:
        return f"episode {self.index} ({self.rig_id or '?'}/{self.run_stem or '?'})"


@dataclass
class Run:
    """What one run found, for the report."""

    header: list[str] = field(default_factory=list)
    sections: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)

    def add(self, name: str, problems: Sequence[str], ok_detail: str) -> bool:
        self.checks.append(_check(name, problems, ok_detail))
        return not problems


class CheckError(Exception):
    """A step could not run; the message says what and what to do."""


# --------------------------------------------------------------------------- arguments


def default_venv(environ: Mapping[str, str], checkout: Path = CHECKOUT) -> Path:
    """``$MECHARM_LEROBOT_VENV`` when set, else ``.lerobot-venv`` in the checkout."""
    env = environ.get(VENV_ENV, "").strip()
    return Path(env).expanduser() if env else checkout / ".lerobot-venv"


def parse_args(
    argv: Sequence[str] | None, environ: Mapping[str, str] | None = None
) -> argparse.Namespace:
    """The command line; ``venv`` resolved from the environment when not given."""
    environ = os.environ if environ is None else environ
    ap = argparse.ArgumentParser(
        prog="python -m mecharm_dev.lerobot_check", description=(__doc__ or "").splitlines()[0]
    )
    ap.add_argument(
        "--venv",
        type=Path,
        help=f"lerobot's virtual environment (default ${VENV_ENV}, else .lerobot-venv in the "
        "checkout); created when missing",
    )
    ap.add_argument("--no-install", action="store_true", help="fail instead of creating the venv")
    ap.add_argument("--root", type=Path, help="data root of rig A (default: a fresh demo root)")
    ap.add_argument(
        "--merge-root", type=Path, help="data root of rig B, merged with A (default: a demo root)"
    )
    ap.add_argument("--trials", type=int, default=4, help="trials of demo root A (default 4)")
    ap.add_argument("--merge-trials", type=int, default=2, help="trials of demo root B (default 2)")
    ap.add_argument("--seed", type=int, default=7, help="scene seed of demo A (B: seed + 100)")
    ap.add_argument(
        "--select", default="recorded", help="export selection (default recorded: mixed outcomes)"
    )
    ap.add_argument(
        "--delete-episode", type=int, default=0, help="episode of A lerobot deletes (default 0)"
    )
    ap.add_argument(
        "--require-top",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"fail when {TOP} is missing (default: yes for demo roots, no for --root)",
    )
    ap.add_argument(
        "--backend",
        default="auto",
        choices=("auto", "pyav", "torchcodec"),
        help="lerobot's video decoder (auto: torchcodec when its FFmpeg libraries load, else pyav)",
    )
    ap.add_argument("--work", type=Path, help="working folder (default: a new temp folder)")
    ap.add_argument("--keep", action="store_true", help="keep the working folder when all is ok")
    args = ap.parse_args(argv)
    if args.venv is None:
        args.venv = default_venv(environ)
    for name in ("trials", "merge_trials"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.delete_episode < 0:
        ap.error("--delete-episode must be 0 or more")
    for name in ("root", "merge_root"):
        p = getattr(args, name)
        if p is not None and not p.is_dir():
            ap.error(f"--{name.replace('_', '-')} {p}: no such folder")
    return args


# --------------------------------------------------------------------------- pure judging


def lerobot_version_ok(version: str) -> bool:
    """Whether ``version`` satisfies lerobot>=0.4.4,<0.5 (pre-release tags count as their base)."""
    nums: list[int] = []
    for part in version.strip().split(".")[:3]:
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            return False
        nums.append(int(digits))
    while len(nums) < 3:
        nums.append(0)
    return (0, 4, 4) <= tuple(nums) < (0, 5, 0)


def _check(name: str, problems: Sequence[str], ok_detail: str) -> Check:
    if not problems:
        return Check(name, True, ok_detail)
    shown = list(problems[:MAX_LINES])
    if len(problems) > MAX_LINES:
        shown.append(f"and {len(problems) - MAX_LINES} more")
    return Check(name, False, "; ".join(shown))


def _one(values: Any) -> str | None:
    if isinstance(values, list) and len(values) == 1:
        return str(values[0])
    return None


def _bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value in ("True", "False", "true", "false"):
        return value.lower() == "true"
    if isinstance(value, int | float):
        return bool(value)
    return None


def episode_records(facts: Mapping[str, Any]) -> list[EpisodeRecord]:
    """The episodes of a probe's facts: per-frame ``mecharm.*`` first, meta columns second."""
    has_success = "next.success" in facts.get("features", {})
    out = []
    for e in facts.get("episodes", []):
        strings, meta = e.get("strings", {}), e.get("meta", {})

        def field_of(
            name: str, strings: Mapping[str, Any] = strings, meta: Mapping[str, Any] = meta
        ) -> str | None:
            got = _one(strings.get(f"mecharm.{name}"))
            if got is None and meta.get(f"mecharm/{name}") is not None:
                got = str(meta[f"mecharm/{name}"])
            return got

        out.append(
            EpisodeRecord(
                index=int(e["episode_index"]),
                rig_id=field_of("rig_id"),
                run_stem=field_of("run_stem"),
                pick_verdict=field_of("pick_verdict"),
                place_verdict=field_of("place_verdict"),
                judge=field_of("judge"),
                recording_status=field_of("recording_status"),
                success=bool(e.get("success_frames")) if has_success else None,
                meta_success=_bool(meta.get("mecharm/success")),
                length=int(e.get("length", 0)),
            )
        )
    return out


def dataset_checks(
    facts: Mapping[str, Any], label: str, *, require_top: bool, expect_meta: bool
) -> list[Check]:
    """Judge one dataset as lerobot loaded it (the probe's facts) against our contract."""
    where = label  # the folder is named once, in the report's sections
    if facts.get("load_error"):
        return [
            Check(
                f"{label} loads in lerobot",
                False,
                f"{label}: LeRobotDataset(root={facts.get('root')}): {facts['load_error']}",
            )
        ]
    checks = [Check(f"{label} loads in lerobot", True, f"LeRobotDataset(root={facts.get('root')})")]
    eps = facts.get("episodes", [])
    # frames: every one read, counts agree, indices contiguous
    probs = [f"{where}: {e}" for e in facts.get("errors", [])]
    if facts.get("errors_dropped"):
        probs.append(f"{where}: {facts['errors_dropped']} more frame errors")
    if facts.get("len") != facts.get("total_frames"):
        probs.append(
            f"{where}: len(dataset) {facts.get('len')} != info total_frames {facts.get('total_frames')}"
        )
    if facts.get("frames_seen") != facts.get("total_frames"):
        probs.append(
            f"{where}: {facts.get('frames_seen')} frames read, info says {facts.get('total_frames')}"
        )
    if len(eps) != facts.get("total_episodes"):
        probs.append(
            f"{where}: {len(eps)} episodes in meta/episodes, info says {facts.get('total_episodes')}"
        )
    if not facts.get("index_contiguous", False):
        probs.append(f"{where}: the global index is not 0..N-1 in order")
    for e in eps:
        at = f"{where} episode {e['episode_index']}"
        if e["frames"] != e["length"]:
            probs.append(f"{at}: {e['frames']} frames read, meta length {e['length']}")
        if e["frames"] and (e["first_frame_index"] != 0 or e["frame_index_gaps"]):
            probs.append(
                f"{at}: frame_index starts at {e['first_frame_index']} with {e['frame_index_gaps']} gap(s)"
            )
    checks.append(
        _check(
            f"{label} every frame",
            probs,
            f"{facts.get('frames_seen')} frames of {len(eps)} episodes read through dataset[i]",
        )
    )
    # timestamps
    probs = [
        f"{where} episode {e['episode_index']}: timestamp off frame_index/fps by {e['max_timestamp_offset_s']:.6f} s"
        for e in eps
        if e["max_timestamp_offset_s"] > TIMESTAMP_TOLERANCE_S
    ]
    checks.append(
        _check(f"{label} timestamps", probs, f"frame_index/fps within {TIMESTAMP_TOLERANCE_S} s")
    )
    # cameras and image tensors
    cams = list(facts.get("cameras", []))
    feats = facts.get("features", {})
    probs = []
    if SIDE not in cams:
        probs.append(f"{where}: no {SIDE} camera (cameras: {cams or 'none'})")
    if require_top and TOP not in cams:
        probs.append(f"{where}: no {TOP} camera (cameras: {cams or 'none'})")
    shapes_txt = []
    for cam in cams:
        h, w, c = [*feats.get(cam, {}).get("shape", []), None, None, None][:3]
        want = [c, h, w]
        got = facts.get("image_shapes", {}).get(cam, [])
        if got != [want]:
            probs.append(
                f"{where} {cam}: image tensors {got}, expected [{want}] (C, H, W of info.json)"
            )
        rng = facts.get("image_range", {}).get(cam)
        if rng is None or rng[0] < 0.0 or rng[1] > 1.0:
            probs.append(f"{where} {cam}: pixel values {rng}, expected within [0, 1]")
        shapes_txt.append(f"{cam} {'x'.join(str(s) for s in want)}")
    n = len(cams)
    checks.append(
        _check(
            f"{label} cameras", probs, f"{n} camera{'s' if n != 1 else ''}: {', '.join(shapes_txt)}"
        )
    )
    # outcome columns
    probs = []
    for key, dtype in OUTCOMES.items():
        f = feats.get(key)
        if f is None:
            probs.append(f"{where}: no {key} feature (per-frame outcome missing)")
        elif f.get("dtype") != dtype or list(f.get("shape", [])) != [1]:
            probs.append(
                f"{where}: {key} is {f.get('dtype')} {f.get('shape')}, expected {dtype} [1]"
            )
    if not probs:
        for e in eps:
            at = f"{where} episode {e['episode_index']}"
            last = e["length"] - 1
            if e["done_frames"] != [last]:
                probs.append(
                    f"{at}: next.done on frames {e['done_frames'][:5]}, expected only the last ({last})"
                )
            if e["success_frames"] not in ([], [last]):
                probs.append(
                    f"{at}: next.success on frames {e['success_frames'][:5]}, expected none or the last ({last})"
                )
            if e["reward_frames"] != e["success_frames"] or any(
                v != 1.0 for v in e["reward_values"]
            ):
                probs.append(
                    f"{at}: next.reward {e['reward_values'][:5]} on frames {e['reward_frames'][:5]}, "
                    f"expected 1.0 exactly where next.success ({e['success_frames']})"
                )
    checks.append(
        _check(
            f"{label} outcome columns",
            probs,
            "next.done on each last frame; next.success/next.reward agree",
        )
    )
    # per-episode mecharm fields: per-frame strings, and (unless lerobot dropped them) meta columns
    probs = []
    missing = [k for k in EXPORT_STRINGS if feats.get(k, {}).get("dtype") != "string"]
    if missing:
        probs.append(f"{where}: no per-frame string feature {', '.join(missing)}")
    for e in eps:
        at = f"{where} episode {e['episode_index']}"
        for k in EXPORT_STRINGS:
            vals = e.get("strings", {}).get(k)
            if k not in missing and (vals is None or len(vals) != 1):
                probs.append(
                    f"{at}: {k} takes {len(vals or [])} values within the episode, expected 1"
                )
    cols = list(facts.get("episode_columns", []))
    if expect_meta:
        gone = [k for k in META_FIELDS if k not in cols]
        if gone:
            probs.append(f"{where}: meta/episodes lacks {', '.join(gone)}")
        for r, e in zip(episode_records(facts), eps, strict=False):
            if r.success is not None and r.meta_success is not None and r.success != r.meta_success:
                probs.append(
                    f"{where} {r.label()}: meta mecharm/success {r.meta_success}, frames say {r.success}"
                )
            for k in EXPORT_STRINGS:
                mk = k.replace("mecharm.", "mecharm/")
                frame_v = _one(e.get("strings", {}).get(k))
                meta_v = e.get("meta", {}).get(mk)
                if frame_v is not None and meta_v is not None and str(meta_v) != frame_v:
                    probs.append(f"{where} {r.label()}: meta {mk} {meta_v!r}, frames {frame_v!r}")
    where_meta = "per-frame mecharm.* strings" + (
        " and meta/episodes mecharm/* columns" if expect_meta else ""
    )
    checks.append(_check(f"{label} episode fields", probs, f"{where_meta} present and consistent"))
    return checks


def placed_stems(ledger_rows: Sequence[Mapping[str, str]]) -> dict[str, bool]:
    """run_stem -> placed (pick_verdict=yes and place_verdict=yes), the ledger's success."""
    return {
        r.get("run_stem", ""): r.get("pick_verdict") == "yes" and r.get("place_verdict") == "yes"
        for r in ledger_rows
        if r.get("run_stem")
    }


def compare_success(
    records: Sequence[EpisodeRecord], placed: Mapping[str, bool], label: str
) -> tuple[Check, list[str]]:
    """Check that next.success marks exactly the ledger's placed trials; and the lines to print."""
    succ = [r.run_stem or f"episode {r.index}" for r in records if r.success]
    want = [r.run_stem for r in records if r.run_stem is not None and placed.get(r.run_stem)]
    probs = []
    if any(r.success is None for r in records):
        probs.append(f"{label}: no next.success feature, success cannot be read")
    nameless = [r.index for r in records if r.run_stem is None]
    if nameless:
        probs.append(f"{label}: episodes {nameless} have no run stem (mecharm.run_stem)")
    for r in records:
        if r.run_stem is not None and r.run_stem not in placed:
            probs.append(f"{label} {r.label()}: run stem not in the ledger")
    exported = {r.run_stem for r in records}
    left = [s for s, ok in placed.items() if ok and s not in exported]
    if not probs and succ != want:
        extra = [s for s in succ if s not in want]
        lost = [s for s in want if s not in succ]
        if extra:
            probs.append(f"{label}: next.success set on {extra}, not placed in the ledger")
        if lost:
            probs.append(f"{label}: placed in the ledger but next.success not set: {lost}")
    lines = [
        f"  success (next.success): {succ}",
        f"  ledger placed:          {want}",
        f"  match: {'yes' if not probs else 'NO'}",
    ]
    if left:
        lines.append(
            f"  placed in the ledger but not in the dataset (not selected or refused): {left}"
        )
    check = _check(
        f"{label} success = ledger placed",
        probs,
        f"{len(succ)} of {len(records)} episodes succeeded, the ledger's placed trials exactly",
    )
    return check, lines


def filter_check(facts: Mapping[str, Any], label: str) -> Check:
    """Loading the successful episodes alone gives exactly their frames."""
    f = facts.get("filter")
    name = f"{label} success filter"
    if not f:
        return Check(name, False, f"{label}: the filter was not run")
    if f.get("skipped"):
        ok = f["skipped"] == "no episode succeeded"
        return Check(name, ok, f"{label}: {f['skipped']}")
    if f.get("error"):
        return Check(
            name, False, f"{label}: LeRobotDataset(episodes={f['episodes']}): {f['error']}"
        )
    probs = []
    if f.get("loaded_episodes") != f["episodes"]:
        probs.append(
            f"{label}: episodes={f['episodes']} loaded episodes {f.get('loaded_episodes')}"
        )
    if f.get("frames") != f["expected_frames"]:
        probs.append(
            f"{label}: episodes={f['episodes']} gave {f.get('frames')} frames, expected {f['expected_frames']}"
        )
    return _check(
        name, probs, f"episodes={f['episodes']}: {f.get('frames')} frames, every one read"
    )


def delete_check(
    before: Sequence[EpisodeRecord], after: Sequence[EpisodeRecord], deleted: int, label: str
) -> Check:
    """After lerobot deleted episode ``deleted``, the others keep their fields and outcome, in order."""
    want = [r for r in before if r.index != deleted]
    probs = _unlabelled(after, label)
    if len(after) != len(want):
        probs.append(f"{label}: {len(after)} episodes, expected {len(want)}")
    for new_index, (w, g) in enumerate(zip(want, after, strict=False)):
        if g.index != new_index:
            probs.append(f"{label}: episode {w.index} became index {g.index}, expected {new_index}")
        if g.kept() != w.kept():
            probs.append(f"{label} {g.label()} (was {w.index}): {_diff(w, g)}")
    return _check(
        f"{label} kept the other episodes",
        probs,
        f"{len(after)} episodes keep rig id, run stem, verdicts, judge, recording status, next.success, length",
    )


def merge_check(
    parts: Sequence[Sequence[EpisodeRecord]], merged: Sequence[EpisodeRecord], label: str
) -> Check:
    """The merged dataset holds every part's episodes in order, each with its rig id and outcome."""
    want = [r for part in parts for r in part]
    probs = _unlabelled(merged, label)
    if len(merged) != len(want):
        probs.append(f"{label}: {len(merged)} episodes, expected {len(want)}")
    for i, (w, g) in enumerate(zip(want, merged, strict=False)):
        if g.index != i:
            probs.append(f"{label}: episode {g.index} at position {i}")
        if g.kept() != w.kept():
            probs.append(f"{label} {g.label()}: {_diff(w, g)}")
        if g.meta_success is not None and g.success is not None and g.meta_success != g.success:
            probs.append(
                f"{label} {g.label()}: meta mecharm/success {g.meta_success}, frames {g.success}"
            )
    ids = [
        (r.rig_id, r.run_stem) for r in merged if r.rig_id is not None and r.run_stem is not None
    ]
    dup = sorted({f"{a}/{b}" for a, b in ids if ids.count((a, b)) > 1})
    if dup:
        probs.append(f"{label}: (rig id, run stem) not unique: {dup}")
    rigs = sorted({str(r.rig_id) for r in merged})
    return _check(
        f"{label} kept rig ids and outcomes",
        probs,
        f"{len(merged)} episodes from rigs {rigs}, each with its rig id, run stem, verdicts and next.success",
    )


def _unlabelled(records: Sequence[EpisodeRecord], label: str) -> list[str]:
    """Episodes whose identity or outcome is not in the data: nothing to prove kept."""
    blind = [r.index for r in records if None in (r.rig_id, r.run_stem, r.success)]
    if not blind:
        return []
    return [f"{label}: episodes {blind[:10]} carry no rig id, run stem or next.success to compare"]


def _diff(want: EpisodeRecord, got: EpisodeRecord) -> str:
    names = (
        "rig_id",
        "run_stem",
        "pick_verdict",
        "place_verdict",
        "judge",
        "recording_status",
        "success",
        "length",
    )
    return ", ".join(
        f"{n} {b!r} (expected {a!r})"
        for n, a, b in zip(names, want.kept(), got.kept(), strict=True)
        if a != b
    )


def episode_table(records: Sequence[EpisodeRecord]) -> list[str]:
    """The episodes as rows: index, rig, run stem, frames, verdicts, success."""

    def s(v: object) -> str:
        return (
            "-"
            if v is None or v == ""
            else ("yes" if v is True else "no" if v is False else str(v))
        )

    head = (
        f"  {'ep':>3}  {'rig':<16} {'run_stem':<26} {'frames':>6}  {'pick':<4} {'place':<5} success"
    )
    rows = [head]
    for r in records:
        rows.append(
            f"  {r.index:>3}  {s(r.rig_id):<16} {s(r.run_stem):<26} {r.length:>6}  "
            f"{s(r.pick_verdict):<4} {s(r.place_verdict):<5} {s(r.success)}"
        )
    return rows


def format_report(header: Sequence[str], sections: Sequence[str], checks: Sequence[Check]) -> str:
    """The report: what was run, what was seen, one line per check, and the verdict."""
    lines = [*header, *sections, "", "checks:"]
    for c in checks:
        lines.append(f"  {'ok  ' if c.ok else 'FAIL'}  {c.name}: {c.detail}")
    bad = sum(not c.ok for c in checks)
    lines.append("")
    if not checks:
        lines.append("lerobot-check: FAILED, no check ran")
    elif bad:
        lines.append(f"lerobot-check: FAILED, {bad} of {len(checks)} checks failed")
    else:
        lines.append(f"lerobot-check: ok, all {len(checks)} checks hold")
    return "\n".join(lines)


# --------------------------------------------------------------------------- steps


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _say(text: str) -> None:
    print(f"lerobot-check: {text}", file=sys.stderr, flush=True)


def _gist(text: str, log: Path | None = None) -> str:
    """The last meaningful line of a process's output (its error), and where the rest went."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    gist = lines[-1] if lines else "no output"
    if log is not None and text.strip():
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(text, encoding="utf-8")
            gist += f" (full output: {log})"
        except OSError:
            pass
    return gist[:1000]


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_venv(venv: Path, install: bool) -> str:
    """lerobot's version in ``venv``; creates the venv and installs lerobot when missing."""
    py = _venv_python(venv)
    version = _installed_lerobot(py)
    if version is None:
        if not install:
            raise CheckError(
                f"no lerobot in {venv} (looked for {py}); run without --no-install to create it, "
                f"or point --venv / ${VENV_ENV} at a venv with {LEROBOT_SPEC}"
            )
        if not py.exists():
            _say(f"creating {venv} (python -m venv)")
            res = subprocess.run([sys.executable, "-m", "venv", str(venv)], check=False)
            if res.returncode != 0:
                raise CheckError(f"python -m venv {venv} failed (exit {res.returncode})")
        _say(
            f"pip install '{LEROBOT_SPEC}' into {venv} (torch comes with it: ~15 min the first time)"
        )
        res = subprocess.run([str(py), "-m", "pip", "install", LEROBOT_SPEC], check=False)
        if res.returncode != 0:
            raise CheckError(
                f"pip install '{LEROBOT_SPEC}' into {venv} failed (exit {res.returncode}); see pip's output above"
            )
        version = _installed_lerobot(py)
        if version is None:
            raise CheckError(f"lerobot still not importable from {py} after pip install")
    if not lerobot_version_ok(version):
        raise CheckError(
            f"{venv} holds lerobot {version}, this check needs {LEROBOT_SPEC}: "
            f"pass another --venv, or {py} -m pip install '{LEROBOT_SPEC}'"
        )
    return version


def _installed_lerobot(py: Path) -> str | None:
    if not py.exists():
        return None
    res = subprocess.run(
        [str(py), "-I", "-c", "import importlib.metadata as m; print(m.version('lerobot'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return res.stdout.strip() if res.returncode == 0 and res.stdout.strip() else None


def lerobot_env(work: Path) -> dict[str, str]:
    """Environment of lerobot's processes: offline, caches inside the work folder, no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_LEROBOT_HOME=str(work / "lerobot_home"),
        HF_DATASETS_CACHE=str(work / "hf_datasets_cache"),
        TQDM_DISABLE="1",
    )
    return env


def project_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment of the project's processes: its checkout first on the path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CHECKOUT), env.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


def _setting_exists(module: str, cls: str, name: str) -> bool:
    """Whether the project's settings class has ``name`` (other helpers add rig_id)."""
    try:
        mod = __import__(module, fromlist=[cls])
        return name in getattr(mod, cls).model_fields
    except Exception:
        return False


def make_demo_root(where: Path, trials: int, seed: int, rig_id: str) -> Path:
    """A fresh demo data root (``python -m mecharm.tools.demo``) recorded as rig ``rig_id``.

    A demo session ends early when a trial leaves the block in the gripper; further
    sessions (next seeds) run until the ledger holds ``trials`` trials, at most
    ``trials`` sessions.
    """
    root = where / rig_id
    extra = {}
    if _setting_exists("mecharm.runtime.config", "RuntimeSettings", "rig_id"):
        extra["MECHARM_RUNTIME_RIG_ID"] = rig_id
    done = 0
    for _ in range(trials):
        _say(f"demo: {trials - done} trial(s), seed {seed + done}, into {root}")
        cmd = [
            sys.executable,
            "-m",
            "mecharm.tools.demo",
            "--data-root",
            str(root),
            "--trials",
            str(trials - done),
            "--seed",
            str(seed + done),
        ]
        res = subprocess.run(
            cmd, capture_output=True, text=True, check=False, env=project_env(extra)
        )
        if res.returncode != 0:
            log = where.parent / "logs" / f"demo-{rig_id}.log"
            why = _gist(res.stderr or res.stdout, log)
            raise CheckError(f"the demo into {root} failed (exit {res.returncode}): {why}")
        done = len(read_ledger(root))
        if done >= trials:
            break
    return root


def export(
    root: Path, out: Path, select: str, rig_id: str | None
) -> tuple[list[str], str, list[str]]:
    """(problems, summary, notes) of ``mecharm export lerobot --root ROOT --out OUT --select ...``.

    A refused trial is the export doing its job (a broken recording is never half-exported):
    it is a note; the check goes on with the episodes that were exported, if any.
    """
    cmd = [
        sys.executable,
        "-m",
        "mecharm.tools.cli",
        "export",
        "lerobot",
        "--allow-time-scaled",  # the demo runs the simulated rig at 5x (docs/lerobot.md)
        "--root",
        str(root),
        "--out",
        str(out),
        "--select",
        select,
        "--no-progress",
    ]
    if rig_id and _setting_exists("mecharm.tools.export.config", "ExportSettings", "rig_id"):
        cmd += ["--rig-id", rig_id]  # only for trials whose run log names no rig
    res = subprocess.run(cmd, capture_output=True, text=True, check=False, env=project_env())
    lines = res.stdout.strip().splitlines()
    summary = lines[-1] if lines else ""
    notes = [ln for ln in lines if ln.startswith(("REFUSED", "skipped"))]
    if res.returncode != 0:
        why = _gist(res.stderr or res.stdout)
        return (
            [f"mecharm export lerobot --root {root} exit {res.returncode}: {why}"],
            summary,
            notes,
        )
    try:
        info = json.loads((out / "meta" / "info.json").read_text(encoding="utf-8"))
        episodes = int(info.get("total_episodes", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        episodes = 0
    if episodes < 1:
        return [f"{root}: no episode exported ({len(notes)} not: {notes[:3]})"], summary, notes
    return [], summary, notes


def verify(dataset: Path) -> tuple[list[str], str]:
    """(problems, summary) of ``mecharm export verify DIR``; problems are its lines."""
    cmd = [
        sys.executable,
        "-m",
        "mecharm.tools.cli",
        "export",
        "verify",
        str(dataset),
        "--no-progress",
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False, env=project_env())
    prefix = f"{dataset}: "
    lines = [
        ln[len(prefix) :] if ln.startswith(prefix) else ln
        for ln in res.stdout.strip().splitlines()
        if ln.strip()
    ]
    if res.returncode == 0:
        return [], lines[-1] if lines else "exit 0"
    if not lines:
        return [f"mecharm export verify {dataset} exit {res.returncode}: {_gist(res.stderr)}"], ""
    return [*lines[:-1], f"exit {res.returncode}: {lines[-1]}"], ""


def probe(
    venv: Path, repo_id: str, dataset: Path, work: Path, backend: str, do_filter: bool
) -> dict[str, Any]:
    """The probe's facts about ``dataset`` (loaded by lerobot in its venv)."""
    out = work / "facts" / f"{repo_id.replace('/', '_')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        str(_venv_python(venv)),
        "-I",
        str(PROBE),
        "--repo-id",
        repo_id,
        "--root",
        str(dataset),
        "--out",
        str(out),
        "--backend",
        backend,
    ]
    if do_filter:
        cmd.append("--filter")
    out.unlink(missing_ok=True)  # never judge an earlier run's facts
    try:
        res = subprocess.run(
            cmd, capture_output=True, text=True, check=False, env=lerobot_env(work)
        )
    except OSError as exc:
        return {"root": str(dataset), "load_error": f"cannot run the lerobot probe: {exc}"}
    try:
        facts: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return {
            "root": str(dataset),
            "load_error": f"the lerobot probe wrote no facts ({exc}); exit {res.returncode}: {_gist(res.stderr, out.with_suffix('.log'))}",
        }
    return facts


def edit_dataset(venv: Path, work: Path, args: Sequence[str]) -> tuple[int, str]:
    """Run lerobot's own ``lerobot-edit-dataset`` (offline, datasets under HF_LEROBOT_HOME)."""
    tool = venv / "bin" / "lerobot-edit-dataset"
    if not tool.exists():
        return 127, f"{tool} is missing (lerobot {LEROBOT_SPEC} installs it)"
    res = subprocess.run(
        [str(tool), *args], capture_output=True, text=True, check=False, env=lerobot_env(work)
    )
    log = work / "logs" / f"lerobot-edit-dataset-{args[args.index('--operation.type') + 1]}.log"
    return res.returncode, _gist(res.stderr or res.stdout, log if res.returncode else None)


def read_ledger(root: Path) -> list[dict[str, str]]:
    """The ledger's rows (plain CSV); [] when it cannot be read."""
    from mecharm.common.layout import DataRoot

    try:
        with open(DataRoot(root).ledger, encoding="utf-8", newline="") as fh:
            return list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error):
        return []


# --------------------------------------------------------------------------- the run


def run_check(args: argparse.Namespace, work: Path, run: Run) -> None:
    """Every step; each outcome lands in ``run`` (a failed step skips what depends on it)."""
    version = ensure_venv(args.venv, install=not args.no_install)
    home = work / "lerobot_home"
    rigs: list[tuple[str, Path | None, int, int, bool]] = [
        ("rig-a", args.root, args.trials, args.seed, args.root is None),
        ("rig-b", args.merge_root, args.merge_trials, args.seed + 100, args.merge_root is None),
    ]
    run.header.append(f"lerobot-check: lerobot {version} in {args.venv}; work folder {work}")
    facts: dict[str, dict[str, Any]] = {}
    records: dict[str, list[EpisodeRecord]] = {}
    decoder_named = False
    for rig, given, trials, seed, is_demo in rigs:
        label = f"dataset {rig[-1].upper()}"
        try:
            root = given.resolve() if given else make_demo_root(work / "roots", trials, seed, rig)
        except CheckError as exc:
            run.add(f"{label} data root", [str(exc)], "")
            continue
        run.header.append(
            f"{label}: data root {root}"
            + (f" (demo, {trials} trials, seed {seed})" if is_demo else "")
        )
        out = home / "mecharm" / rig
        _say(f"export {root} -> {out}")
        probs, summary, notes = export(root, out, args.select, rig if is_demo else None)
        run.sections += [f"{label} export: {n}" for n in notes]
        if not run.add(f"{label} export", probs, summary):
            continue
        probs, summary = verify(out)
        run.add(f"{label} export verify", probs, summary)
        _say(f"lerobot loads {out} and reads every frame")
        f = probe(args.venv, f"mecharm/{rig}", out, work, args.backend, do_filter=True)
        facts[rig] = f
        require_top = args.require_top if args.require_top is not None else is_demo
        run.checks += dataset_checks(f, label, require_top=require_top, expect_meta=True)
        if f.get("load_error"):
            continue
        if not decoder_named:
            decoder_named = True
            run.header.insert(
                1,
                f"lerobot-check: torch {f.get('torch')}, video decoding {f.get('backend')} ({f.get('backend_note')})",
            )
        recs = episode_records(f)
        records[rig] = recs
        cams = f.get("cameras", [])
        run.sections += [
            "",
            f"{label}: {_n(len(recs), 'episode')}, {f.get('frames_seen')} frames, {_n(len(cams), 'camera')} "
            f"({', '.join(cams)}), read in {f.get('seconds')} s",
            *episode_table(recs),
        ]
        check, lines = compare_success(recs, placed_stems(read_ledger(root)), label)
        run.checks.append(check)
        run.sections += lines
        run.checks.append(filter_check(f, label))
        flt = f.get("filter") or {}
        run.sections.append(
            f"  success filter: LeRobotDataset(episodes={flt.get('episodes')}) -> "
            + (
                f"{flt.get('frames')} frames (expected {flt.get('expected_frames')})"
                if "frames" in flt
                else str(flt.get("skipped") or flt.get("error"))
            )
        )
    _merge_step(args, work, facts, records, run)
    _delete_step(args, work, facts, records, run)


def delete_source(records: Mapping[str, Sequence[EpisodeRecord]], k: int) -> str | None:
    """Which dataset lerobot deletes episode ``k`` from: A, else the merged one (lerobot
    refuses to delete a dataset's only episode), else none."""
    for name in ("rig-a", "merged"):
        if len(records.get(name, ())) >= max(2, k + 1):
            return name
    return None


def _delete_step(
    args: argparse.Namespace,
    work: Path,
    facts: Mapping[str, Any],
    records: Mapping[str, list[EpisodeRecord]],
    run: Run,
) -> None:
    """Delete one episode of A with lerobot's tool (of the merged dataset when A has one)."""
    name = "delete with lerobot-edit-dataset"
    k = args.delete_episode
    source = delete_source(records, k)
    if source is None:
        counts = {s: len(r) for s, r in records.items()}
        why = (
            f"episode {k} of a dataset of at least 2 episodes is needed; loaded: {counts or 'none'}"
        )
        run.add(name, [f"not run: {why}"], "")
        return
    before = records[source]
    if source != "rig-a":
        run.sections.append(
            f"\ndataset A has {len(records.get('rig-a', []))} episode(s): deleting from the merged dataset"
        )
    _say(f"lerobot-edit-dataset delete_episodes [{k}] of mecharm/{source}")
    rc, tail = edit_dataset(
        args.venv,
        work,
        [
            "--repo_id",
            f"mecharm/{source}",
            "--new_repo_id",
            f"mecharm/{source}-deleted",
            "--operation.type",
            "delete_episodes",
            "--operation.episode_indices",
            f"[{k}]",
        ],
    )
    if not run.add(
        name, [f"exit {rc}: {tail}"] if rc else [], f"episode {k} of mecharm/{source} deleted"
    ):
        return
    out = work / "lerobot_home" / "mecharm" / f"{source}-deleted"
    f = probe(args.venv, f"mecharm/{source}-deleted", out, work, args.backend, do_filter=False)
    label = "after delete"
    # lerobot's delete rebuilds meta/episodes with its own columns only: the per-frame fields carry on
    run.checks += dataset_checks(
        f, label, require_top=TOP in facts[source].get("cameras", []), expect_meta=False
    )
    if f.get("load_error"):
        return
    after = episode_records(f)
    run.checks.append(delete_check(before, after, k, label))
    probs, summary = verify(out)
    run.add(f"{label} export verify", probs, summary)
    run.sections += [
        "",
        f"after delete of episode {k} of mecharm/{source}: {_n(len(after), 'episode')}, "
        f"{f.get('frames_seen')} frames ({out})",
        *episode_table(after),
    ]


def _merge_step(
    args: argparse.Namespace,
    work: Path,
    facts: dict[str, Any],
    records: dict[str, list[EpisodeRecord]],
    run: Run,
) -> None:
    name = "merge with lerobot-edit-dataset"
    if "rig-a" not in records or "rig-b" not in records:
        run.add(name, ["not run: datasets A and B must both load"], "")
        return
    _say("lerobot-edit-dataset merge mecharm/rig-a + mecharm/rig-b")
    rc, tail = edit_dataset(
        args.venv,
        work,
        [
            "--repo_id",
            "mecharm/merged",
            "--operation.type",
            "merge",
            "--operation.repo_ids",
            "['mecharm/rig-a', 'mecharm/rig-b']",
        ],
    )
    if not run.add(name, [f"exit {rc}: {tail}"] if rc else [], "A + B merged"):
        return
    out = work / "lerobot_home" / "mecharm" / "merged"
    f = probe(args.venv, "mecharm/merged", out, work, args.backend, do_filter=True)
    label = "after merge"
    both_top = all(TOP in facts[r].get("cameras", []) for r in ("rig-a", "rig-b"))
    run.checks += dataset_checks(f, label, require_top=both_top, expect_meta=True)
    if f.get("load_error"):
        return
    merged = episode_records(f)
    facts["merged"], records["merged"] = f, merged
    run.checks.append(merge_check([records["rig-a"], records["rig-b"]], merged, label))
    run.checks.append(filter_check(f, label))
    probs, summary = verify(out)
    run.add(f"{label} export verify", probs, summary)
    run.sections += [
        "",
        f"after merge of A and B: {_n(len(merged), 'episode')}, {f.get('frames_seen')} frames ({out})",
        *episode_table(merged),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    made = args.work is None
    work = Path(tempfile.mkdtemp(prefix="mecharm_lerobot_check_")) if made else args.work.resolve()
    if not made:  # a re-run over the same --work starts clean
        for sub in WORK_PARTS:
            shutil.rmtree(work / sub, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    run = Run()
    t0 = time.monotonic()
    try:
        run_check(args, work, run)
    except CheckError as exc:
        print(f"lerobot-check: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"lerobot-check: interrupted; work folder {work}", file=sys.stderr)
        return 130
    run.sections.append(f"\n(took {time.monotonic() - t0:.0f} s)")
    print(format_report(run.header, run.sections, run.checks))
    ok = bool(run.checks) and all(c.ok for c in run.checks)
    if ok and made and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"lerobot-check: files kept in {work}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
