"""Two small inline SVG charts (the page fetches nothing, so no plotting library or script)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

__all__ = ["Series", "bar_chart", "line_chart", "nice_ticks"]

FONT = 'font-family="system-ui, sans-serif" font-size="12"'


def nice_ticks(value: float, most: int = 5) -> tuple[float, float]:
    """(axis end, tick step): the smallest 1/2/2.5/5 x 10^k step that covers ``value`` in at
    most ``most`` steps, so the axis reads 0, 1, 2, 3 rather than 0, 0.75, 1.5."""
    if value <= 0 or not math.isfinite(value):
        return 1.0, 0.25
    k = math.floor(math.log10(value / most))
    for exp in (k, k + 1):
        for m in (1, 2, 2.5, 5):
            step = m * 10.0**exp
            n = math.ceil(value / step - 1e-9)
            if n <= most:
                return n * step, step
    return 10.0 ** (k + 2), 10.0 ** (k + 1)


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def bar_chart(
    rows: Sequence[tuple[str, float, float]], unit: str, *, label_w: int = 150, width: int = 640
) -> str:
    """Horizontal bars: one per (label, median, p90); the bar is the median, the whisker the p90."""
    bar_h, gap, top, bottom = 20, 10, 8, 28
    plot_w = width - label_w - 70
    top_v, step = nice_ticks(max((p90 for _, _, p90 in rows), default=1.0))
    ticks = round(top_v / step)
    height = top + len(rows) * (bar_h + gap) + bottom
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="median and p90 per stage, {escape(unit)}">'
    ]
    for i in range(ticks + 1):
        v = step * i
        x = label_w + plot_w * v / top_v
        out.append(
            f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{height - bottom + 4}" class="grid"/>'
            f'<text x="{x:.1f}" y="{height - bottom + 18}" text-anchor="middle" {FONT} '
            f'class="axis">{_fmt(v)}{" " + escape(unit) if i == ticks else ""}</text>'
        )
    for i, (label, med, p90) in enumerate(rows):
        y = top + i * (bar_h + gap)
        wm = plot_w * med / top_v
        xp = label_w + plot_w * p90 / top_v
        cy = y + bar_h / 2
        out.append(
            f'<text x="{label_w - 8}" y="{cy + 4:.1f}" text-anchor="end" {FONT}>{escape(label)}</text>'
            f'<rect x="{label_w}" y="{y}" width="{wm:.1f}" height="{bar_h}" rx="2" class="bar">'
            f"<title>{escape(label)}: median {med:.3f} {escape(unit)}, p90 {p90:.3f}</title></rect>"
            f'<line x1="{label_w + wm:.1f}" y1="{cy:.1f}" x2="{xp:.1f}" y2="{cy:.1f}" class="whisker"/>'
            f'<line x1="{xp:.1f}" y1="{y + 3}" x2="{xp:.1f}" y2="{y + bar_h - 3}" class="whisker"/>'
            f'<text x="{xp + 6:.1f}" y="{cy + 4:.1f}" {FONT} class="value">{med:.2f}</text>'
        )
    out.append("</svg>")
    return "".join(out)


@dataclass(frozen=True)
class Series:
    name: str
    css: str
    #: one value per trial (None: the trial has no value; the line breaks there)
    values: Sequence[float | None]


def line_chart(
    series: Sequence[Series], x_labels: Sequence[str], y_unit: str, *, width: int = 640
) -> str:
    """Values per trial (x: trial number in ledger order) as points joined by lines."""
    left, right, top, bottom, height = 48, 16, 12, 40, 220
    plot_w, plot_h = width - left - right, height - top - bottom
    n = max(len(x_labels), 1)
    finite = [v for s in series for v in s.values if v is not None]
    top_v, step = nice_ticks(max(finite, default=1.0))

    def px(i: int) -> float:
        return left + (plot_w * (i + 0.5) / n)

    def py(v: float) -> float:
        return top + plot_h * (1 - v / top_v)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(", ".join(s.name for s in series))} per trial">'
    ]
    for i in range(round(top_v / step) + 1):
        v = step * i
        y = py(v)
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" {FONT} class="axis">'
            f"{_fmt(v)}</text>"
        )
    out.append(
        f'<text x="{left}" y="{height - 4}" {FONT} class="axis">trial (ledger order) → '
        f"y: {escape(y_unit)}</text>"
    )
    step = max(1, math.ceil(n / 20))
    for i, lab in enumerate(x_labels):
        if i % step == 0 or i == n - 1:
            out.append(
                f'<text x="{px(i):.1f}" y="{height - bottom + 16}" text-anchor="middle" {FONT} '
                f'class="axis">{escape(lab)}</text>'
            )
    for s in series:
        run: list[str] = []
        paths: list[str] = []
        for i, val in enumerate(s.values):
            if val is None:
                if len(run) > 1:
                    paths.append(" ".join(run))
                run = []
                continue
            run.append(f"{'M' if not run else 'L'}{px(i):.1f},{py(val):.1f}")
        if len(run) > 1:
            paths.append(" ".join(run))
        for d in paths:
            out.append(f'<path d="{d}" class="line {escape(s.css)}"/>')
        for i, val in enumerate(s.values):
            if val is not None:
                out.append(
                    f'<circle cx="{px(i):.1f}" cy="{py(val):.1f}" r="3.5" class="dot {escape(s.css)}">'
                    f"<title>{escape(s.name)}, trial {escape(x_labels[i] if i < len(x_labels) else str(i + 1))}: "
                    f"{val:.2f} {escape(y_unit)}</title></circle>"
                )
    out.append("</svg>")
    return "".join(out)
