"""Per-episode and dataset statistics with lerobot 0.4.4's definitions.

lerobot computes, per feature and per dimension: min, max, mean, std (population),
count, and quantiles q01 q10 q50 q90 q99 estimated from a 5000-bin histogram
spanning [min - 1e-10, max + 1e-10] with linear interpolation inside the bin.
Images: up to ~100 evenly spaced frames per episode, strided down when a side is
>= 300 px, statistics per RGB channel over all sampled pixels, divided by 255,
shape (3, 1, 1); ``count`` is the number of sampled frames. Dataset stats
aggregate the episodes: count-weighted mean, pooled variance, min of mins, max of
maxes, count-weighted mean of the quantiles (lerobot's approximation).

One deliberate difference: lerobot squares uint8 pixels in uint8 (it wraps), which
makes its image std meaningless (0.0 in the reference dataset); we compute in
float64, so our image std is the true one.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "NUM_BINS",
    "QUANTILES",
    "STAT_KEYS",
    "aggregate_stats",
    "image_sample_indices",
    "image_stats",
    "image_stride",
    "vector_stats",
]

QUANTILES: tuple[float, ...] = (0.01, 0.10, 0.50, 0.90, 0.99)
QUANTILE_KEYS: tuple[str, ...] = tuple(f"q{round(q * 100):02d}" for q in QUANTILES)
STAT_KEYS: tuple[str, ...] = ("min", "max", "mean", "std", "count", *QUANTILE_KEYS)
NUM_BINS = 5000

Stats = dict[str, NDArray[np.generic]]


def _quantiles(
    x: NDArray[np.float64], lo: NDArray[np.float64], hi: NDArray[np.float64]
) -> list[NDArray[np.float64]]:
    """Histogram quantiles per column of ``x`` (n, d), lerobot's estimator."""
    n, d = x.shape
    out = np.empty((len(QUANTILES), d))
    for i in range(d):
        edges = np.linspace(lo[i] - 1e-10, hi[i] + 1e-10, NUM_BINS + 1)
        hist, _ = np.histogram(x[:, i], bins=edges)
        cum = np.cumsum(hist)
        for qi, q in enumerate(QUANTILES):
            target = q * n
            idx = int(np.searchsorted(cum, target))
            if idx == 0:
                out[qi, i] = edges[0]
            elif idx >= len(cum):
                out[qi, i] = edges[-1]
            else:
                before = cum[idx - 1]
                inside = cum[idx] - before
                out[qi, i] = (
                    edges[idx]
                    if inside == 0
                    else edges[idx] + (target - before) / inside * (edges[idx + 1] - edges[idx])
                )
    return [out[qi] for qi in range(len(QUANTILES))]


def _column_stats(x: NDArray[np.float64]) -> dict[str, NDArray[np.float64]]:
    lo, hi = x.min(axis=0), x.max(axis=0)
    mean = x.mean(axis=0)
    std = np.sqrt(np.maximum(0.0, (x * x).mean(axis=0) - mean * mean))
    stats: dict[str, NDArray[np.float64]] = {"min": lo, "max": hi, "mean": mean, "std": std}
    if len(x) < 2:
        stats.update({k: mean.copy() for k in QUANTILE_KEYS})
    else:
        stats.update(zip(QUANTILE_KEYS, _quantiles(x, lo, hi), strict=True))
    return stats


def vector_stats(values: NDArray[np.generic]) -> Stats:
    """Stats of a (n,) or (n, d) feature column; integer and bool features keep their min/max type.

    lerobot takes min/max of the column as it is, so a bool feature (``next.done``) stores
    bool min/max (``list<bool>`` in meta/episodes, ``false``/``true`` in stats.json) while
    its mean, std and quantiles are floats like any other feature's.
    """
    arr = np.asarray(values)
    x = arr.reshape(len(arr), -1).astype(np.float64)
    stats: Stats = dict(_column_stats(x))
    if np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_:
        kind = np.bool_ if arr.dtype == np.bool_ else np.int64
        stats["min"] = arr.reshape(len(arr), -1).min(axis=0).astype(kind)
        stats["max"] = arr.reshape(len(arr), -1).max(axis=0).astype(kind)
    stats["count"] = np.array([len(arr)], dtype=np.int64)
    return {k: stats[k] for k in STAT_KEYS}


def image_sample_indices(n: int) -> NDArray[np.int64]:
    """Rows whose images enter the stats: lerobot's n**0.75 rule (all when n < 100)."""
    num = n if n < 100 else max(100, min(int(n**0.75), 10_000))
    return (
        np.unique(np.round(np.linspace(0, n - 1, num)).astype(np.int64))
        if num > 0
        else np.zeros(0, np.int64)
    )


