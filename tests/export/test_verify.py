"""`mecharm export verify` against lerobot's own datasets and against deliberately broken copies.

Every break is applied to a copy of the dataset lerobot 0.4.4 wrote (``REF``, skipped when
absent) and of one our exporter writes; each must be caught by a line naming the file
and the row. Rules and tolerances: docs/lerobot-verify.md.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mecharm.tools.cli import main
from mecharm.tools.export.config import ExportSettings
from mecharm.tools.export.lerobot import export_lerobot
from mecharm.tools.export.stats import aggregate_stats, vector_stats
from mecharm.tools.export.verify import MAX_PER_KIND, verify_dataset

REPO = Path(__file__).resolve().parents[2]
#: the dataset lerobot 0.4.4 wrote itself (docs/testing.md, "Reference data")
REF = Path(
    os.environ.get("MECHARM_LEROBOT_REFERENCE")
    or REPO.parent / "shared" / "reference" / "lerobot-v3.0-example"
)
#: REF after lerobot's own `lerobot-edit-dataset delete_episodes` of episode 0 (data/README.md)
DELETED = Path(__file__).parent / "data" / "lerobot-deleted-episode0"
DATA = "data/chunk-000/file-000.parquet"
EPISODES = "meta/episodes/chunk-000/file-000.parquet"


@pytest.fixture(scope="module")
def ours(recs: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_root = tmp_path_factory.mktemp("data")
    for i in range(2):
        recs.ledger(data_root, recs.write(data_root, recs.stem(i), seed=i, duration=2.5 + i))
    out = tmp_path_factory.mktemp("ours") / "ds"
    export_lerobot(data_root, out, ExportSettings(progress=False))
    return out


@pytest.fixture(params=["reference", "ours"])
def ds(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A private copy of the reference or of our export, free to damage (verified clean first)."""
    if request.param == "reference":
        if not REF.is_dir():
            pytest.skip(f"lerobot reference dataset not at {REF} (set MECHARM_LEROBOT_REFERENCE)")
        src = REF
    else:
        src = request.getfixturevalue("ours")
    out = Path(shutil.copytree(src, tmp_path / "ds"))
    for p in out.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)  # the shared reference is read-only
    rep = verify_dataset(out)
    assert rep.ok, rep.errors
    return out


# ---------------------------------------------------------------------------- helpers


def info(ds: Path) -> dict[str, Any]:
    return json.loads((ds / "meta/info.json").read_text())


def video_key(ds: Path) -> str:
    return next(k for k, ft in info(ds)["features"].items() if ft["dtype"] == "video")


def video_file(ds: Path) -> str:
    return f"videos/{video_key(ds)}/chunk-000/file-000.mp4"


def episodes(ds: Path) -> list[dict[str, Any]]:
    return pq.read_table(ds / EPISODES).to_pylist()


def rewrite_episodes(ds: Path, change: Callable[[list[dict[str, Any]]], None]) -> None:
    table = pq.read_table(ds / EPISODES)
    rows = table.to_pylist()
    change(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), ds / EPISODES)


def rewrite_column(ds: Path, name: str, change: Callable[[np.ndarray], None]) -> None:
    table = pq.read_table(ds / DATA)
    values = table.column(name).to_numpy().copy()
    change(values)
    i = table.schema.get_field_index(name)
    pq.write_table(
        table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type)),
        ds / DATA,
    )


def mid_row(ds: Path) -> tuple[int, int, int]:
    """(row, episode, frame) of a row inside the second episode."""
    ep = episodes(ds)[1]
    row = ep["dataset_from_index"] + 3
    return row, 1, 3


def check(ds: Path, *needles: str, video: bool = True) -> list[str]:
    rep = verify_dataset(ds, check_video=video)
    assert not rep.ok
    hits = [e for e in rep.errors if all(n in e for n in needles)]
    assert hits, (needles, rep.errors)
    return hits


# ---------------------------------------------------------------------------- clean datasets


@pytest.mark.skipif(not REF.is_dir(), reason=f"lerobot reference dataset not at {REF}")
def test_the_reference_lerobot_wrote_passes() -> None:
    rep = verify_dataset(REF)
    assert rep.ok, rep.errors
    assert (rep.episodes, rep.frames, rep.videos_checked) == (2, 40, 1)


