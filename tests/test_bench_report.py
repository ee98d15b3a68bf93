"""bench/report.py: docs/benchmarks.md from one run's results, or a clear refusal."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import bench.report as report
from bench import Row, has
from bench.__main__ import bench_names
from bench.report import ReportError, check, render

NOTES = "Intro: how this page is made.\n\n<!-- table -->\n\n## Notes\n\n* a note | with a bar\n"


def _rows_a(r: dict[str, Any]) -> list[Row]:
    if not has(r, "rps"):
        return []
    return [
        Row("daemon", "round trip", f"{r['rps']:,} req/s", ">= 5,000 req/s", "echo 7,000 req/s")
    ]


def _rows_b(r: dict[str, Any]) -> list[Row]:
    return [Row("lookup", "pick", f"p50 {r['p50']} ms", "p50 <= 0.1 ms", "rig | method 2 ms")]


def _modules() -> dict[str, object]:
    return {
        "alpha": SimpleNamespace(rows=_rows_a, UNDER_LOAD=True),
        "beta": SimpleNamespace(rows=_rows_b),
    }


def _meta(
    burners: int = 0, load: tuple[float, float] = (1.0, 1.2), run: str = "R1"
) -> dict[str, Any]:
    return {
        "_run_id": run,
        "_date_utc": "2026-12-02T00:40:00+00:00",
        "_git_rev": "abc1234",
        "_command": "python -m bench",
        "_cpu_count": 2,
        "_platform": "Linux-6.1-x86_64",
        "_cpu_burners": burners,
        "_loadavg_1m": list(load),
        "_under_load_pass": True,
        "_quick": False,
    }


def _results() -> dict[str, dict[str, Any]]:
    return {
        "alpha": {"rps": 6887, **_meta(load=(0.9, 1.1))},
        "beta": {"p50": 0.024, **_meta(load=(1.3, 1.5))},
        "alpha.under_load": {"rps": 4100, **_meta(burners=2, load=(2.8, 3.4))},
    }


def test_the_page_has_the_run_header_one_table_and_the_notes_verbatim() -> None:
    page = render(_modules(), _results(), NOTES)
    assert page.startswith("# Benchmarks\n")
    assert "Intro: how this page is made." in page
    assert "2026-12-02T00:40:00+00:00 (run `R1`)" in page
    assert "`python -m bench`" in page and "`abc1234`" in page
    assert "2 CPUs, Linux-6.1-x86_64" in page
    assert "load average (1 min, at each bench's start and end): 0.90-3.40" in page
    assert "alpha again beside 2 CPU burners" in page
    table = [line for line in page.splitlines() if line.startswith("| ")]
    assert table == [
        "| area | figure | result | target | baseline in the same run |",
        "| daemon | round trip | 6,887 req/s | >= 5,000 req/s | echo 7,000 req/s |",
        "| lookup | pick | p50 0.024 ms | p50 <= 0.1 ms | rig \\| method 2 ms |",
        "| daemon (2 CPU burners) | round trip | 4,100 req/s | >= 5,000 req/s | echo 7,000 req/s |",
    ]  # quiet rows first, then under load; a "|" in a cell cannot break the table
    assert page.endswith("## Notes\n\n* a note | with a bar\n")  # the notes, verbatim
    assert page.index("| area |") < page.index("## Notes")


def test_a_missing_bench_is_named() -> None:
    res = _results()
    del res["beta"]
    with pytest.raises(ReportError, match=r"missing: beta\.json"):
        check(_modules(), res)


def test_a_missing_under_load_result_is_named() -> None:
    res = _results()
    del res["alpha.under_load"]
    with pytest.raises(ReportError, match=r"missing: alpha\.under_load\.json"):
        check(_modules(), res)


def test_no_under_load_pass_expects_no_under_load_results() -> None:
    res = _results()
    del res["alpha.under_load"]
    for r in res.values():
        r["_under_load_pass"] = False
    assert check(_modules(), res) == ["alpha", "beta"]
    assert "no second pass in this run" in render(_modules(), res, NOTES)


def test_results_of_different_runs_are_refused_naming_the_files() -> None:
    res = _results()
    res["beta"]["_run_id"] = "R0"
    with pytest.raises(ReportError) as err:
        check(_modules(), res)
    msg = str(err.value)
    assert "results of different runs" in msg
    assert "R0: beta.json" in msg and "R1: alpha.json, alpha.under_load.json" in msg
    assert "run `make bench`" in msg


def test_results_without_a_run_id_are_refused() -> None:
    res = _results()
    for r in res.values():
        del r["_run_id"]  # results of the days before run ids: they agree, but on nothing
    with pytest.raises(
        ReportError, match=r"no _run_id\): alpha\.json, beta\.json, alpha\.under_load\.json"
    ):
        check(_modules(), res)


def test_a_failed_bench_is_named_with_its_error() -> None:
    res = _results()
    res["beta"] = {"_failed": "ValueError: the arm went away", **_meta()}
    with pytest.raises(ReportError, match=r"failed: beta\.json \(ValueError: the arm went away\)"):
        check(_modules(), res)


def test_a_rows_function_that_raises_is_named() -> None:
    res = _results()
    del res["beta"]["p50"]  # _rows_b breaks the contract: a KeyError
    with pytest.raises(
        ReportError, match=r"bench/bench_beta\.py rows\(\) failed on beta\.json: KeyError"
    ):
        render(_modules(), res, NOTES)


def test_a_module_without_rows_is_named() -> None:
    mods = {**_modules(), "gamma": SimpleNamespace()}
    res = {**_results(), "gamma": {"x": 1, **_meta()}}
    with pytest.raises(
        ReportError, match=r"no rows\(result\) to put in the table: bench/bench_gamma\.py"
    ):
        render(mods, res, NOTES)


def test_notes_without_the_table_marker_are_refused() -> None:
    with pytest.raises(ReportError, match="<!-- table -->"):
        render(_modules(), _results(), "no marker here\n")


def _write(results: Path, res: dict[str, dict[str, Any]]) -> None:
    results.mkdir(exist_ok=True)
    for stem, r in res.items():
        (results / f"{stem}.json").write_text(json.dumps(r))


def test_the_command_writes_the_page_and_check_validates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(report, "bench_modules", _modules)
    _write(tmp_path / "results", _results())
    out = tmp_path / "benchmarks.md"
    args = ["--results", str(tmp_path / "results"), "--out", str(out)]
    assert report.main([*args, "--check"]) == 0
    assert not out.exists()  # --check only validates
    assert report.main(args) == 0
    page = out.read_text()
    assert "| daemon (2 CPU burners) | round trip | 4,100 req/s |" in page
    intro, _, notes = report.NOTES.read_text().partition("\n<!-- table -->\n")
    assert intro.strip() in page and page.endswith(notes.lstrip())  # the real notes template

    (tmp_path / "results" / "beta.json").write_text(json.dumps({"p50": 1, **_meta(run="R0")}))
    capsys.readouterr()
    assert report.main([*args, "--check"]) == 1
    err = capsys.readouterr().err
    assert "results of different runs" in err and "beta.json" in err and "Traceback" not in err


def test_an_unreadable_result_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(report, "bench_modules", _modules)
    _write(tmp_path, _results())
    (tmp_path / "beta.json").write_text("{not json")
    assert report.main(["--results", str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    assert "beta.json: not a readable result" in err and "Traceback" not in err


def test_every_real_bench_with_rows_skips_figures_a_result_lacks() -> None:
    """The contract: a quick run's missing figure drops its row, never a KeyError."""
    checked = 0
    for name in bench_names():
        mod = importlib.import_module(f"bench.bench_{name}")
        if not hasattr(mod, "rows"):
            continue  # its owner has not written it yet: the report names it
        assert mod.rows(_meta()) == [], name
        checked += 1
    assert checked >= 12
