"""Compare the recorded decisions with the replayed ones and word the difference.

Why a sequence alignment and not a line-by-line zip: a changed decision often adds
or removes others (an extra servo step, a lookup that now fails and aborts), and a
zip would then report every later line as different. ``difflib`` aligns the two
lists; the report starts at the first block that is not equal and names the stage,
the decision and each field that changed (recorded → replayed).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from mecharm.runtime.records.trace import DECISION_EVENTS

__all__ = [
    "Decision",
    "DecisionDiff",
    "FieldChange",
    "decisions_of",
    "diff_decisions",
    "field_changes",
    "render_diff",
]

_IGNORED = ("seq", "ts")


@dataclass(frozen=True)
class Decision:
    """One decision line without its sequence number and wall-clock stamp."""

    index: int  # position among the decisions (0-based)
    line: int | None  # line in the trace file (None for the replayed side)
    event: dict[str, Any]

    @property
    def stage(self) -> str:
        return str(self.event.get("stage"))

    @property
    def label(self) -> str:
        ev = self.event.get("event")
        if ev == "decision":
            return str(self.event.get("kind"))
        if ev == "transition":
            return f"transition {self.event.get('frm')} -> {self.event.get('to')}"
        return str(ev)

    def key(self) -> str:
        return json.dumps(self.event, sort_keys=True, allow_nan=True)


def decisions_of(events: Sequence[tuple[int | None, dict[str, Any]]]) -> list[Decision]:
    out: list[Decision] = []
    for line, e in events:
        if e.get("event") in DECISION_EVENTS:
            out.append(Decision(len(out), line, {k: v for k, v in e.items() if k not in _IGNORED}))
    return out


@dataclass(frozen=True)
class FieldChange:
    path: str
    recorded: Any
    replayed: Any


@dataclass
class DecisionDiff:
    """Where the replay left the recording: pairs of changed decisions and unpaired extras."""

    total_recorded: int
    total_replayed: int
    first: int | None = None  # index (recorded side) of the first difference
    changed: list[tuple[Decision, Decision, list[FieldChange]]] = field(default_factory=list)
    only_recorded: list[Decision] = field(default_factory=list)
    only_replayed: list[Decision] = field(default_factory=list)
    blocks: list[tuple[str, list[Decision], list[Decision]]] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not self.blocks

    @property
    def n_different(self) -> int:
        return len(self.changed) + len(self.only_recorded) + len(self.only_replayed)


def _is_leaf(v: Any) -> bool:
    if isinstance(v, dict):
        return False
    if isinstance(v, list):
        return all(x is None or isinstance(x, bool | int | float | str) for x in v)
    return True


def field_changes(a: Any, b: Any, path: str = "") -> Iterator[FieldChange]:
    """Every leaf that differs between two decisions (lists of scalars are one leaf)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            sub = f"{path}.{k}" if path else str(k)
            if k not in a:
                yield FieldChange(sub, "<absent>", b[k])
            elif k not in b:
                yield FieldChange(sub, a[k], "<absent>")
            else:
                yield from field_changes(a[k], b[k], sub)
        return
    if (
        isinstance(a, list)
        and isinstance(b, list)
        and len(a) == len(b)
        and not (_is_leaf(a) and _is_leaf(b))
    ):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from field_changes(x, y, f"{path}[{i}]")
        return
    if a != b:
        yield FieldChange(path or "<value>", a, b)


def diff_decisions(recorded: list[Decision], replayed: list[Decision]) -> DecisionDiff:
    """Align the two decision lists (exact comparison: a replay of unchanged code is bit-identical)."""
    out = DecisionDiff(len(recorded), len(replayed))
    keys_a, keys_b = [a.key() for a in recorded], [b.key() for b in replayed]
    sm = difflib.SequenceMatcher(None, keys_a, keys_b, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            continue
        a, b = recorded[i1:i2], replayed[j1:j2]
        if out.first is None:
            out.first = i1
        out.blocks.append((tag, a, b))
        for x, y in zip(a, b, strict=False):
            same = (x.stage, x.label) == (y.stage, y.label)
            out.changed.append(
                (
                    x,
                    y,
                    list(
                        field_changes(_body(x), _body(y))
                        if same
                        else field_changes(x.event, y.event)
                    ),
                )
            )
        out.only_recorded.extend(a[len(b) :])
        out.only_replayed.extend(b[len(a) :])
    return out


def _fmt(v: Any, limit: int = 0) -> str:
    text = (
        v
        if isinstance(v, str) and v == "<absent>"
        else repr(v)
        if isinstance(v, float)
        else json.dumps(v)
    )
    return text if not limit or len(text) <= limit else text[: limit - 3] + "..."


def _body(d: Decision) -> Any:
    """What a decision says, without its framing (event, stage, kind)."""
    if "value" in d.event:
        return d.event["value"]
    return {k: v for k, v in d.event.items() if k not in ("event", "stage", "kind")}


def _where(d: Decision) -> str:
    line = f"trace line {d.line}, " if d.line is not None else ""
    return f"{line}decision {d.index + 1}"


def _entries(diff: DecisionDiff, max_fields: int) -> Iterator[list[str]]:
    for _tag, a, b in diff.blocks:
        for x, y in zip(a, b, strict=False):
            if (x.stage, x.label) == (y.stage, y.label):
                out = [f"at {_where(x)}: stage {x.stage}, {x.label}"]
                changes = list(field_changes(_body(x), _body(y)))
                for c in changes[:max_fields]:
                    out += [
                        f"    {c.path}:",
                        f"        recorded {_fmt(c.recorded)}",
                        f"        replayed {_fmt(c.replayed)}",
                    ]
                if len(changes) > max_fields:
                    out.append(f"    ... {len(changes) - max_fields} more field(s)")
            else:
                out = [
                    f"at {_where(x)}:",
                    f"    recorded stage {x.stage}, {x.label}: {_fmt(_body(x), 160)}",
                    f"    replayed stage {y.stage}, {y.label}: {_fmt(_body(y), 160)}",
                ]
            yield out
        for x in a[len(b) :]:
            yield [
                f"at {_where(x)}: only in the trace: stage {x.stage}, {x.label}: {_fmt(_body(x), 160)}"
            ]
        for y in b[len(a) :]:
            yield [f"only in the replay: stage {y.stage}, {y.label}: {_fmt(_body(y), 160)}"]


def render_diff(diff: DecisionDiff, max_shown: int = 10, max_fields: int = 12) -> str:
    """A readable report that starts at the first differing decision (then at most ``max_shown`` more)."""
    if diff.identical:
        return "identical"
    lines = [
        f"DIFFERENT: {diff.n_different} decision(s) differ "
        f"(recorded {diff.total_recorded}, replayed {diff.total_replayed})"
    ]
    for n, entry in enumerate(_entries(diff, max_fields)):
        if n > max_shown:
            lines.append(f"... {diff.n_different - n} more differing decision(s)")
            break
        lines.append(("first difference " if n == 0 else "then ") + entry[0])
        lines.extend(entry[1:])
    return "\n".join(lines)
