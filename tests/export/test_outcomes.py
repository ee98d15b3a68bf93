"""Outcomes and per-episode fields in the dataset (docs/lerobot-outcomes.md).

The column types, feature order and statistics are checked against what lerobot 0.4.4
itself wrote for the same features (fixtures/lerobot_outcomes.json, made by
fixtures/make_lerobot_outcomes.py); the values against the ledger and the run logs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from structlog.testing import capture_logs

from mecharm.tools.cli import main
from mecharm.tools.export import layout as L
from mecharm.tools.export.config import ExportSettings
from mecharm.tools.export.lerobot import DatasetError, export_lerobot
from mecharm.tools.export.outcomes import outcome_columns
from mecharm.tools.export.stats import aggregate_stats, vector_stats
from mecharm.tools.export.verify import verify_dataset

LEROBOT = json.loads((Path(__file__).parent / "fixtures" / "lerobot_outcomes.json").read_text())
SETTINGS = ExportSettings(progress=False)


# ------------------------------------------------------------------ against lerobot's own writer


def test_features_and_columns_are_lerobots() -> None:
    feats = L.features(96, 192, 10)
    for key, want in LEROBOT["info_features"].items():
        assert feats[key] == want, key
    # the dataset's own features in order, then lerobot's index features; videos are no column
    data_cols = [k for k in feats if feats[k]["dtype"] != "video"]
    assert data_cols == LEROBOT["info_feature_order"]
    ours = {f.name: str(f.type) for f in L.data_schema()}
    assert [f.name for f in L.data_schema()] == [c for c, _ in LEROBOT["data_columns"]]
    assert ours == dict(map(tuple, LEROBOT["data_columns"]))
    hf = json.loads(L.data_schema().metadata[b"huggingface"])["info"]["features"]
    assert hf == LEROBOT["data_hf_features"]
    ep_types = {f.name: str(f.type) for f in L.episodes_schema()}
    for name, typ in LEROBOT["episodes_columns"]:
        if name.startswith(tuple(f"stats/{k}/" for k in L.OUTCOME_FEATURES)):
            assert ep_types[name] == typ, name
    # lerobot writes no stats for string features
    assert not any(c.startswith("stats/mecharm.") for c, _ in LEROBOT["episodes_columns"])
    assert not any(n.startswith("stats/mecharm.") for n in ep_types)


def test_outcome_values_and_stats_reproduce_lerobot() -> None:
    per_episode = []
    for ep, frames, stored in zip(
        LEROBOT["episodes"], LEROBOT["frames"], LEROBOT["episode_stats"], strict=True
    ):
        cols = outcome_columns(ep["length"], ep["success"])
        for key, values in cols.items():
            assert values.tolist() == frames[key], key  # the same per-frame values
            st = vector_stats(values)
            for stat, value in st.items():
                want = stored[f"stats/{key}/{stat}"]
                if key != "next.reward" and stat in ("min", "max"):
                    assert value.dtype == np.bool_ and value.tolist() == want, f"{key}/{stat}"
                else:
                    np.testing.assert_allclose(
                        value, want, rtol=1e-6, atol=1e-9, err_msg=f"{key}/{stat}"
                    )
        per_episode.append(L.stats_from_row(stored))
    agg = aggregate_stats(per_episode)
    for key, want in LEROBOT["stats"].items():
        for stat, value in agg[key].items():
            if key != "next.reward" and stat in ("min", "max"):
                assert value.tolist() == want[stat], f"{key}/{stat}"
            else:
                np.testing.assert_allclose(
                    value, want[stat], rtol=1e-6, atol=1e-9, err_msg=f"{key}/{stat}"
                )
    # stats.json stores bool min/max as JSON booleans, like lerobot's
    assert json.loads(json.dumps(L.stats_to_json(agg)))["next.done"]["min"] == [False]


# ------------------------------------------------------------------ a real export


def _mixed_root(recs: Any, data_root: Path) -> dict[str, tuple[str, str]]:
    """Four recorded trials: placed, pick failed, place failed, placed (verdicts by stem)."""
    verdicts = [("yes", "yes"), ("no", ""), ("yes", "no"), ("yes", "yes")]
    out = {}
    for i, (pick, place) in enumerate(verdicts):
        trial = recs.write(data_root, recs.stem(i), seed=i, duration=2.5 + 0.5 * i)
        recs.ledger(data_root, trial, pick=pick, place=place)
        out[recs.stem(i)] = (pick, place)
    return out


def _data(out: Path) -> dict[str, list[Any]]:
    return pq.read_table(out / "data/chunk-000/file-000.parquet").to_pydict()


def test_recorded_dataset_of_mixed_outcomes_is_filterable_without_sidecar(
    recs: Any, data_root: Path, tmp_path: Path
) -> None:
    verdicts = _mixed_root(recs, data_root)
    reward_type = str(L.data_schema().field("next.reward").type)
    recs.runlog(data_root, recs.stem(0), rig_id="bench-2", judge="vlm")
    recs.runlog(data_root, recs.stem(1))  # a run log from before rig ids: the fallback
    out = tmp_path / "ds"
    rep = export_lerobot(data_root, out, SETTINGS.model_copy(update={"select": "recorded"}))
    assert len(rep.exported) == 4
    assert verify_dataset(out).ok
    (out / L.MANIFEST_PATH).unlink()  # what a lerobot user has: data and meta/episodes only

    df = _data(out)
    assert (
        str(pq.read_schema(out / "data/chunk-000/file-000.parquet").field("next.reward").type)
        == reward_type
        == "float"
    )
    eps = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    placed = {s for s, (p, q) in verdicts.items() if p == q == "yes"}
    for ep in eps:
        sel = [i for i, e in enumerate(df["episode_index"]) if e == ep["episode_index"]]
        rows = {k: [v[i] for i in sel] for k, v in df.items()}
        stem = rows["mecharm.run_stem"][0]
        pick, place = verdicts[stem]
        won = stem in placed
        n = len(sel)
        assert rows["next.done"] == [False] * (n - 1) + [True]
        assert rows["next.success"] == [False] * (n - 1) + [won]
        assert rows["next.reward"] == [0.0] * (n - 1) + [1.0 if won else 0.0]
        # per-frame constants and meta/episodes columns say the same
        want = {
            "run_stem": stem,
            "rig_id": "bench-2" if stem == recs.stem(0) else "data",  # data root folder name
            "pick_verdict": pick,
            "place_verdict": place,
            "judge": {recs.stem(0): "vlm", recs.stem(1): "geometric"}.get(stem, ""),
            "recording_status": "ok",
        }
        for key, value in want.items():
            assert set(rows[f"mecharm.{key}"]) == {value}, key
            assert ep[f"mecharm/{key}"] == value, key
        assert ep[L.SUCCESS_COLUMN] is won
    # the user's filter: an episode succeeded iff any frame has next.success
    by_frames = {s for s, ok in zip(df["mecharm.run_stem"], df["next.success"], strict=True) if ok}
    by_meta = {e["mecharm/run_stem"] for e in eps if e[L.SUCCESS_COLUMN]}
    assert by_frames == by_meta == placed == {recs.stem(0), recs.stem(3)}
    stats = json.loads((out / L.STATS_PATH).read_text())
    assert stats["next.success"]["max"] == [True] and stats["next.done"]["min"] == [False]
    assert stats["next.done"]["count"] == [len(df["index"])]
    assert not any(k.startswith("mecharm") for k in stats)


def test_select_success_exports_only_placed_trials(
    recs: Any, data_root: Path, tmp_path: Path
) -> None:
    _mixed_root(recs, data_root)
    out = tmp_path / "ds"
    rep = export_lerobot(data_root, out, SETTINGS)  # default select: success
    assert [e.run_stem for e in rep.exported] == [recs.stem(0), recs.stem(3)]
    assert all(e.success for e in rep.exported)
    eps = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [e[L.SUCCESS_COLUMN] for e in eps] == [True, True]
    manifest = json.loads((out / L.MANIFEST_PATH).read_text())
    assert [(e["rig_id"], e["run_stem"], e["success"]) for e in manifest["episodes"]] == [
        ("data", recs.stem(0), True),
        ("data", recs.stem(3), True),
    ]
    # conditions still work: the pick-failed trial alone, added to the same dataset
    rep = export_lerobot(
        data_root,
        out,
        SETTINGS.model_copy(update={"select": "recording_status=ok,pick_verdict=no"}),
    )
    assert [(e.run_stem, e.success) for e in rep.exported] == [(recs.stem(1), False)]
    assert verify_dataset(out).ok


def test_unreadable_runlog_falls_back_to_the_rig_setting(
    recs: Any, data_root: Path, tmp_path: Path
) -> None:
    _mixed_root(recs, data_root)
    recs.runlog(data_root, recs.stem(0)).write_text("{ cut short")
    recs.runlog(data_root, recs.stem(3), rig_id="bad\nid")
    out = tmp_path / "ds"
    export_lerobot(data_root, out, SETTINGS.model_copy(update={"rig_id": "arm-7"}))
    eps = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [(e["mecharm/rig_id"], e["mecharm/judge"]) for e in eps] == [
        ("arm-7", ""),
        ("arm-7", "geometric"),
    ]


def _exported_manifest(
    recs: Any, data_root: Path, tmp_path: Path
) -> tuple[Path, Path, dict[str, Any]]:
    """The mixed root exported: the dataset, its manifest's path and the manifest as read."""
    _mixed_root(recs, data_root)
    out = tmp_path / "ds"
    export_lerobot(data_root, out, SETTINGS)
    manifest_path = out / L.MANIFEST_PATH
    return out, manifest_path, json.loads(manifest_path.read_text())


