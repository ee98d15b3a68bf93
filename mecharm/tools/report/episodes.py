"""The report as an episode browser (docs/report.md, "Episodes"): per trial its stage
images, its side video, its joints commanded and measured, its verdicts, whether the
exporter would take it and the command that opens it in the viewer.

Still one page that fetches nothing from the network: the images and the video are the
files beside it (relative links), the plots inline SVG, the filters CSS (radio buttons and
``:checked``), no script. Whether a trial is exportable is the exporter's own answer: a dry
run of ``mecharm export lerobot --select all`` (nothing written), so the column and the
export cannot disagree.
"""

from __future__ import annotations

import csv
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from urllib.parse import quote

from mecharm.common.logging import get_logger
from mecharm.tools.report.collect import RunData, TrialData

__all__ = ["EPISODE_CSS", "Exportable", "episodes_section", "exportable", "href", "joint_plot"]

log = get_logger("mecharm.tools.report")

#: at most this many points per line of a joint plot (a trial polls at ~50 Hz)
PLOT_POINTS = 400
#: joint colours, j0 … j5
_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")


def href(target: Path, page_dir: Path) -> str:
    """``target`` relative to the page's folder, URL-quoted (posix separators)."""
    rel = os.path.relpath(target, page_dir)
    return quote(Path(rel).as_posix())


@dataclass(frozen=True)
class Exportable:
    ok: bool
    why: str = ""


def exportable(data: RunData, task: str) -> dict[str, Exportable]:
    """The exporter's verdict on every trial: a dry run of ``mecharm export lerobot --select
    all`` at its default settings (nothing is written). {} when the exporter cannot run
    here (the page then says so instead of guessing)."""
    try:
        from mecharm.common.config import load_settings
        from mecharm.tools.export.config import ExportSettings
        from mecharm.tools.export.lerobot import export_lerobot

        settings = load_settings(
            ExportSettings, None, {"progress": False, "select": "all", "trials_of": task}
        )
        with tempfile.TemporaryDirectory(prefix="report_export_") as tmp:
            rep = export_lerobot(data.root, Path(tmp) / "dataset", settings, dry_run=True)
    except Exception as exc:  # the page is written anyway, without the column's answers
        log.warning("report_exportable_unknown", error=f"{type(exc).__name__}: {exc}")
        return {}
    out = {e.run_stem: Exportable(True) for e in rep.exported}
    for s in [*rep.refused, *rep.skipped]:
        out.setdefault(s.run_stem, Exportable(False, s.reason))
    return out


def _states(
    t: TrialData,
) -> tuple[list[tuple[float, list[float]]], list[tuple[float, list[float]]]]:
    """(measured, commanded) joint rows of the trial's states.csv, (wall seconds, six angles)."""
    measured: list[tuple[float, list[float]]] = []
    commanded: list[tuple[float, list[float]]] = []
    if t.states is None:
        return measured, commanded
    try:
        with t.states.open(encoding="utf-8", newline="") as fh:
            for row in csv.DictReader(fh):
                kind = row.get("event_type")
                if kind not in ("measured", "commanded"):
                    continue
                try:
                    ts = float(row["ts"])
                    q = [float(row[f"j{i}"]) for i in range(6)]
                except (KeyError, TypeError, ValueError):
                    continue
                if math.isfinite(ts) and all(math.isfinite(v) for v in q):
                    (measured if kind == "measured" else commanded).append((ts, q))
    except OSError:
        pass
    return measured, commanded


