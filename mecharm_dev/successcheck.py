"""Success check: the demo's own path (`make run`) measured against the simulator's truth.

Starts the simulated rig and the recorder exactly as the demo does (``demo.start_demo_rig``:
one home for that set-up), then runs N trials through the runtime's service in one session,
as ``demo`` runs its trials: the recorder on, the session's log file, one connection for
the whole session, the seeds ``--seed``, ``--seed``+1, ... If a session stops early (a
block held in the gripper, a lost scene server, ...) a new session on the same rig and the
same data root (so the memories persist) continues with the next seed, unless
``--one-session``. The scene's ground truth (``GET /scene/truth``) is taken at the end of
every trial and, in a background thread, the moment the trace says ``release_check`` or
``pick_verdict`` (the arm is at rest then): would the block have landed in the box if
released now, and did the jaws hold it when the pick was judged. One CSV row per trial,
a JSON summary (docs/success.md).

    python -m mecharm_dev.successcheck --profile rig --trials 60 --seed 9100
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import math
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, cast

from mecharm.common.layout import DataRoot
from mecharm.common.logging import configure_logging
from mecharm.runtime.cli import session_logging
from mecharm.runtime.console import RuntimeConsole
from mecharm.runtime.service import ServiceReport, session_console
from mecharm.runtime.simcontrol import scene_next
from mecharm.runtime.trial import TrialSummary
from mecharm.sim.profile import PROFILE_NAMES, ProfileError, load_profile
from mecharm.sim.scene import BLOCK_SIZE_M, BOX_INNER_M
from mecharm.sim.world_arm import WorldArm
from mecharm.tools.demo import DemoRig, run_session, start_demo_rig
from mecharm_dev.learncheck import TrialRow, _get_json, _reason_class, trial_row

__all__ = [
    "Capture",
    "ReleaseCheck",
    "SuccessRow",
    "TruthTap",
    "footprint_margin_mm",
    "main",
    "release_check",
    "success_row",
    "summary",
    "truth_flags",
]

#: jaw events: a truth that lists one of these after the trace line came too late (the
#: world changed between the moment and the snapshot)
JAW_EVENTS = ("release", "drop", "grasp", "miss")
#: the success by trial index: the first trials (the memories still empty) and the rest
EARLY_TRIALS = 10


# ---------------------------------------------------------------------------- pure: geometry
def footprint_margin_mm(block: Mapping[str, Any], box: Mapping[str, Any]) -> float | None:
    """How far the block's footprint lies inside the box's inner square, in mm: positive
    inside, negative when a corner is over or beyond a wall. The block's four corners
    (``BLOCK_SIZE_M`` square at its truth ``x``, ``z`` and ``yaw_deg``) in the box's frame
    (``x``, ``z``, ``yaw_deg``; ``inner_m`` the opening's side): the margin is the opening's
    half side minus the farthest corner's larger box-frame coordinate. ``>= 0`` is exactly the
    simulator's own ``box`` for a block released there (``physics.classify_drop``). None
    when a value is missing."""
    try:
        bx, bz = float(block["x"]), float(block["z"])
        a = math.radians(float(block.get("yaw_deg", block.get("yaw", 0.0))))
        cx, cz, cb, sb, half = _box_frame(box)
    except (KeyError, TypeError, ValueError):
        return None
    h = BLOCK_SIZE_M / 2
    ca, sa = math.cos(a), math.sin(a)
    far = 0.0
    for ux, uz in ((h, h), (-h, h), (-h, -h), (h, -h)):
        # the corner in the world (as the renderer turns the block), then in the box's frame
        wx, wz = bx + ca * ux - sa * uz, bz + sa * ux + ca * uz
        rx, rz = wx - cx, wz - cz
        lx, lz = cb * rx + sb * rz, -sb * rx + cb * rz
        far = max(far, abs(lx), abs(lz))
    return (half - far) * 1000.0


def _box_frame(box: Mapping[str, Any]) -> tuple[float, float, float, float, float]:
    """(x, z, cos yaw, sin yaw, inner half side) of the box's truth; KeyError/ValueError."""
    b = math.radians(float(box.get("yaw_deg", 0.0)))
    half = float(box.get("inner_m", BOX_INNER_M)) / 2
    return float(box["x"]), float(box["z"]), math.cos(b), math.sin(b), half


def shadow_margin_mm(block: Mapping[str, Any], box: Mapping[str, Any]) -> float | None:
    """As ``footprint_margin_mm`` but for the block as it hangs: all eight corners of the cube
    turned by its full truth rotation (``rot``, row-major, y up) projected onto the mat. Equal
    to the footprint margin for an upright block; smaller for one tilted in the jaws (the
    ``rig`` and ``harsh`` profiles' MuJoCo grasp). None without ``rot``."""
    try:
        rot = [float(v) for row in block["rot"] for v in row]
        bx, bz = float(block["x"]), float(block["z"])
        cx, cz, cb, sb, half = _box_frame(box)
    except (KeyError, TypeError, ValueError):
        return None
    if len(rot) != 9:
        return None
    h = BLOCK_SIZE_M / 2
    far = 0.0
    for ux in (-h, h):
        for uy in (-h, h):
            for uz in (-h, h):
                wx = bx + rot[0] * ux + rot[1] * uy + rot[2] * uz
                wz = bz + rot[6] * ux + rot[7] * uy + rot[8] * uz
                rx, rz = wx - cx, wz - cz
                far = max(far, abs(cb * rx + sb * rz), abs(-sb * rx + cb * rz))
    return (half - far) * 1000.0


def tilt_deg(block: Mapping[str, Any]) -> float | None:
    """How far the block's face nearest to flat is from flat, degrees (``scene.block_upright``
    counts up to 10 as upright). None without ``rot``."""
    try:
        up = [abs(float(v)) for v in block["rot"][1]]
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    return math.degrees(math.acos(min(1.0, max(up))))


# ---------------------------------------------------------------------------- captures
@dataclass
class Capture:
    """The scene's truth at a moment the trace named: ``release_check`` (``claim``: the
    runtime confirmed the block above the opening) or ``pick_verdict`` (``claim``: "yes"/"no")."""

    kind: str
    claim: Any
    #: the trace line's wall time and sequence number
    seen_ts: float
    seq: int | None = None
    truth: dict[str, Any] | None = None
    error: str = ""
    #: from the trace line to the truth's answer, ms
    latency_ms: float | None = None

    @property
    def late(self) -> bool:
        """The jaws acted (a release, drop, grasp or miss) after the trace line and before the
        snapshot: the truth is not the moment's."""
        if self.truth is None:
            return False
        return any(
            ev.get("kind") in JAW_EVENTS and float(ev.get("ts", 0.0)) > self.seen_ts
            for ev in self.truth.get("events", [])
            if isinstance(ev, dict)
        )


@dataclass
class ReleaseCheck:
    """One ``release_check`` against the truth of that moment."""

    confirmed: bool
    grasped: bool | None
    margin_mm: float | None
    #: released now, the block would land in the box (held, and its footprint inside)
    would_land: bool | None
    late: bool = False
    #: the block as it hangs: its tilt from flat (deg) and its shadow's margin (mm)
    tilt_deg: float | None = None
    shadow_margin_mm: float | None = None

    @property
    def wrong_refusal(self) -> bool:
        return not self.confirmed and self.would_land is True

    @property
    def right_refusal(self) -> bool:
        return not self.confirmed and self.would_land is False

    @property
    def wrong_confirm(self) -> bool:
        return self.confirmed and self.would_land is False


def release_check(
    confirmed: bool, truth: Mapping[str, Any] | None, late: bool = False
) -> ReleaseCheck:
    """The release check ``confirmed`` (or refused) judged by the ``truth`` of its moment:
    ``would_land = grasped and margin >= 0`` (None without a truth)."""
    if truth is None:
        return ReleaseCheck(confirmed, None, None, None, late)
    grasped = bool(truth.get("grasped"))
    block, box = truth.get("block") or {}, truth.get("box") or {}
    margin = footprint_margin_mm(block, box)
    land = None if margin is None else grasped and margin >= 0.0
    return ReleaseCheck(
        confirmed, grasped, margin, land, late, tilt_deg(block), shadow_margin_mm(block, box)
    )


class TruthTap:
    """Listens to a session's trace through its console and takes the scene's truth, in a
    background thread, the moment a ``release_check`` decision or a ``pick_verdict`` input
    is written (the event loop never waits for it). Captures are kept per trial: the
    console's trial number (``trial_start``), 1-based within the session."""

    def __init__(self, control_url: str, timeout: float = 5.0) -> None:
        self.url = control_url.rstrip("/") + "/scene/truth"
        self.timeout = timeout
        self.trial = 0
        self.captures: dict[int, list[Capture]] = {}
        #: each trial's summary as the service handed it to the console (``trial_end``)
        self.summaries: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def attach(self, console: RuntimeConsole) -> RuntimeConsole:
        """Wrap ``console``'s ``on_trace``, ``trial_start`` and ``trial_end`` (the service
        calls them); the console itself works as before."""
        inner_trace, inner_start, inner_end = (
            console.on_trace,
            console.trial_start,
            console.trial_end,
        )

        def on_trace(line: dict[str, Any]) -> None:
            inner_trace(line)
            self.see(line)

        def trial_start(i: int) -> None:
            self.begin(i)
            inner_start(i)

        def trial_end(summary: Any, text: str, arm_alive: bool = True) -> None:
            with self._lock:
                self.summaries[self.trial] = summary
            inner_end(summary, text, arm_alive)

        # an instance's hooks, not the class's methods: this console alone listens
        setattr(console, "on_trace", on_trace)  # noqa: B010
        setattr(console, "trial_start", trial_start)  # noqa: B010
        setattr(console, "trial_end", trial_end)  # noqa: B010
        return console

    def begin(self, i: int) -> None:
        """Trial ``i`` starts (again, after a trial that was not started: its captures anew)."""
        with self._lock:
            self.trial = i
            self.captures[i] = []

    def see(self, line: Mapping[str, Any]) -> None:
        """A trace line; never raises (it runs inside the trial)."""
        try:
            cap = self._capture_of(line)
            if cap is None:
                return
            with self._lock:
                self.captures.setdefault(self.trial, []).append(cap)
                th = threading.Thread(
                    target=self._fetch, args=(cap,), name=f"truth-{cap.kind}", daemon=True
                )
                self._threads.append(th)
            th.start()
        except Exception as exc:  # a listener never changes the trial
            print(f"(successcheck: truth tap: {type(exc).__name__}: {exc})", file=sys.stderr)

    @staticmethod
    def _capture_of(line: Mapping[str, Any]) -> Capture | None:
        event, kind, value = line.get("event"), line.get("kind"), line.get("value")
        if event == "decision" and kind == "release_check":
            if not isinstance(value, dict) or "confirmed" not in value:
                return None
            claim: Any = bool(value["confirmed"])
        elif event == "input" and kind == "pick_verdict":
            claim = value.get("verdict") if isinstance(value, dict) else str(value)
        else:
            return None
        seq = line.get("seq")
        return Capture(
            str(kind),
            claim,
            float(line.get("ts") or time.time()),
            seq=int(seq) if isinstance(seq, int) else None,
        )

    def _fetch(self, cap: Capture) -> None:
        try:
            truth = _get_json(self.url, self.timeout)
        except Exception as exc:
            cap.error = f"{type(exc).__name__}: {exc}"
            return
        cap.latency_ms = (time.time() - cap.seen_ts) * 1000.0
        cap.truth = truth

    def drain(self, timeout: float = 10.0) -> None:
        """Wait for the snapshots still being fetched."""
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads)
        for th in threads:
            th.join(max(0.0, deadline - time.monotonic()))

    def of(self, i: int) -> list[Capture]:
        with self._lock:
            return list(self.captures.get(i, []))


