"""Render the run report in a real browser (headless Chromium) and check what it shows.

Outside ``make test`` (it needs Debian's ``chromium``; ``make report-check`` runs it and
installs the package when it is missing and we are root). It builds a report from a data
root (by default a fresh ``mecharm.tools.demo`` root of a few trials), then asks Chromium
for the DOM after rendering (``--dump-dom``) and for a PNG screenshot, and checks:

* the page's headings and the ledger's numbers (trial count, success rate, one table row
  per trial) are in the rendered DOM, with its SVG charts;
* the page loaded nothing but itself: Chromium's verbose log names every file it opened
  and every network request; the page's only load is its own ``file://`` URL (the
  requests Chromium makes for itself to Google hosts are not the page's and are ignored);
* the screenshot is a real picture (not blank).

    python -m mecharm_dev.browser_check [--root ROOT] [--png FILE] [--height PX]

Exit 0 when every check passes, 1 when one fails, 2 when Chromium is missing and cannot
be installed. docs/report.md describes the check.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from html.parser import HTMLParser
from pathlib import Path

from mecharm.common.layout import DataRoot
from mecharm.tools.report.cli import run as run_report
from mecharm.tools.report.collect import collect

__all__ = ["FLAGS", "chromium_path", "main", "render_page"]

#: headless flags that work on a closed network: without the background-networking ones
#: Chromium keeps trying to reach its update and sync services
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
#: hosts Chromium itself contacts at start even with the flags above (clock, account probes)
BROWSER_OWN_HOSTS = ("google.com", "googleapis.com", "gstatic.com")
HEADINGS = (
    "mechArm run report",
    "Success rate",
    "Failure reasons",
    "Stage durations",
    "Memory learning",
    "Recording status",
    "Trials",
)
_NET = re.compile(r"NotifyBeforeURLRequest: (\S+)")
_FILE = re.compile(r"FileURLLoader::Start: (\S+)")


def chromium_path(install: bool) -> Path | None:
    """Chromium's executable; with ``install``, ``apt-get install chromium`` when missing (root only)."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return Path(found)
    if install and shutil.which("apt-get") and os.geteuid() == 0:
        print("report-check: chromium missing; apt-get install -y chromium", flush=True)
        subprocess.run(["apt-get", "install", "-y", "chromium"], check=False)
        found = shutil.which("chromium")
        return Path(found) if found else None
    return None