def test_dataset_of_manifest_format_1_is_refused_with_what_to_do(
    recs: Any, data_root: Path, tmp_path: Path
) -> None:
    out, manifest_path, manifest = _exported_manifest(recs, data_root, tmp_path)
    manifest["format"] = 1  # as the export before issue 15 wrote it
    for e in manifest["episodes"]:
        for k in ("rig_id", "pick_verdict", "place_verdict", "judge", "success"):
            del e[k]
    manifest_path.write_text(json.dumps(manifest))
    before = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    with pytest.raises(DatasetError, match="format 1") as err:
        export_lerobot(data_root, out, SETTINGS.model_copy(update={"select": "recorded"}))
    assert "new folder" in str(err.value) and "--out" in str(err.value)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == before


def test_cli_rig_id_flag_and_report(
    recs: Any, data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _mixed_root(recs, data_root)
    out = tmp_path / "ds"
    args = ["export", "lerobot", "--root", str(data_root), "--out", str(out), "--no-progress"]
    assert main([*args, "--select", "recorded", "--rig-id", "lab-arm"]) == 0
    text = capsys.readouterr().out
    assert f"exported {recs.stem(0)} as episode 0: " in text
    assert "rig lab-arm, success" in text and "rig lab-arm, no success" in text
    assert main([*args, "--rig-id", "bad\tid"]) == 2
    assert "rig_id" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("damage", "fault"),
    [
        (lambda m: {"format": 2}, "no 'fps'"),
        (lambda m: m.pop("files"), "no 'files'"),
        (lambda m: [e.pop("rig_id") for e in m["episodes"]], "episodes[0] has no str 'rig_id'"),
        (lambda m: m["episodes"][1].update(run_stem=7), "episodes[1] has no str 'run_stem'"),
        (lambda m: m.update(episodes={}), "'episodes' is {}, not list"),
        (lambda m: m["video"].pop("width"), "'video' has no integer 'width'"),
        (lambda m: m.update(files=[1]), "'files' holds something other than text"),
    ],
)
def test_damaged_manifest_is_a_clear_error_not_a_key_error(
    recs: Any, data_root: Path, tmp_path: Path, damage: Any, fault: str
) -> None:
    out, manifest_path, manifest = _exported_manifest(recs, data_root, tmp_path)
    changed = damage(manifest)
    manifest_path.write_text(json.dumps(changed if isinstance(changed, dict) else manifest))
    before = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    with pytest.raises(DatasetError) as err:
        export_lerobot(data_root, out, SETTINGS.model_copy(update={"select": "recorded"}))
    msg = str(err.value)
    assert msg.startswith(f"{manifest_path} is damaged: {fault}"), msg
    assert "mecharm export verify" in msg and "new folder" in msg
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == before