def joint_plot(
    measured: Sequence[tuple[float, Sequence[float]]],
    commanded: Sequence[tuple[float, Sequence[float]]],
    width: int = 560,
    height: int = 180,
) -> str:
    """Six joints over the trial: measured as thin lines, commanded as steps (dashed), one
    colour per joint; '' when there is nothing to plot."""
    if len(measured) < 2 and not commanded:
        return ""
    times = [t for t, _q in measured] + [t for t, _q in commanded]
    t0, t1 = min(times), max(times)
    values = [v for _t, q in [*measured, *commanded] for v in q]
    lo, hi = min(values), max(values)
    if hi - lo < 1:
        lo, hi = lo - 1, hi + 1
    pad_l, pad_b, pad_t = 40, 18, 6
    pw, ph = width - pad_l - 8, height - pad_b - pad_t

    def xy(t: float, v: float) -> str:
        x = pad_l + pw * (t - t0) / max(t1 - t0, 1e-9)
        y = pad_t + ph * (hi - v) / (hi - lo)
        return f"{x:.1f},{y:.1f}"

    step = max(1, len(measured) // PLOT_POINTS)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="joints" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="joints measured and commanded">',
        f'<text x="2" y="{pad_t + 10}" class="axis">{hi:.0f}°</text>'
        f'<text x="2" y="{pad_t + ph}" class="axis">{lo:.0f}°</text>'
        f'<text x="{width - 8}" y="{height - 4}" text-anchor="end" class="axis">'
        f"{t1 - t0:.0f} s</text>",
    ]
    for j in range(6):
        pts = " ".join(xy(t, q[j]) for t, q in measured[::step])
        if pts:
            out.append(f'<polyline points="{pts}" fill="none" stroke="{_COLOURS[j]}" '
                       f'stroke-width="1.2" class="measured"/>')  # fmt: skip
        if commanded:
            stairs: list[str] = []
            for k, (t, q) in enumerate(commanded):
                if k:
                    stairs.append(xy(t, commanded[k - 1][1][j]))  # held until the next: a step
                stairs.append(xy(t, q[j]))
            stairs.append(xy(t1, commanded[-1][1][j]))
            out.append(f'<polyline points="{" ".join(stairs)}" fill="none" '
                       f'stroke="{_COLOURS[j]}" stroke-width="1" stroke-dasharray="4 3" '
                       f'class="commanded"/>')  # fmt: skip
    out.append("</svg>")
    return "".join(out)


def _episode(t: TrialData, page_dir: Path, ex: Exportable | None, tags: Sequence[str] = ()) -> str:
    r = t.row
    status = r.get("status", "")
    ok = t.success
    kinds = ["ok" if ok else "no", "exp" if ex is not None and ex.ok else "noexp"]
    # a tag's class is its place in the page's tag list (``tags``): no tag text in the CSS
    kinds += [f"tag{tags.index(g)}" for g in t.tags if g in tags]
    labels = "".join(f' <span class="pill tag">#{escape(g)}</span>' for g in t.tags)
    verdicts = " ".join(
        f"<span>{escape(c.removesuffix('_verdict'))}: <b>{escape(r.get(c, '') or '–')}</b></span>"
        for c in t.records.verdicts
    )
    if ex is None:
        exp = '<span class="pill none">exportable: unknown</span>'
    elif ex.ok:
        exp = '<span class="pill ok">exportable</span>'
    else:
        exp = f'<span class="pill bad" title="{escape(ex.why)}">not exportable</span> <small>{escape(ex.why)}</small>'
    thumbs = ""
    video = ""
    if t.run_dir is not None:
        # the stage images as saved, with what perception drew on them
        imgs = sorted(p for p in t.run_dir.glob("*.jpg") if p.is_file())
        thumbs = "".join(
            f'<a href="{escape(href(p, page_dir))}"><img src="{escape(href(p, page_dir))}" '
            f'alt="{escape(p.stem)}" title="{escape(p.stem)}" loading="lazy" width="160"></a>'
            for p in imgs
        )
    if t.video is not None:
        video = (
            f'<video controls preload="metadata" width="320" '
            f'src="{escape(href(t.video, page_dir))}"></video>'
        )
    measured, commanded = _states(t)
    plot = joint_plot(measured, commanded)
    view = f"mecharm view {t.run_dir}" if t.run_dir is not None else ""
    open_line = (
        f'<p>open in the viewer: <code class="copy">{escape(view)}</code> '
        "(or <code>--web</code> for a browser)</p>"
        if view
        else ""
    )
    reason = f'<div class="reason">{escape(r.get("reason", ""))}</div>' if r.get("reason") else ""
    return (
        f'<article class="ep {" ".join(kinds)}" id="ep-{escape(t.stem)}">'
        f'<h3>{escape(t.stem)} <span class="pill {"ok" if status == "completed" else "bad"}">'
        f"{escape(status or '?')}</span> {verdicts} {exp}{labels}</h3>{reason}"
        f'<div class="media">{video}{plot}</div>'
        f'<div class="thumbs">{thumbs or "<i>no stage images</i>"}</div>' + open_line + "</article>"
    )


