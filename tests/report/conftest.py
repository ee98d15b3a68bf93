"""A small data root written with the project's own writers, for the report tests.

The ledger is appended with the runtime's ``append_row``, the traces with its
``TraceWriter``, the recording metas from the recorder's ``RecordingMeta`` model; the
run logs hold the fields the report reads (stages with outcome and duration). Each
trial's numbers are chosen so a test can say what the page must show.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from mecharm.common.layout import DataRoot, format_run_stem
from mecharm.recorder.events import RecordingMeta
from mecharm.runtime.records.ledger import append_row
from mecharm.runtime.records.trace import TraceWriter

T0 = 1_764_500_000.0


@dataclass
class Spec:
    """What one hand-made trial is (and so what the report must say about it)."""

    status: str = "completed"
    reason: str = ""
    seed: int = 7
    pick: str = "yes"
    place: str = "yes"
    stages: dict[str, float] = field(default_factory=dict)
    failed_stage: str = ""
    first_tip_mm: float | None = 3.0
    applied_mm: tuple[float, float] = (0.0, 0.0)
    memory_sizes: tuple[int, int] = (0, 0)
    corr_update: dict[str, Any] | None = None
    height_update: dict[str, Any] | None = None
    recording: str = "ok"  # ok | crashed | none
    frames: int = 300
    fps: float = 30.0
    video: bool = True
    rerun: bool = False


def make_trial(root: Path, number: int, spec: Spec) -> str:
    dr = DataRoot(root)
    stem = format_run_stem(number, T0 + number * 60)
    run_dir = dr.run_dir(stem)
    run_dir.mkdir(parents=True)
    stages = [
        {
            "stage": name,
            "outcome": "fail" if name == spec.failed_stage else "ok",
            "reason": spec.reason if name == spec.failed_stage else "",
            "duration_s": dur,
            "ended_ts": T0 + number * 60,
        }
        for name, dur in spec.stages.items()
    ]
    dr.runlog(stem).write_text(
        json.dumps({"run_stem": stem, "stages": stages, "stage_times": spec.stages}),
        encoding="utf-8",
    )
    tr = TraceWriter(dr.trace(stem))
    tr.stage = "start"
    corr = {f"pick_{i}": {"dx_mm": 0.0, "dz_mm": 0.0, "n": 1} for i in range(spec.memory_sizes[0])}
    height = {f"place_{i}": {"dee_y_mm": 0.0, "n": 1} for i in range(spec.memory_sizes[1])}
    tr.input("memories", {"correction": corr, "height": height})
    tr.stage = "correct_aim"
    tr.decision("correction", {"key": "pick_x180_z220", "applied_mm": list(spec.applied_mm)})
    tr.stage = "descend_pick"
    if spec.first_tip_mm is not None:
        tr.input("tip", {"ok": False, "dist_mm": 99.0, "reason": "tip not seen"})
        tr.input(
            "tip",
            {"ok": True, "dx_mm": 0.0, "dz_mm": spec.first_tip_mm, "dist_mm": spec.first_tip_mm},
        )
        tr.input("tip", {"ok": True, "dx_mm": 0.0, "dz_mm": 0.5, "dist_mm": 0.5})
    if spec.corr_update is not None:
        tr.stage = "lift_and_judge"
        tr.decision("correction_update", spec.corr_update)
    if spec.height_update is not None:
        tr.stage = "retreat_and_judge"
        tr.decision("height_update", spec.height_update)
    tr.result(spec.status, spec.reason)
    rec = dr.recording(stem)
    rel = str(DataRoot.recording_rel(stem))
    if spec.recording != "none" or spec.video:
        rec.dir.mkdir(parents=True)
    if spec.video:
        rec.video.write_bytes(b"\x00\x00\x00\x18ftypmp42")  # the report links it, never decodes it
    if spec.recording != "none":
        meta = RecordingMeta(
            run_stem=stem, started_ts=T0, ended_ts=T0 + 10, elapsed_sec=10.0,
            frames_captured=spec.frames, frames_written=spec.frames, effective_fps=spec.fps,
            container_fps=30.0, width=64, height=48, codec="h264", status=spec.recording,
            recording_path=rel,
            status_reason="recorder killed; repaired" if spec.recording == "crashed" else "",
        )  # fmt: skip
        rec.meta.write_text(meta.model_dump_json(), encoding="utf-8")
    if spec.rerun:
        dr.rerun(stem).write_bytes(b"RRF2")
    append_row(
        dr.ledger,
        {
            "run_stem": stem,
            "started_at": f"2026-12-01T12:00:{number:02d}.000",
            "ended_at": f"2026-12-01T12:00:{number + 10:02d}.000",
            "duration_s": round(sum(spec.stages.values()), 3),
            "status": spec.status,
            "reason": spec.reason,
            "dry_run": False,
            "scene_seed": spec.seed,
            "pick_verdict": spec.pick,
            "place_verdict": spec.place,
            "pick_attempts": 1,
            "recording_path": rel if spec.recording != "none" else "",
            # the ledger was written before a repair: a crashed recording reads "none" there
            "recording_status": "none" if spec.recording == "crashed" else spec.recording,
            "recording_fps": spec.fps if spec.recording == "ok" else None,
            "recording_frames": spec.frames if spec.recording == "ok" else None,
        },
    )
    return stem


def stages(detect: float, grasp: float, release: float | None = None) -> dict[str, float]:
    out = {"detect": detect, "grasp": grasp}
    if release is not None:
        out["release"] = release
    return out


#: four trials: two succeed, one is refused at the release, one judged not placed
SPECS = (
    Spec(seed=7, stages=stages(1.0, 0.4, 0.5), first_tip_mm=9.0, memory_sizes=(0, 0),
         corr_update={"key": "pick_x180_z220", "updated": True, "dx_mm": -1.5, "dz_mm": 2.0, "n": 1},
         height_update={"key": "place_x-180_z180", "placed_ok": True, "dee_y_mm": 0.0}, rerun=True),
    Spec(seed=8, stages=stages(2.0, 0.6, 0.7), first_tip_mm=4.0, applied_mm=(3.0, 4.0),
         memory_sizes=(1, 1),
         corr_update={"key": "pick_x180_z220", "updated": True, "dx_mm": -1.0, "dz_mm": 1.0, "n": 2},
         height_update={"key": "place_x-180_z180", "placed_ok": True, "dee_y_mm": 5.0, "n": 2,
                        "change": "raise", "why": "placed with margin"}),
    Spec(status="stopped", seed=7, place="",
         reason="release refused: block not seen above the box opening (top: 16.4 mm)",
         stages=stages(3.0, 0.8, 0.9), failed_stage="release", first_tip_mm=2.0,
         memory_sizes=(1, 1), recording="crashed", frames=120, fps=12.5),
    Spec(seed=8, place="no", stages=stages(4.0, 1.0, 1.1), first_tip_mm=None,
         memory_sizes=(1, 1), recording="none", video=False),
)  # fmt: skip


@pytest.fixture
def data_root(tmp_path: Path) -> tuple[Path, list[str]]:
    root = tmp_path / "root"
    root.mkdir()
    stems = [make_trial(root, i + 1, s) for i, s in enumerate(SPECS)]
    return root, stems


class Page(HTMLParser):
    """The parts of a report page the tests look at."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.ids: set[str] = set()
        self.rows: list[str] = []
        self.text: list[str] = []
        self._cells: list[str] | None = None
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None
        self._skip = 0
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        if a.get("id"):
            self.ids.add(a["id"] or "")
        if tag in ("style", "title"):
            self._skip += 1
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self._cells = []
            if a.get("id"):
                self.rows.append(a["id"] or "")
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("style", "title") and self._skip:
            self._skip -= 1
        if tag in ("td", "th") and self._cell is not None and self._cells is not None:
            self._cells.append(" ".join(" ".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._cells is not None:
            self.tables[-1].append(self._cells)
            self._cells = None

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)

    @property
    def plain(self) -> str:
        return " ".join(" ".join(self.text).split())

    def table_with(self, column: str) -> list[dict[str, str]]:
        """The rows (as dicts) of the table whose header row has ``column``."""
        for t in self.tables:
            if t and column in t[0]:
                return [dict(zip(t[0], r, strict=False)) for r in t[1:]]
        raise AssertionError(f"no table with a column {column!r}")
