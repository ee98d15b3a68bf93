"""The data-root layout has one home: mecharm/common/layout.py (docs/data-root.md).

The runtime, the recorder and the tools meet only through these files, so a name
spelled a second time is a second contract that can drift. The grep reads every
string in the code (``ast``: string constants and f-string parts, docstrings
excepted — they describe, they do not build paths) of the packages, tests and
benches, and fails naming file, line and name. The pinned layout test below is
the one place outside layout.py that spells the names: it says what the docs say.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from mecharm.common import layout
from mecharm.common.layout import DataRoot, FkTableFiles, format_run_stem, run_number

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("mecharm.common", "mecharm.cameras", "mecharm.sim", "mecharm.daemon", "recorder", "mecharm.runtime",
           "mecharm.tools", "bench", "tests")  # fmt: skip
HOME = ROOT / "mecharm.common" / "layout.py"
#: The replay tools and their tests are being rewritten elsewhere; they switch over when that lands.
#: the replay tests name corpus files (data, not the data-root layout) and test FK tables by file name
PENDING: tuple[Path, ...] = (ROOT / "tests" / "replay",)

#: The names of the layout. Generic words ("runs", "recording", "memories", "fk") are
#: also dictionary keys elsewhere, so they are caught through their longer neighbours.
FORBIDDEN = re.compile(
    r"run_pick_place|pick_place_ledger|ledger_archive|recording_meta\.json|states\.csv|frame_log\.(before_repair\.)?csv"
    r"|episode\.mp4"
    r"|correction_memory|height_memory|fk_table\.(csv|sha256|lock)|\.trace\.jsonl|recorder_orphan_frames"
    r"|^extracted$|run_\(?\\d\{4"
)


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
        ):
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def offenders(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    docs = _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            m = FORBIDDEN.search(node.value)
            if m:
                out.append(
                    f"{path.relative_to(ROOT)}:{node.lineno}: {m.group(0)!r} in {node.value[:60]!r}"
                )
    return out


@pytest.mark.slow
def test_layout_names_are_spelled_only_in_layout_py() -> None:
    files = [p for pkg in SCANNED for p in sorted((ROOT / pkg).rglob("*.py"))]
    assert len(files) > 100
    found = [
        o
        for p in files
        if p not in (HOME, Path(__file__).resolve()) and not any(d in p.parents for d in PENDING)
        for o in offenders(p)
    ]
    assert not found, "use mecharm.common.layout instead of spelling the path:\n" + "\n".join(found)


def test_the_grep_sees_a_spelled_name(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        '"""states.csv in a docstring is fine."""\nPATH = f"{root}/runs/run_pick_place/{stem}"\n'
    )
    rel = Path(*bad.parts[1:])
    bad_in_root = ROOT / "tests" / "common" / ".tmp_grep_probe.py"
    try:
        bad_in_root.write_text(bad.read_text())
        found = offenders(bad_in_root)
    finally:
        bad_in_root.unlink(missing_ok=True)
    assert len(found) == 1 and ":2: 'run_pick_place'" in found[0], (rel, found)


def test_the_layout_is_the_documented_one(tmp_path: Path) -> None:
    """Pinned: changing a name here breaks every data root already on disk (docs/data-root.md)."""
    d = DataRoot(tmp_path)
    stem = "run_0007_20260101_120000"
    rec = d.recording(stem)
    assert d.ledger == tmp_path / "runs/pick_place_ledger.csv"
    assert d.ledger_archive == tmp_path / "runs/ledger_archive"
    assert d.run_dir(stem) == tmp_path / "runs/run_pick_place" / stem
    assert d.trace(stem) == tmp_path / "runs/run_pick_place" / stem / f"{stem}.trace.jsonl"
    assert d.runlog(stem) == tmp_path / "runs/run_pick_place" / stem / f"{stem}.json"
    assert str(DataRoot.recording_rel(stem)) == f"runs/run_pick_place/{stem}/recording"
    assert rec.dir == tmp_path / DataRoot.recording_rel(stem)
    assert rec.frame_log_before_repair.name == "frame_log.before_repair.csv"
    assert [p.name for p in (rec.video, rec.frame_log, rec.states, rec.meta, rec.snapshots)] == [
        "episode.mp4",
        "frame_log.csv",
        "states.csv",
        "recording_meta.json",
        "extracted",
    ]
    assert d.correction_memory == tmp_path / "memories/correction_memory.json"
    assert d.height_memory == tmp_path / "memories/height_memory.json"
    assert d.fk_table == tmp_path / "fk/fk_table.csv"
    assert d.orphan_frames == tmp_path / "diag/recorder_orphan_frames"
    fk = FkTableFiles(d.fk_table)
    assert (fk.record.name, fk.cache("ab" * 32).name, fk.archive_dir, fk.lock.name) == (
        "fk_table.sha256",
        f".fk_table.csv.{'ab' * 8}.npz",
        tmp_path / "fk/archive",
        ".fk_table.lock",
    )


def test_every_name_is_in_the_docs() -> None:
    doc = (ROOT / "docs" / "data-root.md").read_text(encoding="utf-8")
    names = [v for k, v in vars(layout).items() if k.isupper() and isinstance(v, str)]
    names += layout.ORPHAN_FRAMES
    missing = [n for n in names if n not in doc]
    assert not missing, f"docs/data-root.md does not mention {missing}"


def test_run_stems(tmp_path: Path) -> None:
    d = DataRoot(tmp_path)
    now = 1_780_000_000.0
    assert d.next_run_stem(now) == format_run_stem(1, now)
    assert layout.RUN_STEM_RE.fullmatch(format_run_stem(1, now))
    for name in ("run_0009_20260101_120000", "run_12345_20260101_120000", "run_0100_bad", "other"):
        (d.run_folders / name).mkdir(parents=True)
    assert d.next_run_stem(now).startswith("run_12346_")
    assert run_number("run_0009_20260101_120000") == 9 and run_number("run_0100_bad") is None


@pytest.mark.parametrize("stem", ["../escape", "a/b", "", ".hidden/.."])
def test_a_stem_from_outside_cannot_leave_the_root(tmp_path: Path, stem: str) -> None:
    with pytest.raises(ValueError):
        DataRoot(tmp_path).recording(stem)
    with pytest.raises(ValueError):
        DataRoot(tmp_path).run_dir(stem)
