"""`mecharm export lerobot|verify` through the real dispatcher: output, exit codes, flags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mecharm.common.layout import META, VIDEO
from mecharm.tools.cli import main


def test_cli_export_then_verify(
    recs: Any, data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recs.ledger(data_root, recs.write(data_root, recs.stem(1), seed=1, duration=2.5))
    recs.ledger(
        data_root, recs.write(data_root, recs.stem(2), seed=2, duration=2.5, write_meta=False)
    )
    recs.ledger(data_root, recs.stem(3), pick="no", rec_status="none")
    out = tmp_path / "ds"
    args = [
        "export",
        "lerobot",
        "--root",
        str(data_root),
        "--out",
        str(out),
        "--no-progress",
        "--task",
        "stack it",
    ]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert f"exported {recs.stem(1)} as episode 0" in text
    assert f"REFUSED {recs.stem(2)}: {META} is missing" in text
    assert f"skipped {recs.stem(3)}: not selected: recording_status is none (want ok)" in text
    assert "exported 1 episode(s), kept 0, skipped 1, refused 1" in text
    assert main(["export", "verify", str(out), "--no-progress"]) == 0
    assert "ok, 1 episodes" in capsys.readouterr().out
    assert main(args) == 0
    assert f"kept    {recs.stem(1)}: already exported as episode 0" in capsys.readouterr().out


def test_cli_bad_inputs_exit_2(
    recs: Any, data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recs.ledger(data_root, recs.write(data_root, recs.stem(1), seed=1, duration=2.5))
    base = [
        "export",
        "lerobot",
        "--root",
        str(data_root),
        "--out",
        str(tmp_path / "ds"),
        "--no-progress",
    ]
    assert main([*base, "--select", "verdict=yes"]) == 2
    assert "unknown ledger column 'verdict'" in capsys.readouterr().err
    assert main([*base, "--fps", "0"]) == 2
    assert "fps" in capsys.readouterr().err
    for width in ("-1", "100000"):  # the side video's width: 0 (as recorded) up to 7680
        assert main([*base, "--side-width", width]) == 2
        err = capsys.readouterr().err
        assert "side_width" in err and "Traceback" not in err, err
    assert (
        main(
            [
                "export",
                "lerobot",
                "--root",
                str(tmp_path / "nowhere"),
                "--out",
                str(tmp_path / "ds"),
                "--no-progress",
            ]
        )
        == 2
    )
    assert "cannot read the ledger" in capsys.readouterr().err
    cfg = tmp_path / "export.yaml"
    cfg.write_text("fps: 10\ngripper_settle: 2\n")
    assert main([*base, "--config", str(cfg)]) == 2
    assert "gripper_settle: unknown key" in capsys.readouterr().err


def test_cli_select_and_run_filters(
    recs: Any, data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for i, place in ((1, "yes"), (2, "no"), (3, "yes")):
        recs.ledger(
            data_root, recs.write(data_root, recs.stem(i), seed=i, duration=2.0), place=place
        )
    out = tmp_path / "ds"
    argv = ["export", "lerobot", "--root", str(data_root), "--out", str(out), "--no-progress", "--dry-run",
            "--select", "recording_status=ok,place_verdict=no|yes", "--run", recs.stem(2), "--run", recs.stem(3)]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert (
        f"would export {recs.stem(2)} as episode 0" in text
        and f"would export {recs.stem(3)} as episode 1" in text
    )
    assert f"skipped {recs.stem(1)}: not requested (--run)" in text
    assert not out.exists()


def test_cli_verify_reports_problems(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta/info.json").write_text("{}")
    assert main(["export", "verify", str(tmp_path), "--no-progress"]) == 1
    assert "problem(s)" in capsys.readouterr().out


def test_shipped_config_is_valid_and_flags_win(monkeypatch: pytest.MonkeyPatch) -> None:
    from mecharm.common.config import load_settings
    from mecharm.tools.export.config import ExportSettings

    cfg = Path(__file__).resolve().parents[2] / "configs" / "export.yaml"
    s = load_settings(ExportSettings, cfg)
    assert s.fps == 10 and s.select == "success" and s.gop == 2
    monkeypatch.setenv("MECHARM_EXPORT_FPS", "15")
    assert load_settings(ExportSettings, cfg).fps == 15
    assert load_settings(ExportSettings, cfg, {"fps": 5}).fps == 5


def test_cli_include_crashed(
    recs: Any, data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A recording whose recorder died: repaired with `mecharm recording repair`, exported
    only with --include-crashed, and said so in the output (docs/lerobot.md)."""
    t = recs.write(data_root, recs.stem(1), seed=1, duration=3.0, write_meta=False)
    video = t.path / VIDEO
    video.write_bytes(video.read_bytes()[: video.stat().st_size * 2 // 3])  # the kill's cut
    recs.ledger(data_root, t, rec_status="crashed")
    assert main(["recording", "repair", "--root", str(data_root), recs.stem(1)]) == 0
    assert "status crashed" in capsys.readouterr().out
    base = ["export", "lerobot", "--root", str(data_root), "--out", str(tmp_path / "ds")]
    assert main([*base, "--no-progress", "--dry-run"]) == 0
    assert "recording_status is crashed (want ok)" in capsys.readouterr().out
    assert main([*base, "--no-progress", "--include-crashed"]) == 0
    text = capsys.readouterr().out
    assert f"exported {recs.stem(1)} as episode 0" in text and "[crashed recording, " in text


def test_cli_unknown_run_is_an_error_not_an_empty_dataset(
    recs: Any, data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recs.ledger(data_root, recs.write(data_root, recs.stem(1), seed=1, duration=2.0))
    out = tmp_path / "ds"
    argv = ["export", "lerobot", "--root", str(data_root), "--out", str(out), "--no-progress",
            "--run", recs.stem(1), "--run", "run_0099_20990101_000000"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--run run_0099_20990101_000000: no such trial" in err and "Traceback" not in err
    assert not out.exists()


def test_cli_disk_full_is_one_line_and_the_dataset_keeps_its_state(
    recs: Any, data_root: Path, tmpfs: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dataset on a disk that fills mid-export: exit 3, one line naming the error, and the
    dataset as the last export left it (verify clean); freed, the same command completes."""
    for i in (1, 2):
        recs.ledger(data_root, recs.write(data_root, recs.stem(i), seed=i, duration=2.0))
    fs = tmpfs("out", size_kib=4 * 1024)
    out = fs.path / "ds"
    base = ["export", "lerobot", "--root", str(data_root), "--out", str(out), "--no-progress"]
    assert main([*base, "--run", recs.stem(1)]) == 0
    capsys.readouterr()
    filler = fs.fill(leave_bytes=16 * 1024)
    assert main(base) == 3
    cap = capsys.readouterr()
    last = cap.err.strip().splitlines()[-1]  # the log lines above it are the export's JSON log
    assert last.startswith("error: export stopped, ") and "No space left on device" in last, last
    assert "Traceback" not in cap.err
    assert main(["export", "verify", str(out), "--no-progress"]) == 0
    assert "ok, 1 episodes" in capsys.readouterr().out
    filler.unlink()
    assert main(base) == 0
    assert f"exported {recs.stem(2)} as episode 1" in capsys.readouterr().out
