"""Ledger: append-only rows, bounded recording wait, archive-and-pad migration, verify."""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import get_args

import pytest

from mecharm.common.dirlock import dir_held, hold_dir
from mecharm.common.layout import LEDGER, LEDGER_ARCHIVE, DataRoot, RecordingFiles
from mecharm.recorder import events
from mecharm.recorder.events import RecordingMeta
from mecharm.runtime.pick_place.records import RECORDS
from mecharm.runtime.records import ledger
from mecharm.runtime.records.ledger import (
    LedgerError,
    append_row,
    migrate_ledger,
    verify_ledger,
    wait_recording_meta,
)
from mecharm.tools.cli import main as mecharm_main

LEDGER_COLUMNS = RECORDS.ledger_columns


def _row(i: int, **kw: object) -> dict[str, object]:
    row: dict[str, object] = {
        "run_stem": f"run_{i:04d}_20260101_1200{i % 60:02d}",
        "started_at": "2026-01-01T12:00:00",
        "ended_at": "2026-01-01T12:01:00",
        "duration_s": 60.0 + i,
        "status": "completed",
        "reason": "",
        "dry_run": False,
        "scene_seed": i,
        "pick_verdict": "yes",
        "pick_confidence": 0.9,
        "place_verdict": "yes",
        "place_confidence": 0.95,
        "pick_attempts": 1,
        "block_x": 0.2,
        "block_z": 0.26,
        "box_x": -0.2,
        "box_z": 0.18,
        "recording_path": str(DataRoot.recording_rel(f"run_{i:04d}")),
        "recording_fps": 27.2,
        "recording_frames": 2443,
        "recording_status": "ok",
    }
    row.update(kw)
    return row


def test_append_creates_header_and_never_rewrites(tmp_path: Path) -> None:
    path = DataRoot(tmp_path).ledger
    append_row(path, _row(1))
    first = path.read_bytes()
    append_row(
        path,
        _row(2, status="stopped", reason="daemon connection lost:\nreset", recording_status="none"),
    )
    data = path.read_bytes()
    assert data.startswith(first)  # earlier bytes untouched
    rows = list(csv.DictReader(data.decode().splitlines()))
    assert [r["run_stem"] for r in rows] == [_row(1)["run_stem"], _row(2)["run_stem"]]
    assert rows[1]["reason"] == "daemon connection lost: reset"  # one record one line
    assert rows[0]["dry_run"] == "0"
    assert list(rows[0]) == list(LEDGER_COLUMNS)
    assert verify_ledger(path).ok


def test_append_refuses_unknown_column_and_foreign_header(tmp_path: Path) -> None:
    path = tmp_path / "l.csv"
    with pytest.raises(LedgerError, match="unknown columns"):
        append_row(path, {**_row(1), "bogus": 1})
    path.write_text("a,b\n1,2\n")
    with pytest.raises(LedgerError, match="header differs"):
        append_row(path, _row(1))
    old = ",".join(LEDGER_COLUMNS[:17]) + "\n"
    path.write_text(old)
    with pytest.raises(LedgerError, match="migrate"):
        append_row(path, _row(1))
    assert path.read_text() == old


def test_append_after_partial_line_starts_new_line(tmp_path: Path) -> None:
    path = tmp_path / "l.csv"
    append_row(path, _row(1))
    with open(path, "ab") as fh:
        fh.write(b"run_0099_2026")  # a crash mid-append
    append_row(path, _row(2))
    lines = path.read_text().splitlines()
    assert lines[-1].startswith(str(_row(2)["run_stem"]))
    rep = verify_ledger(path)
    assert not rep.ok and any("cells" in e for e in rep.errors)  # the torn line is reported


def _old_ledger(path: Path, n: int) -> bytes:
    cols = list(LEDGER_COLUMNS[:17])
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(cols)
        for i in range(n):
            r = _row(i, reason='said "no", twice' if i == 3 else "")
            w.writerow([r[c] if c != "dry_run" else "0" for c in cols])
    return path.read_bytes()


def test_migrate_pads_old_rows_byte_identical(tmp_path: Path) -> None:
    path = DataRoot(tmp_path).ledger
    path.parent.mkdir()
    old = _old_ledger(path, 393)
    rep = migrate_ledger(path, now=lambda: 1_700_000_000.0)
    assert rep.rows == 393 and rep.added_columns == list(LEDGER_COLUMNS[17:])
    assert rep.archive is not None and rep.archive.read_bytes() == old
    new_lines = path.read_bytes().split(b"\n")
    old_lines = old.split(b"\n")
    assert new_lines[0].decode() == ",".join(LEDGER_COLUMNS)
    for o, n in zip(old_lines[1:-1], new_lines[1:-1], strict=True):
        assert n == o + b",,,,"
    assert verify_ledger(path).ok
    append_row(path, _row(500))  # the migrated ledger takes new rows
    assert verify_ledger(path).rows == 394
    # idempotent
    assert migrate_ledger(path).added_columns == []


