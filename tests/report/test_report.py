"""`mecharm report ROOT`: the page's numbers come from the ledger and the trials' files, its
links are relative and lead to files that exist (or say they are absent), it loads nothing
from anywhere, and bad input gives one line and an exit code (docs/report.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from mecharm.common.layout import DataRoot
from mecharm.tools.cli import main as mecharm
from mecharm.tools.export.config import ExportSettings
from mecharm.tools.export.lerobot import export_lerobot
from mecharm.tools.export.selection import read_ledger
from mecharm.tools.report.cli import run
from mecharm.tools.report.stats import quantile, reason_group
from mecharm.tools.report.svg import nice_ticks

from .conftest import Page

REPO = Path(__file__).resolve().parents[2]


def _page(root: Path, out: Path | None = None) -> Page:
    assert run(root, out) == 0
    return Page((out or DataRoot(root).report).read_text(encoding="utf-8"))


def test_numbers_match_the_ledger(data_root: tuple[Path, list[str]]) -> None:
    root, stems = data_root
    page = _page(root)
    text = page.plain
    assert "4 trial(s)" in text
    assert "50% SUCCESS" in text.upper()
    for label, value in (("completed", "3 / 4"), ("pick yes", "4 / 4"), ("place yes", "2 / 4")):
        assert f"{value} {label}".upper() in text.upper(), label
    assert page.rows == stems  # one row per ledger trial, in ledger order
    by_seed = page.table_with("scene seed")
    assert [(r["scene seed"], r["trials"], r["success"], r["rate"]) for r in by_seed] == [
        ("7", "2", "1", "50%"),
        ("8", "2", "1", "50%"),
    ]
    fails = {r["reason"]: r for r in page.table_with("failed stage")}
    assert set(fails) == {"release refused", "completed, place judged no"}
    assert fails["release refused"]["which"] == stems[2]
    assert fails["release refused"]["failed stage"] == "release"
    assert fails["completed, place judged no"]["which"] == stems[3]
    st = {r["stage"]: r for r in page.table_with("median s")}
    # detect took 1, 2, 3, 4 s: median 2.5, p90 3.7 (linear interpolation)
    assert (st["detect"]["trials"], st["detect"]["median s"], st["detect"]["p90 s"]) == (
        "4",
        "2.50",
        "3.70",
    )
    assert (st["grasp"]["median s"], st["grasp"]["p90 s"], st["grasp"]["max s"]) == (
        "0.70",
        "0.94",
        "1.00",
    )
    trials = {r["run folder"]: r for r in page.table_with("run folder")}
    assert trials[stems[0]]["recording"] == "ok" and trials[stems[0]]["frames"] == "300"
    # the ledger says none, the meta (repaired after the row was written) says crashed
    assert trials[stems[2]]["recording"] == "crashed" and trials[stems[2]]["frames"] == "120"
    assert trials[stems[3]]["recording"] == "none" and trials[stems[3]]["video"] == "no video"
    assert trials[stems[0]]["Rerun"] == "rerun" and trials[stems[1]]["Rerun"] == "not built"


def test_the_ledger_numbers_are_the_readers(data_root: tuple[Path, list[str]]) -> None:
    """The page counts what the project's ledger reader reads, not what the fixture meant."""
    root, _ = data_root
    rows = [r for _, r in read_ledger(root)]
    ok = sum(
        r["status"] == "completed" and r["pick_verdict"] == "yes" and r["place_verdict"] == "yes"
        for r in rows
    )
    text = _page(root).plain
    assert f"{len(rows)} trial(s)" in text
    assert f"{100 * ok / len(rows):.0f}%" in text