def image_stride(height: int, width: int) -> int:
    """lerobot's downsampling step: every k-th pixel when a side is >= 300 px."""
    if max(height, width) < 300:
        return 1
    return max(1, int(width / 150) if width > height else int(height / 150))


def _quantiles_from_counts(
    values: NDArray[np.float64], counts: NDArray[np.int64], lo: float, hi: float, n: int
) -> list[float]:
    """``_quantiles`` for data given as (value, count) pairs: same bins, same interpolation."""
    edges = np.linspace(lo - 1e-10, hi + 1e-10, NUM_BINS + 1)
    bins = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, NUM_BINS - 1)
    hist = np.bincount(bins, weights=counts, minlength=NUM_BINS)
    cum = np.cumsum(hist)
    out = []
    for q in QUANTILES:
        target = q * n
        idx = int(np.searchsorted(cum, target))
        if idx == 0:
            out.append(float(edges[0]))
        elif idx >= len(cum):
            out.append(float(edges[-1]))
        else:
            before, inside = cum[idx - 1], cum[idx] - cum[idx - 1]
            out.append(
                float(
                    edges[idx]
                    if inside == 0
                    else edges[idx] + (target - before) / inside * (edges[idx + 1] - edges[idx])
                )
            )
    return out


def image_stats(images: NDArray[np.uint8]) -> Stats:
    """Per-channel stats of sampled RGB images (n, h, w, 3) uint8, normalized to [0, 1].

    Pixels are 0..255 integers, so a 256-value count per channel gives min, max,
    mean, std and the 5000-bin histogram quantiles exactly, without a float copy.
    """
    n = images.shape[0]
    channels = images.shape[-1]
    flat = images.reshape(-1, channels)
    levels = np.arange(256, dtype=np.float64)
    stats: dict[str, list[float]] = {k: [] for k in STAT_KEYS if k != "count"}
    for c in range(channels):
        counts = np.bincount(flat[:, c], minlength=256).astype(np.int64)
        total = int(counts.sum())
        present = np.nonzero(counts)[0]
        lo, hi = float(present[0]), float(present[-1])
        mean = float((counts * levels).sum() / total)
        var = float((counts * levels * levels).sum() / total - mean * mean)
        stats["min"].append(lo)
        stats["max"].append(hi)
        stats["mean"].append(mean)
        stats["std"].append(float(np.sqrt(max(0.0, var))))
        qs = (
            _quantiles_from_counts(levels[present], counts[present], lo, hi, total)
            if total >= 2
            else [mean] * len(QUANTILES)
        )
        for key, value in zip(QUANTILE_KEYS, qs, strict=True):
            stats[key].append(value)
    out: Stats = {k: (np.asarray(v) / 255.0).reshape(-1, 1, 1) for k, v in stats.items()}
    out["count"] = np.array([n], dtype=np.int64)
    return {k: out[k] for k in STAT_KEYS}


def aggregate_stats(per_episode: list[dict[str, Stats]]) -> dict[str, Stats]:
    """Dataset stats from per-episode stats (lerobot's aggregate_stats)."""
    keys: list[str] = []
    for ep in per_episode:
        keys.extend(k for k in ep if k not in keys)
    out: dict[str, Stats] = {}
    for key in keys:
        items = [ep[key] for ep in per_episode if key in ep]
        counts = np.stack([np.asarray(s["count"], dtype=np.float64) for s in items])  # (E, 1)
        means = np.stack([np.asarray(s["mean"], dtype=np.float64) for s in items])
        total = float(counts.sum())
        w = counts.reshape(counts.shape + (1,) * (means.ndim - counts.ndim))
        mean = (means * w).sum(axis=0) / total
        stds = np.stack([np.asarray(s["std"], dtype=np.float64) for s in items])
        var = ((stds**2 + (means - mean) ** 2) * w).sum(axis=0) / total
        agg: Stats = {  # min/max keep their type (bool features: bool, like lerobot)
            "min": np.min(np.stack([np.asarray(s["min"]) for s in items]), axis=0),
            "max": np.max(np.stack([np.asarray(s["max"]) for s in items]), axis=0),
            "mean": mean,
            "std": np.sqrt(var),
            "count": np.array([int(total)], dtype=np.int64),
        }
        for q in QUANTILE_KEYS:
            agg[q] = (np.stack([np.asarray(s[q], dtype=np.float64) for s in items]) * w).sum(
                axis=0
            ) / total
        out[key] = {k: agg[k] for k in STAT_KEYS}
    return out