@pytest.mark.parametrize("bad", ["two words", "rig/7", "é-arm", "x" * 65])
def test_rig_id_flag_follows_the_runtime_rule(
    recs: Any, data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: str
) -> None:
    """One rule for rig ids (mecharm.common.rigid): what the runtime refuses, the export too."""
    from mecharm.runtime.config import RuntimeSettings

    with pytest.raises(ValueError, match="rig_id"):
        RuntimeSettings(rig_id=bad)
    _mixed_root(recs, data_root)
    args = ["export", "lerobot", "--root", str(data_root), "--out", str(tmp_path / "ds")]
    assert main([*args, "--no-progress", "--rig-id", bad]) == 2
    err = capsys.readouterr().err
    assert "rig_id" in err and "letters, digits, '.', '_' or '-'" in err
    assert "Traceback" not in err
    assert not (tmp_path / "ds").exists()


def test_run_log_rig_id_outside_the_rule_falls_back(
    recs: Any, data_root: Path, tmp_path: Path
) -> None:
    _mixed_root(recs, data_root)
    recs.runlog(data_root, recs.stem(0), rig_id="bench 2")  # printable, but not a rig id
    out = tmp_path / "ds"
    export_lerobot(data_root, out, SETTINGS.model_copy(update={"rig_id": "arm-7"}))
    eps = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert eps[0]["mecharm/rig_id"] == "arm-7"