def test_memory_curves_come_from_the_traces(data_root: tuple[Path, list[str]]) -> None:
    root, stems = data_root
    html = DataRoot(root).report
    page = _page(root)
    titles = [
        " ".join(t.split())
        for t in re.findall(
            r"<circle[^>]*><title>([^<]*)</title>", html.read_text(encoding="utf-8")
        )
    ]
    # the first tip the camera measured (ok) of each trial; trial 4 has none (no point)
    tips = [t for t in titles if t.startswith("first-attempt tip error")]
    assert tips == [
        "first-attempt tip error, trial 1: 9.00 mm",
        "first-attempt tip error, trial 2: 4.00 mm",
        "first-attempt tip error, trial 3: 2.00 mm",
    ]
    assert "correction applied, trial 2: 5.00 mm" in titles  # |(3, 4)|
    assert "correction memory, trial 2: 1.00 entries" in titles
    updates = page.table_with("memory")
    assert [(u["trial"], u["memory"], u["key"]) for u in updates] == [
        (stems[0], "correction", "pick_x180_z220"),
        (stems[0], "height", "place_x-180_z180"),
        (stems[1], "correction", "pick_x180_z220"),
        (stems[1], "height", "place_x-180_z180"),
    ]
    assert "dee_y 5.0 mm, n=2, raise, placed with margin" in page.plain


@pytest.mark.parametrize("elsewhere", [False, True], ids=["at-root", "out-elsewhere"])
def test_every_link_is_relative_and_leads_somewhere(
    data_root: tuple[Path, list[str]], tmp_path: Path, elsewhere: bool
) -> None:
    root, stems = data_root
    out = tmp_path / "pages" / "deep" / "run.html" if elsewhere else None
    if out is not None:
        out.parent.mkdir(parents=True)
    page = _page(root, out)
    page_dir = (out or DataRoot(root).report).parent
    hrefs = [a["href"] or "" for tag, a in page.tags if tag == "a"]
    assert hrefs
    files = []
    for href in hrefs:
        parts = urlsplit(href)
        assert not parts.scheme and not parts.netloc and not href.startswith("/"), href
        if href.startswith("#"):
            assert href[1:] in page.ids, href
            continue
        target = page_dir / unquote(parts.path)
        assert target.exists(), href
        files.append(os.path.normpath(target))
    dr = DataRoot(root)
    assert {os.path.normpath(dr.run_dir(s)) for s in stems} <= set(files)
    assert os.path.normpath(dr.rerun(stems[0])) in files
    assert os.path.normpath(dr.recording(stems[0]).video) in files
    absent = [
        (a.get("data-absent"), a.get("class")) for tag, a in page.tags if a.get("data-absent")
    ]
    # three Rerun files not built, one trial without video
    assert sorted(w for w, _ in absent) == ["rerun", "rerun", "rerun", "video"]


def test_the_page_loads_nothing(data_root: tuple[Path, list[str]]) -> None:
    root, _ = data_root
    page = _page(root)
    html = DataRoot(root).report.read_text(encoding="utf-8")
    tags = {tag for tag, _ in page.tags}
    assert not tags & {"script", "link", "iframe", "object", "embed", "audio", "source"}
    # the episodes' stage images and side videos are the files beside the page, each there
    media = [(tag, a["src"]) for tag, a in page.tags if tag in ("img", "video")]
    assert "video" in {tag for tag, _ in media}
    page_dir = DataRoot(root).report.parent
    for tag, src in media:
        assert src and (page_dir / unquote(src)).is_file(), (tag, src)
    for tag, attrs in page.tags:
        for name, value in attrs.items():
            if name in ("src", "href", "srcset", "poster", "action", "data"):
                assert not re.match(r"^[a-z][a-z0-9+.-]*:|^//", value or "", re.I), (
                    tag,
                    name,
                    value,
                )
    # the only http(s) text is the SVG namespace, which names a vocabulary and loads nothing
    assert set(re.findall(r"https?://[^\s\"'<>)]+", html)) == {"http://www.w3.org/2000/svg"}
    assert "@import" not in html and "url(" not in html
    # the three charts (and one joint plot per episode whose recording has joints)
    assert len(page.tags) > 100 and sum(tag == "svg" for tag, _ in page.tags) >= 3


