"""The simulated rig's control URL: lay out the next trial's scene (the operator putting the
block back, on the simulator; docs/setup.md)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

__all__ = ["SimControlError", "scene_next", "scene_truth"]


class SimControlError(RuntimeError):
    """The simulated rig's control URL did not answer; the message says what to check."""


def scene_next(url: str, seed: int | None = None, timeout: float = 5.0) -> dict[str, Any]:
    """Simulated rig only: ask the workcell for a fresh scene (``POST {url}/scene/next``).

    Raises SimControlError (one line: the URL, why, what to check), never a raw URLError:
    the usual cause is a daemon that stopped between trials (docs/setup.md, "Traps")."""
    target = url.rstrip("/") + "/scene/next" + (f"?seed={seed}" if seed is not None else "")
    req = urllib.request.Request(target, data=b"", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:
        raise SimControlError(
            f"sim control {target} answered HTTP {exc.code} {exc.reason}; is --sim-control the "
            "camera server's URL (http://HOST:CAMERA_PORT)?"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        why = getattr(exc, "reason", None) or exc
        raise SimControlError(
            f"sim control {url} does not answer ({why}): the simulated daemon stopped or "
            "--sim-control is wrong; start mecharm-daemon --backend sim --scene random again"
        ) from None
    try:
        out = json.loads(body) if body else {}
    except ValueError:
        out = {"raw": body[:200].decode("utf-8", "replace")}
    return out if isinstance(out, dict) else {"result": out}


def scene_truth(url: str, timeout: float = 5.0) -> dict[str, Any]:
    """Simulated rig only: the world as it is (``GET {url}/scene/truth``: where the block
    rests, whether the jaws hold it, collisions), for a check against the runtime's own
    account; SimControlError when the workcell does not answer."""
    target = url.rstrip("/") + "/scene/truth"
    try:
        with urllib.request.urlopen(target, timeout=timeout) as resp:
            out = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise SimControlError(
            f"sim truth {target}: {getattr(exc, 'reason', None) or exc}"
        ) from None
    return out if isinstance(out, dict) else {"result": out}