def test_lerobot_delete_episodes_output_passes() -> None:
    """AV1 re-encoded by lerobot, index/episode_index stats kept from before the renumbering."""
    rep = verify_dataset(DELETED)
    assert rep.ok, rep.errors
    assert (rep.episodes, rep.frames, rep.videos_checked) == (1, 20, 1)
    ep = episodes(DELETED)[0]
    assert ep["stats/index/min"] == [20] and ep["stats/episode_index/min"] == [1]  # the old values


def test_our_export_passes(ours: Path) -> None:
    rep = verify_dataset(ours)
    assert rep.ok, rep.errors
    assert rep.episodes == 2 and rep.videos_checked >= 1


def test_reindexed_stats_must_be_a_whole_shift(tmp_path: Path) -> None:
    """The copied-from-before stats lerobot leaves are accepted; anything else is not."""
    ds = Path(shutil.copytree(DELETED, tmp_path / "ds"))
    rewrite_episodes(ds, lambda r: r[0].update({"stats/index/std": [9.0]}))
    check(ds, EPISODES, "row 0 (episode 0)", "stats/index/std")
    rewrite_episodes(
        ds,
        lambda r: r[0].update({"stats/index/std": [5.766281297335398], "stats/index/mean": [29.0]}),
    )
    check(ds, EPISODES, "row 0 (episode 0)", "stats/index/mean")


def _add_features(ds: Path) -> None:
    """A second camera, lerobot's outcome columns and an extra per-episode column, consistent.

    Only what the dataset lacks is added (an exporter may already write some of them).
    """
    (ds / "meta/mecharm_export.json").unlink(missing_ok=True)  # another tool's dataset
    meta = info(ds)
    side = video_key(ds)
    top = "observation.images.top"
    stat_keys = ("min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99")
    table = pq.read_table(ds / DATA)
    ep = table.column("episode_index").to_numpy()
    done = np.append(ep[1:] != ep[:-1], True)
    success = done & (ep == 1)
    outcomes = {
        "next.reward": (success.astype(np.float32), "float32", pa.float32()),
        "next.done": (done, "bool", pa.bool_()),
        "next.success": (success, "bool", pa.bool_()),
    }
    outcomes = {k: v for k, v in outcomes.items() if k not in meta["features"]}
    new_top = top not in meta["features"]
    if new_top:
        meta["features"][top] = json.loads(json.dumps(meta["features"][side]))
        shutil.copytree(ds / "videos" / side, ds / "videos" / top)
    for name, (values, dtype, t) in outcomes.items():
        meta["features"][name] = {"dtype": dtype, "shape": [1], "names": None}
        table = table.append_column(pa.field(name, t), pa.array(values, t))
    (ds / "meta/info.json").write_text(json.dumps(meta, indent=4))
    pq.write_table(table, ds / DATA)
    rows = pq.read_table(ds / EPISODES).to_pylist()
    for r in rows:
        sel = ep == r["episode_index"]
        if new_top:
            for c in ("chunk_index", "file_index", "from_timestamp", "to_timestamp"):
                r[f"videos/{top}/{c}"] = r[f"videos/{side}/{c}"]
            for stat in stat_keys:
                r[f"stats/{top}/{stat}"] = r[f"stats/{side}/{stat}"]
        for name, (values, _, _) in outcomes.items():
            for stat, v in vector_stats(values[sel].reshape(-1, 1)).items():
                r[f"stats/{name}/{stat}"] = np.asarray(
                    v, dtype=np.int64 if stat == "count" else np.float64
                ).tolist()
        r["othertool/place_verdict"] = "yes" if r["episode_index"] == 1 else "no"
    pq.write_table(pa.Table.from_pylist(rows), ds / EPISODES)
    added = [*outcomes, *([top] if new_top else [])]
    per_ep = [
        {
            k: {s: np.asarray(r[f"stats/{k}/{s}"], dtype=np.float64) for s in stat_keys}
            for k in added
        }
        for r in rows
    ]
    stats = json.loads((ds / "meta/stats.json").read_text())
    for k, st in aggregate_stats(per_ep).items():
        stats[k] = {s: np.asarray(v).tolist() for s, v in st.items()}
    (ds / "meta/stats.json").write_text(json.dumps(stats))


def test_any_features_two_cameras_and_outcomes(ds: Path) -> None:
    _add_features(ds)
    rep = verify_dataset(ds)
    assert rep.ok, rep.errors
    assert rep.videos_checked == 2
    # the second camera is checked too: its file, its rows
    top = "videos/observation.images.top/chunk-000/file-000.mp4"
    (ds / top).unlink()
    check(ds, top, "missing", "row 0 (episode 0)")


