"""The report as one self-contained HTML page: inline CSS and SVG, no script, nothing fetched.

Links to a trial's files are relative to the page, so the page works from ``file://``
wherever the data root is mounted, and from a copy of the whole root (docs/report.md).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

from mecharm.runtime.records.outcome import TaskRecords
from mecharm.tools.report.collect import MemoryEvent, RunData, TrialData
from mecharm.tools.report.episodes import EPISODE_CSS, Exportable, episodes_section, href
from mecharm.tools.report.stats import (
    Summary,
    failure_groups,
    reason_group,
    stage_spreads,
    summarize,
)
from mecharm.tools.report.svg import Series, bar_chart, line_chart

__all__ = ["render"]

CSS = """
:root { --fg:#1d2430; --muted:#5b6573; --line:#dde2e8; --bg:#f6f7f9; --ok:#1f8a4c;
  --bad:#c0392b; --warn:#b7791f; --accent:#2b6cb0; --accent2:#d97706; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--fg);
  font:14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
main { max-width:1180px; margin:0 auto; padding:24px 28px 48px; }
h1 { font-size:24px; margin:0 0 4px; }
h2 { font-size:18px; margin:28px 0 10px; padding-bottom:4px; border-bottom:1px solid var(--line); }
h3 { font-size:14px; margin:14px 0 6px; color:var(--muted); font-weight:600; }
.sub { color:var(--muted); margin:0 0 16px; }
.cards { display:flex; flex-wrap:wrap; gap:12px; }
.card { background:#fff; border:1px solid var(--line); border-radius:8px; padding:10px 16px; min-width:130px; }
.card .v { font-size:24px; font-weight:650; }
.card .k { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.04em; }
.card.good .v { color:var(--ok); } .card.bad .v { color:var(--bad); } .card.warn .v { color:var(--warn); }
.card.warn .meter > span { background:var(--warn); } .card.bad .meter > span { background:var(--bad); }
.meter { height:8px; background:#e9ecf1; border-radius:4px; overflow:hidden; margin-top:6px; }
.meter > span { display:block; height:100%; background:var(--ok); }
table { border-collapse:collapse; background:#fff; border:1px solid var(--line); width:100%; }
th, td { padding:5px 9px; border-bottom:1px solid var(--line); text-align:left; vertical-align:top; }
th { background:#eef1f5; font-weight:600; font-size:12px; color:#3a4452; white-space:nowrap; }
td.n, th.n { text-align:right; font-variant-numeric:tabular-nums; }
tr:target { background:#fff7d6; }
.grid2 { display:grid; grid-template-columns: minmax(0,1fr) minmax(0,1fr); gap:18px; }
@media (max-width: 1000px) { .grid2 { grid-template-columns: 1fr; } }
.panel { background:#fff; border:1px solid var(--line); border-radius:8px; padding:10px 12px; }
.chart { max-width:100%; height:auto; display:block; }
.chart .grid { stroke:#e6e9ee; stroke-width:1; }
.chart .axis { fill:var(--muted); }
.chart .bar { fill:#7aa7d9; }
.chart .whisker { stroke:#2b4f7a; stroke-width:1.5; }
.chart .value { fill:#2b4f7a; }
.chart .line { fill:none; stroke-width:2; }
.chart .s1 { stroke:var(--accent); fill:var(--accent); }
.chart .s2 { stroke:var(--accent2); fill:var(--accent2); }
.chart path.line { fill:none; }
.legend { display:flex; gap:14px; color:var(--muted); font-size:12px; margin:2px 0 6px; }
.legend i { display:inline-block; width:10px; height:10px; border-radius:5px; margin-right:5px; vertical-align:-1px; }
.legend .s1 { background:var(--accent); } .legend .s2 { background:var(--accent2); }
.pill { display:inline-block; padding:0 7px; border-radius:9px; font-size:12px; font-weight:600; }
.pill.ok { background:#dcf3e5; color:var(--ok); } .pill.bad { background:#fbe1dd; color:var(--bad); }
.pill.warn { background:#fcefd4; color:var(--warn); } .pill.none { background:#e9ecf1; color:var(--muted); }
.absent { color:var(--muted); font-style:italic; white-space:nowrap; }
td.link { white-space:nowrap; }
.problem { color:var(--bad); }
.reason { color:var(--muted); font-size:12px; max-width:360px; }
a { color:var(--accent); text-decoration:none; } a:hover { text-decoration:underline; }
code { font-size:12px; }
details { margin-top:12px; } td details.reason { margin:0; } td details.reason summary { font-weight:400; margin:0; }
td.notes { min-width:150px; }
#trials th, #trials td { padding:5px 7px; } summary { cursor:pointer; color:var(--muted); font-weight:600; margin-bottom:6px; }
footer { margin-top:28px; color:var(--muted); font-size:12px; }
"""


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.0f}%" if whole else "–"


def _f(v: float | None, digits: int = 2) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def _pill(text: str, kind: str) -> str:
    return f'<span class="pill {kind}">{escape(text)}</span>'


def _verdict(v: str) -> str:
    return _pill(v, "ok" if v == "yes" else "bad") if v else '<span class="absent">–</span>'


def _card(label: str, value: str, cls: str = "", meter: float | None = None) -> str:
    bar = (
        f'<div class="meter"><span style="width:{100 * meter:.0f}%"></span></div>'
        if meter is not None
        else ""
    )
    return (
        f'<div class="card {cls}"><div class="v">{escape(value)}</div>'
        f'<div class="k">{escape(label)}</div>{bar}</div>'
    )


def render(
    data: RunData,
    page: Path,
    now: float | None = None,
    exportable: dict[str, Exportable] | None = None,
) -> str:
    """The page for ``data``, with links relative to where ``page`` will be written;
    ``exportable``: the exporter's verdict per run stem (``episodes.exportable``; None or
    {}: unknown)."""
    exp = exportable or {}
    page_dir = Path(os.path.abspath(page)).parent
    trials = data.trials
    s = summarize(trials)
    started = [t.row.get("started_at", "") for t in trials if t.row.get("started_at")]
    span = f"{min(started)} – {max(started)}" if started else "no start times"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() if now is None else now))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>mechArm run report: {escape(data.root.name or str(data.root))}</title>",
        f"<style>{CSS}{EPISODE_CSS}</style></head><body><main>",
        "<h1>mechArm run report</h1>",
        f'<p class="sub">Data root <code>{escape(str(data.root))}</code> · '
        f"{s.trials} trial(s), {escape(span)} · written {escape(stamp)}</p>",
        _success(s, data.records),
        _failures(trials),
        _stages(trials),
        _memory(trials),
        _recording(s),
        _trial_table(trials, page_dir, data.records, exp),
        episodes_section(data, page_dir, exp),
        "<footer>Made by <code>mecharm report</code> from the ledger, run logs, traces and "
        "recording metas. Numbers are explained in docs/report.md.</footer>",
        "</main></body></html>",
    ]
    return "\n".join(parts) + "\n"


def _rate_class(part: int, whole: int) -> str:
    """Green when every trial succeeded, amber from 80 %, red below."""
    if whole and part == whole:
        return "good"
    return "warn" if whole and part / whole >= 0.8 else "bad"


def _success(s: Summary, records: TaskRecords) -> str:
    cards = [
        _card("trials", str(s.trials)),
        _card(
            "success",
            _pct(s.success, s.trials),
            _rate_class(s.success, s.trials),
            s.success / s.trials if s.trials else 0.0,
        ),
        _card("completed", f"{s.completed} / {s.trials}"),
        *(
            _card(f"{c.removesuffix('_verdict')} yes", f"{n} / {s.trials}")
            for c, n in s.verdict_yes.items()
        ),
        _card("recorded ok", f"{s.recording.get('ok', 0)} / {s.trials}"),
    ]
    if s.duration is not None:
        cards.append(
            _card("trial time median / p90", f"{s.duration.median:.1f} / {s.duration.p90:.1f} s")
        )
    if s.unreadable:
        cards.append(_card("trials with unreadable files", str(s.unreadable), "bad"))
    rows = "".join(
        f'<tr><td>{escape(seed or "(none)")}</td><td class="n">{n}</td><td class="n">{ok}</td>'
        f'<td class="n">{_pct(ok, n)}</td></tr>'
        for seed, (n, ok) in s.by_seed.items()
    )
    dry = f" {s.dry_run} of them dry runs." if s.dry_run else ""
    rule = " and ".join(f"{c.replace('_', ' ')} {v}" for c, v in records.success.items())
    return (
        '<section id="success"><h2>Success rate</h2>'
        f'<div class="cards">{"".join(cards)}</div>'
        f'<p class="sub">Success = status completed, {escape(rule)}.{dry}</p>'
        '<h3>By scene seed</h3><table style="width:auto;min-width:360px"><thead><tr><th>scene seed</th>'
        '<th class="n">trials</th><th class="n">success</th><th class="n">rate</th></tr></thead>'
        f"<tbody>{rows}</tbody></table></section>"
    )


def _failures(trials: Sequence[TrialData]) -> str:
    groups = failure_groups(trials)
    if not groups:
        body = '<p class="sub">No failed trial: every trial succeeded.</p>'
    else:
        rows = "".join(
            f"<tr><td>{escape(g.group)}</td><td>{escape(', '.join(g.stages) or '–')}</td>"
            f'<td class="n">{len(g.stems)}</td><td>'
            + ", ".join(f'<a href="#{escape(st)}">{escape(st)}</a>' for st in g.stems)
            + f'</td><td class="reason">{escape(g.example)}</td></tr>'
            for g in groups
        )
        body = (
            '<table><thead><tr><th>reason</th><th>failed stage</th><th class="n">trials</th><th>which</th>'
            f"<th>example (full reason)</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    return f'<section id="failures"><h2>Failure reasons</h2>{body}</section>'


def _stages(trials: Sequence[TrialData]) -> str:
    spreads = stage_spreads(trials)
    if not spreads:
        return '<section id="stages"><h2>Stage durations</h2><p class="sub">No run log with stage durations.</p></section>'
    rows = "".join(
        f'<tr><td>{escape(st)}</td><td class="n">{sp.n}</td><td class="n">{sp.median:.2f}</td>'
        f'<td class="n">{sp.p90:.2f}</td><td class="n">{sp.max:.2f}</td></tr>'
        for st, sp in spreads.items()
    )
    chart = bar_chart([(st, sp.median, sp.p90) for st, sp in spreads.items()], "s")
    return (
        '<section id="stages"><h2>Stage durations</h2><div class="grid2">'
        '<div><table><thead><tr><th>stage</th><th class="n">trials</th><th class="n">median s</th>'
        f'<th class="n">p90 s</th><th class="n">max s</th></tr></thead><tbody>{rows}</tbody></table></div>'
        f'<div class="panel"><div class="legend"><span>bar: median</span><span>whisker: p90</span></div>{chart}</div>'
        "</div></section>"
    )


def _memory_event_text(e: MemoryEvent) -> str:
    v = e.values
    if e.kind == "correction_update":
        bits = [f"dx {_f(_opt(v.get('dx_mm')))} mm", f"dz {_f(_opt(v.get('dz_mm')))} mm"]
        if "n" in v:
            bits.append(f"n={v['n']}")
        if v.get("updated") is False:
            bits.append("not updated")
    else:
        bits = [f"dee_y {_f(_opt(v.get('dee_y_mm')), 1)} mm"]
        if "n" in v:
            bits.append(f"n={v['n']}")
        if v.get("change"):
            bits.append(str(v["change"]))
        if v.get("why"):
            bits.append(str(v["why"]))
    return ", ".join(bits)


def _opt(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _memory(trials: Sequence[TrialData]) -> str:
    labels = [str(i + 1) for i in range(len(trials))]
    err = line_chart(
        [
            Series("first-attempt tip error", "s1", [t.first_tip_mm for t in trials]),
            Series("correction applied", "s2", [t.applied_mm for t in trials]),
        ],
        labels,
        "mm",
    )
    sizes = line_chart(
        [
            Series(
                "correction memory",
                "s1",
                [t.memory_sizes[0] if t.memory_sizes else None for t in trials],
            ),
            Series(
                "height memory",
                "s2",
                [t.memory_sizes[1] if t.memory_sizes else None for t in trials],
            ),
        ],
        labels,
        "entries",
    )
    rows = []
    for i, t in enumerate(trials):
        for e in t.memory_events:
            what = "correction" if e.kind == "correction_update" else "height"
            rows.append(
                f'<tr><td class="n">{i + 1}</td><td><a href="#{escape(t.stem)}">{escape(t.stem)}</a></td>'
                f"<td>{what}</td><td><code>{escape(e.key)}</code></td>"
                f"<td>{escape(_memory_event_text(e))}</td></tr>"
            )
    table = (
        '<table><thead><tr><th class="n">#</th><th>trial</th><th>memory</th><th>key</th>'
        f"<th>entry after the trial</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
        if rows
        else '<p class="sub">No memory update in the traces.</p>'
    )
    return (
        '<section id="memory"><h2>Memory learning</h2><div class="grid2">'
        '<div class="panel"><h3>Pick error at the first descent, and the correction applied</h3>'
        '<div class="legend"><span><i class="s1"></i>first-attempt tip error (mm)</span>'
        f'<span><i class="s2"></i>correction applied (mm)</span></div>{err}</div>'
        '<div class="panel"><h3>Memory entries when the trial started</h3>'
        '<div class="legend"><span><i class="s1"></i>correction memory</span>'
        f'<span><i class="s2"></i>height memory</span></div>{sizes}</div>'
        f"</div><details><summary>{len(rows)} memory update(s) (correction_update and "
        f"height_update in the traces)</summary>{table}</details></section>"
    )


def _recording(s: Summary) -> str:
    cards = "".join(
        _card(f"recording {status}", str(n), "good" if status == "ok" else "bad")
        for status, n in sorted(s.recording.items())
    )
    return f'<section id="recording"><h2>Recording status</h2><div class="cards">{cards}</div></section>'


def _rec_pill(status: str) -> str:
    kind = {"ok": "ok", "crashed": "bad", "none": "none"}.get(status, "warn")
    return _pill(status, kind)


def _link(path: Path | None, page_dir: Path, text: str, absent: str, what: str) -> str:
    if path is None:
        return f'<span class="absent" data-absent="{what}">{escape(absent)}</span>'
    return f'<a href="{escape(href(path, page_dir))}">{escape(text)}</a>'


def _label(column: str) -> str:
    """A count column's header: ``pick_attempts`` -> ``attempts`` (what the page always said)."""
    return column.rsplit("_", 1)[-1]


def _exportable_cell(e: Exportable | None) -> str:
    if e is None:
        return _pill("?", "none")
    if e.ok:
        return _pill("yes", "ok")
    return f'<span title="{escape(e.why)}">{_pill("no", "bad")}</span>'


def _trial_table(
    trials: Sequence[TrialData],
    page_dir: Path,
    records: TaskRecords,
    exp: dict[str, Exportable] | None = None,
) -> str:
    exp = exp or {}
    rows: list[str] = []
    anchors: set[str] = set()
    for i, t in enumerate(trials):
        r = t.row
        status = r.get("status", "")
        notes = []
        if r.get("reason"):
            # the head in the row, the whole reason one click away (a <details>, no script)
            notes.append(
                f'<details class="reason"><summary>{escape(reason_group(r["reason"]))}</summary>'
                f"{escape(r['reason'])}</details>"
            )
        if t.rec_note:
            notes.append(f'<div class="reason">recording: {escape(t.rec_note)}</div>')
        for p in t.problems:
            notes.append(f'<div class="problem">unreadable: {escape(p)}</div>')
        cls = ' class="unreadable"' if t.problems else ""
        # a repeated stem (a damaged ledger) gets no second id: anchors stay unique
        anchor = f' id="{escape(t.stem)}"' if t.stem not in anchors else ""
        anchors.add(t.stem)
        rows.append(
            f"<tr{anchor}{cls}>"
            f'<td class="n">{i + 1}</td>'
            f"<td>{_link(t.run_dir, page_dir, t.stem, t.stem + ' (no folder)', 'run_dir')}</td>"
            f'<td class="n">{escape(r.get("scene_seed", ""))}</td>'
            f"<td>{_pill(status or '?', 'ok' if status == 'completed' else 'bad')}</td>"
            + "".join(f"<td>{_verdict(r.get(c, ''))}</td>" for c in t.records.verdicts)
            + "".join(f'<td class="n">{escape(r.get(c, ""))}</td>' for c in t.records.integer)
            + f'<td class="n">{_f(t.number("duration_s"), 1)}</td>'
            f"<td>{_rec_pill(t.rec_status)}</td>"
            f'<td class="n">{"–" if t.rec_frames is None else t.rec_frames}</td>'
            f'<td class="n">{_f(t.rec_fps, 1)}</td>'
            f'<td class="exportable">{_exportable_cell(exp.get(t.stem))}</td>'
            f'<td class="link">{_link(t.video, page_dir, "video", "no video", "video")}</td>'
            f'<td class="link">{_link(t.rerun, page_dir, "rerun", "not built", "rerun")}</td>'
            f'<td class="notes">{"".join(notes)}</td></tr>'
        )
    return (
        '<section id="trials"><h2>Trials</h2><table><thead><tr><th class="n">#</th>'
        '<th>run folder</th><th class="n">seed</th><th>status</th>'
        + "".join(f"<th>{escape(c.removesuffix('_verdict'))}</th>" for c in records.verdicts)
        + "".join(f'<th class="n">{escape(_label(c))}</th>' for c in records.integer)
        + '<th class="n">time s</th><th>recording</th>'
        '<th class="n">frames</th><th class="n">fps</th><th>exportable</th><th>video</th>'
        "<th>Rerun</th><th>notes</th>"
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table></section>"
    )
