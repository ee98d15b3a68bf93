"""The top camera behind ``EyesPort``: frames, the perception and judge code, stage images.

``CameraEyes`` grabs frames from the top camera (any ``mecharm.cameras`` source,
e.g. the simulated rig's MJPEG stream) — only frames fresh for the capture request,
by the shared rule of docs/recorder.md#frame-freshness — runs ``mecharm.runtime.perception``
on them and saves one JPEG per capture group into the run folder: the stage image, with what
the stage saw and decided drawn on it, and the raw frame in ``raw/`` (docs/stage-images.md).
The port's other implementations (a dry run's, the trace's wrapper) are in eyes.py.

One concern: the top camera as the runtime's eyes; each ``EyesPort`` method is one short
capture-then-perceive step over shared frames and homography.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import math
import os
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from numpy.typing import NDArray

from mecharm.cameras import CameraSource, Frame, is_fresh
from mecharm.common.fsutil import DataRootGuard
from mecharm.common.layout import STAGE_RAW
from mecharm.common.logging import get_logger
from mecharm.runtime.perception import (
    DEFAULT_CONFIG,
    GeometricJudge,
    HomographyError,
    Judge,
    JudgeEvidence,
    MatHomography,
    PerceptionConfig,
    detect_scene,
    estimate_homography,
    locate_block,
    refind_box,
)
from mecharm.runtime.perception.judge import inside_margin_mm
from mecharm.runtime.perception.overlay import StageMarks, VerdictMark, stage_jpegs, warm_up
from mecharm.runtime.perception.results import (
    BoxDetection,
    SceneDetection,
    Verdict,
)
from mecharm.runtime.perception.side import side_view
from mecharm.runtime.perception.tip import measure_tip
from mecharm.runtime.ports import (
    ReleaseView,
    SceneObservation,
    TipObservation,
    VerdictObservation,
)
from mecharm.runtime.threads import to_thread

__all__ = ["CameraEyes", "EyesError", "StageCapture", "side_check"]

log = get_logger("mecharm.runtime.camera_eyes")


class EyesError(RuntimeError):
    """The top camera delivered no usable frames."""


class CameraEyes:
    """Top camera + perception + judge; keeps the trial's homography and scene detection."""

    def __init__(
        self,
        camera: CameraSource,
        judge: Judge | None = None,
        *,
        homography_frames: int = 10,
        detect_repeat: int = 3,
        judge_frames: int = 3,
        box_fallback_xz: tuple[float, float] = (-0.01, 0.108),
        box_score_thresh: float = 0.5,
        detect_retries: int = 2,
        config: PerceptionConfig = DEFAULT_CONFIG,
        max_failed_reads: int = 30,
        flush_frames: int = 1,
        max_age_s: float = 0.0,
        guard: DataRootGuard | None = None,
        release_frames: int = 3,
        release_near_m: float = 0.100,
        release_prompt: Callable[[str], Awaitable[bool | None]] | None = None,
        frozen_frames: int = 10,
    ) -> None:
        self.camera = camera
        # a live camera's sensor noise never repeats a frame: this many identical frames in a
        # row is a frozen feed, and no stage judges from it (docs/perception.md, "Frozen feed");
        # 0 = no check
        self.frozen_frames = max(0, int(frozen_frames))
        self._last_key: bytes | None = None
        self._repeats = 0
        # before a release: frames of the held block over the box; the operator's
        # "release anyway?" (None: nobody is asked, --confirm off; docs/stages.md, "release")
        self.release_frames = release_frames
        self.release_near_m = release_near_m
        self.release_prompt = release_prompt
        # images are records too: written only while the data root is the session's own
        self.guard = guard
        self.judge: Judge = judge or GeometricJudge(config)
        self.homography_frames = homography_frames
        self.detect_repeat = detect_repeat
        self.judge_frames = judge_frames
        self.box_fallback_xz = box_fallback_xz
        self.box_score_thresh = box_score_thresh
        # an untrusted box is detected again on fresh captures, at most this many times
        self.detect_retries = max(0, int(detect_retries))
        self.config = config
        self.max_failed_reads = max_failed_reads
        # a frame captured before the request may predate the motion that just ended: only
        # frames captured at most max_age_s before it count (docs/recorder.md#frame-freshness);
        # a device may stamp a buffered frame when it hands it over, so the first is dropped too
        self.max_age_s = max_age_s
        self.flush_frames = flush_frames
        self.run_dir: Path | None = None
        self.H: MatHomography | None = None
        self.scene: SceneDetection | None = None
        # the stage images are drawn and written in one long-lived thread: OpenCV loads its
        # font once per thread (~45 ms), and the shared pool's threads end after 10 s idle, so
        # there every trial would pay it again (docs/stage-images.md, "What it costs")
        self._drawer = ThreadPoolExecutor(1, thread_name_prefix="stage-images")
        self._drawer.submit(warm_up)  # now, not in the first trial
        self._pending: Future[str] | None = None

    def start_trial(self, run_dir: Path | None) -> None:
        self.run_dir, self.H, self.scene = run_dir, None, None
        start = getattr(self.judge, "start_trial", None)
        if callable(start):  # a judge with a per-trial budget (the VLM judge)
            start()

    # ------------------------------------------------------------ frames
    def _grab_sync(self, n: int) -> list[NDArray[np.uint8]]:
        """``n`` frames fresh for a request made now; EyesError when the feed fails or stays stale."""
        return [f.image for f in self._grab_frames_sync(n) if f.image is not None]

    def _grab_frames_sync(self, n: int) -> list[Frame]:
        asked_ns = time.monotonic_ns()
        frames: list[Frame] = []
        failed = stale = 0
        skip = self.flush_frames
        while len(frames) < n:
            f = self.camera.read()
            if f.ok and f.image is not None:
                failed = 0
                if skip > 0:
                    skip -= 1
                    continue
                if not is_fresh(f.mono_ns, self.max_age_s, asked_ns):
                    stale += 1
                    if stale >= self.max_failed_reads:
                        raise EyesError(
                            f"top camera {self.camera.spec}: {stale} frames captured before the "
                            f"request (max age {self.max_age_s:g} s)"
                        )
                    continue
                stale = 0
                if self.frozen_frames and self._repeated(f.jpeg, f.image):
                    continue  # a repeat shows nothing new: wait for a live frame
                frames.append(f)
            else:
                failed += 1
                if failed >= self.max_failed_reads:
                    raise EyesError(
                        f"top camera {self.camera.spec}: {failed} consecutive failed reads"
                    )
        return frames

    def _repeated(self, jpeg: bytes | None, image: NDArray[np.uint8]) -> bool:
        """True when this frame is identical to the previous one (same JPEG bytes, or same
        pixels when the source gives no JPEG); EyesError once ``frozen_frames`` frames in a
        row were identical. Kept across grabs: a frozen feed is frozen for every stage."""
        key = hashlib.blake2b(
            jpeg if jpeg is not None else image.tobytes(), digest_size=16
        ).digest()
        if key != self._last_key:
            self._last_key, self._repeats = key, 0
            return False
        self._repeats += 1
        if self._repeats + 1 >= self.frozen_frames:
            n = self._repeats + 1
            log.error("camera_feed_frozen", camera=self.camera.spec, identical_frames=n)
            raise EyesError(
                f"top camera {self.camera.spec}: feed frozen: {n} identical frames in a row "
                "(a live camera never repeats a frame); not judging from a stale image"
            )
        return True

    async def grab(self, n: int, tag: str) -> StageCapture:
        """``n`` fresh frames; the first becomes the stage image ``tag`` once ``save`` is called."""
        frames = await to_thread(self._grab_frames_sync, n)
        images = [np.asarray(f.image, dtype=np.uint8) for f in frames]
        return StageCapture(tag, images, frames[0].jpeg, frames[0].wall_ts)

    async def save(self, cap: StageCapture, marks: StageMarks | None) -> str:
        """Hand the capture's stage image (``marks`` drawn on its first frame) and its raw frame
        to the drawing thread; returns the stage image's file name ("" when the data root may
        not be written). Called after the stage decided, so the marks show the decision. The
        stage does not wait for the drawing: only the previous capture's image, if it is still
        being written, is waited for first, so images are written in order and never pile up
        (``settle`` waits for the last one). A failure to draw writes the raw frame instead."""
        if self.run_dir is None or (self.guard is not None and self.guard.problem() is not None):
            return ""
        await self.settle()
        self._pending = self._drawer.submit(self._save_sync, self.run_dir, cap, marks)
        return f"{cap.tag}.jpg"

    async def settle(self) -> None:
        """Wait until the last stage image is written (the trial's end); never raises: an image
        that could not be written is logged, the trial goes on."""
        job, self._pending = self._pending, None
        if job is None:
            return
        try:
            await asyncio.wrap_future(job)
        except Exception as exc:  # the writer's own errors are caught there; anything else
            log.warning("image_not_written", error=f"{type(exc).__name__}: {exc}"[:200])

    def _save_sync(self, run_dir: Path, cap: StageCapture, marks: StageMarks | None) -> str:
        t0 = time.perf_counter()
        stage, raw = stage_jpegs(cap.frames[0], cap.jpeg, marks, self.config)
        p = run_dir / f"{cap.tag}.jpg"
        try:
            (run_dir / STAGE_RAW).mkdir(exist_ok=True)
            (run_dir / STAGE_RAW / p.name).write_bytes(raw)
            p.write_bytes(stage)
            if cap.wall_ts > 0:  # both files dated when the frame was taken, not when drawn
                for f in (run_dir / STAGE_RAW / p.name, p):
                    os.utime(f, (cap.wall_ts, cap.wall_ts))
        except OSError as exc:  # a full or read-only disk: the image is lost, not the trial
            log.warning("image_not_written", path=str(p), error=str(exc).strip()[:200])
            return ""
        log.debug("stage_image", tag=cap.tag, ms=round((time.perf_counter() - t0) * 1000.0, 2))
        return p.name

    # ------------------------------------------------------------ EyesPort
    async def observe_scene(self, tag: str) -> SceneObservation:
        try:
            hcap = await self.grab(self.homography_frames, f"{tag}_mat")
        except EyesError as exc:
            return SceneObservation(ok=False, reason=f"mat homography: {exc}")
        mat = StageMarks(hcap.tag, hcap.wall_ts, markers=True)
        try:
            H = await to_thread(estimate_homography, hcap.frames, self.config)
        except HomographyError as exc:
            mat.lines, mat.warn = [f"mat homography failed: {exc}"], True
            await self.save(hcap, mat)
            return SceneObservation(ok=False, reason=f"mat homography: {exc}")
        mat.H, mat.grid = H, True
        seen = ", ".join(f"{k} {v}/{H.n_frames}" for k, v in H.markers_seen.items())
        mat.lines = [f"mat homography from {H.n_frames} frames, error {H.reproj_error_px:.2f} px",
                     f"markers seen: {seen}"]  # fmt: skip
        hpath = await self.save(hcap, mat)
        self.H = H
        attempts: list[SceneDetection] = []
        dpath = ""
        for k in range(1 + self.detect_retries):
            suffix = "" if k == 0 else f"_retry{k}"
            dcap = await self.grab(self.detect_repeat, f"{tag}_detect{suffix}")
            scene = await to_thread(
                detect_scene,
                dcap.frames,
                H,
                self.box_fallback_xz,
                self.box_score_thresh,
                self.config,
            )
            attempts.append(scene)
            path = await self.save(dcap, _detect_marks(dcap, H, scene))
            dpath = dpath or path
            if scene.box.trusted:
                break
            log.warning(
                "box_untrusted", attempt=k + 1, of=1 + self.detect_retries, doubt=scene.box.doubt
            )
        self.scene = scene
        block = scene.block
        box = scene.box
        reason = (
            ""
            if block is not None
            else f"red block not found in a majority of {len(dcap.frames)} captures"
        )
        doubt = ""
        if not box.trusted:
            doubt = f"box detection not trusted in {len(attempts)} detects: {box.doubt}"
        return SceneObservation(
            ok=block is not None,
            reason=reason,
            block_xz=(block.x, block.z) if block is not None else None,
            box_xz=(box.x, box.z),
            box_score=box.score,
            box_method=box.method,
            repeats=[a.to_dict() for a in attempts],
            captures=[p for p in (hpath, dpath) if p],
            box_trusted=box.trusted,
            box_doubt=doubt,
        )

    async def measure_tip(
        self, block_xz: tuple[float, float], tip_height_m: float, tag: str
    ) -> TipObservation:
        if self.H is None or self.scene is None or self.scene.block is None:
            return TipObservation(False, reason="no detect detection to measure against")
        cap = await self.grab(self.judge_frames, tag)
        H, block = self.H, self.scene.block
        each = [measure_tip(f, H, block, tip_height_m, self.config) for f in cap.frames]
        found = [m for m in each if m is not None]
        marks = StageMarks(cap.tag, cap.wall_ts, H, scene=self.scene, tip=each[0])
        if not found:
            marks.lines, marks.warn = [f"tip marker not visible in {len(each)} frames"], True
            path = await self.save(cap, marks)
            return TipObservation(False, reason="tip marker not visible", capture=path)
        dx = float(np.median([m.dx_mm for m in found]))
        dz = float(np.median([m.dz_mm for m in found]))
        marks.lines = [f"tip - block (median of {len(found)}/{len(each)} frames): dx {dx:+.1f} "
                       f"dz {dz:+.1f} mm, {math.hypot(dx, dz):.1f} mm"]  # fmt: skip
        path = await self.save(cap, marks)
        return TipObservation(True, dx, dz, math.hypot(dx, dz), capture=path)

    async def locate_block(
        self, lift_m: float, near_xz: tuple[float, float], tag: str
    ) -> tuple[float, float] | None:
        if self.H is None:
            return None
        cap = await self.grab(2, tag)
        # the held block keeps its offset to the tip: its top face was at block_size on
        # the mat when grasped and has risen by lift_m since (docs/perception.md)
        top = self.config.block_size_m + lift_m
        each = [locate_block(f, self.H, top, near_xz, self.config) for f in cap.frames]
        found = [b for b in each if b is not None]
        box = self.scene.box if self.scene is not None else None
        marks = StageMarks(cap.tag, cap.wall_ts, self.H, block=each[0], box=box, target_xz=near_xz)
        if not found:
            marks.lines, marks.warn = [f"held block not found in {len(each)} frames"], True
            await self.save(cap, marks)
            return None
        x = float(np.median([b.x for b in found]))
        z = float(np.median([b.z for b in found]))
        marks.lines = [f"held block (median of {len(found)}/{len(each)} frames) x {x:+.4f} "
                       f"z {z:+.4f} m; box centre - block dx {(near_xz[0] - x) * 1000:+.1f} "
                       f"dz {(near_xz[1] - z) * 1000:+.1f} mm"]  # fmt: skip
        await self.save(cap, marks)
        return x, z

    async def _evidence(
        self, tag: str, tip_height_m: float | None, side_frame: str | None
    ) -> tuple[JudgeEvidence, StageCapture] | None:
        if self.H is None or self.scene is None:
            return None
        cap = await self.grab(self.judge_frames, tag)
        side: NDArray[np.uint8] | None = None
        if side_frame:
            img = await to_thread(cv2.imread, side_frame)
            side = None if img is None else np.asarray(img, dtype=np.uint8)
        ev = JudgeEvidence(
            frames=cap.frames,
            H=self.H,
            scene=self.scene,
            tip_height_m=tip_height_m,
            side_frame=side,
            meta={"capture": f"{tag}.jpg", "side_frame": side_frame},
        )
        return ev, cap

    async def _judged(
        self, what: str, found: tuple[JudgeEvidence, StageCapture], v: Verdict
    ) -> None:
        """The judge capture's stage image, with the verdict; drawn after the judge answered."""
        ev, cap = found
        marks = StageMarks(
            cap.tag,
            cap.wall_ts,
            ev.H,
            scene=ev.scene,
            verdict=VerdictMark(what, v.verdict, float(v.confidence), v.reason, v.judge),
        )
        frames = v.details.get("frames") if isinstance(v.details, dict) else None
        if isinstance(frames, list) and frames and isinstance(frames[0], dict):
            marks.lines = ["this frame: " + ", ".join(f"{k} {val}" for k, val in frames[0].items())]
        await self.save(cap, marks)

    async def judge_pick(self, tip_height_m: float, tag: str) -> VerdictObservation:
        found = await self._evidence(tag, tip_height_m, None)
        if found is None:
            return VerdictObservation(
                "no", 0.0, "cannot judge: no detect detection", self.judge.name
            )
        v = await self.judge.judge_pick(found[0])
        await self._judged("pick", found, v)
        return VerdictObservation(v.verdict, float(v.confidence), v.reason, v.judge, v.details)

    async def judge_place(self, side_frame: str | None, tag: str) -> VerdictObservation:
        return await self._place(self.judge, side_frame, tag)

    async def look_place(self, tag: str) -> VerdictObservation:
        return await self._place(self._look_judge(), None, tag)

    async def _place(self, judge: Judge, side_frame: str | None, tag: str) -> VerdictObservation:
        found = await self._evidence(tag, None, side_frame)
        if found is None:
            return VerdictObservation("no", 0.0, "cannot judge: no detect detection", judge.name)
        v = await judge.judge_place(found[0])
        await self._judged("place", found, v)
        return VerdictObservation(v.verdict, float(v.confidence), v.reason, v.judge, v.details)

    def _look_judge(self) -> Judge:
        """The trial's judge when it is the geometric one, else the geometric one it falls
        back to (the VLM's), else one of these eyes' own."""
        if isinstance(self.judge, GeometricJudge):
            return self.judge
        fallback = getattr(self.judge, "fallback", None)
        if isinstance(fallback, GeometricJudge):
            return fallback
        return GeometricJudge(self.config)

    async def view_release(
        self, lift_m: float, box_xz: tuple[float, float], side_frame: str | None, tag: str
    ) -> ReleaseView:
        side, side_reason = await side_check(side_frame)
        if self.H is None:
            return ReleaseView(0, 0, side=side, side_reason=side_reason)
        cap = await self.grab(self.release_frames, tag)
        top = self.config.block_size_m + lift_m  # the held block's top face (see locate_block)
        detected = (
            self.scene.box
            if self.scene is not None
            else BoxDetection(box_xz[0], box_xz[1], 0.0, 0.0, "fallback")
        )
        # the box as it is now, not as detect left it: the arm may have pushed it
        # (docs/release.md, "The box at the release")
        box, how = await to_thread(refind_box, cap.frames, self.H, detected, self.config)
        refound = how == "found"
        if not refound:  # where the runtime aims now (detect's, or an earlier re-find's)
            box = dataclasses.replace(box, x=box_xz[0], z=box_xz[1])
        moved_mm = round(math.hypot(box.x - detected.x, box.z - detected.z) * 1000.0, 2)
        here = (box.x, box.z)
        # what is known before the block is looked for: the box now, the side view
        base = ReleaseView(
            0,
            len(cap.frames),
            side=side,
            side_reason=side_reason,
            box_xz=here,
            box_method=box.method if refound else how,
            box_moved_mm=moved_mm,
            box_refound=refound,
        )
        # only a block within release_near_m of the box can be the one held above it (a
        # block dropped on the mat elsewhere is not "seen above the box")
        each = [locate_block(f, self.H, top, here, self.config) for f in cap.frames]
        found = [
            b
            for b in each
            if b is not None and math.hypot(b.x - here[0], b.z - here[1]) <= self.release_near_m
        ]
        marks = StageMarks(cap.tag, cap.wall_ts, self.H, block=each[0], box=box, target_xz=here)
        side_line = f"side camera: {side} ({side_reason})"
        box_line = {
            "found": f"box found again ({box.method}), {moved_mm:.0f} mm from where detect saw it",
            "hidden": "box not found again (hidden): detect's position used",
            "gone": "box gone: nothing white where detect saw it",
        }[how]
        if not found:
            marks.lines = [f"held block not seen above the box in {len(each)} frames", box_line,
                           side_line]  # fmt: skip
            marks.warn = True
            return dataclasses.replace(base, capture=await self.save(cap, marks))
        x = float(np.median([b.x for b in found]))
        z = float(np.median([b.z for b in found]))
        margin = float(np.median([inside_margin_mm(b, box, self.config) for b in found]))
        dist = round(math.hypot(x - here[0], z - here[1]) * 1000.0, 2)
        marks.lines = [f"held block seen in {len(found)}/{len(each)} frames, {dist:.1f} mm from the "
                       f"box centre, {margin:.1f} mm inside the opening", box_line, side_line]  # fmt: skip
        return dataclasses.replace(
            base,
            top_seen=len(found),
            block_xz=(x, z),
            dist_mm=dist,
            margin_mm=round(margin, 2),
            capture=await self.save(cap, marks),
        )

    async def ask_release(self, why: str, tag: str) -> VerdictObservation:
        if self.release_prompt is None:
            return VerdictObservation("no", 0.0, "not asked (--confirm off)", "none")
        answer = await self.release_prompt(why)
        if answer is None:
            return VerdictObservation("no", 0.0, "operator: no answer", "human")
        return VerdictObservation(
            "yes" if answer else "no",
            1.0,
            "operator: release anyway" if answer else "operator: abort",
            "human",
        )

    async def close(self) -> None:
        await self.settle()
        self._drawer.shutdown(wait=False)
        await to_thread(self.camera.close)