def test_each_episode_states_the_time_scale_it_was_recorded_at(
    recs: Any, data_root: Path, tmp_path: Path
) -> None:
    """A trial of the simulated rig at 5x real time has the arm's path, not its timing: it is
    refused unless asked for; asked for, the manifest's episode says at what pace it was
    recorded and the export warns (a trial whose run log predates the key: unknown, None)."""
    _mixed_root(recs, data_root)
    recs.runlog(data_root, recs.stem(0), judge="vlm", time_scale=5.0)
    recs.runlog(data_root, recs.stem(1), time_scale=1.0)
    recs.runlog(data_root, recs.stem(2))  # flat constants, no time scale
    out = tmp_path / "ds"
    # by default the 5x trial is refused, naming why and the flag; the others go out
    rep = export_lerobot(
        data_root, tmp_path / "plain", SETTINGS.model_copy(update={"select": "recorded"})
    )
    assert [(r.run_stem, r.reason) for r in rep.refused if "real time" in r.reason] == [
        (recs.stem(0), "recorded at 5x real time (the simulated rig's time scale): its rows have "
                       "the arm's path, not its timing; pass --allow-time-scaled to export it anyway")
    ]  # fmt: skip
    assert recs.stem(0) not in {e.run_stem for e in rep.exported} and len(rep.exported) == 3
    with capture_logs() as logs:
        export_lerobot(
            data_root,
            out,
            SETTINGS.model_copy(update={"select": "recorded", "allow_time_scaled": True}),
        )
    manifest = json.loads((out / L.MANIFEST_PATH).read_text())
    scales = {e["run_stem"]: e["time_scale"] for e in manifest["episodes"]}
    assert scales[recs.stem(0)] == 5.0 and scales[recs.stem(1)] == 1.0
    assert scales[recs.stem(2)] is None
    # each episode says its gripper state is the command after the settle time, not a reading
    assert {(e["gripper_state"], e["gripper_settle_s"]) for e in manifest["episodes"]} == {
        ("command", SETTINGS.gripper_settle_s)
    }
    judges = {e["run_stem"]: e["judge"] for e in manifest["episodes"]}
    assert judges[recs.stem(0)] == "vlm"  # read from the nested constants
    warned = [e for e in logs if e["event"] == "export_time_scaled"]
    assert [e["run_stem"] for e in warned] == [recs.stem(0)] and "5x real time" in warned[0][
        "reason"
    ]
    assert verify_dataset(out).ok