# ---------------------------------------------------------------------------- rows
def truth_flags(
    *,
    pick_verdict: str,
    place_verdict: str,
    block_held: bool,
    end: Mapping[str, Any] | None,
    pick_grasped: bool | None,
) -> dict[str, bool | None]:
    """The disagreements between the runtime's account and the world (None: no truth).

    ``placed_true``: the world's block rests in the box at the end; ``false_placed``: the
    place judged yes while it does not; ``missed_place``: judged no while it does;
    ``false_held``: the trial said it stopped holding the block while the jaws hold nothing;
    ``pick_wrong``: the last pick judgement differs from the jaws' truth at that moment."""
    placed = None if end is None else (end.get("block") or {}).get("resting_on") == "box"
    grasped = None if end is None else bool(end.get("grasped"))
    return {
        "placed_true": placed,
        "false_placed": None if placed is None else place_verdict == "yes" and not placed,
        "missed_place": None if placed is None else place_verdict == "no" and placed,
        "false_held": None if grasped is None else bool(block_held) and not grasped,
        "pick_wrong": (
            None
            if pick_grasped is None or pick_verdict not in ("yes", "no")
            else (pick_verdict == "yes") != pick_grasped
        ),
    }


@dataclass
class SuccessRow:
    """One trial of the demo's path and the world's truth (a CSV row; docs/success.md)."""

    trial: int
    session: int
    seed: int | None
    run_stem: str
    status: str
    reason: str
    pick_verdict: str
    place_verdict: str
    #: the trial stopped holding the block (TrialSummary.held)
    block_held: bool
    duration_s: float
    #: the world at the trial's end: where the block rests, where the last release landed,
    #: the jaws hold it, it stands upright
    true_block_on: str
    true_place_outcome: str
    true_grasped: bool | None
    true_upright: bool | None
    #: pick judgements in the trial, and the jaws' truth at the last one
    pick_judgements: int
    pick_true_grasped: bool | None
    #: release checks: how many, confirmed, refused wrongly/rightly, confirmed wrongly
    release_checks: int
    release_confirmed: int
    wrong_refusals: int
    right_refusals: int
    #: checks not confirmed, then re-aimed, whose block would have landed as it hung
    reaimed_would_land: int
    wrong_confirms: int
    #: at the last release check: the footprint's margin inside the opening (mm) and whether
    #: the block would have landed in the box if released then
    release_margin_mm: float | None
    release_would_land: bool | None
    #: at the last release check, the block as it hangs in the jaws: its tilt from flat (deg)
    #: and its shadow's margin inside the opening (mm; all eight corners, ``shadow_margin_mm``)
    release_tilt_deg: float | None
    release_shadow_margin_mm: float | None
    #: the last release check was confirmed and the release after it landed in the box (the
    #: end truth's ``place_outcome``): what ``release_would_land`` predicted, as it happened
    release_landed: bool | None
    #: snapshots taken after the jaws acted (not the moment's truth) or not taken at all
    late_captures: int
    failed_captures: int
    #: learncheck's view of the same trial: the first grasp held, pick attempts, the first
    #: attempt's true tip-to-block distance (mm)
    first_grasp: bool
    attempts: int
    true_tip_xz_mm: float | None
    placed_true: bool | None
    false_placed: bool | None
    missed_place: bool | None
    false_held: bool | None
    pick_wrong: bool | None
    #: the jaws' events in the trial as the simulator logged them (grasp, miss, slip, drop),
    #: each as ``kind`` plus what decided it (``lever_mm``: the block's centre beside the pinch
    #: point; ``axis_mm``/``across_mm``: its centre in the hand frame; ``why``: the miss's)
    jaw_events: str = ""
    #: the snapshots themselves (JSON only, not in the CSV)
    captures: list[dict[str, Any]] = field(default_factory=list)

    def csv_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("captures")
        return {
            k: ("" if v is None else round(v, 2) if isinstance(v, float) else v)
            for k, v in d.items()
        }