#: the filters are radio buttons before the episodes: CSS alone shows the chosen ones
EPISODE_CSS = """
.filters label{margin-right:1em;cursor:pointer}
.filters input{margin-right:.3em}
#f-ok:checked~.episodes .ep.no,#f-no:checked~.episodes .ep.ok,
#f-exp:checked~.episodes .ep.noexp,#f-noexp:checked~.episodes .ep.exp{display:none}
.ep{border:1px solid #ddd;border-radius:6px;padding:.6em;margin:.8em 0}
.ep h3{margin:.2em 0;font-size:1em}.ep h3 span{margin-left:.6em;font-weight:normal}
.ep .media{display:flex;gap:1em;align-items:flex-start;flex-wrap:wrap}
.ep .thumbs{display:flex;gap:.4em;overflow-x:auto;margin-top:.4em}
.ep .thumbs img{height:90px;width:auto;border:1px solid #ccc}
.ep code.copy{user-select:all;background:#f4f4f4;padding:.1em .3em}
.pill.tag{background:#e6eefb;color:#2a4d8f}
svg.joints .axis{font:11px system-ui,sans-serif;fill:#555}
"""


def episodes_section(data: RunData, page_dir: Path, exp: dict[str, Exportable]) -> str:
    n_ok = sum(t.success for t in data.trials)
    n_exp = sum(1 for t in data.trials if (e := exp.get(t.stem)) is not None and e.ok)
    total = len(data.trials)
    radios = [
        ("f-all", f"all {total}", True),
        ("f-ok", f"succeeded {n_ok}", False),
        ("f-no", f"not succeeded {total - n_ok}", False),
        ("f-exp", f"exportable {n_exp}", False),
        ("f-noexp", f"not exportable {total - n_exp}", False),
    ]
    # by tag: one more radio each, and its rule (hide the episodes without that tag)
    tags = sorted({g for t in data.trials for g in t.tags})
    radios += [
        (f"f-tag{i}", f"#{g} {sum(1 for t in data.trials if g in t.tags)}", False)
        for i, g in enumerate(tags)
    ]
    tag_css = "".join(
        f"#f-tag{i}:checked~.episodes .ep:not(.tag{i}){{display:none}}" for i in range(len(tags))
    )
    inputs = "".join(
        f'<input type="radio" name="epf" id="{i}"{" checked" if c else ""}>'
        f'<label for="{i}">{escape(text)}</label>'
        for i, text, c in radios
    )
    body = "".join(
        _episode(t, page_dir, exp.get(t.stem) if exp else None, tags) for t in data.trials
    )
    note = (
        ""
        if exp
        else "<p><i>exportable: unknown (the exporter could not look at this root; see the log)</i></p>"
    )
    return (
        '<section id="episodes"><h2>Episodes</h2>'
        "<p>Each trial with its stage images (the top camera, with what perception drew), "
        "its side video, its joints (measured: lines; commanded: dashed steps) and whether "
        "<code>mecharm export lerobot</code> would take its recording.</p>"
        + (f"<style>{tag_css}</style>" if tag_css else "")
        + f'{note}<div class="filters">{inputs}<div class="episodes">{body}</div></div></section>'
    )