def test_migrate_refuses_and_leaves_file_untouched(tmp_path: Path) -> None:
    path = tmp_path / "l.csv"
    path.write_text("x,y\n1,2\n")
    with pytest.raises(LedgerError, match="not a prefix"):
        migrate_ledger(path)
    old = _old_ledger(path, 5)
    path.write_bytes(old + b"run_0009,partial")
    with pytest.raises(LedgerError, match="partial line"):
        migrate_ledger(path)
    path.write_bytes(old.replace(b"said", b"sa\nid", 1))
    with pytest.raises(LedgerError, match=r"spans lines|cells"):
        migrate_ledger(path)
    assert not (tmp_path / LEDGER_ARCHIVE).exists() or not any(
        (tmp_path / LEDGER_ARCHIVE).iterdir()
    )


def test_verify_reports_each_problem(tmp_path: Path) -> None:
    path = tmp_path / "l.csv"
    append_row(path, _row(1))
    with open(path, "ab") as fh:  # a duplicate stem, as a hand edit or a copy-paste leaves it
        fh.write(path.read_bytes().splitlines(keepends=True)[1])
    append_row(
        path,
        _row(2, status="weird", pick_verdict="maybe", recording_status="great", duration_s="abc"),
    )
    append_row(path, _row(3, status="stopped", reason=""))
    append_row(path, _row(4, run_stem="run_x", pick_attempts="1.5"))
    errors = "\n".join(verify_ledger(path).errors)
    for needle in (
        "repeats line",
        "status 'weird'",
        "pick_verdict 'maybe'",
        "recording_status 'great'",
        "duration_s 'abc'",
        "stopped without a reason",
        "run_stem 'run_x'",
        "pick_attempts '1.5'",
    ):
        assert needle in errors


def test_cli_verify_and_migrate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / LEDGER
    _old_ledger(path, 5)
    assert mecharm_main(["ledger", "verify", str(path)]) == 1
    assert "migrate" in capsys.readouterr().err
    assert mecharm_main(["ledger", "migrate", str(path)]) == 0
    assert "added recording_path" in capsys.readouterr().out
    assert mecharm_main(["ledger", "verify", str(path)]) == 0
    assert mecharm_main(["ledger", "verify", str(tmp_path / "missing.csv")]) == 1


class _FakeTime:
    """A clock that moves only when the wait sleeps, so the poll schedule is exact."""

    def __init__(self, on_sleep: Callable[[float], None] = lambda now: None) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []
        self._on_sleep = on_sleep

    def clock(self) -> float:
        return self.now

    async def sleep(self, dt: float) -> None:
        self.sleeps.append(dt)
        self.now += dt
        self._on_sleep(self.now)


def _meta(stem: str = "run_0001_20260101_120000", **kw: object) -> dict[str, object]:
    """A complete meta file as the recorder writes it."""
    meta = RecordingMeta(
        run_stem=stem,
        started_ts=100.0,
        ended_ts=103.6,
        elapsed_sec=3.6,
        frames_captured=99,
        frames_written=99,
        effective_fps=27.2,
        container_fps=30.0,
        width=640,
        height=480,
        codec="h264",
        status="ok",
        recording_path=str(DataRoot.recording_rel(stem)),
    ).model_dump(mode="json")
    meta.update(kw)
    return meta


@pytest.mark.anyio
async def test_recording_wait_finds_meta_written_late(tmp_path: Path) -> None:
    stem = "run_0001_20260101_120000"
    rec = DataRoot(tmp_path).recording(stem)
    rec.dir.mkdir(parents=True)

    def write_at_250_ms(now: float) -> None:
        if now >= 100.25 and not rec.meta.exists():
            rec.meta.write_text(json.dumps(_meta(stem, status="truncated")))

    t = _FakeTime(write_at_250_ms)
    info = await wait_recording_meta(
        rec.dir, tmp_path, timeout_s=2.0, poll_s=0.1, clock=t.clock, sleep=t.sleep
    )
    assert (info.status, info.fps, info.frames, info.note) == ("truncated", 27.2, 99, "")
    assert info.path == str(DataRoot.recording_rel(stem))
    # found by the first poll after it appeared (at 0.3 s), not at the deadline
    assert t.sleeps == pytest.approx([0.1, 0.1, 0.1])
    assert info.waited_s == pytest.approx(0.3)


