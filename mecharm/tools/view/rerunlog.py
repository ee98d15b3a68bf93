"""Log one trial to a ``rerun.RecordingStream``: joints, stages, camera, side video, arm in 3D.

``TrialLogger.event`` takes the trace one line at a time, so the same code builds
the recording of a finished trial (every line, then ``finish``) and streams a trial
that is still running (``mecharm view --follow`` feeds lines as they are appended).
Every entity is logged on one timeline, ``time``: the wall-clock timestamps of the
trace lines, the recorder's ``capture_ts`` and the stage images' write times. The
entity paths are listed in docs/viewing.md; ``ENTITIES`` names them here.

One concern: one trial as a Rerun recording; every entity is logged from the same trace
lines on one timeline.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import rerun as rr

from mecharm.common.kinematics import fk_frames, fk_tip
from mecharm.common.logging import get_logger
from mecharm.runtime.perception import MatHomography
from mecharm.tools.view.overlays import (
    BLOCK_M,
    BOX_RIM_M,
    MAT_X,
    MAT_Z,
    box_outline,
    box_rim_xz,
    find_homography,
    grid_strips,
    marker_strips,
)
from mecharm.tools.view.sidevideo import is_time as _is_time
from mecharm.tools.view.sidevideo import log_side_asset, log_side_images
from mecharm.tools.view.trialfiles import TrialFiles, stage_images

__all__ = ["ENTITIES", "TIMELINE", "TrialLogger", "log_trial"]

log = get_logger("mecharm.tools.view")

#: the one timeline: wall-clock seconds of the trace, the recorder and the image files
TIMELINE = "time"

#: entity paths (docs/viewing.md, "What is in a recording")
ENTITIES = {
    "measured": "joints/j{i}/measured",
    "commanded": "joints/j{i}/commanded",
    "gripper": "gripper/commanded",
    "stages": "events/stages",
    "stage_now": "stage",
    "lookups": "events/lookups",
    "guards": "events/guards",
    "verdicts": "events/verdicts",
    "decisions": "events/decisions",
    "notes": "events/notes",
    "top": "camera/top",
    "markers": "camera/top/markers",
    "grid": "camera/top/mat_grid",
    "block_px": "camera/top/block",
    "box_px": "camera/top/box",
    "tip_px": "camera/top/tip",
    "error_px": "camera/top/servo_error",
    "side": "camera/side",
    "world": "world",
    "arm": "world/arm",
    "target": "world/arm_target",
    "block": "world/block",
    "box": "world/box",
    "mat": "world/mat",
}

#: commands and the gripper hold until the next one: the viewer draws them as steps from its
#: own series style (a point 1 µs before each change looked right in the data but the plot's
#: per-pixel aggregation drew ramps anyway: seen in the web viewer's screenshot)
STEP = rr.components.InterpolationMode.StepAfter
#: the let-go block is drawn this long after the release (a held reading may share its time)
RELEASED_AFTER_S = 1e-6
#: the entities drawn in the rig's frame under ``world``
WORLD_3D = ("mat", "arm", "target", "block", "box")
#: a gripper command below this closes on the block (0 closed … 100 open; the rig's close is 20)
GRIPPER_HELD_BELOW = 60.0

_LOOKUPS = {
    "lookup",
    "pick_hover",
    "correction",
    "place_band",
    "correction_update",
    "height_update",
}
_GUARDS = {"guard", "motion_check", "home_needed", "release_check", "release_override"}
#: judgements shown on the verdicts panel: these, and any task's ``<what>_verdict``
_VERDICTS = {"release_answer", "release_view"}
_VERDICT_SUFFIX = "_verdict"
#: inputs a stage image may be the evidence of (the observation follows its capture)
_OBSERVATIONS = {"tip", "block_xz", "release_view", "pick_verdict", "place_verdict", "scene"}
#: an image file written later than this after the trial's start was copied, not captured
_MAX_TRIAL_S = 3600.0
_WARN = (240, 180, 40)
#: what one bad value in a line raises while it is logged: that line is skipped, not the file
_LINE_ERRORS = (ValueError, TypeError, OverflowError, KeyError, IndexError, AttributeError)


def _num_list(v: Any, n: int) -> list[float] | None:
    """``n`` finite numbers (a NaN or inf would make Rerun drop the whole plot), else None."""
    if isinstance(v, list | tuple) and len(v) == n:
        try:
            out = [float(x) for x in v]
        except (TypeError, ValueError):
            return None
        return out if all(math.isfinite(x) for x in out) else None
    return None


def _short(value: Any, limit: int = 240) -> str:
    if isinstance(value, dict):
        text = ", ".join(f"{k}={_short(v, 60)}" for k, v in value.items())
    elif isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, list) and value and all(isinstance(x, float) for x in value):
        text = "[" + ", ".join(f"{x:.2f}" for x in value) + "]"
    else:
        text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class _Image:
    path: Path
    ts: float
    observation: dict[str, Any] | None


@dataclass
class TrialLogger:
    """Logs the events of one trial into ``rec`` (see module docstring)."""

    rec: rr.RecordingStream
    run_dir: Path | None = None
    stem: str = ""
    constants: dict[str, Any] = field(default_factory=dict)
    #: counts of what was logged, for the summary line and the tests
    counts: dict[str, int] = field(default_factory=dict)
    _stage: str | None = None
    _stage_start: float | None = None
    _stage_end: float | None = None
    _first_ts: float | None = None
    _last_ts: float | None = None
    _pending_command: tuple[float, list[float]] | None = None
    _inputs: list[dict[str, Any]] = field(default_factory=list)
    _scenes: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    _named: dict[str, float] = field(default_factory=dict)
    _stage_starts: list[tuple[float, str]] = field(default_factory=list)
    _logged_images: set[str] = field(default_factory=set)
    _homography: MatHomography | None = None
    _homography_tried: bool = False
    _measured_seen: bool = False
    _grid_done: bool = False
    _measured_buf: list[tuple[float, list[float]]] = field(default_factory=list)
    _static_done: bool = False
    #: the side video as decoded JPEG images instead of an H.264 asset (no ffmpeg to decode it)
    side_images: bool = False
    #: for the held block: every reading, the gripper's (time, closed?) and the pick verdicts
    _readings: list[tuple[float, list[float]]] = field(default_factory=list)
    _grips: list[tuple[float, bool]] = field(default_factory=list)
    _picks: list[tuple[float, str]] = field(default_factory=list)
    _place: str | None = None
    #: the trace lines left out, each with why (one bad value costs its line, not the file)
    skipped: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------ helpers
    def _t(self, ts: float) -> None:
        self.rec.set_time(TIMELINE, timestamp=ts)

    def _count(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n

    def _text(self, what: str, ts: float, text: str, level: str = "INFO") -> None:
        self._t(ts)
        self.rec.log(ENTITIES[what], rr.TextLog(text, level=level))
        self._count(what)

    @property
    def last_ts(self) -> float | None:
        """The time of the last line logged (None before the first)."""
        return self._last_ts

    def _stage_now(self, ts: float, markdown: str) -> None:
        """The stage running at each time, as one document the viewer shows at its time
        cursor: the span of each stage, from its start to its transition."""
        self._t(ts)
        self.rec.log(ENTITIES["stage_now"], rr.TextDocument(markdown, media_type="text/markdown"))
        self._count("stage_now")

    def note(self, text: str, ts: float | None = None) -> None:
        """A line about the recording itself (what was missing), on ``events/notes``."""
        self._text("notes", ts if ts is not None else (self._first_ts or 0.0), text, "WARN")

    def _static(self) -> None:
        if self._static_done:
            return
        self._static_done = True
        # the rig's frame is x right, y up, z away from the base: left-handed (docs/kinematics.md),
        # which the viewer does not support ("Unsupported left-handed coordinate system", an
        # empty-looking 3D view). Each 3D entity keeps its rig-frame numbers and is mirrored
        # in z into a right-handed world (x right, y up, z towards the base)
        self.rec.log(ENTITIES["world"], rr.ViewCoordinates.RUB, static=True)
        for name in WORLD_3D:
            self.rec.log(ENTITIES[name], rr.Transform3D(scale=[1.0, 1.0, -1.0]), static=True)
        (x0, x1), (z0, z1) = MAT_X, MAT_Z
        self.rec.log(
            ENTITIES["mat"],
            rr.LineStrips3D([[[x0, 0, z0], [x1, 0, z0], [x1, 0, z1], [x0, 0, z1], [x0, 0, z0]]],
                            colors=[(150, 150, 150)]),
            static=True,
        )  # fmt: skip
        self.rec.log(
            ENTITIES["arm"],
            rr.LineStrips3D.from_fields(colors=[(60, 140, 230)], radii=[0.004]),
            static=True,
        )
        for i in range(6):
            for kind, color, shape in (
                ("measured", (60, 140, 230), rr.components.InterpolationMode.Linear),
                ("commanded", (240, 140, 40), STEP),
            ):
                self.rec.log(
                    ENTITIES[kind].format(i=i),
                    rr.SeriesLines(
                        colors=[color], names=[f"j{i} {kind}"], interpolation_mode=shape
                    ),
                    static=True,
                )
        self.rec.log(
            ENTITIES["gripper"],
            rr.SeriesLines(
                colors=[(120, 180, 60)], names=["gripper commanded"], interpolation_mode=STEP
            ),
            static=True,
        )

    # ------------------------------------------------------------------ events
    def event(self, e: dict[str, Any]) -> None:
        """Log one trace line (any format; unknown events are skipped, and so is a line
        with a value that cannot be logged: ``skipped`` says which and why)."""
        self._static()
        ts = e.get("ts")
        if ts is None or isinstance(ts, bool) or not isinstance(ts, int | float):
            ts = self._last_ts  # no time of its own: at the previous line's
            if ts is None:
                return
        elif not _is_time(ts):
            self._skip(e, f"ts {ts!r} is not a wall-clock time in seconds")
            return
        try:
            self._event(e, float(ts))
        except _LINE_ERRORS as exc:
            self._skip(e, f"{type(exc).__name__}: {exc}")

    def _skip(self, e: dict[str, Any], why: str) -> None:
        self.skipped.append(
            f"trace line seq {e.get('seq', '?')} ({e.get('event')} {e.get('kind', '')}".rstrip()
            + f"): {why}"
        )
        self._count("skipped")

    def _event(self, e: dict[str, Any], ts: float) -> None:
        if self._first_ts is None:
            self._first_ts = ts
        self._last_ts = ts
        ev = e.get("event")
        stage = e.get("stage") if isinstance(e.get("stage"), str) else None
        if ev == "trial":
            self._text("stages", ts, f"trial {e.get('run_stem', self.stem)} starts"
                       f"{' (dry run)' if e.get('dry_run') else ''}, scene seed {e.get('scene_seed')}")  # fmt: skip
            if isinstance(e.get("constants"), dict) and not self.constants:
                self.constants = dict(e["constants"])
            return
        if stage and stage != self._stage and ev != "result" and stage not in ("start", "end"):
            # stages follow each other: one starts where the previous one ended (its first
            # line may come late, e.g. detect's scene input once detection is done)
            start = self._stage_end if self._stage_end is not None else ts
            self._stage, self._stage_start = stage, start
            self._stage_starts.append((start, stage))
            self._text("stages", start, f"▶ {stage}")
            self._stage_now(start, f"**{stage}** running (started {start - (self._first_ts or start):.2f} s into the trial)")  # fmt: skip
            self._t(ts)
        if ev == "input":
            self._input(str(e.get("kind")), e.get("value"), ts, stage)
        elif ev == "decision":
            self._decision(str(e.get("kind")), e.get("value"), ts)
        elif ev == "transition":
            self._flush_command()
            frm, outcome, reason = e.get("frm"), e.get("outcome"), e.get("reason") or ""
            took = f" in {ts - self._stage_start:.2f} s" if self._stage_start is not None else ""
            level = "INFO" if outcome == "ok" else "WARN"
            self._text("stages", ts, f"■ {frm} {outcome}{took}{': ' + reason if reason else ''} → {e.get('to')}", level)  # fmt: skip
            self._stage_now(ts, f"**{frm}** {outcome}{took}{': ' + reason if reason else ''} → {e.get('to')}")  # fmt: skip
            self._stage, self._stage_end = None, ts
            self.images(upto=ts)
        elif ev == "result":
            self._flush_command()
            status, reason = e.get("status"), e.get("reason") or ""
            level = "INFO" if status == "success" else "WARN"
            self._text("stages", ts, f"result: {status}{': ' + reason if reason else ''}", level)
            self._stage_now(ts, f"**result: {status}**{': ' + reason if reason else ''}")
            self.images(upto=ts)

    def _input(self, kind: str, value: Any, ts: float, stage: str | None) -> None:
        if kind == "angles" and isinstance(value, dict):
            angles = _num_list(value.get("angles"), 6)
            if angles is not None:
                self.measured(ts, angles)
                self._measured_seen = True
            elif value.get("error"):
                self._text("decisions", ts, f"angles read failed: {value.get('error')}", "WARN")
            elif value.get("angles") is not None:
                raise ValueError(f"angles {value.get('angles')!r} are not 6 finite numbers")
        elif kind == "sent" and isinstance(value, dict):
            angles = _num_list(value.get("angles"), 6)
            if angles is not None:
                self._pending_command = None  # what went on the wire replaces the request
                self.commanded(ts, angles)
        elif kind == "send_t" and self._pending_command is not None:
            # first format: the send time only, the angles are the command's
            self.commanded(ts, self._pending_command[1])
            self._pending_command = None
        if kind in _OBSERVATIONS:
            self._inputs.append({"kind": kind, "value": value, "ts": ts, "stage": stage})
        if kind == "scene" and isinstance(value, dict):
            self._scenes.append((ts, value))
            self.scene_3d(ts, value)
            for name in value.get("captures") or ():
                if isinstance(name, str):
                    self._named.setdefault(name, ts)
            ok = value.get("ok")
            self._text("verdicts", ts, f"scene: {'found' if ok else 'NOT found'} block {_short(value.get('block_xz'))} "
                       f"box {_short(value.get('box_xz'))} score {_short(value.get('box_score'))}"
                       f"{'' if ok else ': ' + str(value.get('reason'))}", "INFO" if ok else "WARN")  # fmt: skip
        elif isinstance(value, dict) and isinstance(value.get("capture"), str) and value["capture"]:
            self._named.setdefault(value["capture"], ts)
        if kind in ("pick_verdict", "place_verdict") and isinstance(value, dict):
            verdict = str(value.get("verdict"))
            if kind == "pick_verdict":
                self._picks.append((ts, verdict))
            else:
                self._place = verdict
        if kind in _VERDICTS or kind.endswith(_VERDICT_SUFFIX):
            level = "INFO"
            if isinstance(value, dict) and value.get("verdict") not in (None, "yes"):
                level = "WARN"
            self._text("verdicts", ts, f"{kind}: {_short(value)}", level)
        elif kind == "tip" and isinstance(value, dict):
            self._text(
                "verdicts", ts, f"tip: {_short(value)}", "INFO" if value.get("ok") else "WARN"
            )

    def _decision(self, kind: str, value: Any, ts: float) -> None:
        if kind == "command" and isinstance(value, dict):
            self._flush_command()
            angles = _num_list(value.get("angles"), 6)
            if angles is not None:
                self._pending_command = (ts, angles)
                self.target_3d(ts, angles)
        if kind == "gripper" and isinstance(value, dict):
            v = value.get("value")
            if isinstance(v, int | float) and math.isfinite(float(v)):
                self._step(ENTITIES["gripper"], ts, [float(v)])
                self._grips.append((ts, float(v) < GRIPPER_HELD_BELOW))
                self._count("gripper")
        what = "lookups" if kind in _LOOKUPS else "guards" if kind in _GUARDS else "decisions"
        if kind.endswith(_VERDICT_SUFFIX):  # a verdict the task decided (lift_return's return)
            what = "verdicts"
        level = "INFO"
        if isinstance(value, dict) and (
            value.get("ok") is False
            or value.get("confirmed") is False
            or (what == "verdicts" and value.get("verdict") not in (None, "yes"))
        ):
            level = "WARN"
        self._text(what, ts, f"{kind}: {_short(value)}", level)

    def _flush_command(self) -> None:
        """A command no ``sent`` input followed (a dry run, a refused send): log the request."""
        if self._pending_command is not None:
            self.commanded(*self._pending_command)
            self._pending_command = None

    # ------------------------------------------------------------------ joints and 3D
    def measured(self, ts: float, angles: Sequence[float]) -> None:
        """Buffer one reading; ``flush`` sends the buffer as columns (one call per entity
        instead of seven per reading: the readings are most of a trial's lines)."""
        self._measured_buf.append((ts, list(angles)))
        self._readings.append((ts, list(angles)))
        self._count("measured")

    def flush(self) -> None:
        """Send the buffered readings: joint scalars and the arm's links from the FK."""
        if not self._measured_buf:
            return
        ts = np.array([t for t, _a in self._measured_buf], dtype=np.float64)
        q = np.array([a for _t, a in self._measured_buf], dtype=np.float64)
        self._measured_buf.clear()
        index = [rr.TimeColumn(TIMELINE, timestamp=ts)]
        for i in range(6):
            self.rec.send_columns(
                ENTITIES["measured"].format(i=i), index, rr.Scalars.columns(scalars=q[:, i])
            )
        self.rec.send_columns(
            ENTITIES["arm"], index, rr.LineStrips3D.columns(strips=list(fk_frames(q)))
        )

    def _step(self, entity: str, ts: float, values: Sequence[float]) -> None:
        """``values`` from ``ts`` on (the entity's series style draws them as a step)."""
        self._t(ts)
        for i, v in enumerate(values):
            self.rec.log(entity.format(i=i), rr.Scalars(v))

    def commanded(self, ts: float, angles: Sequence[float]) -> None:
        self._step(ENTITIES["commanded"], ts, list(angles))
        self._count("commanded")

    def target_3d(self, ts: float, angles: Sequence[float]) -> None:
        self._t(ts)
        pts = fk_frames(np.asarray(angles, dtype=np.float64))
        self.rec.log(
            ENTITIES["target"], rr.LineStrips3D([pts], colors=[(240, 140, 40, 120)], radii=[0.002])
        )

    def scene_3d(self, ts: float, scene: dict[str, Any]) -> None:
        """The detected block and box as boxes standing on the mat (Unity frame, metres)."""
        self._t(ts)
        det = _last_repeat(scene)
        block, box = det.get("block") or {}, det.get("box") or {}
        bxz = _num_list(scene.get("block_xz"), 2)
        if bxz is not None:
            h = float(block.get("height_m") or BLOCK_M)
            yaw = math.radians(float(block.get("yaw_deg") or 0.0))
            self.rec.log(ENTITIES["block"], rr.Boxes3D(
                centers=[[bxz[0], h / 2, bxz[1]]], half_sizes=[[BLOCK_M / 2, h / 2, BLOCK_M / 2]],
                rotation_axis_angles=[rr.RotationAxisAngle(axis=[0, 1, 0], radians=yaw)],
                colors=[(220, 40, 40)], labels=["block"]))  # fmt: skip
        xxz = _num_list(scene.get("box_xz"), 2)
        if xxz is not None:  # its rim as a closed line at rim height, the posts down to the mat
            rim = box_rim_xz(
                xxz, _num_list(box.get("size_mm"), 2), float(box.get("yaw_deg") or 0.0)
            )
            top = [[x, BOX_RIM_M, z] for x, z in rim]
            posts = [[[x, 0.0, z], [x, BOX_RIM_M, z]] for x, z in rim[:4]]
            self.rec.log(ENTITIES["box"], rr.LineStrips3D(
                [top, *posts], colors=[(235, 235, 235)], labels=["box"]))  # fmt: skip

    # ------------------------------------------------------------------ top camera
    def images(self, upto: float | None = None) -> None:
        """Log the stage JPEGs taken up to ``upto`` not logged yet (called at each stage end);
        ``upto=None`` (the finish) logs every one left."""
        if self.run_dir is None or self.run_dir.name != self.stem:
            return
        ready: list[tuple[float, Path]] = []
        for path in stage_images(self.run_dir):
            if path.name in self._logged_images:
                continue
            ts = self._image_time(path)
            if upto is not None and (ts is None or ts > upto):
                continue  # a later stage's image (or not yet placeable): at its stage end
            ready.append((ts if ts is not None else (self._last_ts or 0.0), path))
        for ts, path in sorted(ready):  # in time order: the grid goes with the first one
            self._logged_images.add(path.name)
            self.image(_Image(path, ts, self._observation_for(path.name, ts)))

    def _image_time(self, path: Path) -> float | None:
        """When the image was taken: its write time when that lies within the trial (the
        file is written right after the capture), else the time of the trace line naming
        it; None when neither is known (a copied folder, an image the trace does not name)."""
        start = self._first_ts if self._first_ts is not None else 0.0
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            mtime = -1.0
        if start - 1.0 <= mtime <= start + _MAX_TRIAL_S:
            return mtime
        return self._named.get(path.name)

    def _observation_for(self, name: str, ts: float) -> dict[str, Any] | None:
        for inp in self._inputs:
            v = inp["value"]
            if isinstance(v, dict) and (
                v.get("capture") == name or name in (v.get("captures") or ())
            ):
                return inp
        stage_of = next((st for start, st in reversed(self._stage_starts) if start <= ts), None)
        for inp in self._inputs:  # the first observation of that stage made after the capture
            if inp["stage"] == stage_of and inp["ts"] >= ts - 0.05 and inp["kind"] != "scene":
                return inp
        return None

    def image(self, img: _Image) -> None:
        try:
            data = img.path.read_bytes()
        except OSError:
            return
        self._t(img.ts)
        self.rec.log(ENTITIES["top"], rr.EncodedImage(contents=data, media_type="image/jpeg"))
        self._count("images")
        self._overlays(img)

    def _scene_at(self, ts: float) -> dict[str, Any] | None:
        before = [s for t, s in self._scenes if t <= ts]
        if before:
            return before[-1]
        return self._scenes[0][1] if self._scenes else None

    def _overlays(self, img: _Image) -> None:
        """Detections on the image, or a Clear where it has none (no arrow lingers)."""
        H = self._mat_homography()
        scene = self._scene_at(img.ts)
        det = _last_repeat(scene) if scene else {}
        block, box = det.get("block") or {}, det.get("box") or {}
        logged: set[str] = set()
        if H is not None:
            self._grid_overlays(H)
        if block.get("u") is not None:
            self.rec.log(ENTITIES["block_px"], rr.Points2D(
                [[block["u"], block["v"]]], radii=[6], colors=[(255, 40, 40)],
                labels=[f"block {block.get('x', 0):+.3f}, {block.get('z', 0):+.3f}"]))  # fmt: skip
            logged.add("block_px")
        if box.get("u") is not None:
            outline = None
            box_xz = _num_list(scene.get("box_xz"), 2) if scene is not None else None
            if H is not None and box_xz is not None:
                outline = box_outline(
                    H, box_xz, _num_list(box.get("size_mm"), 2), float(box.get("yaw_deg") or 0.0)
                )
            color = (60, 220, 255) if box.get("trusted", True) else _WARN
            label = f"box {box.get('method', '')} {box.get('score', 0):.2f}"
            if outline is not None:
                self.rec.log(
                    ENTITIES["box_px"], rr.LineStrips2D([outline], colors=[color], labels=[label])
                )
            else:
                self.rec.log(ENTITIES["box_px"], rr.Points2D([[box["u"], box["v"]]], radii=[8], colors=[color], labels=[label]))  # fmt: skip
            logged.add("box_px")
        obs = img.observation
        if obs is not None and H is not None:
            logged |= self._error_overlays(H, obs, scene, block)
        for key in ("block_px", "box_px", "tip_px", "error_px"):
            if key not in logged:
                self.rec.log(ENTITIES[key], rr.Clear(recursive=False))

    def _grid_overlays(self, H: MatHomography) -> None:
        """The mat grid and markers, once per trial at its first image (the top camera does
        not move, and the viewer shows the latest value at every later time)."""
        if self._grid_done:
            return
        self._grid_done = True
        strips, names = marker_strips(H)
        self.rec.log(
            ENTITIES["markers"], rr.LineStrips2D(strips, colors=[(255, 0, 255)], labels=names)
        )
        self.rec.log(
            ENTITIES["grid"],
            rr.LineStrips2D(grid_strips(H), colors=[(255, 255, 0, 90)], radii=[0.8]),
        )

    def _error_overlays(self, H: MatHomography, obs: dict[str, Any], scene: dict[str, Any] | None, block: dict[str, Any]) -> set[str]:  # fmt: skip
        """Servo error as an arrow: tip -> block (pick), held block -> box centre (place)."""
        kind, v = obs["kind"], obs["value"]
        bxz = _num_list(scene.get("block_xz"), 2) if scene else None
        box_xz = _num_list(scene.get("box_xz"), 2) if scene else None
        h_block = float(block.get("height_m") or BLOCK_M)
        if kind == "tip" and isinstance(v, dict) and v.get("ok") and bxz is not None:
            tip = (
                bxz[0] + float(v.get("dx_mm", 0)) / 1000,
                bxz[1] + float(v.get("dz_mm", 0)) / 1000,
            )
            tu, tv = H.xz_to_pixel(tip[0], tip[1], height=h_block)
            bu, bv = H.xz_to_pixel(bxz[0], bxz[1], height=h_block)
            self.rec.log(ENTITIES["tip_px"], rr.Points2D([[tu, tv]], radii=[6], colors=[(40, 255, 40)],
                                                          labels=[f"tip {float(v.get('dist_mm', 0)):.1f} mm off"]))  # fmt: skip
            self.rec.log(ENTITIES["error_px"], rr.Arrows2D(vectors=[[bu - tu, bv - tv]], origins=[[tu, tv]], colors=[_WARN]))  # fmt: skip
            return {"tip_px", "error_px"}
        seen = None
        if kind == "block_xz":
            seen = _num_list(v, 2)
        elif kind == "release_view" and isinstance(v, dict):
            seen = _num_list(v.get("block_xz"), 2)
        if seen is not None and box_xz is not None:
            su, sv = H.xz_to_pixel(seen[0], seen[1], height=BOX_RIM_M)
            cu, cv = H.xz_to_pixel(box_xz[0], box_xz[1], height=BOX_RIM_M)
            dist = math.hypot(seen[0] - box_xz[0], seen[1] - box_xz[1]) * 1000
            self.rec.log(ENTITIES["error_px"], rr.Arrows2D(vectors=[[cu - su, cv - sv]], origins=[[su, sv]], colors=[_WARN],
                                                            labels=[f"held block {dist:.1f} mm from the box centre"]))  # fmt: skip
            return {"error_px"}
        return set()

    def _mat_homography(self) -> MatHomography | None:
        """The mat homography, found again from the trial's mat image once it exists."""
        if self._homography_tried or self.run_dir is None:
            return self._homography
        H, why = find_homography(self.run_dir, self.constants)
        if H is None and why is None:
            return None  # no mat image (yet)
        self._homography_tried, self._homography = True, H
        if why is not None:
            log.warning("mat_grid_not_drawn", run_dir=str(self.run_dir), error=why)
            self.note(f"mat grid not drawn: {why}")
        return H

    # ------------------------------------------------------------------ recording files
    def side_video(self, tf: TrialFiles) -> None:
        """The side video (sidevideo.py): an H.264 asset with a frame reference per frame_log
        row, or with ``side_images`` JPEG images decoded here."""
        if tf.video is None or not tf.frame_log:
            return
        if tf.meta is None:
            self.note("side video left out: the recording has no meta (not finished or crashed)")
            return
        entity = ENTITIES["side"]
        if self.side_images:
            self._count("side_images", log_side_images(self.rec, entity, TIMELINE, tf))
            return
        shown, note = log_side_asset(self.rec, entity, TIMELINE, tf)
        if note:
            self.note(note)
        self._count("video_frames", shown)

    def states_fallback(self, tf: TrialFiles) -> None:
        """Measured joints from the recorder's states.csv when the trace carried none."""
        if self._measured_seen:
            return
        for row in tf.states:
            if row.get("event_type") != "measured":
                continue
            angles = _num_list([row.get(f"j{i}") for i in range(6)], 6)
            try:
                ts = float(row["ts"])
            except (KeyError, TypeError, ValueError):
                continue
            if angles is not None and _is_time(ts):
                self.measured(ts, angles)

    def held_block(self) -> None:
        """The block where the jaws carry it: from each close that a pick verdict ``yes``
        judged, until the next open, at the tool tip of every reading (the FK), then left
        where the jaws opened (in the box when the place was judged yes, else on the mat)."""
        h = BLOCK_M
        for k, (t_close, closed) in enumerate(self._grips):
            if not closed:
                continue
            t_open = next((t for t, c in self._grips[k + 1 :] if not c), None)
            end = t_open if t_open is not None else math.inf
            if not any(v == "yes" and t_close <= t <= end for t, v in self._picks):
                continue  # nothing judged in the jaws: the block stayed where it was seen
            rows = [(t, q) for t, q in self._readings if t_close <= t <= end]
            if not rows:
                continue
            ts = np.array([t for t, _q in rows], dtype=np.float64)
            tips = np.array([fk_tip(np.asarray(q, dtype=np.float64)) for _t, q in rows])
            centers = tips - np.array([0.0, h / 2, 0.0])  # the block hangs in the jaws
            self.rec.send_columns(
                ENTITIES["block"],
                [rr.TimeColumn(TIMELINE, timestamp=ts)],
                rr.Boxes3D.columns(centers=centers, half_sizes=[[BLOCK_M / 2, h / 2, BLOCK_M / 2]] * len(ts),
                                   colors=[(220, 40, 40)] * len(ts), labels=["block (held)"] * len(ts)),
            )  # fmt: skip
            if t_open is not None:  # let go: it falls straight down from the jaws
                x, _y, z = (float(v) for v in tips[-1])
                inside = self._place == "yes"
                self._t(t_open + RELEASED_AFTER_S)
                self.rec.log(ENTITIES["block"], rr.Boxes3D(
                    centers=[[x, h / 2, z]], half_sizes=[[BLOCK_M / 2, h / 2, BLOCK_M / 2]],
                    colors=[(220, 40, 40)],
                    labels=["block (in the box)" if inside else "block (released)"]))  # fmt: skip
            self._count("held_block", len(ts))

    def finish(self, tf: TrialFiles) -> None:
        self._flush_command()
        self.images()
        self.states_fallback(tf)
        self.flush()
        self.held_block()
        self.side_video(tf)


def _last_repeat(scene: dict[str, Any] | None) -> dict[str, Any]:
    reps = scene.get("repeats") if isinstance(scene, dict) else None
    return reps[-1] if isinstance(reps, list) and reps and isinstance(reps[-1], dict) else {}


def log_trial(rec: rr.RecordingStream, tf: TrialFiles, side_images: bool = False) -> TrialLogger:
    """Log a whole trial (every trace line, images, recording files) into ``rec``;
    ``side_images``: the side video as JPEG images (``TrialLogger.side_frames``)."""
    lg = TrialLogger(rec, run_dir=tf.run_dir, stem=tf.stem, constants=tf.constants)
    lg.side_images = side_images
    for e in tf.events:
        lg.event(e)
    lg.finish(tf)
    if lg.skipped:
        more = f" (and {len(lg.skipped) - 3} more)" if len(lg.skipped) > 3 else ""
        tf.notes.append(
            f"{len(lg.skipped)} trace line(s) skipped: " + "; ".join(lg.skipped[:3]) + more
        )
    for n in tf.notes:
        lg.note(n)
    return lg