CSV_COLUMNS = [f.name for f in fields(SuccessRow) if f.name != "captures"]


def success_row(
    trial: int,
    session: int,
    t: TrialSummary,
    captures: Sequence[Capture],
    end: Mapping[str, Any] | None,
    lc_row: Any = None,
) -> SuccessRow:
    """The row of one trial: its summary, the snapshots taken during it, the truth at its end,
    and learncheck's row of it (``learncheck.trial_row``; None: those columns empty)."""
    picks = [c for c in captures if c.kind == "pick_verdict"]
    checks = [
        (c, release_check(bool(c.claim), c.truth, c.late))
        for c in captures
        if c.kind == "release_check"
    ]
    last_pick = picks[-1] if picks else None
    pick_grasped = (
        None
        if last_pick is None or last_pick.truth is None
        else bool(last_pick.truth.get("grasped"))
    )
    # the trial's last word on the pick (a judgement revised from later evidence included:
    # docs/release.md, "A pick that never lifted the block"), compared with the jaws at the
    # last judgement
    pick_verdict = t.outcome["pick_verdict"] or "-"
    if pick_verdict == "-" and last_pick is not None and isinstance(last_pick.claim, str):
        pick_verdict = last_pick.claim or pick_verdict
    flags = truth_flags(
        pick_verdict=pick_verdict,
        place_verdict=t.outcome["place_verdict"] or "-",
        block_held=t.held,
        end=end,
        pick_grasped=pick_grasped,
    )
    block = (end or {}).get("block") or {}
    last = checks[-1][1] if checks else None
    final = checks[-1:] if t.reason.startswith("release refused") else []
    return SuccessRow(
        trial=trial, session=session, seed=t.scene_seed, run_stem=t.run_stem, status=t.status,
        reason=t.reason, pick_verdict=t.outcome["pick_verdict"] or "-", place_verdict=t.outcome["place_verdict"] or "-",
        block_held=t.held, duration_s=t.duration_s,
        true_block_on=str(block.get("resting_on", "-")) if end is not None else "-",
        true_place_outcome=str((end or {}).get("place_outcome") or "-"),
        true_grasped=None if end is None else bool(end.get("grasped")),
        true_upright=None if "upright" not in block else bool(block["upright"]),
        pick_judgements=len(picks), pick_true_grasped=pick_grasped,
        release_checks=len(checks), release_confirmed=sum(r.confirmed for _, r in checks),
        # a refusal is the trial's last word on the release (the block put back or held); a
        # check not confirmed that the re-aim followed is counted apart (docs/success.md)
        wrong_refusals=sum(r.wrong_refusal for _, r in final),
        right_refusals=sum(r.right_refusal for _, r in final),
        reaimed_would_land=sum(r.wrong_refusal for _, r in checks) - sum(
            r.wrong_refusal for _, r in final
        ),
        wrong_confirms=sum(r.wrong_confirm for _, r in checks),
        release_margin_mm=None if last is None else last.margin_mm,
        release_would_land=None if last is None else last.would_land,
        release_tilt_deg=None if last is None else last.tilt_deg,
        release_shadow_margin_mm=None if last is None else last.shadow_margin_mm,
        release_landed=(
            None
            if last is None or not last.confirmed or end is None or not end.get("place_outcome")
            else end.get("place_outcome") == "box"
        ),
        late_captures=sum(c.late for c in captures),
        failed_captures=sum(c.truth is None for c in captures),
        first_grasp=bool(getattr(lc_row, "first_grasp", False)),
        attempts=int(getattr(lc_row, "attempts", t.outcome["pick_attempts"])),
        true_tip_xz_mm=getattr(lc_row, "true_xz_mm", None),
        placed_true=flags["placed_true"], false_placed=flags["false_placed"],
        missed_place=flags["missed_place"], false_held=flags["false_held"],
        pick_wrong=flags["pick_wrong"],
        jaw_events=jaw_events(end),
        captures=[_capture_json(c) for c in captures],
    )  # fmt: skip