def test_outcome_dtype_is_checked(ds: Path) -> None:
    _add_features(ds)
    table = pq.read_table(ds / DATA)
    i = table.schema.get_field_index("next.done")
    table = table.set_column(i, "next.done", table.column(i).cast(pa.int64()))
    pq.write_table(table, ds / DATA)
    check(ds, DATA, "column 'next.done'", "expected bool")


# ---------------------------------------------------------------------------- broken copies


def test_missing_data_file(ds: Path) -> None:
    (ds / DATA).unlink()
    check(ds, DATA, "missing", f"{EPISODES} row 0 (episode 0)")


def test_missing_video_file(ds: Path) -> None:
    (ds / video_file(ds)).unlink()
    check(ds, video_file(ds), "missing", f"{EPISODES} row 0 (episode 0)")


def test_index_gap(ds: Path) -> None:
    row, e, f = mid_row(ds)
    rewrite_column(ds, "index", lambda v: v.__setitem__(slice(row, None), v[row:] + 1))
    check(ds, f"{DATA} row {row} (episode {e}, frame {f}): index {row + 1}, expected {row} (gap)")


def test_duplicated_index(ds: Path) -> None:
    row, e, f = mid_row(ds)
    rewrite_column(ds, "index", lambda v: v.__setitem__(row, row - 1))
    check(
        ds, f"{DATA} row {row} (episode {e}, frame {f}): index {row - 1}, expected {row} (repeats)"
    )


def test_frame_index_restart(ds: Path) -> None:
    row, e, f = mid_row(ds)
    rewrite_column(ds, "frame_index", lambda v: v.__setitem__(slice(row, row + 5), np.arange(5)))
    check(ds, f"{DATA} row {row} (episode {e}, frame 0): frame_index 0, expected {f} (restart)")


def test_timestamp_past_the_video_end(ds: Path) -> None:
    key = video_key(ds)
    rewrite_episodes(
        ds,
        lambda r: r[-1].update(
            {
                f"videos/{key}/{c}": r[-1][f"videos/{key}/{c}"] + 1.0
                for c in ("from_timestamp", "to_timestamp")
            }
        ),
    )
    last = episodes(ds)[-1]
    n = last["dataset_to_index"] - 1
    check(
        ds,
        video_file(ds),
        f"{DATA} row {n} (episode {last['episode_index']}, frame {last['length'] - 1})",
        "past the video's end",
    )


def test_wrong_episode_range(ds: Path) -> None:
    rewrite_episodes(ds, lambda r: r[0].update({"dataset_to_index": r[0]["dataset_to_index"] + 1}))
    to = episodes(ds)[0]["dataset_to_index"]
    check(
        ds,
        f"{EPISODES} row 0 (episode 0): dataset_from_index 0, dataset_to_index {to}",
        f"(to {to - 1})",
    )


def test_episode_index_gap(ds: Path) -> None:
    row = episodes(ds)[1]["dataset_from_index"]
    rewrite_column(ds, "episode_index", lambda v: v.__setitem__(v == 1, 2))
    rewrite_episodes(ds, lambda r: r[1].update({"episode_index": 2}))
    check(ds, f"{DATA} row {row} (episode 2, frame 0): episode_index 2 after 0")
    check(ds, f"{EPISODES} row 1 (episode 2): episode_index 2, expected 1")


