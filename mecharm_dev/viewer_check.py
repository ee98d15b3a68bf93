"""Open a trial in Rerun's web viewer in a real browser (headless Chromium) with no ffmpeg on PATH.

Outside ``make test`` (Debian's ``chromium``; ``make viewer-check`` runs it). It serves a run
folder with ``mecharm view RUN --web`` exactly as a user without a display gets it, with
every folder that holds an ``ffmpeg`` removed from PATH, loads the printed URL in headless
Chromium (SwiftShader for WebGL) over the DevTools protocol, and takes a screenshot once the
viewer has drawn. It checks:

* the viewer started and drew its panels (the page is no longer the loading screen);
* the side camera panel shows a picture: the side video decoded by the viewer itself (the
  browser decodes the H.264 asset; with ``--side-frames`` the frames are JPEG images);
* the page fetched nothing from outside 127.0.0.1 (the viewer's wasm is served locally)
  but for the viewer's own calls home (``VIEWER_OWN_HOSTS``: Rerun's release check and its
  usage analytics, which fail on a closed network and change nothing), listed apart.

    python -m mecharm_dev.viewer_check [--run RUN_DIR] [--side-frames] [--png FILE]

Exit 0 when every check passes, 1 when one fails, 2 when Chromium is missing. docs/viewing.md
("Checked in a browser") has the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np

from mecharm.common.layout import DataRoot
from mecharm.tools.simrig import free_port
from mecharm_dev.browser_check import BROWSER_OWN_HOSTS, _demo_root, chromium_path, host_in
from mecharm_dev.cdp import Browser

__all__ = ["classify", "main", "path_without_ffmpeg", "side_panel_picture"]

WINDOW = (1600, 1000)
#: the side camera's panel in the default layout (mecharm/tools/view/layout.py: the left
#: column, 2 of 5.5 shares wide, its lower half), as fractions of the page, with a margin
SIDE_PANEL = (0.02, 0.55, 0.34, 0.88)  # x0, y0, x1, y1
#: a panel with a picture in it: grey-level spread and share of pixels off the background
MIN_STD = 18.0
MIN_BUSY = 0.25
#: hosts Rerun's web viewer calls by itself: GitHub for its newest release, its welcome
#: screen's examples list, PostHog usage
#: analytics (``rerun analytics disable`` covers the native viewer only)
VIEWER_OWN_HOSTS = ("api.github.com", "tel.rerun.io", "app.rerun.io")


def path_without_ffmpeg(path: str) -> str:
    """``path`` without the folders that hold an ``ffmpeg`` executable."""
    keep = [p for p in path.split(os.pathsep) if p and not shutil.which("ffmpeg", path=p)]
    return os.pathsep.join(keep)


def side_panel_picture(png: bytes) -> tuple[bool, float, float]:
    """(a picture?, grey-level std, busy share) of the side panel of a viewer screenshot."""
    img = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_GRAYSCALE)
    if img is None:
        return False, 0.0, 0.0
    h, w = img.shape
    x0, y0, x1, y1 = SIDE_PANEL
    panel = img[int(y0 * h) : int(y1 * h), int(x0 * w) : int(x1 * w)].astype(np.float64)
    background = float(np.median(img))  # the viewer's dark chrome is most of the page
    busy = float(np.mean(np.abs(panel - background) > 24))
    std = float(panel.std())
    return std >= MIN_STD and busy >= MIN_BUSY, std, busy


def _serve(
    run_dir: Path, side_frames: bool, env: dict[str, str]
) -> tuple[subprocess.Popen[str], str]:
    """Start ``mecharm view RUN --web``; (the process, the URL it printed)."""
    argv = [sys.executable, "-m", "mecharm.tools.view", str(run_dir), "--web",
            "--web-port", str(free_port())]  # fmt: skip
    if side_frames:
        argv.append("--side-frames")
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        print("  view:", line.rstrip())
        m = re.search(r"open (http://127\.0\.0\.1:\d+/\S+)", line)
        if m:
            return proc, m.group(1)
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError("mecharm view --web printed no URL")


async def _shoot(chromium: Path, url: str, wait_s: float) -> tuple[bytes, list[str], float]:
    """(screenshot once the side panel shows a picture or at ``wait_s``, every URL the page
    requested, seconds until the picture)."""
    async with Browser(chromium, WINDOW) as browser:
        t0 = time.monotonic()
        await browser.goto(url)
        shot = b""
        while time.monotonic() - t0 < wait_s:
            await asyncio.sleep(2.0)
            shot = await browser.screenshot()
            if side_panel_picture(shot)[0]:
                await asyncio.sleep(2.0)  # let the other panels settle for the picture
                return await browser.screenshot(), browser.requested, time.monotonic() - t0
        return shot, browser.requested, time.monotonic() - t0


def classify(url: str) -> str:
    """``local`` (loopback, data, blob), ``browser`` (Chromium's own), ``viewer`` (Rerun's
    own calls home) or ``outside`` (anything else: the page fetched it)."""
    if url.startswith(("data:", "blob:", "about:", "chrome")):
        return "local"
    for kind, hosts in (
        ("local", ("127.0.0.1", "localhost")),
        ("browser", BROWSER_OWN_HOSTS),
        ("viewer", VIEWER_OWN_HOSTS),
    ):
        if host_in(url, hosts):
            return kind
    return "outside"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m mecharm_dev.viewer_check", description=__doc__.split("\n")[0]
    )
    ap.add_argument(
        "--run", help="run folder to view (default: the first trial of a fresh demo root)"
    )
    ap.add_argument(
        "--side-frames", action="store_true", help="serve the side video as JPEG frames"
    )
    ap.add_argument(
        "--png", default="viewer-check.png", help="screenshot (default viewer-check.png)"
    )
    ap.add_argument("--wait", type=float, default=90.0, help="seconds to wait for the picture")
    args = ap.parse_args(argv)
    chromium = chromium_path(install=True)
    if chromium is None:
        print("viewer-check: chromium not found (apt-get install chromium)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="viewer-check-") as tmp:
        if args.run:
            run_dir = Path(args.run)
        else:
            root = _demo_root(Path(tmp), 1)
            run_dir = next(iter(sorted(DataRoot(root).runs.rglob("run_[0-9]*/"))), Path())
        env = {**os.environ, "PATH": path_without_ffmpeg(os.environ.get("PATH", ""))}
        if shutil.which("ffmpeg", path=env["PATH"]):
            print("viewer-check: could not take ffmpeg off PATH", file=sys.stderr)
            return 1
        try:
            server, url = _serve(run_dir, args.side_frames, env)
        except RuntimeError as exc:  # the view's own lines above say why (no trace, ...)
            print(f"viewer-check: {exc}", file=sys.stderr)
            return 1
        try:
            shot, requested, took = asyncio.run(_shoot(chromium, url, args.wait))
        except RuntimeError as exc:  # Chromium did not start or answer
            print(f"viewer-check: {exc}", file=sys.stderr)
            return 1
        finally:
            server.terminate()
            server.wait(20)
    Path(args.png).write_bytes(shot)
    ok, std, busy = side_panel_picture(shot)
    outside = [u for u in requested if classify(u) == "outside"]
    own = sorted({re.sub(r"^[a-z+]+://([^/]+)(/[^?]*).*$", r"\1\2", u)
                  for u in requested if classify(u) == "viewer"})  # fmt: skip
    form = "JPEG frames" if args.side_frames else "the H.264 asset (decoded by the browser)"
    print(f"viewer-check: {run_dir.name}, side video as {form}, no ffmpeg on PATH")
    print(f"viewer-check: side panel {'shows a picture' if ok else 'EMPTY'} after {took:.1f} s "
          f"(grey std {std:.1f}, {busy:.0%} off the background); screenshot {args.png}")  # fmt: skip
    print(
        f"viewer-check: {len(requested)} requests, {len(outside)} outside 127.0.0.1"
        + (": " + ", ".join(outside[:5]) if outside else "")
        + (f"; the viewer's own calls home: {', '.join(own)}" if own else "")
    )
    return 0 if ok and not outside else 1


if __name__ == "__main__":
    raise SystemExit(main())
