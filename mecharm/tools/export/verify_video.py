"""The video checks: every episode's frames decode at their timestamps within lerobot's
``tolerance_s``, in the size and codec info.json says, and the stored image stats match the
decoded frames (docs/lerobot-verify.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import av
import numpy as np
from numpy.typing import NDArray
from tqdm import tqdm

from mecharm.tools.export.stats import (
    image_sample_indices,
    image_stats,
    image_stride,
)
from mecharm.tools.export.verify_base import (
    IMAGE_ATOL,
    INFO_PATH,
    TOLERANCE_S,
    VerifierBase,
    canonical_codec,
    fmt,
)
from mecharm.tools.export.video import sample_rgb

__all__ = ["VideoChecks"]


class VideoChecks(VerifierBase):
    """Decode every video file an episode points into; check frames, sizes and image stats."""

    def _check_videos(self) -> None:
        d = self.data
        total = len(d["index"]) * len(self.video_keys)
        with tqdm(
            total=total, unit="frame", desc="verify", disable=not self.progress, leave=False
        ) as bar:
            for key in self.video_keys:
                by_file: dict[str, list[dict[str, Any]]] = {}
                for e in self.episodes:
                    rel = self._video_rel(key, e)
                    if (
                        rel is not None
                        and "_rows" in e
                        and key not in e.get("_bad_range", ())
                        and (self.root / rel).is_file()
                    ):
                        by_file.setdefault(rel, []).append(e)
                for rel, eps in sorted(by_file.items()):
                    self._check_video(key, rel, eps, bar.update)
                    self.rep.videos_checked += 1

    def _frame_hw(self, key: str) -> tuple[int, int]:
        ft = self.features[key]
        names = ft.get("names") or ["height", "width", "channels"]
        shape = list(ft["shape"])
        try:
            return shape[list(names).index("height")], shape[list(names).index("width")]
        except (ValueError, IndexError):
            return shape[0], shape[1]

    def _check_video(
        self, key: str, rel: str, eps: list[dict[str, Any]], tick: Callable[[int], Any]
    ) -> None:
        d = self.data
        h, w = self._frame_hw(key)
        vinfo = self.features[key].get("info") or {}
        # image-stats samples: lerobot's rows, as times in this file
        sample_t: list[float] = []
        sample_of: list[tuple[int, int]] = []
        for n, e in enumerate(eps):
            for i in image_sample_indices(len(e["_rows"])):
                sample_of.append((n, int(i)))
                sample_t.append(
                    e[f"videos/{key}/from_timestamp"] + float(d["timestamp"][e["_rows"][i]])
                )
        order = np.argsort(sample_t)
        st = np.asarray(sample_t)[order]
        stride = image_stride(h, w)
        pts: list[float] = []
        kept: dict[int, NDArray[np.uint8]] = {}
        try:
            with av.open(str(self.root / rel)) as container:
                if not container.streams.video:
                    self.p.add("video", f"{rel}: no video stream")
                    return
                stream = container.streams.video[0]
                name = canonical_codec(stream.codec_context.name)
                want_codec = vinfo.get("video.codec")
                # lerobot decodes by probing the file, and its delete_episodes re-encodes to AV1
                # without updating info.json: a disagreement is a note, not a problem
                if want_codec is not None and canonical_codec(str(want_codec)) != name:
                    self.p.note(
                        f"{rel}: codec {name} (decoder {stream.codec_context.name}), {INFO_PATH} features.{key}.info says {want_codec}"
                    )
                want_fmt = vinfo.get("video.pix_fmt")
                if want_fmt is not None and stream.codec_context.pix_fmt not in (None, want_fmt):
                    self.p.note(
                        f"{rel}: pix_fmt {stream.codec_context.pix_fmt}, {INFO_PATH} features.{key}.info says {want_fmt}"
                    )
                if (stream.codec_context.height, stream.codec_context.width) != (h, w):
                    self.p.add(
                        "video",
                        f"{rel}: {stream.codec_context.width}x{stream.codec_context.height}, {INFO_PATH} features.{key}.shape says {w}x{h}",
                    )
                stream.thread_type = "AUTO"
                try:
                    for n, frame in enumerate(container.decode(stream)):
                        t = (
                            float(frame.pts * frame.time_base)
                            if frame.pts is not None and frame.time_base is not None
                            else float("nan")
                        )
                        pts.append(t)
                        j = int(np.searchsorted(st, t))
                        near = any(
                            0 <= k < len(st) and abs(st[k] - t) <= 0.5 / self.fps
                            for k in (j - 1, j)
                        )
                        if near:
                            kept[n] = sample_rgb(frame, stride)
                        tick(1)
                except Exception as exc:  # a damaged stream: judge the frames that did decode
                    self.p.add(
                        "video",
                        f"{rel}: decoding stops after frame {len(pts)}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                    )
        except Exception as exc:
            self.p.add(
                "video",
                f"{rel}: cannot be opened as video: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
            )
            return
        if not pts:
            self.p.add("video", f"{rel}: no decodable frame")
            return
        frame_t = np.asarray(pts)
        by_time = np.argsort(frame_t, kind="stable")
        sorted32 = frame_t[by_time].astype(np.float32)
        last = float(frame_t[by_time[-1]])
        tol32 = np.float32(TOLERANCE_S)
        for e in eps:
            rows = e["_rows"]
            # lerobot's query: from_timestamp + row timestamp, compared in float32 (torch tensors)
            start = float(e[f"videos/{key}/from_timestamp"])
            q = (start + d["timestamp"][rows].astype(np.float64)).astype(np.float32)
            nxt = (
                np.clip(np.searchsorted(sorted32, q), 1, max(1, len(sorted32) - 1))
                if len(sorted32) > 1
                else np.zeros(len(q), int)
            )
            dist = (
                np.minimum(np.abs(sorted32[nxt] - q), np.abs(sorted32[nxt - 1] - q))
                if len(sorted32) > 1
                else np.abs(sorted32[0] - q)
            )
            # torchcodec (lerobot's default decoder) takes frame round(ts * fps) by position
            pos = np.rint(q.astype(np.float64) * self.fps).astype(np.int64)
            for r in np.nonzero(~(dist < tol32))[0]:
                i = int(rows[r])
                if q[r] > last + TOLERANCE_S:
                    self.p.add(
                        "frames",
                        f"{rel}: {self.where(i)}: timestamp {float(q[r]):.4f} s is past the video's end (last frame at {last:.4f} s)",
                    )
                else:
                    self.p.add(
                        "frames",
                        f"{rel}: {self.where(i)}: no frame within {TOLERANCE_S} s of {float(q[r]):.4f} s (nearest {float(dist[r]):.6f} s away)",
                    )
            ok = dist < tol32
            inside = (pos >= 0) & (pos < len(sorted32))
            for r in np.nonzero(
                ok & (~inside | (np.abs(sorted32[np.clip(pos, 0, len(sorted32) - 1)] - q) >= tol32))
            )[0]:
                i = int(rows[r])
                self.p.add(
                    "frames",
                    f"{rel}: {self.where(i)}: frame #{pos[r]} (the one lerobot's torchcodec decoder takes for {float(q[r]):.4f} s) is not within {TOLERANCE_S} s of it",
                )
        self._check_image_stats(
            key, rel, eps, frame_t, by_time, kept, sample_of, np.asarray(sample_t)
        )

    def _check_image_stats(
        self, key: str, rel: str, eps: list[dict[str, Any]], frame_t: NDArray[np.float64], by_time: NDArray[np.int64],
        kept: dict[int, NDArray[np.uint8]], sample_of: list[tuple[int, int]], sample_t: NDArray[np.float64],
    ) -> None:  # fmt: skip
        images: dict[int, list[NDArray[np.uint8]]] = {}
        ft = frame_t[by_time]
        for (n, _i), t in zip(sample_of, sample_t, strict=True):
            j = int(np.clip(np.searchsorted(ft, t), 0, len(ft) - 1))
            if j > 0 and abs(ft[j - 1] - t) < abs(ft[j] - t):
                j -= 1
            frame_no = int(by_time[j])
            if frame_no in kept and abs(ft[j] - t) <= 0.5 / self.fps:  # else: a timestamp problem
                images.setdefault(n, []).append(kept[frame_no])
        for n, e in enumerate(eps):
            stored = self._stored(e, key)
            if stored is None:
                continue
            where = e["_where"]
            bad_shape = [s for s, v in stored.items() if s != "count" and v.size != 3]
            if bad_shape:
                self.p.add(
                    "stats",
                    f"{where}: stats/{key}/{bad_shape[0]} has {stored[bad_shape[0]].size} values, expected 3 (per channel, shape (3, 1, 1))",
                )
                continue
            count = int(stored["count"].ravel()[0])
            if not 1 <= count <= e["length"]:
                self.p.add(
                    "stats",
                    f"{where}: stats/{key}/count {count}, expected 1..{e['length']} sampled frames",
                )
            if n not in images or len(images[n]) < len(image_sample_indices(e["length"])):
                continue  # frames missing: reported by the timestamp check
            imgs = np.stack(images[n])
            got = image_stats(imgs)
            for stat, atol in IMAGE_ATOL.items():
                if stat == "std" or stat not in stored:
                    continue
                if not (np.abs(stored[stat].ravel() - got[stat].ravel()) <= atol).all():
                    self.p.add(
                        "stats",
                        f"{where}: stats/{key}/{stat} {fmt(stored[stat])}, the decoded video gives {fmt(got[stat])} (allowed {atol})",
                    )
            self._check_image_std(where, key, stored, got, imgs)

    def _check_image_std(
        self,
        where: str,
        key: str,
        stored: dict[str, NDArray[Any]],
        got: dict[str, NDArray[Any]],
        imgs: NDArray[np.uint8],
    ) -> None:
        """The true std, or what lerobot 0.4.4 writes: it squares uint8 pixels in uint8 (mod 256)."""
        s, m = stored["std"].ravel(), stored["mean"].ravel()
        true_ok = np.abs(s - got["std"].ravel()) <= IMAGE_ATOL["std"]
        # E[x² mod 256] <= 255, so a wrapped std obeys (255 s)² + (255 m)² <= 255
        bound_ok = (255 * s) ** 2 + (255 * m) ** 2 <= 255 * (1 + 0.05) + 1
        if (true_ok | bound_ok).all():
            return
        flat = imgs.reshape(-1, imgs.shape[-1])
        levels = np.arange(256, dtype=np.float64)
        counts = [np.bincount(flat[:, c], minlength=256) for c in range(flat.shape[1])]
        wrapped = (
            np.asarray(
                [
                    np.sqrt(
                        max(
                            0.0,
                            (n * (levels**2 % 256)).sum() / n.sum()
                            - ((n * levels).sum() / n.sum()) ** 2,
                        )
                    )
                    for n in counts
                ]
            )
            / 255.0
        )
        wrap_ok = np.abs(s - wrapped) <= IMAGE_ATOL["std"]
        if not (true_ok | wrap_ok | bound_ok).all():
            self.p.add(
                "stats",
                f"{where}: stats/{key}/std {fmt(s)}, the decoded video gives {fmt(got['std'])} (or lerobot's uint8-wrapped {fmt(wrapped)})",
            )