@pytest.mark.anyio
async def test_recording_wait_is_bounded_and_never_oversleeps(tmp_path: Path) -> None:
    t = _FakeTime()
    info = await wait_recording_meta(tmp_path / "nothing", tmp_path, timeout_s=0.35, poll_s=0.1,
                                     clock=t.clock, sleep=t.sleep)  # fmt: skip
    assert info.status == "none" and info.path == ""
    # three whole polls, then the last sleep is cut at the deadline, not a whole poll
    assert t.sleeps == pytest.approx([0.1, 0.1, 0.1, 0.05])
    assert info.waited_s == pytest.approx(0.35)


@pytest.mark.anyio
async def test_recording_wait_really_sleeps_by_default(tmp_path: Path) -> None:
    t0 = time.monotonic()
    info = await wait_recording_meta(tmp_path / "nothing", tmp_path, timeout_s=0.2, poll_s=0.1)
    assert info.status == "none" and time.monotonic() - t0 >= 0.2  # a lower bound only


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{not json", "not a valid recording meta"),
        ("[1, 2]", "not a valid recording meta"),
        (json.dumps(_meta(status="exploded")), "status"),
        (
            json.dumps(_meta(status="none")),
            "status",
        ),  # none is the runtime's word, never the recorder's
        (json.dumps({k: v for k, v in _meta().items() if k != "frames_written"}), "frames_written"),
        (json.dumps(_meta(effective_fps="fast")), "effective_fps"),
    ],
    ids=["not-json", "not-object", "unknown-status", "status-none", "missing-field", "bad-number"],
)
async def test_recording_wait_bad_meta_is_status_none_with_the_reason(
    tmp_path: Path, content: str, says: str
) -> None:
    rec = RecordingFiles(tmp_path)
    rec.meta.write_text(content)
    reads: list[float] = []

    def clock() -> float:  # counts the clock reads: a second poll would read it again
        reads.append(float(len(reads)))
        return reads[-1]

    info = await wait_recording_meta(rec.dir, tmp_path, timeout_s=5.0, clock=clock)
    assert info.status == "none" and info.path == "" and info.fps is None
    assert rec.meta.name in info.note and says in info.note, info.note
    assert len(reads) == 2  # a bad file is final: not polled again until the deadline


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("left", "holder", "status", "says"),
    [
        ((), False, "none", "no recording folder: the recorder was absent"),
        ("dir", False, "none", "an empty recording folder"),
        (("frame_log",), False, "crashed", "nobody holds the folder: the recorder died"),
        (("video", "frame_log"), False, "crashed", "{video} and {frame_log} left"),
        (("video", "frame_log"), True, "crashed", "the recorder still holds the folder"),
    ],
    ids=["absent", "empty-folder", "died-before-frames", "died", "late"],
)
async def test_recording_wait_links_a_recording_left_without_meta(
    tmp_path: Path, left: object, holder: bool, status: str, says: str
) -> None:
    """The recorder died (or is late): the row links the recording, status crashed
    (docs/recorder.md, "Crashed recordings"); no recording at all stays none."""
    stem = "run_0001_20260101_120000"
    rec = DataRoot(tmp_path).recording(stem)
    if left:
        rec.dir.mkdir(parents=True)
    for name in left if isinstance(left, tuple) else ():
        getattr(rec, name).write_bytes(b"x")
    t = _FakeTime()

    async def wait() -> ledger.RecordingInfo:
        return await wait_recording_meta(
            rec.dir, tmp_path, timeout_s=0.25, poll_s=0.1, clock=t.clock, sleep=t.sleep
        )

    if holder:
        with hold_dir(rec.dir):  # a live recorder holds its trial's folder until the meta
            info = await wait()
    else:
        info = await wait()
    assert info.status == status and info.waited_s == pytest.approx(0.25)
    says = says.format(video=rec.video.name, frame_log=rec.frame_log.name)
    assert says in info.note, info.note
    if status == "crashed":
        assert info.path == str(DataRoot.recording_rel(stem)) and info.frames is None
        assert f"recording repair {stem}" in info.note
        assert not holder or dir_held(rec.dir) is False  # the probe took nothing away
    else:
        assert info.path == ""


def test_recording_statuses_are_the_recorders() -> None:
    assert ledger.RECORDING_STATUSES is events.RECORDING_STATUSES
    assert set(events.RECORDING_STATUSES) == {*get_args(events.RecordingStatus), "none"}


def test_verify_flags_a_recording_status_outside_the_recorders(tmp_path: Path) -> None:
    path = DataRoot(tmp_path).ledger
    append_row(path, _row(1, recording_status="ok"))
    append_row(path, _row(2, recording_status="exploded"))
    rep = verify_ledger(path)
    assert [e for e in rep.errors if "recording_status" in e] and all(
        "line 2" not in e for e in rep.errors
    )


