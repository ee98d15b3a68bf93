"""The report's numbers, computed from the collected trials (docs/report.md says how)."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from mecharm.runtime.records.ledger import default_records
from mecharm.tools.report.collect import TrialData

__all__ = [
    "FailureGroup",
    "Spread",
    "Summary",
    "failure_groups",
    "quantile",
    "reason_group",
    "spread",
    "stage_spreads",
    "summarize",
]


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile by linear interpolation between the sorted values (numpy's default)."""
    xs = sorted(values)
    if not xs:
        raise ValueError("quantile of no values")
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass(frozen=True)
class Spread:
    n: int
    median: float
    p90: float
    max: float


def spread(values: Sequence[float]) -> Spread | None:
    if not values:
        return None
    return Spread(len(values), quantile(values, 0.5), quantile(values, 0.9), max(values))


@dataclass
class Summary:
    trials: int
    completed: int
    #: verdict column -> trials judged yes, in the task's order
    verdict_yes: dict[str, int]
    success: int
    dry_run: int
    unreadable: int
    #: scene seed ("" when none) -> (trials, successes)
    by_seed: dict[str, tuple[int, int]]
    #: recording status -> trials
    recording: Counter[str]
    duration: Spread | None


def summarize(trials: Sequence[TrialData]) -> Summary:
    by_seed: dict[str, tuple[int, int]] = {}
    for t in trials:
        seed = t.row.get("scene_seed", "")
        n, ok = by_seed.get(seed, (0, 0))
        by_seed[seed] = (n + 1, ok + t.success)
    durations = [d for t in trials if (d := t.number("duration_s")) is not None]
    return Summary(
        trials=len(trials),
        completed=sum(t.row.get("status") == "completed" for t in trials),
        verdict_yes={c: sum(t.row.get(c) == "yes" for t in trials) for c in _verdicts(trials)},
        success=sum(t.success for t in trials),
        dry_run=sum(t.row.get("dry_run") == "1" for t in trials),
        unreadable=sum(bool(t.problems) for t in trials),
        by_seed=dict(sorted(by_seed.items(), key=lambda kv: _seed_key(kv[0]))),
        recording=Counter(t.rec_status for t in trials),
        duration=spread(durations),
    )


def _verdicts(trials: Sequence[TrialData]) -> tuple[str, ...]:
    """The verdict columns of the trials' task (pick_place's when there are none)."""
    return (trials[0].records if trials else default_records()).verdicts


def _seed_key(seed: str) -> tuple[int, float, str]:
    try:
        return (0, float(seed), seed)
    except ValueError:
        return (1, 0.0, seed)


_DETAIL = re.compile(r"\s*[:(].*$", re.S)
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


def reason_group(reason: str) -> str:
    """The reason's head: the text before its first ':' or '(' with numbers as N, so
    "release refused: block 16.4 mm ..." and "release refused: block 9.1 mm ..." group."""
    head = _DETAIL.sub("", reason.strip()) or reason.strip()
    return _NUMBER.sub("N", head).strip() or "(no reason given)"


@dataclass
class FailureGroup:
    group: str
    stems: list[str] = field(default_factory=list)
    example: str = ""
    #: the stages whose outcome was not ok in these trials' run logs
    stages: list[str] = field(default_factory=list)


def failure_groups(trials: Sequence[TrialData]) -> list[FailureGroup]:
    """Every trial that did not succeed, grouped by reason, largest group first.

    A stopped trial groups by its ledger reason; a completed one that was judged
    not picked / not placed by that verdict."""
    groups: dict[str, FailureGroup] = {}
    for t in trials:
        if t.success:
            continue
        r = t.row
        if r.get("status") in ("stopped", "interrupted"):
            reason = r.get("reason", "") or "stopped without a reason"
            key = reason_group(reason)
        elif r.get("status") == "completed":
            # the first of the task's verdicts that was not yes (the task's own rule may
            # also fail on its other columns: then the last verdict is named)
            verdicts = t.records.verdicts or ("verdict",)
            col = next((c for c in verdicts if r.get(c) != "yes"), verdicts[-1])
            verdict = r.get(col) or "no verdict"
            reason = key = f"completed, {col.removesuffix('_verdict')} judged {verdict}"
        else:
            reason = key = f"status {r.get('status', '')!r} in the ledger"
        g = groups.setdefault(key, FailureGroup(key, example=reason))
        g.stems.append(t.stem)
        if t.failed_stage and t.failed_stage not in g.stages:
            g.stages.append(t.failed_stage)
    return sorted(groups.values(), key=lambda g: (-len(g.stems), g.group))


def stage_spreads(trials: Sequence[TrialData]) -> dict[str, Spread]:
    """Per stage (in the order trials ran them) the spread of its durations over the trials that ran it."""
    values: dict[str, list[float]] = {}
    for t in trials:
        for stage, dur in t.stages.items():
            values.setdefault(stage, []).append(dur)
    out = {}
    for stage, vs in values.items():
        s = spread(vs)
        if s is not None:
            out[stage] = s
    return out
