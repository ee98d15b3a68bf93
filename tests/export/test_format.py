"""Our files against the dataset lerobot 0.4.4 wrote itself (``REF``), and verify's teeth."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mecharm.tools.export import layout as L
from mecharm.tools.export.config import ExportSettings
from mecharm.tools.export.lerobot import export_lerobot
from mecharm.tools.export.stats import aggregate_stats, image_stats, vector_stats
from mecharm.tools.export.verify import verify_dataset

#: the dataset lerobot 0.4.4 wrote itself: MECHARM_LEROBOT_REFERENCE, else the copy in the
#: shared/ folder beside the repository (docs/testing.md, "Reference data")
REF = Path(
    os.environ.get("MECHARM_LEROBOT_REFERENCE")
    or Path(__file__).resolve().parents[3] / "shared" / "reference" / "lerobot-v3.0-example"
)
needs_ref = pytest.mark.skipif(
    not REF.is_dir(),
    reason=f"lerobot reference dataset not at {REF} (set MECHARM_LEROBOT_REFERENCE)",
)


#: what we add to lerobot's columns (checked against lerobot's own writer in test_outcomes.py)
OURS = (*L.OUTCOME_FEATURES, *L.EPISODE_FEATURES, *L.EPISODE_COLUMNS)


def _is_ours(name: str) -> bool:
    return name in OURS or any(name.startswith(f"stats/{k}/") for k in L.OUTCOME_FEATURES)


def _lerobot_part(schema: pa.Schema) -> pa.Schema:
    """``schema`` without our outcome / per-episode columns."""
    return pa.schema([f for f in schema if not _is_ours(f.name)], metadata=schema.metadata)


@pytest.fixture(scope="module")
def built(recs: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_root = tmp_path_factory.mktemp("data")
    for i in range(2):
        recs.ledger(data_root, recs.write(data_root, recs.stem(i), seed=i, duration=2.5 + i))
    out = tmp_path_factory.mktemp("built") / "ds"
    # one camera, as the reference (the top camera's format: tests/export/test_top_camera.py)
    export_lerobot(data_root, out, ExportSettings(progress=False, cameras=["side"]))
    return out


@pytest.fixture
def dataset(built: Path, tmp_path: Path) -> Path:
    """A private copy of the module's dataset, free to damage."""
    return Path(shutil.copytree(built, tmp_path / "ds"))


@needs_ref
def test_file_names_schemas_and_info_match_lerobot(dataset: Path) -> None:
    ref_files = sorted(p.relative_to(REF).as_posix() for p in REF.rglob("*") if p.is_file())
    ours = sorted(p.relative_to(dataset).as_posix() for p in dataset.rglob("*") if p.is_file())
    assert [f for f in ours if f != L.MANIFEST_PATH] == ref_files
    for rel in (
        "data/chunk-000/file-000.parquet",
        "meta/episodes/chunk-000/file-000.parquet",
        "meta/tasks.parquet",
    ):
        ref_schema, our_schema = pq.read_schema(REF / rel), pq.read_schema(dataset / rel)
        assert _lerobot_part(our_schema).equals(ref_schema, check_metadata=False), rel
        assert (our_schema.metadata is None) == (ref_schema.metadata is None), rel
    hf = json.loads(
        pq.read_schema(dataset / "data/chunk-000/file-000.parquet").metadata[b"huggingface"]
    )
    ref_hf = json.loads(
        pq.read_schema(REF / "data/chunk-000/file-000.parquet").metadata[b"huggingface"]
    )
    assert {k: v for k, v in hf["info"]["features"].items() if not _is_ours(k)} == ref_hf["info"][
        "features"
    ]
    assert list(hf["info"]["features"]) == [
        f.name for f in pq.read_schema(dataset / "data/chunk-000/file-000.parquet")
    ]
    pandas = json.loads(pq.read_schema(dataset / "meta/tasks.parquet").metadata[b"pandas"])
    ref_pandas = json.loads(pq.read_schema(REF / "meta/tasks.parquet").metadata[b"pandas"])
    assert (
        pandas["index_columns"] == ref_pandas["index_columns"]
        and pandas["columns"] == ref_pandas["columns"]
    )
    info, ref_info = (json.loads((d / "meta/info.json").read_text()) for d in (dataset, REF))
    assert list(info) == list(ref_info)
    assert [k for k in info["features"] if not _is_ours(k)] == list(ref_info["features"])
    for key in ("observation.state", "action"):
        # the names are the caller's choice: lerobot wrote the reference with the flat names
        # our export had then (j0 … gripper); ours are now the mecharm270 robot's features
        assert {**info["features"][key], "names": None} == {
            **ref_info["features"][key],
            "names": None,
        }
        assert info["features"][key]["names"] == L.JOINT_NAMES == [
            "j0.pos", "j1.pos", "j2.pos", "j3.pos", "j4.pos", "j5.pos", "gripper.pos"
        ]  # fmt: skip
    for key in (
        "timestamp",
        "frame_index",
        "episode_index",
        "index",
        "task_index",
    ):
        assert info["features"][key] == ref_info["features"][key]
    vid, ref_vid = info["features"][L.VIDEO_KEY], ref_info["features"][L.VIDEO_KEY]
    assert list(vid["info"]) == list(ref_vid["info"]) and vid["names"] == ref_vid["names"]
    stats, ref_stats = (json.loads((d / "meta/stats.json").read_text()) for d in (dataset, REF))
    assert sorted(k for k in stats if not _is_ours(k)) == sorted(ref_stats)
    for feat in ref_stats:
        assert list(stats[feat]) == list(ref_stats[feat])
        assert {k: np.shape(v) for k, v in stats[feat].items() if k != "count"} == {
            k: np.shape(v) for k, v in ref_stats[feat].items() if k != "count"
        }