def jaw_events(end: Mapping[str, Any] | None) -> str:
    """The end truth's jaw events, one ``kind(key=value ...)`` each, joined by ``|``: why a
    pick held, slipped or missed (the simulator's grasp model, docs/simulation-contact.md)."""
    out = []
    for ev in (end or {}).get("events", []):
        if not isinstance(ev, dict) or ev.get("kind") not in (*JAW_EVENTS, "slip"):
            continue
        parts = [f"{k}={ev[k]}" for k in ("lever_mm", "axis_mm", "across_mm") if k in ev]
        if ev.get("kind") == "miss" and ev.get("reason"):
            parts.append(f"why={str(ev['reason']).split(' (')[0].split(':')[0]}")
        out.append(f"{ev.get('kind')}({' '.join(parts)})")
    return "|".join(out)


def _capture_json(c: Capture) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": c.kind, "claim": c.claim, "seq": c.seq, "latency_ms": c.latency_ms,
        "late": c.late, "error": c.error,
    }  # fmt: skip
    tr = c.truth
    if tr is not None:
        b, x = tr.get("block") or {}, tr.get("box") or {}
        out["truth"] = {
            "grasped": tr.get("grasped"), "gripper": tr.get("gripper"),
            "block": {
                k: b.get(k) for k in ("x", "y", "z", "yaw_deg", "rot", "upright", "resting_on")
            },
            "box": {k: x.get(k) for k in ("x", "z", "yaw_deg", "inner_m")},
        }  # fmt: skip
        if c.kind == "release_check":
            r = release_check(bool(c.claim), tr, c.late)
            out["margin_mm"], out["would_land"] = r.margin_mm, r.would_land
            out["tilt_deg"], out["shadow_margin_mm"] = r.tilt_deg, r.shadow_margin_mm
    return out