# ---------------------------------------------------------------- start-up checks


def _ledger_with(path: Path, header: list[str], n: int = 2) -> bytes:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        for i in range(n):
            r = _row(i)
            w.writerow([r.get(c, "x") for c in header])
    return path.read_bytes()


def test_ready_accepts_a_missing_an_empty_and_a_good_ledger(tmp_path: Path) -> None:
    path = DataRoot(tmp_path).ledger
    ledger.check_ledger_ready(path)  # missing: the first row creates it
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    ledger.check_ledger_ready(path)
    append_row(path, _row(1))
    append_row(path, _row(2))
    ledger.check_ledger_ready(path)


@pytest.mark.parametrize(
    ("header", "needles"),
    [
        (list(LEDGER_COLUMNS[:17]), ["older 17-column header", "missing recording_path",
                                     "mecharm ledger migrate"]),
        ([*LEDGER_COLUMNS[:5], "notes", *LEDGER_COLUMNS[5:]], ["extra 'notes'", "Move it aside"]),
        ([c for c in LEDGER_COLUMNS if c != "scene_seed"], ["missing scene_seed", "Move it aside"]),
        (["run_stem", "started_at", "status"] + ["x"] * 3, ["missing ended_at", "extra 'x'",
                                                           "repeated x"]),
        ([LEDGER_COLUMNS[1], LEDGER_COLUMNS[0], *LEDGER_COLUMNS[2:]], ["another order",
                                                                      "column 1 is 'started_at'"]),
        ([c.upper() for c in LEDGER_COLUMNS], ["missing run_stem", "extra 'RUN_STEM'"]),
    ],
    ids=["older-generation", "extra-column", "missing-column", "foreign", "reordered", "renamed"],
)  # fmt: skip
def test_ready_refuses_an_edited_header_naming_the_columns(
    tmp_path: Path, header: list[str], needles: list[str]
) -> None:
    path = tmp_path / LEDGER
    before = _ledger_with(path, header)
    with pytest.raises(LedgerError) as err:
        ledger.check_ledger_ready(path)
    for needle in needles:
        assert needle in str(err.value), str(err.value)
    assert str(path) in str(err.value)
    with pytest.raises(LedgerError):  # and no trial row is ever appended under it
        append_row(path, _row(9))
    assert path.read_bytes() == before


def test_ready_refuses_duplicate_run_stems_naming_them(tmp_path: Path) -> None:
    path = tmp_path / LEDGER
    for i in (1, 2, 3):
        append_row(path, _row(i))
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([*lines, lines[1], lines[3]]))  # stems 1 and 3 twice
    with pytest.raises(LedgerError) as err:
        ledger.check_ledger_ready(path)
    msg = str(err.value)
    assert (
        f"{_row(1)['run_stem']} (lines 2, 5)" in msg
        and f"{_row(3)['run_stem']} (lines 4, 6)" in msg
    )
    assert f"mecharm ledger verify {path}" in msg
    assert str(_row(2)["run_stem"]) not in msg


def test_append_refuses_a_run_stem_already_present(tmp_path: Path) -> None:
    path = tmp_path / LEDGER
    append_row(path, _row(1))
    before = path.read_bytes()
    with pytest.raises(
        LedgerError, match=rf"run stem {_row(1)['run_stem']} is already in .* \(line 2\)"
    ):
        append_row(path, _row(1, status="stopped", reason="again"))
    assert path.read_bytes() == before


def test_ready_refuses_unreadable_and_non_utf8_ledgers(tmp_path: Path) -> None:
    path = tmp_path / LEDGER
    path.mkdir()
    with pytest.raises(LedgerError, match="is a directory"):
        ledger.check_ledger_ready(path)
    path.rmdir()
    append_row(path, _row(1))
    path.write_bytes(path.read_bytes() + b"run_0002_\xff\xfe,broken\n")
    with pytest.raises(LedgerError, match=r"not UTF-8 \(byte \d+, line 3\).*move it aside"):
        ledger.check_ledger_ready(path)


def test_row_check_after_a_trial(tmp_path: Path) -> None:
    path = tmp_path / LEDGER
    append_row(path, _row(1))
    ledger.check_ledger_row(path, str(_row(1)["run_stem"]))
    with pytest.raises(LedgerError, match=rf"{_row(2)['run_stem']} is not in .*ledger_error"):
        ledger.check_ledger_row(path, str(_row(2)["run_stem"]))
    with pytest.raises(LedgerError, match="is not in"):
        ledger.check_ledger_row(tmp_path / "missing.csv", str(_row(1)["run_stem"]))