@needs_ref
def test_stats_reproduce_lerobot_numbers() -> None:
    """Recompute the reference's per-episode stats from its data with our code: same numbers."""
    data = pq.read_table(REF / "data/chunk-000/file-000.parquet")
    rows = pq.read_table(REF / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    per_episode = []
    for row in rows:
        part = data.slice(row["dataset_from_index"], row["length"])
        cols = {
            "observation.state": np.asarray(
                part.column("observation.state").combine_chunks().flatten()
            ).reshape(-1, 7),
            "action": np.asarray(part.column("action").combine_chunks().flatten()).reshape(-1, 7),
            **{k: part.column(k).to_numpy() for k in L.INDEX_FEATURES},
        }
        # the reference frames are flat grey images of value (80*e + 5*i) % 255 (see its README)
        e = row["episode_index"]
        imgs = np.stack(
            [np.full((72, 128, 3), (80 * e + 5 * i) % 255, np.uint8) for i in range(row["length"])]
        )
        ours = {k: vector_stats(v) for k, v in cols.items()} | {L.VIDEO_KEY: image_stats(imgs)}
        stored = L.stats_from_row(row)
        for feat, st in ours.items():
            for key, value in st.items():
                if feat == L.VIDEO_KEY and key == "std":
                    continue  # lerobot squares uint8 pixels in uint8 (wraps): its image std is 0.0
                np.testing.assert_allclose(
                    value, stored[feat][key], rtol=1e-6, atol=1e-9, err_msg=f"{feat}/{key}"
                )
        per_episode.append(stored)
    agg = aggregate_stats(per_episode)
    ref_stats = json.loads((REF / "meta/stats.json").read_text())
    for feat, st in agg.items():
        for key, value in st.items():
            np.testing.assert_allclose(
                value, ref_stats[feat][key], rtol=1e-6, atol=1e-9, err_msg=f"{feat}/{key}"
            )


@needs_ref
def test_verify_accepts_the_reference() -> None:
    rep = verify_dataset(REF)  # AV1 and lerobot's uint8-wrapped image std included
    assert rep.episodes == 2 and rep.frames == 40 and rep.videos_checked == 1
    assert rep.ok, rep.errors


def test_video_timestamps_are_exact_and_keyframes_dense(dataset: Path) -> None:
    with av.open(str(dataset / "videos/observation.images.side/chunk-000/file-000.mp4")) as c:
        s = c.streams.video[0]
        packets = [p for p in c.demux(s) if p.size]
        assert s.codec_context.name == "h264" and s.codec_context.pix_fmt == "yuv420p"
        assert (s.time_base.denominator % 10) == 0  # k/10 s is a whole number of ticks
        pts = sorted(p.pts for p in packets)
        assert pts == [k * (s.time_base.denominator // 10) for k in range(len(pts))]
        assert all(
            p.is_keyframe for p in sorted(packets, key=lambda p: p.pts)[::2]
        )  # gop 2, like lerobot


def _rewrite_episodes(ds: Path, change: Any) -> None:
    path = ds / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    rows = table.to_pylist()
    change(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)  # whatever columns it has


def _drop_manifest_episode(ds: Path) -> None:
    path = ds / "meta/mecharm_export.json"
    manifest = json.loads(path.read_text())
    manifest["episodes"].pop()
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("tamper", "needle"),
    [
        (
            lambda ds: _rewrite_episodes(
                ds, lambda r: r[0].update({"stats/action/mean": [0.0] * 7})
            ),
            "stats/action/mean",
        ),
        (
            lambda ds: _rewrite_episodes(ds, lambda r: r[1].update({"dataset_from_index": 3})),
            "dataset_from_index 3",
        ),
        (
            lambda ds: _rewrite_episodes(
                ds,
                lambda r: r[1].update(
                    {
                        "videos/observation.images.side/from_timestamp": r[1][
                            "videos/observation.images.side/from_timestamp"
                        ]
                        + 0.05
                    }
                ),
            ),
            "no frame within 0.0001 s",
        ),
        (
            lambda ds: (ds / "videos/observation.images.side/chunk-000/file-001.mp4").write_bytes(
                b"x"
            ),
            "no episode refers",
        ),
        (
            lambda ds: (ds / "meta/info.json").write_text(
                (ds / "meta/info.json").read_text().replace('"total_frames": ', '"total_frames": 1')
            ),
            "total_frames",
        ),
        (
            lambda ds: (ds / "meta/stats.json").write_text(json.dumps({"action": {}})),
            "stats.json: no stats for feature 'observation.state'",
        ),
        (_drop_manifest_episode, "mecharm_export.json: its episodes do not match"),
    ],
)
def test_verify_finds_damage(dataset: Path, tamper: Any, needle: str) -> None:
    assert verify_dataset(dataset).ok
    tamper(dataset)
    rep = verify_dataset(dataset)
    assert not rep.ok
    assert any(needle in e for e in rep.errors), rep.errors


def test_verify_finds_wrong_timestamps_in_data(dataset: Path) -> None:
    path = dataset / "data/chunk-000/file-000.parquet"
    t = pq.read_table(path)
    ts = t.column("timestamp").to_numpy().copy()
    ts[5] += 0.01
    t = t.set_column(t.schema.get_field_index("timestamp"), "timestamp", pa.array(ts, pa.float32()))
    pq.write_table(t.replace_schema_metadata(L.data_schema().metadata), path)
    rep = verify_dataset(dataset, check_video=False)
    assert any("expected 1/fps" in e for e in rep.errors), rep.errors


def test_copy_of_dataset_verifies(dataset: Path, tmp_path: Path) -> None:
    """The dataset is self-contained: a copied folder verifies (no absolute paths inside)."""
    copy = tmp_path / "copy"
    shutil.copytree(dataset, copy)
    assert verify_dataset(copy).ok


def test_data_and_video_files_roll_over_at_the_size_limit(
    recs: Any, data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mecharm.tools.export import writer as writer_mod

    monkeypatch.setattr(writer_mod, "_MB", 1000)  # limits of 100 kB data / 200 kB video per file
    for i in range(3):
        recs.ledger(data_root, recs.write(data_root, recs.stem(i), seed=i, duration=2.5))
    out = tmp_path / "ds"
    export_lerobot(
        data_root,
        out,
        ExportSettings(progress=False, data_files_size_in_mb=1, video_files_size_in_mb=1),
    )
    rows = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [r["data/file_index"] for r in rows] == [0, 1, 2]
    assert [r["videos/observation.images.side/file_index"] for r in rows] == [0, 1, 2]
    assert all(r["videos/observation.images.side/from_timestamp"] == 0.0 for r in rows)
    # the top camera's files roll over on their own size (smaller frames: later)
    top = [(r[f"videos/{L.TOP_VIDEO_KEY}/file_index"], r["length"]) for r in rows]
    for k, r in enumerate(rows):
        before = sum(n for f, n in top[:k] if f == top[k][0])
        assert r[f"videos/{L.TOP_VIDEO_KEY}/from_timestamp"] == before / 10
        assert (out / f"videos/{L.TOP_VIDEO_KEY}/chunk-000/file-{top[k][0]:03d}.mp4").is_file()
    assert [f for f, _ in top] == sorted(f for f, _ in top)
    assert verify_dataset(out).ok


def test_sampled_rgb_matches_ffmpeg_conversion() -> None:
    from mecharm.tools.export.video import sample_rgb

    yy, xx = np.mgrid[0:720, 0:1280]
    img = np.stack([xx * 255 // 1280, yy * 255 // 720, (xx + yy) * 255 // 2000], axis=-1).astype(
        np.uint8
    )
    frame = av.VideoFrame.from_ndarray(img, format="rgb24").reformat(format="yuv420p")
    ffmpeg = frame.to_ndarray(format="rgb24")[::8, ::8].astype(int)
    ours = sample_rgb(frame, 8).astype(int)
    assert ours.shape == ffmpeg.shape == (90, 160, 3)
    assert np.abs(ours - ffmpeg).max() <= 3


def test_verify_reports_malformed_files_instead_of_crashing(dataset: Path) -> None:
    (dataset / "meta/info.json").write_text(
        json.dumps(json.loads((dataset / "meta/info.json").read_text()) | {"features": []})
    )
    rep = verify_dataset(dataset)
    assert not rep.ok and rep.errors
    (dataset / "meta/episodes/chunk-000/file-000.parquet").write_bytes(b"PAR1 broken")
    rep = verify_dataset(dataset)
    assert not rep.ok