def test_episodes_filter_by_the_sessions_tags(
    data_root: tuple[Path, list[str]], tmp_path: Path
) -> None:
    """Each tag of the run logs gets a radio with its count and a rule that hides the
    episodes without it; a value that is not a tag word is not shown at all."""
    root, stems = data_root
    dr = DataRoot(root)
    tagged = {stems[0]: ["dusk"], stems[1]: ["dusk", "pad-v2"], stems[2]: ["<script>", 7]}
    for stem, tags in tagged.items():
        log = json.loads(dr.runlog(stem).read_text(encoding="utf-8"))
        dr.runlog(stem).write_text(json.dumps({**log, "tags": tags}), encoding="utf-8")
    html = (_page(root, tmp_path / "r.html"), (tmp_path / "r.html").read_text(encoding="utf-8"))
    page, text = html
    radios = {a["id"]: a for tag, a in page.tags if tag == "input" and a.get("type") == "radio"}
    assert {"f-tag0", "f-tag1"} <= set(radios) and "f-tag2" not in radios
    assert "#dusk 2" in page.plain and "#pad-v2 1" in page.plain
    classes = {a["id"]: (a["class"] or "").split() for tag, a in page.tags if tag == "article"}
    assert "tag0" in classes[f"ep-{stems[0]}"] and "tag1" not in classes[f"ep-{stems[0]}"]
    assert {"tag0", "tag1"} <= set(classes[f"ep-{stems[1]}"])
    assert not [c for c in classes[f"ep-{stems[2]}"] if c.startswith("tag")]
    for i in (0, 1):
        assert f"#f-tag{i}:checked~.episodes .ep:not(.tag{i}){{display:none}}" in text
    assert "<script>" not in text  # the page still runs no script


