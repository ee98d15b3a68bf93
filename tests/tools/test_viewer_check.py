"""The viewer check's own judgement (the check itself needs Chromium: `make viewer-check`)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import cv2
import numpy as np

from mecharm_dev.viewer_check import (
    SIDE_PANEL,
    WINDOW,
    classify,
    path_without_ffmpeg,
    side_panel_picture,
)


def _png(img: np.ndarray) -> bytes:
    ok, buf = cv2.imencode(".png", img)
    assert ok
    return bytes(buf)


def test_a_dark_page_or_a_flat_panel_is_not_a_picture() -> None:
    w, h = WINDOW
    page = np.full((h, w, 3), 20, np.uint8)  # the viewer's chrome, the loading screen
    assert not side_panel_picture(_png(page))[0]
    x0, y0, x1, y1 = SIDE_PANEL
    page[int(y0 * h) : int(y1 * h), int(x0 * w) : int(x1 * w)] = 200  # a flat grey panel
    assert not side_panel_picture(_png(page))[0]
    assert side_panel_picture(b"not a png") == (False, 0.0, 0.0)


def test_a_scene_in_the_side_panel_is_a_picture() -> None:
    w, h = WINDOW
    page = np.full((h, w, 3), 20, np.uint8)
    x0, y0, x1, y1 = SIDE_PANEL
    ph, pw = int(y1 * h) - int(y0 * h), int(x1 * w) - int(x0 * w)
    scene = np.tile(np.linspace(60, 230, pw, dtype=np.uint8), (ph, 1))  # a lit floor
    cv2.rectangle(scene, (pw // 3, ph // 4), (pw // 2, ph // 2), 30, -1)  # the arm's shadow
    page[int(y0 * h) : int(y0 * h) + ph, int(x0 * w) : int(x0 * w) + pw] = scene[..., None]
    ok, std, busy = side_panel_picture(_png(page))
    assert ok and std > 18 and busy > 0.5


def test_ffmpeg_is_taken_off_path(tmp_path: Path) -> None:
    with_ffmpeg, without = tmp_path / "a", tmp_path / "b"
    for d in (with_ffmpeg, without):
        d.mkdir()
    exe = with_ffmpeg / "ffmpeg"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    assert path_without_ffmpeg(os.pathsep.join([str(with_ffmpeg), str(without)])) == str(without)


def test_requests_are_told_apart() -> None:
    assert classify("http://127.0.0.1:9090/re_viewer_bg.wasm") == "local"
    assert classify("data:image/png;base64,AAAA") == "local"
    assert classify("https://tel.rerun.io/api/pog") == "viewer"
    assert classify("https://api.github.com/repos/rerun-io/rerun/releases/latest") == "viewer"
    assert classify("https://www.google.com/async/ddljson") == "browser"
    assert classify("https://cdn.example.com/font.woff2") == "outside"
