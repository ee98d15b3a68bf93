"""A trial recorded by the real recorder (in-process service, synthetic camera, UDP sender) exports."""

from __future__ import annotations

import asyncio
import csv
import json
import socket
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from mecharm.common.layout import FRAME_LOG, META, DataRoot
from mecharm.recorder.config import RecorderSettings, VideoSettings
from mecharm.recorder.events import (
    Commanded,
    Gripper,
    Measured,
    RecordingMeta,
    Stage,
    TrialEnd,
    TrialStart,
)
from mecharm.recorder.sender import RecorderSender
from mecharm.recorder.service import RecorderService
from mecharm.runtime.records.ledger import append_row, ledger_path
from mecharm.tools.export.config import ExportSettings
from mecharm.tools.export.lerobot import export_lerobot
from mecharm.tools.export.verify import verify_dataset

STEM = "run_0007_20251130_120000"


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _record_trial(root: Path) -> list[tuple[float, list[float]]]:
    settings = RecorderSettings(
        data_root=root, udp_port=_free_udp_port(), camera="synthetic?fps=26&w=320&h=240",
        status_interval_sec=0, video=VideoSettings(preset="ultrafast"),
    )  # fmt: skip
    svc = RecorderService(settings)
    await svc.start()
    measured: list[tuple[float, list[float]]] = []
    try:
        s = RecorderSender(port=svc.port)
        deadline = time.monotonic() + 5
        while svc.camera.latest is None and time.monotonic() < deadline:  # the first frame is in
            await asyncio.sleep(0.02)
        s.notify(TrialStart(run_stem=STEM))
        await asyncio.sleep(0.3)
        s.notify(Stage(stage="open_gripper_home"))
        s.notify(Gripper(state=100, note="open_gripper_home:open: initial open"))
        await asyncio.sleep(0.2)
        t_send = time.time()
        s.notify(
            Commanded(angles=[-32.0, 60.0, -38.0, 18.0, -45.0, -30.0], speed=20, ts_send=t_send)
        )
        for i in range(1, 61):  # a 1.2 s move polled at 50 Hz
            angles = [
                -32.0 * i / 60,
                60.0 * i / 60,
                -38.0 * i / 60,
                18.0 * i / 60,
                -45.0 * i / 60,
                -30.0,
            ]
            ev = Measured(angles=angles)
            measured.append((ev.ts, angles))
            s.notify(ev)
            await asyncio.sleep(0.02)
        s.notify(Gripper(state=20, note="grasp:close: grasp"))
        await asyncio.sleep(0.4)
        while svc.counters.events < s.sent and time.monotonic() < deadline + 5:  # all rows written
            await asyncio.sleep(0.02)
        s.notify(TrialEnd(run_stem=STEM))
        s.close()
        deadline = time.monotonic() + 5
        meta_path = DataRoot(root).recording(STEM).meta
        while not meta_path.exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await svc.wait_closed()
    finally:
        await svc.stop()
    return measured


@pytest.mark.slow
@pytest.mark.anyio
async def test_recorded_trial_exports_and_verifies(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    measured = await _record_trial(root)
    rec = DataRoot(root).recording(STEM).dir
    meta = RecordingMeta.model_validate_json((rec / META).read_bytes())
    assert meta.status == "ok" and meta.frames_written > 30
    append_row(ledger_path(root), {
        "run_stem": STEM, "status": "completed", "dry_run": 0, "pick_verdict": "yes", "place_verdict": "yes",
        "recording_path": meta.recording_path, "recording_fps": meta.effective_fps,
        "recording_frames": meta.frames_written, "recording_status": meta.status,
    })  # fmt: skip
    out = tmp_path / "ds"
    # the recorder alone (no runtime): no top camera recording, a side-only dataset
    settings = ExportSettings(progress=False, cameras=["side"])
    # a synthetic test card is no demonstration: refused unless asked for by name
    refused = await asyncio.to_thread(export_lerobot, root, out, settings, dry_run=True)
    assert [r.run_stem for r in refused.refused] == [STEM]
    assert "synthetic test card" in refused.refused[0].reason
    settings = settings.model_copy(update={"allow_synthetic": True, "allow_time_scaled": True})
    rep = await asyncio.to_thread(export_lerobot, root, out, settings)
    assert not rep.refused, rep.refused
    assert [e.run_stem for e in rep.exported] == [STEM]
    with open(rec / FRAME_LOG, newline="") as fh:
        capture = np.array([float(r["capture_ts"]) for r in csv.DictReader(fh)])
    n = int(np.floor((capture[-1] - capture[0]) * 10 + 1e-9)) + 1
    assert rep.exported[0].length == n and rep.exported[0].source_frames == len(capture)
    rows = pq.read_table(out / "data/chunk-000/file-000.parquet").to_pylist()
    # after the move the state holds the last measured pose; the action is the commanded target
    last_t, last = measured[-1]
    for r in rows:
        t = capture[0] + r["timestamp"]
        if t > last_t + 0.3:
            np.testing.assert_allclose(r["observation.state"][:6], last, atol=1e-3)
            np.testing.assert_allclose(
                r["action"][:6], [-32.0, 60.0, -38.0, 18.0, -45.0, -30.0], atol=1e-4
            )
            assert r["action"][6] == 20.0  # close commanded
    v = verify_dataset(out)
    assert v.ok, v.errors
    info = json.loads((out / "meta/info.json").read_text())
    assert info["features"]["observation.images.side"]["shape"] == [240, 320, 3]