def render_page(
    chromium: Path, page: Path, profile: Path, *, png: Path | None = None, height: int = 2400
) -> tuple[str, list[str]]:
    """(rendered DOM, URLs the page loaded) of ``page``; writes a 1280-wide screenshot to ``png``."""
    url = page.resolve().as_uri()
    base = [str(chromium), *FLAGS, f"--user-data-dir={profile}"]
    dom = subprocess.run(
        [*base, "--enable-logging=stderr", "--v=1", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    loads = _FILE.findall(dom.stderr) + [u for u in _NET.findall(dom.stderr) if not _browser_own(u)]
    if png is not None:
        png.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [*base, f"--window-size=1280,{height}", f"--screenshot={png}", url],
            capture_output=True,
            timeout=120,
            check=False,
        )
    return dom.stdout, loads


#: appended to a copy of the page (never to the page itself, which runs no script): counts
#: the images that decoded and the videos that reached a decoded frame, into <pre id=media>
_MEDIA_PROBE = """
<script>
window.addEventListener("load", () => {
  const vids = [...document.querySelectorAll("video")];
  vids.forEach(v => { v.muted = true; v.play().catch(() => {}); });
  setTimeout(() => {
    const imgs = [...document.querySelectorAll("img")];
    const out = {
      img_total: imgs.length,
      img_loaded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
      video_total: vids.length,
      video_ready: vids.filter(v => v.readyState >= 2).length,
      video_frames: vids.map(v => v.getVideoPlaybackQuality ? v.getVideoPlaybackQuality().totalVideoFrames : -1),
      video_errors: vids.filter(v => v.error).map(v => v.error.code),
    };
    const pre = document.createElement("pre");
    pre.id = "media";
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  }, 4000);
});
</script>
"""


def media_check(chromium: Path, page: Path, profile: Path) -> dict[str, object]:
    """Load a copy of ``page`` (beside it: the same relative links) with ``_MEDIA_PROBE`` and
    return its counts: images decoded, videos with a decoded frame."""
    import json

    probe = page.with_name(page.stem + ".media-check.html")
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", _MEDIA_PROBE + "</body>"))
    try:
        res = subprocess.run(
            [str(chromium), *FLAGS, f"--user-data-dir={profile}", "--autoplay-policy=no-user-gesture-required",
             "--virtual-time-budget=15000", "--dump-dom", probe.resolve().as_uri()],
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
    finally:
        probe.unlink(missing_ok=True)
    m = re.search(r'<pre id="media">(.*?)</pre>', res.stdout, re.S)
    if not m:
        return {"error": "the probe wrote nothing (did the page load?)"}
    return dict(json.loads(m.group(1).replace("&quot;", '"')))


def host_in(url: str, hosts: Sequence[str]) -> bool:
    """``url``'s host is one of ``hosts`` or under one of them."""
    host = re.sub(r"^[a-z+]+://([^/:]+).*$", r"\1", url)
    return any(host == h or host.endswith("." + h) for h in hosts)


def _browser_own(url: str) -> bool:
    return host_in(url, BROWSER_OWN_HOSTS)


class _Text(HTMLParser):
    """The DOM's visible text, its trial rows (``tr`` with an id) and its SVG count."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.trial_rows: list[str] = []
        self.svgs = 0
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in ("style", "title"):
            self._skip += 1
        if tag == "svg":
            self.svgs += 1
        if tag == "tr" and a.get("id"):
            self.trial_rows.append(a["id"] or "")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("style", "title") and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.text.append(data)


def check_dom(dom: str, root: Path) -> list[str]:
    """What the rendered page lacks compared with the data root's ledger (empty: all there)."""
    data = collect(root)
    p = _Text()
    p.feed(dom)
    text = " ".join(" ".join(p.text).split())
    problems = [f"heading {h!r} not rendered" for h in HEADINGS if h not in text]
    n = len(data.trials)
    ok = sum(t.success for t in data.trials)
    rate = f"{100.0 * ok / n:.0f}%"
    if f"{n} trial(s)" not in text:
        problems.append(f"trial count {n} not shown")
    if rate not in text:
        problems.append(f"success rate {rate} not shown")
    want = list(dict.fromkeys(t.stem for t in data.trials))
    if p.trial_rows != want:
        problems.append(f"trial rows {p.trial_rows} are not the ledger's {want}")
    if p.svgs < 3:
        problems.append(f"{p.svgs} SVG chart(s) rendered, expected 3")
    return problems


def _png_ok(png: Path) -> str | None:
    try:
        import cv2

        img = cv2.imread(str(png))
    except ImportError:  # pragma: no cover - cv2 is a project dependency
        return None
    if img is None:
        return f"{png} is not a readable PNG"
    if float(img.std()) < 5.0:
        return f"{png} is blank (pixel spread {float(img.std()):.1f})"
    return None


#: in the page, by the browser's console (not a script of the page's): each filter's radio
#: and label, with where the label is
_FILTERS_JS = """[...document.querySelectorAll('.filters input[type=radio]')].map(i =>
  [i.id, document.querySelector('label[for="' + i.id + '"]').textContent])"""
#: one filter's label scrolled into view: where it is now
_LABEL_JS = """(() => {{ const l = document.querySelector('label[for="{fid}"]');
  l.scrollIntoView({{block: 'center'}}); const r = l.getBoundingClientRect();
  return [r.x + r.width / 2, r.y + r.height / 2]; }})()"""
_VISIBLE_JS = (
    "[...document.querySelectorAll('.episodes .ep')].filter(e => e.offsetParent !== null).length"
)
_EXPORTABLE_JS = """[...document.querySelectorAll('td.exportable')].map(td =>
  [td.closest('tr').id, td.textContent.trim()])"""


async def views_check(chromium: Path, page: Path, out_dir: Path) -> tuple[list[str], list[str]]:
    """Click each filter of the episodes as a user would, count the episodes left in view
    against the count its label promises, and save a screenshot per view. Returns
    (problems, one line per view)."""
    from mecharm_dev.cdp import Browser

    problems: list[str] = []
    lines: list[str] = []
    async with Browser(chromium, (1280, 1400)) as b:
        await b.goto(page.resolve().as_uri())
        await asyncio.sleep(2.0)
        filters = await b.evaluate(_FILTERS_JS) or []
        if not filters:
            return ["the page has no episode filters"], lines
        for fid, label in filters:
            x, y = await b.evaluate(_LABEL_JS.format(fid=fid))  # where it is, now
            await b.click(x, y)
            await asyncio.sleep(0.5)
            checked = await b.evaluate(f"document.getElementById('{fid}').checked")
            shown = int(await b.evaluate(_VISIBLE_JS))
            m = re.search(r"(\d+)\s*$", label)
            want = int(m.group(1)) if m else -1
            png = out_dir / f"report-view-{fid}.png"
            png.write_bytes(await b.screenshot(from_selector="#episodes"))
            lines.append(f"{label.strip()}: {shown} shown ({png.name})")
            if not checked:
                problems.append(f"clicking {label.strip()!r} did not check its filter")
            if shown != want:
                problems.append(
                    f"filter {label.strip()!r} shows {shown} episodes, its label says {want}"
                )
    return problems, lines


async def exportable_cells(chromium: Path, page: Path) -> dict[str, str]:
    """The page's ``exportable`` column as rendered: {row anchor: yes/no/?}."""
    from mecharm_dev.cdp import Browser

    async with Browser(chromium) as b:
        await b.goto(page.resolve().as_uri())
        await asyncio.sleep(1.0)
        return {str(k): str(v) for k, v in (await b.evaluate(_EXPORTABLE_JS) or [])}


def exportable_problems(root: Path, cells: dict[str, str]) -> list[str]:
    """The rendered column against what ``mecharm export lerobot --select all`` takes (a dry
    run at the exporter's defaults, nothing written)."""
    from mecharm.common.config import load_settings
    from mecharm.tools.export.config import ExportSettings
    from mecharm.tools.export.lerobot import export_lerobot

    settings = load_settings(ExportSettings, None, {"progress": False, "select": "all"})
    with tempfile.TemporaryDirectory(prefix="report_check_export_") as tmp:
        rep = export_lerobot(root, Path(tmp) / "ds", settings, dry_run=True)
    took = {e.run_stem for e in rep.exported}
    problems = []
    for anchor, text in cells.items():
        stem = anchor.removeprefix("t-")
        want = "yes" if stem in took else "no"
        if text != want:
            problems.append(f"{stem}: the page says exportable {text!r}, the exporter {want!r}")
    if not cells:
        problems.append("no exportable column rendered")
    return problems


def _demo_root(where: Path, trials: int) -> Path:
    root = where / "demo"
    print(f"report-check: making a demo root with {trials} trials in {root}", flush=True)
    cmd = [
        sys.executable,
        "-m",
        "mecharm.tools.demo",
        "--trials",
        str(trials),
        "--data-root",
        str(root),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)  # any cwd works
    if res.returncode != 0:
        raise SystemExit(
            f"report-check: the demo failed (exit {res.returncode}):\n{res.stderr[-2000:]}"
        )
    return root


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m mecharm_dev.browser_check", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--root", help="data root to report on (default: a fresh demo root)")
    ap.add_argument("--trials", type=int, default=3, help="trials of the demo root (default 3)")
    ap.add_argument(
        "--png", help="where to write the screenshot (default: report.png beside the page)"
    )
    ap.add_argument("--height", type=int, default=2400, help="screenshot height in pixels")
    ap.add_argument("--no-install", action="store_true", help="do not apt-get install chromium")
    args = ap.parse_args(argv)
    chromium = chromium_path(install=not args.no_install)
    if chromium is None:
        print(
            "report-check: chromium not found; install Debian's package (apt-get install chromium) "
            "as root, or run without --no-install as root",
            file=sys.stderr,
        )
        return 2
    # the demo root is kept (its report.html and the screenshot are there to look at)
    root = (
        Path(args.root)
        if args.root
        else _demo_root(Path(tempfile.mkdtemp(prefix="mecharm_report_check_")), args.trials)
    )
    with tempfile.TemporaryDirectory(prefix="report_check_profile_") as tmp:
        if run_report(root) != 0:
            return 1
        page = DataRoot(root).report
        png = Path(args.png) if args.png else page.with_suffix(".png")
        dom, loads = render_page(chromium, page, Path(tmp) / "profile", png=png, height=args.height)
        problems = check_dom(dom, root) if dom.strip() else ["chromium printed no DOM"]
        # the page loads itself and the episodes' images and videos beside it, nothing else
        root_uri = root.resolve().as_uri() + "/"
        extra = [u for u in loads if u != page.resolve().as_uri() and not u.startswith(root_uri)]
        problems += [f"the page loaded {u}" for u in extra]
        media = media_check(chromium, page, Path(tmp) / "profile2")
        print(f"report-check: media {media}", flush=True)
        if media.get("error"):
            problems.append(str(media["error"]))
        else:
            if media["img_loaded"] != media["img_total"]:
                problems.append(f"{media['img_loaded']} of {media['img_total']} images decoded")
            if media["video_ready"] != media["video_total"]:
                problems.append(
                    f"{media['video_ready']} of {media['video_total']} videos decoded a frame"
                )
        if not any(u == page.resolve().as_uri() for u in loads):
            problems.append("chromium's log does not show the page being opened")
        cells = asyncio.run(exportable_cells(chromium, page))
        problems += exportable_problems(root, cells)
        n_yes = sum(1 for v in cells.values() if v == "yes")
        print(f"report-check: exportable column {n_yes} yes / {len(cells) - n_yes} no, "
              "as mecharm export lerobot --select all takes them", flush=True)  # fmt: skip
        view_problems, views = asyncio.run(views_check(chromium, page, page.parent))
        problems += view_problems
        for line in views:
            print(f"report-check: view {line}", flush=True)
        png_problem = _png_ok(png)
        if png_problem:
            problems.append(png_problem)
        for p in problems:
            print(f"report-check: FAIL {p}", file=sys.stderr)
        if problems:
            return 1
        print(
            f"report-check: ok: {page} rendered in {chromium.name}: headings, trial rows and "
            f"numbers present, nothing loaded but the page and its files ({len(loads)} loads, 0 "
            f"from the network), every image and video decoded; screenshot {png}"
        )
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
