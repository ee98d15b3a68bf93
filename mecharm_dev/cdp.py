"""Headless Chromium driven over its DevTools protocol: the development checks' browser.

``--screenshot``/``--dump-dom`` take one picture of a page as it loads; a check that must
wait for a web app to draw (Rerun's web viewer) or act as a user (click a filter of the
report) needs the browser's own remote control. One page, one websocket, the calls the
checks use; every request the page makes is kept (``requested``). WebGL runs on
SwiftShader, so it works without a GPU or a display.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["Browser"]


class Browser:
    """``async with Browser(chromium, (w, h)) as b:`` then ``await b.goto(url)``,
    ``b.evaluate``, ``b.click``, ``b.screenshot``; ``b.requested`` lists every URL asked for."""

    def __init__(self, chromium: Path, window: tuple[int, int] = (1600, 1000)) -> None:
        self.chromium, self.window = chromium, window
        self.requested: list[str] = []
        self._ids = itertools.count(1)
        self._proc: subprocess.Popen[str] | None = None
        self._ws: Any = None
        self._profile = ""

    async def __aenter__(self) -> Browser:
        import websockets

        self._profile = tempfile.mkdtemp(prefix="mecharm-cdp-")
        w, h = self.window
        self._proc = subprocess.Popen(
            [str(self.chromium), "--headless", "--no-sandbox", "--use-gl=angle",
             "--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--hide-scrollbars", "--autoplay-policy=no-user-gesture-required",
             f"--window-size={w},{h}", f"--user-data-dir={self._profile}",
             "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self._proc.stderr is not None
        port = None
        for line in self._proc.stderr:
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if m:
                port = m.group(1)
                break
        if port is None:
            await self.__aexit__(None, None, None)
            raise RuntimeError("Chromium did not open its DevTools port")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json") as resp:
            pages = [t for t in json.load(resp) if t.get("type") == "page"]
        self._ws = await websockets.connect(pages[0]["webSocketDebuggerUrl"], max_size=1 << 28)
        await self.call("Network.enable")
        await self.call("Page.enable")
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
        shutil.rmtree(self._profile, ignore_errors=True)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its ``result`` (events met on the way are noted)."""
        i = next(self._ids)
        await self._ws.send(json.dumps({"id": i, "method": method, "params": params}))
        while True:
            msg = json.loads(await self._ws.recv())
            if msg.get("method") == "Network.requestWillBeSent":
                self.requested.append(str(msg["params"]["request"]["url"]))
            if msg.get("id") == i:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return dict(msg.get("result") or {})

    async def goto(self, url: str) -> None:
        await self.call("Page.navigate", url=url)

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (the browser's console, not a
        script of the page's own)."""
        r = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return (r.get("result") or {}).get("value")

    async def click(self, x: float, y: float) -> None:
        """A left click at the page's (x, y), as a mouse would."""
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            await self.call(
                "Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1
            )

    async def screenshot(self, from_selector: str | None = None, max_height: int = 6000) -> bytes:
        """PNG of the window; with ``from_selector``, of the page from that element's top to
        the page's end (at most ``max_height`` pixels), scrolled or not."""
        params: dict[str, Any] = {"format": "png"}
        if from_selector is not None:
            box = await self.evaluate(
                f"(() => {{ const e = document.querySelector({json.dumps(from_selector)});"
                " const d = document.documentElement;"
                " return e ? [e.getBoundingClientRect().top + window.scrollY, d.scrollWidth,"
                " d.scrollHeight] : null; })()"
            )
            if box:
                top, width, height = (float(v) for v in box)
                params["captureBeyondViewport"] = True  # the part below the window too
                params["clip"] = {"x": 0, "y": top, "width": width,
                                  "height": min(height - top, max_height), "scale": 1}  # fmt: skip
        r = await self.call("Page.captureScreenshot", **params)
        return base64.b64decode(r["data"])