# ---------------------------------------------------------------------------- summary
def _count(rows: Sequence[SuccessRow], name: str) -> int:
    return sum(bool(getattr(r, name)) for r in rows)


def summary(
    rows: Sequence[SuccessRow], trials: int, sessions: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The figures of a run: ``trials`` asked for, ``sessions`` as run (their stop reasons)."""
    early = [r for r in rows if r.trial <= EARLY_TRIALS]
    later = [r for r in rows if r.trial > EARLY_TRIALS]
    pick_known = [r for r in rows if r.pick_wrong is not None]
    place_known = [
        r for r in rows if r.placed_true is not None and r.place_verdict in ("yes", "no")
    ]
    durations = [r.duration_s for r in rows]
    return {
        "trials_asked": trials,
        "trials_run": len(rows),
        "placed_true": _count(rows, "placed_true"),
        "placed_true_first": {"trials": len(early), "placed": _count(early, "placed_true")},
        "placed_true_rest": {"trials": len(later), "placed": _count(later, "placed_true")},
        "placed_by_verdicts": sum(
            r.pick_verdict == "yes" and r.place_verdict == "yes" for r in rows
        ),
        "sessions": len(sessions),
        "release_checks": sum(r.release_checks for r in rows),
        "release_confirmed": sum(r.release_confirmed for r in rows),
        "wrong_refusals": sum(r.wrong_refusals for r in rows),
        "right_refusals": sum(r.right_refusals for r in rows),
        "reaimed_would_land": sum(r.reaimed_would_land for r in rows),
        "wrong_confirms": sum(r.wrong_confirms for r in rows),
        # a confirmed check whose would-land the release that followed did not bear out
        "would_land_not_borne_out": sum(
            r.release_landed is not None
            and r.release_would_land is not None
            and r.release_landed != r.release_would_land
            for r in rows
        ),
        "false_placed": _count(rows, "false_placed"),
        "missed_place": _count(rows, "missed_place"),
        "false_held": _count(rows, "false_held"),
        "pick_verdict_equals_truth": {
            "trials": len(pick_known),
            "equal": sum(r.pick_wrong is False for r in pick_known),
        },
        "place_verdict_equals_truth": {
            "trials": len(place_known),
            "equal": sum((r.place_verdict == "yes") == r.placed_true for r in place_known),
        },
        "truth_missing_at_end": sum(r.placed_true is None for r in rows),
        "late_captures": sum(r.late_captures for r in rows),
        "failed_captures": sum(r.failed_captures for r in rows),
        "mean_trial_s": statistics.fmean(durations) if durations else None,
        "not_placed": dict(
            Counter(
                _reason_class(cast(TrialRow, r)) for r in rows if not r.placed_true
            ).most_common()
        ),
    }


def _of(part: Mapping[str, Any]) -> str:
    n = part["trials"]
    return f"{part.get('placed', part.get('equal'))}/{n}" if n else "-"


def summary_text(sm: Mapping[str, Any], stops: Sequence[Mapping[str, Any]]) -> str:
    n = sm["trials_run"]
    refused = sm["wrong_refusals"] + sm["right_refusals"]
    mean = sm["mean_trial_s"]
    lines = [
        f"placed (truth):        {sm['placed_true']}/{n}"
        + (f" of {sm['trials_asked']} asked" if n != sm["trials_asked"] else "")
        + f"  (trials 1-{EARLY_TRIALS}: {_of(sm['placed_true_first'])}, "
        f"{EARLY_TRIALS + 1}-{n if n > EARLY_TRIALS else 'N'}: {_of(sm['placed_true_rest'])})",
        f"placed (verdicts):     {sm['placed_by_verdicts']}/{n}",
        f"sessions needed:       {sm['sessions']}",
        *(
            f"  session {s['session']}: {s['trials']} trial(s), stopped by: "
            f"{s['stopped_by'] or '- (all its trials ran)'}"
            for s in stops
        ),
        f"release checks:        {sm['release_checks']} ({sm['release_confirmed']} confirmed, "
        f"{refused} refused: {sm['wrong_refusals']} wrong, {sm['right_refusals']} right; "
        f"{sm.get('reaimed_would_land', 0)} re-aimed that would have landed as they hung); "
        f"wrong confirms {sm['wrong_confirms']}; would-land not borne out by the release "
        f"{sm['would_land_not_borne_out']}",
        f"false placed:          {sm['false_placed']}   missed place: {sm['missed_place']}   "
        f"false held: {sm['false_held']}",
        f"pick verdict = truth:  {_of(sm['pick_verdict_equals_truth'])} trials",
        f"place verdict = truth: {_of(sm['place_verdict_equals_truth'])} trials",
        f"mean trial duration:   {'-' if mean is None else f'{mean:.1f} s'}",
        f"snapshots late/failed: {sm['late_captures']}/{sm['failed_captures']}; "
        f"trials without an end truth: {sm['truth_missing_at_end']}",
    ]
    for why, k in sm["not_placed"].items():
        lines.append(f"  not placed x{k}: {why}")
    return "\n".join(lines)


def row_line(r: SuccessRow) -> str:
    def yn(v: bool | None) -> str:
        return "-" if v is None else "yes" if v else "no"

    margin = "-" if r.release_margin_mm is None else f"{r.release_margin_mm:+.1f} mm"
    flags = [
        k for k in ("false_placed", "missed_place", "false_held", "pick_wrong") if getattr(r, k)
    ]
    flags += ["wrong_refusal"] * r.wrong_refusals + ["wrong_confirm"] * r.wrong_confirms
    return (
        f"truth {r.trial:>3} seed {r.seed}: {r.status}; pick {r.pick_verdict} (held "
        f"{yn(r.pick_true_grasped)}) place {r.place_verdict}; block on {r.true_block_on}, "
        f"placed {yn(r.placed_true)}; release checks {r.release_checks} "
        f"({r.release_confirmed} confirmed, margin {margin}, would land "
        f"{yn(r.release_would_land)})" + (f"; {', '.join(flags)}" if flags else "")
    )


# ---------------------------------------------------------------------------- sessions
@dataclass
class _Session:
    number: int
    first_trial: int  # trials before this session (its seeds continue from there)
    report: ServiceReport = field(default_factory=ServiceReport)
    starts: dict[int, dict[str, Any]] = field(default_factory=dict)
    ends: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: the indexes of its trials whose rows are made
    done: set[int] = field(default_factory=set)
    error: str = ""

    @property
    def stopped_by(self) -> str:
        return self.error or self.report.stopped_by


def _truth(control_url: str) -> dict[str, Any] | None:
    try:
        return _get_json(control_url.rstrip("/") + "/scene/truth")
    except Exception:
        return None


def _run_one(
    rig: DemoRig,
    sess: _Session,
    trials: int,
    seed: int,
    on_end: Callable[[_Session, int, TrialSummary, list[Capture]], str],
) -> None:
    """One session of ``trials`` trials, run as the demo runs its own (``demo.run_session``,
    the session's console and log file). Before trial ``i`` > 0 the world as trial ``i-1``
    left it, then that trial's ``on_end(session, index, summary, captures)`` (its line to the
    console); after the session the last trial's."""
    settings = rig.settings.model_copy(update={"trials": trials})
    url = rig.control_url
    tap = TruthTap(url)

    def ended(j: int, t: TrialSummary | None) -> str:
        end = _truth(url)
        if end is not None:
            sess.ends[j] = end
        tap.drain()
        return "" if t is None else on_end(sess, j, t, tap.of(j + 1))

    async def between(i: int) -> int | None:
        if i > 0 and i - 1 not in sess.done:
            line = await asyncio.to_thread(ended, i - 1, tap.summaries.get(i))
            if line:
                console.line(line)
        s = seed + sess.first_trial + i
        if sess.first_trial == 0 and i == 0:  # the daemon started on this seed's scene
            start = await asyncio.to_thread(_truth, url)
            if start is not None:
                sess.starts[i] = start
            return s
        info = await asyncio.to_thread(scene_next, url, s)
        sess.starts[i] = info
        return s if info else None

    console = tap.attach(session_console(settings))
    try:
        with session_logging(settings, console):
            sess.report = asyncio.run(run_session(settings, between, console))
    finally:
        console.close()
        tap.drain()
    for j, t in enumerate(sess.report.trials):  # the last one (and any left without a row)
        if j not in sess.done:
            print(ended(j, t), flush=True)


def _write(out_dir: Path, rows: Sequence[SuccessRow], doc: dict[str, Any]) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    out_csv, out_json = out_dir / "successcheck.csv", out_dir / "successcheck.json"
    with open(out_csv, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow(r.csv_dict())
    out_json.write_text(
        json.dumps({**doc, "trials": [asdict(r) for r in rows]}, indent=2, default=str),
        encoding="utf-8",
    )
    return out_csv, out_json


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {v}")
    return v


def _scale(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"must be a number above 0, not {text}")
    return v


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m mecharm_dev.successcheck", description=__doc__.splitlines()[0]
    )
    p.add_argument(
        "--profile", choices=PROFILE_NAMES, default="rig", help="sim profile (default rig)"
    )
    p.add_argument("--trials", type=_positive_int, default=60, help="trials (default 60)")
    p.add_argument(
        "--seed", type=int, default=9100, help="scene seed of trial 1, then +1 each (default 9100)"
    )
    p.add_argument("--time-scale", type=_scale, default=10.0, help="sim arm speed-up (default 10)")
    p.add_argument(
        "--root", type=Path, default=None, help="the data root (default: a new temp dir, printed)"
    )
    p.add_argument(
        "--out", type=Path, default=None, help="where the CSV and JSON go (default: the root)"
    )
    p.add_argument(
        "--one-session",
        action="store_true",
        help="do not start a new session when one stops early (report it)",
    )
    args = p.parse_args(argv)
    try:
        profile = load_profile(args.profile)
    except ProfileError as exc:
        p.error(str(exc))
    root = (args.root or Path(tempfile.mkdtemp(prefix="successcheck_"))).resolve()
    if root.exists() and not root.is_dir():
        p.error(f"--root {root}: not a directory")
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        p.error(f"--out {args.out}: not a directory")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        p.error(f"--root {root}: cannot create it: {exc}")
    out_dir = (args.out or root).resolve()
    configure_logging("warning")  # until the session's log file takes over
    print(f"data root: {root}", flush=True)
    layout = DataRoot(root)
    if layout.correction_memory.exists() or layout.height_memory.exists():
        print("  (it has memories already: the trials start from them)", flush=True)
    world = WorldArm(profile.arm)
    rows: list[SuccessRow] = []
    sessions: list[_Session] = []
    stops: list[dict[str, Any]] = []
    rig: DemoRig | None = None
    code = 0
    t0 = time.monotonic()

    def on_end(sess: _Session, j: int, t: TrialSummary, captures: list[Capture]) -> str:
        """The row of the session's trial ``j`` (0-based) once the world after it is known."""
        k = sess.first_trial + j + 1
        start, end = sess.starts.get(j, {}), sess.ends.get(j)
        try:
            s = t.scene_seed if t.scene_seed is not None else args.seed + k - 1
            lc = trial_row(k, s, t, world, start, end or {})
        except Exception:  # a trace that cannot be read: the row without learncheck's part
            lc = None
        row = success_row(k, sess.number, t, captures, end, lc)
        rows.append(row)
        sess.done.add(j)
        return row_line(row)

    try:
        rig = start_demo_rig(
            root,
            trials=args.trials,
            seed=args.seed,
            time_scale=args.time_scale,
            sim_profile=args.profile,
            profile=profile,
            recorder=True,
        )
        print(
            f"running {args.trials} trials (the FK table is built on the first run, ~10 s) ...",
            flush=True,
        )
        while len(rows) < args.trials:
            sess = _Session(len(sessions) + 1, len(rows))
            sessions.append(sess)
            if sess.number > 1:
                print(
                    f"session {sess.number}: continuing at trial {len(rows) + 1} "
                    f"(seed {args.seed + len(rows)})",
                    flush=True,
                )
            try:
                _run_one(rig, sess, args.trials - len(rows), args.seed, on_end)
            except KeyboardInterrupt:
                raise
            except Exception as exc:
                sess.error = f"error: {type(exc).__name__}: {exc}"
            n = len(rows) - sess.first_trial
            stops.append({"session": sess.number, "trials": n, "stopped_by": sess.stopped_by})
            print(
                f"session {sess.number}: {n} trial(s), stopped by: "
                f"{sess.stopped_by or '- (all its trials ran)'}",
                flush=True,
            )
            if len(rows) >= args.trials:
                break
            why_not = (
                "--one-session"
                if args.one_session
                else "it ran no trial"
                if n == 0
                else "Ctrl-C"
                if sess.stopped_by in ("signal", "forced stop")
                else "a storage fault"
                if sess.report.storage_problem
                else "the rig stopped"
                if not all(c.alive() for c in rig.children)
                else ""
            )
            if why_not:
                print(
                    f"stopped early after {len(rows)} of {args.trials} trials; not continued "
                    f"({why_not})",
                    flush=True,
                )
                break
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    except Exception as exc:
        print(f"successcheck failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = 1
    finally:
        if rig is not None:
            rig.stop()
    sm = summary(rows, args.trials, stops)
    doc = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "root": str(root),
        "profile": profile.name,
        "summary": sm,
        "sessions": stops,
        "took_s": round(time.monotonic() - t0, 1),
    }
    out_csv, out_json = _write(out_dir, rows, doc)
    print()
    print(
        f"success check: profile {profile.name}, seeds {args.seed}.., time scale {args.time_scale}x"
    )
    print(summary_text(sm, stops))
    print(f"rows:    {out_csv}\nsummary: {out_json}\nroot:    {root}")
    print(f"took {time.monotonic() - t0:.0f}s")
    if code:
        return code
    return 0 if rows else 1


if __name__ == "__main__":
    raise SystemExit(main())