@dataclass
class StageCapture:
    """Frames grabbed for one stage capture; the first becomes its stage image."""

    tag: str
    frames: list[NDArray[np.uint8]]
    jpeg: bytes | None  # the camera's own JPEG of the first frame, when it sent one
    wall_ts: float


def _detect_marks(cap: StageCapture, H: MatHomography, scene: SceneDetection) -> StageMarks:
    """The detect capture's overlay: block and box as combined over the capture's frames."""
    found = sum(b is not None for b in scene.block_samples)
    lines = [f"block found in {found}/{len(scene.block_samples)} frames"
             + ("" if scene.block_spread_mm is None else f", spread {scene.block_spread_mm:.1f} mm"),
             f"box: {scene.box.method}, score {scene.box.score:.2f}"
             + ("" if scene.box_spread_mm is None else f", spread {scene.box_spread_mm:.1f} mm")]  # fmt: skip
    warn = scene.block is None or not scene.box.trusted
    if scene.block is None:
        lines.append("red block not found in a majority of the frames")
    if not scene.box.trusted:
        lines.append(f"box not trusted: {scene.box.doubt}")
    return StageMarks(cap.tag, cap.wall_ts, H, grid=True, scene=scene, lines=lines, warn=warn)


async def side_check(side_frame: str | None) -> tuple[str, str]:
    """("seen" | "not_seen" | "no_frame", why) for the recorder's side frame (perception/side.py)."""
    if not side_frame:
        return "no_frame", "no side frame"
    img = await to_thread(cv2.imread, side_frame)
    if img is None:
        return "no_frame", f"side frame {side_frame} unreadable"
    v = await to_thread(side_view, np.asarray(img, dtype=np.uint8))
    return ("seen" if v.seen else "not_seen"), v.reason