def test_corrupt_parquet(ds: Path) -> None:
    raw = (ds / DATA).read_bytes()
    (ds / DATA).write_bytes(raw[: len(raw) // 2])
    check(ds, DATA, "not a readable parquet file")
    raw = (ds / EPISODES).read_bytes()
    (ds / EPISODES).write_bytes(raw[: len(raw) // 3])
    check(ds, EPISODES, "not a readable parquet file")


def test_stats_off(ds: Path) -> None:
    def change(rows: list[dict[str, Any]]) -> None:
        rows[1]["stats/observation.state/mean"] = [
            v + 0.5 for v in rows[1]["stats/observation.state/mean"]
        ]

    rewrite_episodes(ds, change)
    check(
        ds,
        f"{EPISODES} row 1 (episode 1): stats/observation.state/mean",
        "recomputed from the data",
    )


def test_image_stats_off(ds: Path) -> None:
    key = video_key(ds)
    rewrite_episodes(ds, lambda r: r[0].update({f"stats/{key}/std": [[[0.4]], [[0.4]], [[0.4]]]}))
    check(ds, f"{EPISODES} row 0 (episode 0): stats/{key}/std", "decoded video")
    rewrite_episodes(ds, lambda r: r[0].update({f"stats/{key}/mean": [[[0.99]], [[0.0]], [[0.5]]]}))
    check(ds, f"{EPISODES} row 0 (episode 0): stats/{key}/mean", "decoded video")


def test_stats_json_off(ds: Path) -> None:
    stats = json.loads((ds / "meta/stats.json").read_text())
    stats["action"]["mean"][2] += 1.0
    (ds / "meta/stats.json").write_text(json.dumps(stats))
    check(ds, "meta/stats.json: action/mean", "aggregate")


def test_total_frames_wrong(ds: Path) -> None:
    meta = info(ds)
    meta["total_frames"] += 1
    (ds / "meta/info.json").write_text(json.dumps(meta))
    check(
        ds,
        f"meta/info.json: total_frames {meta['total_frames']}",
        f"hold {meta['total_frames'] - 1} rows",
    )


def test_feature_missing_from_the_data(ds: Path) -> None:
    table = pq.read_table(ds / DATA)
    pq.write_table(table.drop_columns(["action"]), ds / DATA)
    check(ds, DATA, "no column 'action'")


def test_wrong_dtype(ds: Path) -> None:
    table = pq.read_table(ds / DATA)
    i = table.schema.get_field_index("timestamp")
    pq.write_table(table.set_column(i, "timestamp", table.column(i).cast(pa.float64())), ds / DATA)
    check(ds, DATA, "column 'timestamp': type double, expected float")


def test_column_outside_the_features(ds: Path) -> None:
    table = pq.read_table(ds / DATA)
    pq.write_table(table.append_column("extra", pa.array(np.zeros(table.num_rows))), ds / DATA)
    check(ds, DATA, "columns ['extra'] are not features")


def test_frame_size_differs_from_info(ds: Path) -> None:
    meta = info(ds)
    key = video_key(ds)
    meta["features"][key]["shape"][1] += 16
    (ds / "meta/info.json").write_text(json.dumps(meta))
    check(ds, video_file(ds), f"features.{key}.shape says")


def test_truncated_mp4(ds: Path) -> None:
    path = ds / video_file(ds)
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) * 6 // 10])
    hits = check(ds, video_file(ds))
    assert any(
        w in h for h in hits for w in ("cannot be opened", "decoding stops", "past the video's end")
    ), hits


def test_timestamps_off_the_frame_rate(ds: Path) -> None:
    row, e, f = mid_row(ds)
    rewrite_column(ds, "timestamp", lambda v: v.__setitem__(row, v[row] + 0.01))
    check(
        ds, f"{DATA} row {row} (episode {e}, frame {f}): timestamp", "expected 1/fps", video=False
    )
    check(
        ds, video_file(ds), f"{DATA} row {row} (episode {e}, frame {f})", "no frame within 0.0001 s"
    )


def test_problems_are_bounded_per_kind(ds: Path) -> None:
    rewrite_column(ds, "frame_index", lambda v: v.__setitem__(slice(None), 7))
    rep = verify_dataset(ds, check_video=False)
    lines = [e for e in rep.errors if "frame_index" in e and "expected" in e]
    assert len(lines) == MAX_PER_KIND
    assert any(e.startswith("... ") and "more frame_index problem(s)" in e for e in rep.errors)
    assert rep.problems > len(rep.errors)


@pytest.mark.parametrize(
    ("target", "content", "needle"),
    [
        ("meta/info.json", b"{not json", "meta/info.json: not readable JSON"),
        ("meta/info.json", b"[1, 2]", "meta/info.json: not a JSON object"),
        (
            "meta/info.json",
            b'{"codebase_version": "v3.0", "fps": 10, "features": {"a": 3}}',
            "meta/info.json: features",
        ),
        ("meta/stats.json", b"\x00\x01garbage", "meta/stats.json: not readable JSON"),
        ("meta/tasks.parquet", b"PAR1 nope", "meta/tasks.parquet: not a readable parquet file"),
        ("VIDEO", b"\x00\x00\x00\x18ftypmp42 nothing more", "cannot be opened as video"),
        ("meta/mecharm_export.json", b"{", "meta/mecharm_export.json: not readable JSON"),
    ],
)
def test_garbage_is_one_line_not_a_traceback(
    ds: Path, target: str, content: bytes, needle: str
) -> None:
    target = video_file(ds) if target == "VIDEO" else target
    (ds / target).write_bytes(content)
    check(ds, needle)


def test_manifest_is_optional_but_must_agree(ours: Path, tmp_path: Path) -> None:
    ds = Path(shutil.copytree(ours, tmp_path / "ds"))
    manifest = json.loads((ds / "meta/mecharm_export.json").read_text())
    manifest["episodes"].pop()
    (ds / "meta/mecharm_export.json").write_text(json.dumps(manifest))
    check(ds, "meta/mecharm_export.json: its episodes do not match")
    manifest["files"] = [{"not": "a path"}]  # unhashable: once an internal error
    (ds / "meta/mecharm_export.json").write_text(json.dumps(manifest))
    check(ds, "meta/mecharm_export.json: files is not a list of paths")
    (ds / "meta/mecharm_export.json").unlink()
    assert verify_dataset(ds).ok


# ---------------------------------------------------------------------------- the CLI


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "mecharm.tools.cli", "export", "verify", *args, "--no-progress"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=False,
    )


@pytest.mark.slow
def test_cli_exit_codes(ds: Path, tmp_path: Path) -> None:
    clean = _cli(str(ds))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert ": ok, 2 episodes" in clean.stdout
    rewrite_episodes(ds, lambda r: r[0].update({"dataset_to_index": r[0]["dataset_to_index"] + 1}))
    broken = _cli(str(ds))
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert f"{EPISODES} row 0 (episode 0)" in broken.stdout and "problem(s)" in broken.stdout
    assert "Traceback" not in broken.stderr
    missing = _cli(str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "no such folder" in missing.stderr
    assert main(["export", "verify", str(tmp_path / "nowhere"), "--no-progress"]) == 2


OURS_DELETED = Path(__file__).parent / "data" / "ours-deleted-episode1"


def test_lerobot_delete_episodes_of_our_export_passes_with_a_codec_note() -> None:
    """What the old verifier rejected (17 problems): AV1 after lerobot's re-encode, info.json
    still saying h264, index stats from before the renumbering."""
    rep = verify_dataset(OURS_DELETED)
    assert rep.ok, rep.errors
    assert (rep.episodes, rep.frames) == (2, 70)
    assert rep.notes and "codec av1" in rep.notes[0] and "says h264" in rep.notes[0]
    assert episodes(OURS_DELETED)[1]["stats/index/min"] == [60]  # from before: the data says 25
    result = _cli(str(OURS_DELETED))
    assert result.returncode == 0 and ": note: videos/" in result.stdout


@pytest.mark.parametrize("bad", [math.nan, math.inf])
@pytest.mark.parametrize("column", ["from_timestamp", "to_timestamp"])
def test_non_finite_episode_range_names_file_and_row(
    ds: Path, column: str, bad: float, capsys: pytest.CaptureFixture[str]
) -> None:
    """A NaN/inf video range is one line naming the episodes file and row, not an internal error."""
    key = video_key(ds)
    rewrite_episodes(ds, lambda r: r[1].update({f"videos/{key}/{column}": bad}))
    hits = check(ds, f"{EPISODES} row 1 (episode 1): videos/{key} from/to_timestamp")
    assert "not a finite" in hits[0]
    rep = verify_dataset(ds)
    assert not any("cannot be checked further" in e for e in rep.errors), rep.errors
    assert main(["export", "verify", str(ds), "--no-progress"]) == 1
    assert "cannot be checked further" not in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["Infinity", "NaN", "1e999"])
def test_non_finite_fps_names_info_json(
    ds: Path, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (ds / "meta/info.json").read_text()
    fps = info(ds)["fps"]
    (ds / "meta/info.json").write_text(text.replace(f'"fps": {fps}', f'"fps": {bad}', 1))
    assert info(ds)["fps"] != fps  # the edit landed
    check(ds, "meta/info.json: fps", "not a positive finite number")
    assert not any("cannot be checked further" in e for e in verify_dataset(ds).errors)
    assert main(["export", "verify", str(ds), "--no-progress"]) == 1
    assert "cannot be checked further" not in capsys.readouterr().out
