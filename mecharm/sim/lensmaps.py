"""The remap tables of a distorting simulated lens, worked out once per machine.

A camera with lens distortion draws its static layer through a wider pinhole view and
remaps that into the distorted image (docs/simulation-optics.md). The remap tables
come from undistorting every output pixel with OpenCV's iterative solver: 0.5 s of
CPU for the rig's 1920x1080 top camera and 0.15 s for the side one, at every start of a
simulated daemon. They depend only on the sensor size, the intrinsics, the distortion
coefficients and OpenCV's solver, so they are kept on disk under the user's cache
directory (``$XDG_CACHE_HOME/mecharm``, else ``~/.cache/mecharm``), keyed by all of
these: the next start reads them in a few milliseconds. A missing, unreadable or
malformed file is worked out again; a cache directory that cannot be written only
costs the time.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import threading
import zipfile
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from numpy.typing import NDArray

from mecharm.common.logging import get_logger

__all__ = ["cache_file", "compute_maps", "distortion_maps"]

log = get_logger("mecharm.sim.lensmaps")

#: bump when ``compute_maps`` changes what it returns (old files are then never read)
_FORMAT = 1

Maps = tuple[float, NDArray[Any], NDArray[Any]]


def compute_maps(
    size: tuple[int, int], k: tuple[float, float, float, float], dist: tuple[float, ...]
) -> Maps:
    """For a distorting camera: the focal scale of the wider pinhole view the static layer is
    drawn through, and the fixed-point maps that remap that view into the distorted image
    (every output pixel looks up where its undistorted ray lands in the pinhole view)."""
    w, h = size
    fx, fy, cx, cy = k
    K = np.array([[fx, 0, cx], [0, fy, cy], [0, 0, 1.0]])
    uu, vv = np.meshgrid(np.arange(w, dtype=np.float64), np.arange(h, dtype=np.float64))
    pts = np.stack([uu.ravel(), vv.ravel()], -1).reshape(-1, 1, 2)
    crit = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 40, 1e-9)
    d = np.array(dist)
    if hasattr(cv2, "undistortPointsIter"):  # OpenCV 4 (lerobot's pin): the criteria's own function
        und = cv2.undistortPointsIter(pts, K, d, None, None, crit).reshape(h, w, 2)
    else:  # OpenCV 5 folded it into undistortPoints (same solver, same result)
        und = cv2.undistortPoints(pts, K, d, criteria=crit).reshape(h, w, 2)
    xs, ys = und[..., 0], und[..., 1]
    scale = 1.0
    for lo, hi, c, f, n in ((xs.min(), xs.max(), cx, fx, w), (ys.min(), ys.max(), cy, fy, h)):
        if lo < 0:
            scale = min(scale, c / (f * -lo))
        if hi > 0:
            scale = min(scale, (n - 1 - c) / (f * hi))
    scale *= 0.995
    mx = (scale * fx * xs + cx).astype(np.float32)
    my = (scale * fy * ys + cy).astype(np.float32)
    m1, m2 = cv2.convertMaps(mx, my, cv2.CV_16SC2)
    return float(scale), m1, m2


def cache_file(
    size: tuple[int, int], k: tuple[float, float, float, float], dist: tuple[float, ...]
) -> Path | None:
    """Where the maps of this lens are kept (None: no home or cache directory to keep them in)."""
    root = os.environ.get("XDG_CACHE_HOME")
    if not root or not os.path.isabs(root):  # the XDG rule: a relative value is ignored
        try:
            root = str(Path.home() / ".cache")
        except RuntimeError:
            return None
    # repr-exact floats: a lens that differs in any digit gets its own file
    ident = json.dumps([_FORMAT, cv2.__version__, list(size), list(k), list(dist)])
    key = hashlib.sha256(ident.encode("utf-8")).hexdigest()[:16]
    return Path(root) / "mecharm" / f"lens-maps-{size[0]}x{size[1]}-{key}.npz"


def _load(path: Path, size: tuple[int, int]) -> Maps | None:
    w, h = size
    try:  # our own handle: np.load leaves the file open when a torn zip fails to parse
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as z:
            scale, m1, m2 = float(z["scale"]), z["m1"], z["m2"]
    except (FileNotFoundError, NotADirectoryError):  # not kept yet, or no folder to keep it
        return None
    except (OSError, EOFError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as exc:
        # torn, foreign or corrupt: worked out again and replaced
        log.warning("lens_maps_unreadable", path=str(path), error=f"{type(exc).__name__}: {exc}")
        return None
    if (
        m1.shape != (h, w, 2)
        or m1.dtype != np.int16
        or m2.shape != (h, w)
        or m2.dtype != np.uint16
        or not 0.0 < scale <= 1.0
    ):
        log.warning("lens_maps_unreadable", path=str(path), error="shape, type or scale")
        return None
    return scale, m1, m2


def _save(path: Path, maps: Maps) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as fh:
            np.savez(fh, scale=np.float64(maps[0]), m1=maps[1], m2=maps[2])
        os.replace(tmp, path)  # whole or not at all, whoever else writes it at the same time
    except OSError as exc:
        log.info("lens_maps_not_kept", path=str(path), error=f"{type(exc).__name__}: {exc}")
    finally:
        with contextlib.suppress(OSError):  # e.g. the folder is a file: there is no tmp
            tmp.unlink(missing_ok=True)


@functools.lru_cache(maxsize=8)
def distortion_maps(
    size: tuple[int, int], k: tuple[float, float, float, float], dist: tuple[float, ...]
) -> Maps:
    """``compute_maps``, from the disk cache when it holds them (once per process)."""
    path = cache_file(size, k, dist)
    if path is not None:
        maps = _load(path, size)
        if maps is not None:
            return maps
    maps = compute_maps(size, k, dist)
    if path is not None:
        _save(path, maps)
    return maps
