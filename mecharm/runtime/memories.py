"""Learning memories (docs/runtime.md, "Memories"): per-cell pick correction and per-cell place height.

Both are small JSON files in the data root (``{root}/memories/``), written atomically.
Why the strictness: a corrupt entry would aim the gripper somewhere arbitrary, so
an entry that does not validate is skipped with a log line and never applied; a file
that is not JSON at all is moved aside (never silently overwritten) and the memory
starts empty. Corrections are updated only when the final pick verdict is yes.

Plausibility bounds (docs/runtime.md, "Memories"): a number can be well formed and
still impossible (a correction of 1e308 mm was clamped to 20 mm and every pick of
the trial missed). An entry outside the bounds is rejected at load with an error
line naming the entry, the value and the bound, and never applied.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mecharm.common.fsutil import OutsideRootError, atomic_write_json, inside_root
from mecharm.common.logging import get_logger

__all__ = [
    "CORRECTION_LIMIT_MM",
    "HEIGHT_LIMIT_MM",
    "N_LIMIT",
    "CorrectionMemory",
    "HeightMemory",
    "HeightUpdate",
    "HeldBlockMemory",
    "cell_key",
    "learn_height",
]

log = get_logger("mecharm.runtime.memories")

#: Largest |dx_mm|, |dz_mm| of a correction entry: twice the applied clamp
#: (``max_correction_mm``, 20 mm) and over three times the grasp tolerance (12 mm);
#: the EMA of tip offsets of successful picks stays far inside it.
CORRECTION_LIMIT_MM = 40.0
#: Range of a height entry's dee_y_mm: the update moves it by ``height_step_mm`` within
#: 0..``height_max_mm`` (30 mm) after places, and blocks lost on the box up to
#: ``height_lost_max_mm`` (60 mm); 80 mm lifts the place target from 100 mm to 180 mm
#: above the mat, beyond which the place region is out of reach. Below 0 would lower the
#: block into the box.
HEIGHT_LIMIT_MM = (0.0, 80.0)
#: Largest n (learning count) of an entry: 100,000 trials in one 20 mm cell is
#: 100 days of trials without a pause at the rig's ~90 s per trial.
N_LIMIT = 100_000


def cell_key(phase: str, x_m: float, z_m: float, cell_mm: int = 20) -> str:
    """``pick_x200_z260``: the phase plus x, z (mm) rounded to the nearest ``cell_mm``."""
    if not (math.isfinite(x_m) and math.isfinite(z_m)):
        raise ValueError(f"cell_key needs finite x, z (got {x_m}, {z_m})")

    def r(v: float) -> int:
        return int(round(v * 1000.0 / cell_mm) * cell_mm)

    return f"{phase}_x{r(x_m)}_z{r(z_m)}"


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


class _JsonMemory:
    kind = "memory"

    def __init__(self, path: Path, root: Path | None = None) -> None:
        """``root``: the data root the file must stay in (a ``memories/`` symlinked out of
        it is neither read nor written; docs/data-root.md, "Nothing outside the root")."""
        self.path = Path(path)
        self.root = None if root is None else Path(root)
        self.entries: dict[str, dict[str, Any]] = {}
        self.skipped: list[str] = []
        if self.root is not None:
            try:
                inside_root(self.root, self.path)
            except OutsideRootError as exc:
                log.error("memory_file_outside_root", memory=self.kind, reason=str(exc),
                          action="not read, not written", operator=True)  # fmt: skip
                return
        self._load()

    def _valid(self, entry: Any) -> bool:  # pragma: no cover - overridden
        raise NotImplementedError

    def _implausible(self, entry: dict[str, Any]) -> tuple[str, Any, str] | None:
        """(field, value, allowed range) of the first value outside its bound, or None."""
        return None

    def _load(self) -> None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        try:
            data = json.loads(text)
            entries = data["entries"]
            if not isinstance(entries, dict):
                raise TypeError("entries is not an object")
        except (ValueError, KeyError, TypeError) as exc:
            aside = self.path.with_name(
                f"{self.path.name}.corrupt-{time.strftime('%Y%m%d_%H%M%S')}"
            )
            self.path.replace(aside)
            log.error(
                "memory_file_corrupt",
                memory=self.kind,
                path=str(self.path),
                moved_to=str(aside),
                error=str(exc),
                operator=True,  # on the console (docs/console.md, "Log lines")
            )
            return
        for key, entry in entries.items():
            if not self._valid(entry):
                self.skipped.append(key)
                log.error(
                    "memory_entry_corrupt_skipped",
                    memory=self.kind,
                    key=key,
                    entry=repr(entry)[:200],
                    path=str(self.path),
                    action=f"not applied; fix or delete entry {key!r} in {self.path}",
                    operator=True,
                )
                continue
            bad = self._implausible(entry)
            if bad is not None:
                name, value, allowed = bad
                self.skipped.append(key)
                log.error(
                    "memory_entry_implausible",
                    memory=self.kind,
                    key=key,
                    field=name,
                    value=repr(value)[:60],
                    allowed=allowed,
                    path=str(self.path),
                    action=f"not applied; fix or delete entry {key!r} in {self.path}",
                    operator=True,
                )
                continue
            self.entries[key] = dict(entry)

    def save(self) -> None:
        """Write all valid entries (corrupt ones are dropped from the file, they were never used)."""
        if self.root is not None:  # OutsideRootError is a StorageFault: the record waits
            inside_root(self.root, self.path.parent)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.root is not None:
            inside_root(self.root, self.path)
        atomic_write_json(self.path, {"version": 1, "kind": self.kind, "entries": self.entries})


@dataclass(frozen=True)
class Correction:
    key: str
    dx_mm: float
    dz_mm: float
    n: int


class CorrectionMemory(_JsonMemory):
    """Pick correction per 20 mm cell: aim = block − Δ; Δ learned by EMA from the tip offset."""

    kind = "correction"

    def _valid(self, entry: Any) -> bool:
        return (
            isinstance(entry, dict)
            and _finite(entry.get("dx_mm"))
            and _finite(entry.get("dz_mm"))
            and isinstance(entry.get("n"), int)
            and not isinstance(entry.get("n"), bool)
            and entry["n"] >= 1
        )

    def _implausible(self, entry: dict[str, Any]) -> tuple[str, Any, str] | None:
        lim = CORRECTION_LIMIT_MM
        for name in ("dx_mm", "dz_mm"):
            if not -lim <= entry[name] <= lim:
                return name, entry[name], f"-{lim:g}..{lim:g} mm"
        if entry["n"] > N_LIMIT:
            return "n", entry["n"], f"1..{N_LIMIT}"
        return None

    def get(self, key: str) -> Correction | None:
        e = self.entries.get(key)
        return (
            None
            if e is None
            else Correction(key, float(e["dx_mm"]), float(e["dz_mm"]), int(e["n"]))
        )

    def update(
        self,
        key: str,
        used_dx_mm: float,
        used_dz_mm: float,
        tip_dx_mm: float,
        tip_dz_mm: float,
        alpha: float,
    ) -> Correction:
        """Learn from one successful pick.

        The tip landed at block + (tip_dx, tip_dz) although we aimed at block − used,
        so the systematic offset is used + tip; Δ moves toward it by EMA ``alpha``.
        """
        if not all(_finite(v) for v in (used_dx_mm, used_dz_mm, tip_dx_mm, tip_dz_mm)):
            raise ValueError("correction update needs finite numbers")
        obs_dx, obs_dz = used_dx_mm + tip_dx_mm, used_dz_mm + tip_dz_mm
        old = self.get(key)
        if old is None:
            dx, dz, n = obs_dx, obs_dz, 1
        else:
            dx = (1 - alpha) * old.dx_mm + alpha * obs_dx
            dz = (1 - alpha) * old.dz_mm + alpha * obs_dz
            n = min(old.n + 1, N_LIMIT)
        lim = CORRECTION_LIMIT_MM
        if not (-lim <= dx <= lim and -lim <= dz <= lim):
            # a tip offset this large is a mis-measurement, not a bias: store it bounded,
            # so the file never holds what the next load would reject
            log.warning("correction_update_bounded", key=key, dx_mm=dx, dz_mm=dz, limit_mm=lim)
            dx, dz = max(-lim, min(lim, dx)), max(-lim, min(lim, dz))
        new = Correction(key, dx, dz, n)
        self.entries[key] = {"dx_mm": new.dx_mm, "dz_mm": new.dz_mm, "n": new.n}
        return new


class HeightMemory(_JsonMemory):
    """Place height per cell: dee_y (mm) added to the place target ee_y."""

    kind = "height"

    def _valid(self, entry: Any) -> bool:
        return (
            isinstance(entry, dict)
            and _finite(entry.get("dee_y_mm"))
            and isinstance(entry.get("n"), int)
            and not isinstance(entry.get("n"), bool)
        )

    def _implausible(self, entry: dict[str, Any]) -> tuple[str, Any, str] | None:
        lo, hi = HEIGHT_LIMIT_MM
        if not lo <= entry["dee_y_mm"] <= hi:
            return "dee_y_mm", entry["dee_y_mm"], f"{lo:g}..{hi:g} mm"
        if not 0 <= entry["n"] <= N_LIMIT:
            return "n", entry["n"], f"0..{N_LIMIT}"
        return None

    def get(self, key: str) -> float | None:
        e = self.entries.get(key)
        return None if e is None else float(e["dee_y_mm"])

    def highest(self) -> float | None:
        """The highest dee_y of the cells learnt so far (None: none): where a new cell starts
        (docs/runtime.md, "Memories"). A block lost on the
        box in one cell raised that cell; the arm that held it so low holds it as low over
        the next cell, so the next cell starts there rather than paying for it again."""
        learnt = [float(e["dee_y_mm"]) for e in self.entries.values() if int(e["n"]) > 0]
        return max(learnt) if learnt else None

    def learn(
        self,
        key: str,
        placed_ok: bool,
        margin_mm: float | None,
        *,
        step_mm: float,
        max_mm: float,
        raise_margin_mm: float,
        start_mm: float = 0.0,
    ) -> HeightUpdate:
        """Apply the measured rule to ``key`` (see ``learn_height``) and count the place; a cell
        not in the memory starts from ``start_mm`` (what its band used)."""
        old = self.entries.get(key, {"dee_y_mm": start_mm, "n": 0})
        old_mm = float(old["dee_y_mm"])
        new, change, why = learn_height(
            old_mm,
            placed_ok,
            margin_mm,
            step_mm=step_mm,
            max_mm=max_mm,
            raise_margin_mm=raise_margin_mm,
        )
        n = min(int(old["n"]) + 1, N_LIMIT)
        self.entries[key] = {"dee_y_mm": new, "n": n}
        return HeightUpdate(margin_mm, old_mm, new, n, change, why)

    def learn_failed(
        self,
        key: str,
        outcome: str,
        margin_mm: float | None,
        *,
        step_mm: float,
        max_mm: float,
        start_mm: float = 0.0,
    ) -> HeightUpdate:
        """A place that did not happen (docs/release.md, "Every trial teaches"): ``lost`` (the
        held block caught on the box) raises the cell one step up to ``max_mm`` (the runtime
        passes ``height_lost_max_mm``); ``refused`` keeps it and counts the attempt."""
        old = self.entries.get(key, {"dee_y_mm": start_mm, "n": 0})
        lo, top = HEIGHT_LIMIT_MM
        old_mm = max(lo, min(top, float(old["dee_y_mm"])))
        hi = min(max_mm, top)
        if outcome == "lost":  # a raise, never a fall to the bound
            new = max(old_mm, min(hi, old_mm + step_mm))
            change = "raise" if new > old_mm else "keep"
            why = "the held block caught on the box: more clearance"
        else:
            new = old_mm
            change = "keep"
            why = "release refused: the block was kept out in x-z, not by its height"
        n = min(int(old["n"]) + 1, N_LIMIT)
        self.entries[key] = {"dee_y_mm": new, "n": n}
        return HeightUpdate(margin_mm, old_mm, new, n, change, why)

    def raise_floor(self, floor_mm: float) -> dict[str, tuple[float, float]]:
        """Every cell lower than ``floor_mm`` raised to it (counts kept): a block lost on the
        box in one cell says the arm holds blocks that low over every cell (docs/release.md,
        "Every trial teaches"). Returns the cells raised, each (old, new)."""
        floor = max(HEIGHT_LIMIT_MM[0], min(HEIGHT_LIMIT_MM[1], floor_mm))
        raised: dict[str, tuple[float, float]] = {}
        for key, e in self.entries.items():
            old = float(e["dee_y_mm"])
            if old < floor:
                self.entries[key] = {**e, "dee_y_mm": floor}
                raised[key] = (old, floor)
        return raised


@dataclass(frozen=True)
class HeightUpdate:
    """One measured height update: what was measured, the change and why."""

    margin_mm: float | None
    old_mm: float
    dee_y_mm: float
    n: int
    change: str  # raise | lower | keep
    why: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def learn_height(
    old_mm: float,
    placed_ok: bool,
    margin_mm: float | None,
    *,
    step_mm: float,
    max_mm: float,
    raise_margin_mm: float,
) -> tuple[float, str, str]:
    """(new dee_y, change, why) by the measured rule (docs/runtime.md, "Memories").

    The place height trades clearance (higher: the gripper and the held block stay
    farther from the box walls) against a sure landing (lower: a shorter drop). A
    place judged yes whose release was measured well inside the opening (margin >=
    ``raise_margin_mm``) raises it one step, as the rig's did after good places; a
    place judged no lowers it one step; an unmeasured release or a narrow margin
    keeps it. A raise goes no higher than min(max_mm, HEIGHT_LIMIT_MM[1]); a cell that blocks
    lost on the box took higher (``learn_failed``) keeps its height until a place judged no
    lowers it: a good place is no evidence that less clearance would do.
    """
    hi = min(max_mm, HEIGHT_LIMIT_MM[1])
    lo, top = HEIGHT_LIMIT_MM
    old_mm = max(lo, min(top, old_mm))
    if not placed_ok:
        new = max(lo, old_mm - step_mm)
        return new, ("lower" if new < old_mm else "keep"), "place judged no: shorter drop"
    if margin_mm is None or not math.isfinite(margin_mm):
        return old_mm, "keep", "placed, release not measured"
    if margin_mm < raise_margin_mm:
        why = f"placed, margin {margin_mm:.1f} mm < {raise_margin_mm:g} mm at the release"
        return old_mm, "keep", why
    new = max(old_mm, min(hi, old_mm + step_mm))
    why = f"placed with margin {margin_mm:.1f} mm at the release: more clearance"
    return new, ("raise" if new > old_mm else "keep"), why


class HeldBlockMemory:
    """The operator's memory across a stop: a session that ended with the block in the
    gripper leaves ``memories/held_block.json``; the next session asks before its first
    trial opens the gripper at HOME, and forgets once the operator says the block is out
    (docs/runtime.md, "A block held across sessions"). A file that cannot be read is taken
    as held: opening the jaws on a block is the mistake this exists to prevent."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def recall(self) -> dict[str, Any] | None:
        """What the last session left (run stem, evidence, when), or None: nothing held."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("held_block_unreadable", path=str(self.path), error=str(exc))
            return {"run_stem": "unknown", "evidence": "unknown", "note": f"unreadable: {exc}"}
        return data if isinstance(data, dict) else {"run_stem": "unknown", "evidence": "unknown"}

    def remember(self, run_stem: str, evidence: str) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(
                self.path, {"run_stem": run_stem, "evidence": evidence or "unknown",
                            "at": time.strftime("%Y-%m-%dT%H:%M:%S")},
            )  # fmt: skip
        except OSError as exc:  # the console said it loudly already; the next session cannot
            log.error("held_block_not_remembered", path=str(self.path), error=str(exc))

    def forget(self) -> None:
        try:
            self.path.unlink(missing_ok=True)
        except OSError as exc:
            log.error("held_block_not_forgotten", path=str(self.path), error=str(exc))