def test_an_unreadable_run_log_and_trace_mark_their_row(
    data_root: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    root, stems = data_root
    dr = DataRoot(root)
    dr.runlog(stems[1]).write_text('{"stages": [', encoding="utf-8")
    dr.trace(stems[2]).write_text('{"seq": 1}\nnot json\n', encoding="utf-8")
    page = _page(root)
    err = capsys.readouterr().err
    assert "2 trial(s) with unreadable files" in err and "Traceback" not in err
    trials = {r["run folder"]: r for r in page.table_with("run folder")}
    assert "unreadable: run log unreadable" in trials[stems[1]]["notes"]
    assert "unreadable: trace unreadable" in trials[stems[2]]["notes"]
    assert "TRIALS WITH UNREADABLE FILES" in page.plain.upper()
    st = {r["stage"]: r for r in page.table_with("median s")}
    assert st["detect"]["trials"] == "3"  # the unreadable run log adds no duration
    assert page.rows == stems


def test_a_repeated_run_stem_is_marked_and_keeps_anchors_unique(
    data_root: tuple[Path, list[str]],
) -> None:
    root, stems = data_root
    ledger = DataRoot(root).ledger
    lines = ledger.read_text(encoding="utf-8").splitlines(keepends=True)
    ledger.write_text("".join([*lines, lines[1]]), encoding="utf-8")  # trial 1's row again
    page = _page(root)
    assert page.rows == stems  # the second row of the stem has no id
    assert [tag for tag, a in page.tags if a.get("id") == stems[0]] == ["tr"]
    assert "ledger line 6 repeats the run stem of line 2" in page.plain
    assert "5 trial(s)" in page.plain


def _bad(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = mecharm(["report", str(root)])
    captured = capsys.readouterr()
    return code, captured.err


def test_bad_roots_give_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = {}
    cases["missing"] = _bad(tmp_path / "nowhere", capsys)
    (tmp_path / "plain").mkdir()
    cases["not a root"] = _bad(tmp_path / "plain", capsys)
    empty = tmp_path / "empty"
    DataRoot(empty).runs.mkdir(parents=True)
    DataRoot(empty).ledger.write_text("", encoding="utf-8")
    cases["empty ledger"] = _bad(empty, capsys)
    header = tmp_path / "header"
    DataRoot(header).runs.mkdir(parents=True)
    DataRoot(header).ledger.write_text(
        "run_stem,recording_path,recording_status\n", encoding="utf-8"
    )
    cases["header only"] = _bad(header, capsys)
    binary = tmp_path / "binary"
    DataRoot(binary).runs.mkdir(parents=True)
    DataRoot(binary).ledger.write_bytes(b"\xff\xfe\x00garbage\n")
    cases["not utf-8"] = _bad(binary, capsys)
    for what, (code, err) in cases.items():
        assert code == 2, what
        assert err.count("\n") == 1 and err.startswith("report: "), (what, err)
        assert "Traceback" not in err
    assert "no such folder" in cases["missing"][1]
    assert "not a data root" in cases["not a root"][1]
    assert "no trials yet" in cases["header only"][1]
    assert "not UTF-8" in cases["not utf-8"][1]
    assert not (tmp_path / "plain" / DataRoot(tmp_path).report.name).exists()


def test_an_unwritable_page_exits_1(
    data_root: tuple[Path, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = data_root
    code = mecharm(["report", str(root), "--out", str(tmp_path / "no" / "such" / "dir.html")])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("report: cannot write") and err.count("\n") == 1


def test_the_command_runs_from_anywhere(data_root: tuple[Path, list[str]], tmp_path: Path) -> None:
    root, _ = data_root
    out = tmp_path / "r.html"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run(
        ["sh", "-c", 'umask 022 && exec "$0" "$@"', sys.executable, "-m", "mecharm.tools.cli",
         "report", str(root), "--out", str(out)],
        cwd="/", capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"report: {out} (4 trials, 2 succeeded)"
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert out.stat().st_mode & 0o044 == 0o044  # readable by others (umask 022 here)


def test_quantile_reason_group_and_axis_ticks() -> None:
    assert quantile([4, 1, 3, 2], 0.5) == 2.5
    assert quantile([1, 2, 3, 4], 0.9) == pytest.approx(3.7)
    assert quantile([5], 0.9) == 5
    assert reason_group("release refused: block 16.4 mm (needs 3 mm)") == "release refused"
    assert reason_group("daemon lost after 3 retries") == "daemon lost after N retries"
    assert reason_group("") == "(no reason given)"
    assert nice_ticks(2.78) == (3.0, 1.0)
    assert nice_ticks(19.3) == (20.0, 5.0)
    assert nice_ticks(3) == (3.0, 1.0)
    assert nice_ticks(0.0) == (1.0, 0.25)


@pytest.mark.slow
def test_a_real_demo_root(demo_root: Path, tmp_path: Path) -> None:
    """Two trials of `make run`'s demo on the simulated rig, recorder included (the suite's
    shared demo root, tests/conftest.py: the page goes to tmp_path, the root stays as it is)."""
    root = demo_root
    page = _page(root, tmp_path / "report.html")
    rows = [r for _, r in read_ledger(root)]
    assert page.rows == [r["run_stem"] for r in rows]
    trials = {r["run folder"]: r for r in page.table_with("run folder")}
    for r in rows:
        t = trials[r["run_stem"]]
        assert t["recording"] == r["recording_status"] and t["frames"] == r["recording_frames"]
        assert t["status"] == r["status"] and t["video"] == "video"
    st = page.table_with("median s")
    assert {"detect", "grasp", "release"} <= {r["stage"] for r in st}
    assert all(r["trials"] == str(len(rows)) for r in st if r["stage"] == "detect")
    # the episode browser: each trial's stage images and side video, the files beside it
    page_dir = tmp_path
    for r in rows:
        run_dir = DataRoot(root).run_dir(r["run_stem"])
        imgs = [
            a["src"] for tag, a in page.tags if tag == "img" and r["run_stem"] in (a["src"] or "")
        ]
        assert len(imgs) == len(list(run_dir.glob("*.jpg"))) > 5
        assert all((page_dir / unquote(src or "")).is_file() for src in imgs)
        assert f"mecharm view {run_dir}" in page.plain
    videos = [a["src"] for tag, a in page.tags if tag == "video"]
    assert len(videos) == len(rows)
    # "exportable" is what `mecharm export lerobot --select all` takes, trial by trial
    rep = export_lerobot(root, tmp_path / "ds", ExportSettings(progress=False, select="all"))
    took = {e.run_stem for e in rep.exported}
    refused = {s.run_stem: s.reason for s in [*rep.refused, *rep.skipped]}
    assert took | set(refused) == {r["run_stem"] for r in rows}
    for r in rows:
        cell = trials[r["run_stem"]]["exportable"]
        assert cell == ("yes" if r["run_stem"] in took else "no"), (r["run_stem"], cell)
        if r["run_stem"] in refused:  # the page says why, in the exporter's words
            assert refused[r["run_stem"]] in page.plain
