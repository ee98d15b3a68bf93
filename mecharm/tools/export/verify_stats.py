"""The statistics checks: each episode's stored stats against its data, and stats.json
against the episodes' (lerobot's aggregation), within the tolerances of
docs/lerobot-verify.md."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from mecharm.tools.export.stats import (
    NUM_BINS,
    STAT_KEYS,
    aggregate_stats,
    vector_stats,
)
from mecharm.tools.export.verify_base import (
    DEFAULT_FEATURES,
    EPISODES_DIR,
    REINDEXED,
    STATS_PATH,
    VerifierBase,
    fmt,
)

__all__ = ["StatsChecks"]


class StatsChecks(VerifierBase):
    """Per-episode and aggregated statistics."""

    def _check_episode_stats(self, d: dict[str, Any], vals: dict[str, NDArray[Any]]) -> None:
        for key, ft in self.features.items():
            if ft["dtype"] in ("string", "video", "image"):
                continue
            base = d[key].reshape(len(d[key]), -1) if key in DEFAULT_FEATURES else vals.get(key)
            if base is None:
                continue
            for e in self.episodes:
                rows = e.get("_rows")
                stored = self._stored(e, key)
                if rows is None or stored is None:
                    continue
                x = base[rows]
                want = vector_stats(x)
                self._compare_numeric(e, key, ft["dtype"], stored, want, x)

    def _compare_numeric(
        self,
        e: dict[str, Any],
        key: str,
        dtype: str,
        got: dict[str, NDArray[Any]],
        want: dict[str, NDArray[Any]],
        x: NDArray[Any],
    ) -> None:
        where = e["_where"]
        xf = x.astype(np.float64)
        eps = (
            float(np.finfo(np.float32).eps)
            if dtype in ("float32", "float16")
            else float(np.finfo(np.float64).eps)
        )
        scale = np.abs(xf).max(axis=0) if len(xf) else np.zeros(xf.shape[1])
        span = (xf.max(axis=0) - xf.min(axis=0)) if len(xf) else scale
        for stat, value in got.items():
            if value.size != want[stat].size:
                self.p.add(
                    "stats",
                    f"{where}: stats/{key}/{stat} has {value.size} values, the feature has {want[stat].size}",
                )
                return
        if int(got["count"].ravel()[0]) != len(x):
            self.p.add(
                "stats",
                f"{where}: stats/{key}/count {int(got['count'].ravel()[0])}, the episode has {len(x)} rows",
            )
            return
        loc_tol = 64 * eps * scale + 1e-9
        tol = {s: loc_tol for s in ("min", "max", "mean")} | {
            q: loc_tol + 2 * span / NUM_BINS for q in STAT_KEYS if q.startswith("q")
        }
        shift = 0.0
        if key in REINDEXED:  # lerobot's tools copy these per-episode stats from before renumbering
            d = float(np.round(got["min"].ravel()[0] - want["min"].ravel()[0]))
            if np.allclose(got["min"].ravel(), want["min"].ravel() + d, atol=1e-6):
                shift = d
        for stat in ("min", "max", "mean", *(q for q in STAT_KEYS if q.startswith("q"))):
            if stat not in got:
                continue
            g, w = got[stat].ravel(), want[stat].ravel() + shift
            if not (np.abs(g - w) <= tol[stat]).all():
                self.p.add(
                    "stats",
                    f"{where}: stats/{key}/{stat} {fmt(g)}, recomputed from the data {fmt(w)}",
                )
        g, v = got["std"].ravel(), want["std"].ravel() ** 2
        if not (
            np.abs(g**2 - v) <= 64 * eps * scale**2 + 1e-12
        ).all():  # float32 E[x²]-E[x]² cancels
            self.p.add(
                "stats",
                f"{where}: stats/{key}/std {fmt(g)}, recomputed from the data {fmt(np.sqrt(v))}",
            )

    def _check_stats_json(self) -> None:
        stats = self._read_json(STATS_PATH)
        if stats is None or not self.episodes:
            return
        if not isinstance(stats, dict):
            self.p.add("stats.json", f"{STATS_PATH}: not a JSON object")
            return
        for key, ft in self.features.items():
            if ft["dtype"] == "string":
                continue
            if key not in stats or not isinstance(stats[key], dict):
                self.p.add("stats.json", f"{STATS_PATH}: no stats for feature {key!r}")
                continue
            per_ep: list[dict[str, Any]] = []
            for e in self.episodes:
                s = {
                    stat: np.asarray(e[f"stats/{key}/{stat}"], dtype=np.float64)
                    for stat in STAT_KEYS
                    if e.get(f"stats/{key}/{stat}") is not None
                }
                if any(k not in s for k in STAT_KEYS):
                    break
                per_ep.append({key: s})
            else:
                try:
                    agg = aggregate_stats(per_ep)[key]
                except (ValueError, KeyError):
                    self.p.add(
                        "stats.json",
                        f"{EPISODES_DIR}: the stats/{key} of the episodes do not have one shape",
                    )
                    continue
                for stat in STAT_KEYS:
                    try:
                        got = np.asarray(stats[key].get(stat), dtype=np.float64)
                    except (TypeError, ValueError):
                        got = np.asarray([np.nan])
                    want = np.asarray(agg[stat], dtype=np.float64)
                    if got.size != want.size or not np.allclose(
                        got.ravel(), want.ravel(), rtol=1e-6, atol=1e-9
                    ):
                        self.p.add(
                            "stats.json",
                            f"{STATS_PATH}: {key}/{stat} {fmt(got)}, the episodes' stats aggregate to {fmt(want)}",
                        )
