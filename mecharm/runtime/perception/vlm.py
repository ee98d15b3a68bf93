"""The VLM judge: top-camera images to a vision-language model, adopted by the rig's rule.

Why a rule and not the model alone: a remote model can be slow, busy, wrong or
absent, and a trial must neither hang nor trust a guess. So every judgement also
runs the geometric judge (cheap, local) and measures the block's distance from
where it must not be; the adopted verdict is, in order (docs/perception.md,
"VLM judge"): the operator's answer when asked and given; a "no" from the
distance override when the measurement is decisive; the model's verdict when its
confidence reaches the threshold; else the geometric verdict. Any API failure
(rate limit, overload, server error, timeout, refused connection, malformed
answer, refusal) or an exhausted per-trial budget falls back to the geometric
verdict with the reason in ``Verdict.details``, which the trace records.

``AnthropicVlm`` is the real ``VlmClient`` (the vendor's ``anthropic`` SDK, SDK
retries off, one hard deadline per call); any object with
``async ask(images, prompt) -> str`` fits the same seam.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlparse

import cv2
import numpy as np

from mecharm.common.logging import get_logger
from mecharm.runtime.perception.config import DEFAULT_CONFIG, PerceptionConfig
from mecharm.runtime.perception.detect import detect_block
from mecharm.runtime.perception.judge import Judge, JudgeEvidence
from mecharm.runtime.perception.results import Verdict
from mecharm.runtime.threads import to_thread

__all__ = [
    "DEFAULT_MODEL",
    "PICK_PROMPT",
    "PLACE_PROMPT",
    "AnthropicVlm",
    "DistanceOverride",
    "VlmClient",
    "VlmConfigError",
    "VlmError",
    "VlmJudge",
    "anthropic_from_env",
    "parse_vlm_answer",
    "vlm_env",
]

log = get_logger("mecharm.runtime.perception.vlm")

DEFAULT_MODEL = "claude-sonnet-4-6"
#: the model's raw text kept in the trace (enough to see what it said, never a whole essay)
RAW_CHARS = 500


@runtime_checkable
class VlmClient(Protocol):
    """A vision-language model: JPEG images and a prompt in, the model's text out."""

    async def ask(self, images: list[bytes], prompt: str) -> str: ...


class VlmConfigError(ValueError):
    """The VLM judge cannot be set up (no API key, a bad base URL); the message says what to do."""


class VlmError(RuntimeError):
    """One call to the model failed; ``kind`` names how (rate_limited, overloaded, server_error,
    timeout, connection, refused, malformed, auth, bad_request, api_error)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind


PICK_PROMPT = (
    "Top-camera images of a robot arm pick-and-place workcell, taken after the arm lifted. "
    "Is the red block held in the gripper (lifted off the mat)? Answer only JSON: "
    '{"verdict": "yes"|"no", "confidence": 0..1, "reason": "..."}'
)
PLACE_PROMPT = (
    "Top-camera images of a robot arm pick-and-place workcell, taken after the arm moved away. "
    "Does the red block lie inside the white box? Answer only JSON: "
    '{"verdict": "yes"|"no", "confidence": 0..1, "reason": "..."}'
)


def parse_vlm_answer(text: str, judge: str = "vlm") -> Verdict:
    """Parse the model's JSON answer (the first {...} in ``text``); anything else is "no", 0."""
    start, end = text.find("{"), text.rfind("}")
    try:
        d = json.loads(text[start : end + 1]) if start >= 0 < end else None
        verdict = str(d["verdict"]).strip().lower() if isinstance(d, dict) else None
        conf = float(d["confidence"]) if isinstance(d, dict) else math.nan
    except (ValueError, KeyError, TypeError):
        d, verdict, conf = None, None, math.nan
    if verdict not in ("yes", "no") or not 0.0 <= conf <= 1.0 or not isinstance(d, dict):
        return Verdict("no", 0.0, f"vlm answer unparseable: {text[:120]!r}", judge)
    return Verdict(verdict, conf, str(d.get("reason", "")), judge)  # type: ignore[arg-type]


# ---------------------------------------------------------------- the real client
_STATUS_KINDS = {429: "rate_limited", 529: "overloaded", 401: "auth", 403: "auth"}


class AnthropicVlm:
    """``VlmClient`` over the Messages API with the vendor's SDK.

    The SDK's own retries are off (``max_retries=0``): the per-trial budget is the
    retry policy, and one call never takes longer than ``timeout_s`` (an
    ``asyncio.timeout`` around it as well as the SDK's, so a server that trickles
    bytes cannot stretch it). Raises ``VlmError`` for every failure.
    """

    def __init__(
        self,
        api_key: str,
        model: str = DEFAULT_MODEL,
        base_url: str | None = None,
        timeout_s: float = 20.0,
        max_tokens: int = 300,
    ) -> None:
        import anthropic  # the runtime extra; imported only when the VLM judge is chosen

        self.model = model
        self.timeout_s = timeout_s
        self.max_tokens = max_tokens
        self.base_url = base_url
        self._sdk = anthropic
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=0
        )

    async def ask(self, images: list[bytes], prompt: str) -> str:
        content: list[dict[str, Any]] = [
            {
                "type": "image",
                "source": {
                    "type": "base64",
                    "media_type": "image/jpeg",
                    "data": base64.b64encode(img).decode("ascii"),
                },
            }
            for img in images
        ]
        content.append({"type": "text", "text": prompt})
        sdk = self._sdk
        try:
            async with asyncio.timeout(self.timeout_s):
                msg = await self._client.messages.create(
                    model=self.model,
                    max_tokens=self.max_tokens,
                    messages=[{"role": "user", "content": content}],  # type: ignore[misc,list-item]
                )
        except TimeoutError:
            raise VlmError("timeout", f"no answer within {self.timeout_s:g} s") from None
        except sdk.APITimeoutError:
            raise VlmError("timeout", f"no answer within {self.timeout_s:g} s") from None
        except sdk.APIConnectionError as exc:
            cause = f": {type(exc.__cause__).__name__}" if exc.__cause__ is not None else ""
            where = self.base_url or "the vendor's API"
            raise VlmError("connection", f"{exc}{cause} ({where})") from None
        except sdk.APIStatusError as exc:
            code = exc.status_code
            kind = _STATUS_KINDS.get(code) or ("server_error" if code >= 500 else "bad_request")
            after = exc.response.headers.get("retry-after")
            extra = f", retry-after {after} s" if after else ""
            raise VlmError(kind, f"HTTP {code}{extra}: {_error_message(exc)}") from None
        except sdk.APIError as exc:  # a response the SDK could not read
            raise VlmError("malformed", str(exc)[:200]) from None
        if getattr(msg, "stop_reason", None) == "refusal":
            raise VlmError("refused", "the model declined to answer (stop_reason refusal)")
        text = "".join(getattr(b, "text", "") for b in msg.content if b.type == "text")
        if not text.strip():
            raise VlmError("malformed", f"no text in the answer (stop_reason {msg.stop_reason})")
        return text

    async def aclose(self) -> None:
        await self._client.close()


def _error_message(exc: Any) -> str:
    """The API's ``{"error": {"type", "message"}}`` in words (the SDK's message when absent)."""
    body = exc.body if isinstance(exc.body, dict) else {}
    err = body.get("error")
    if not isinstance(err, dict):
        return str(exc.message)[:160]
    return f"{err.get('type', '')}: {err.get('message', '')}"[:160]


def vlm_env(
    base_url: str | None = None, env: Mapping[str, str] | None = None
) -> tuple[str, str | None]:
    """The API key (``ANTHROPIC_API_KEY``) and base URL (the setting, else ``ANTHROPIC_BASE_URL``,
    else None: the vendor's). Raises ``VlmConfigError`` naming what is missing or wrong."""
    env = os.environ if env is None else env
    key = (env.get("ANTHROPIC_API_KEY") or "").strip()
    if not key:
        raise VlmConfigError(
            "--judge vlm needs an API key: set ANTHROPIC_API_KEY in the environment "
            "(or choose --judge geometric)"
        )
    url = base_url or env.get("ANTHROPIC_BASE_URL") or None
    if url is not None:
        try:
            u = urlparse(url)
            u.port  # noqa: B018  (raises on a port that is not a number or out of range)
        except ValueError as exc:
            raise VlmConfigError(
                f"VLM base URL {url!r} is not a valid URL ({exc}); "
                "set judge.vlm_base_url or ANTHROPIC_BASE_URL to http(s)://host[:port]"
            ) from None
        if u.scheme not in ("http", "https") or not u.netloc:
            raise VlmConfigError(
                f"VLM base URL {url!r} is not an http(s) URL (judge.vlm_base_url or ANTHROPIC_BASE_URL)"
            )
    return key, url


def anthropic_from_env(
    model: str = DEFAULT_MODEL,
    base_url: str | None = None,
    timeout_s: float = 20.0,
    max_tokens: int = 300,
    env: Mapping[str, str] | None = None,
) -> AnthropicVlm:
    """The real client, configured from the environment (``vlm_env``)."""
    key, url = vlm_env(base_url, env)
    try:
        return AnthropicVlm(key, model, url, timeout_s, max_tokens)
    except ImportError:
        raise VlmConfigError(
            "--judge vlm needs the anthropic SDK: pip install '.[runtime]'"
        ) from None


# ---------------------------------------------------------------- distance override
@dataclass(frozen=True)
class DistanceOverride:
    """When the top camera's measurement alone settles a judgement as "no".

    pick: the block is still at its mat position (within ``still_mm`` of where
    detect saw it, its top face the full size of a block on the mat, so not
    lifted nearer the camera) in every frame. place: the block stands on the mat
    at least ``outside_mm`` outside the box's outer footprint in every frame (the
    box not a fallback position). Anything less leaves the judgement to the model.
    """

    still_mm: float = 5.0
    outside_mm: float = 20.0
    area_tol: float = 0.15
    config: PerceptionConfig = DEFAULT_CONFIG

    def pick(self, ev: JudgeEvidence) -> tuple[bool, float | None]:
        """(decisive "no", measured distance from the mat position in mm)."""
        origin = ev.scene.block
        if origin is None or not ev.frames:
            return False, None
        full = (self.config.block_size_m * 1000.0) ** 2
        dists: list[float] = []
        still = 0
        for f in ev.frames:
            b = detect_block(f, ev.H, self.config)
            if b is None:
                continue
            d = math.hypot(b.x - origin.x, b.z - origin.z) * 1000.0
            dists.append(d)
            still += d <= self.still_mm and abs(b.area_mm2 / full - 1.0) <= self.area_tol
        dist = round(float(np.median(dists)), 2) if dists else None
        return still == len(ev.frames), dist

    def place(self, ev: JudgeEvidence) -> tuple[bool, float | None]:
        """(decisive "no", how far the block is outside the box's outer footprint in mm)."""
        box = ev.scene.box
        if not ev.frames or box.method == "fallback":
            return False, None
        half = self.config.box_outer_m / 2.0
        b_yaw = math.radians(box.yaw_deg)
        cb, sb = math.cos(b_yaw), math.sin(b_yaw)
        outs: list[float] = []
        for f in ev.frames:
            b = detect_block(f, ev.H, self.config)
            if b is None:
                continue
            rx, rz = b.x - box.x, b.z - box.z
            lx, lz = cb * rx + sb * rz, -sb * rx + cb * rz
            outs.append(math.hypot(max(abs(lx) - half, 0.0), max(abs(lz) - half, 0.0)) * 1000.0)
        dist = round(float(np.median(outs)), 2) if outs else None
        decisive = len(outs) == len(ev.frames) and min(outs) >= self.outside_mm
        return decisive, dist


# ---------------------------------------------------------------- the judge
class VlmJudge:
    """Asks a vision-language model and adopts its verdict by the rig's rule.

    Bare (``VlmJudge(client)``): the model's parsed answer, a failure being "no"
    with confidence 0. With ``fallback`` (the geometric judge), ``override``,
    ``human`` and a threshold it is the rig's judge (module docstring).
    ``start_trial`` resets the per-trial budget of ``max_calls``; ``timeout_s``
    bounds each call whatever the client.
    """

    name = "vlm"

    def __init__(
        self,
        client: VlmClient,
        jpeg_quality: int = 85,
        max_frames: int = 3,
        *,
        fallback: Judge | None = None,
        override: DistanceOverride | None = None,
        human: Judge | None = None,
        confidence_min: float = 0.0,
        max_calls: int | None = None,
        timeout_s: float | None = None,
    ) -> None:
        self.client = client
        self.jpeg_quality = jpeg_quality
        self.max_frames = max_frames
        self.fallback = fallback
        self.override = override
        self.human = human
        self.confidence_min = confidence_min
        self.max_calls = max_calls
        self.timeout_s = timeout_s
        self.calls = 0
        self.model = str(getattr(client, "model", type(client).__name__))

    def start_trial(self) -> None:
        self.calls = 0

    async def aclose(self) -> None:
        """Release the client's connections (the real client holds an HTTP pool)."""
        close = getattr(self.client, "aclose", None)
        if close is not None:
            await close()

    async def judge_pick(self, evidence: JudgeEvidence) -> Verdict:
        return await self._judge(evidence, "pick", PICK_PROMPT)

    async def judge_place(self, evidence: JudgeEvidence) -> Verdict:
        return await self._judge(evidence, "place", PLACE_PROMPT)

    async def _ask(self, ev: JudgeEvidence, prompt: str) -> tuple[Verdict | None, dict[str, Any]]:
        """The model's verdict (None when the call failed) and what to record about the call."""
        info: dict[str, Any] = {"model": self.model, "raw": None, "latency_s": None}
        if self.max_calls is not None and self.calls >= self.max_calls:
            info["fallback"] = f"budget: {self.max_calls} VLM call(s) per trial used"
            return None, info
        frames = ev.frames[: self.max_frames]
        if not frames:  # nothing to show: no call, no budget spent
            info["fallback"] = "no_frames: no top-camera frames to send"
            return None, info
        images = await to_thread(self._encode, frames)
        self.calls += 1
        t0 = time.monotonic()
        try:
            if self.timeout_s is None:
                text = await self.client.ask(images, prompt)
            else:  # any client, however it is built, gets the same deadline
                async with asyncio.timeout(self.timeout_s):
                    text = await self.client.ask(images, prompt)
        except TimeoutError as exc:
            why = (
                f"timeout: no answer within {self.timeout_s:g} s"
                if self.timeout_s is not None
                else f"TimeoutError: {exc}"
            )
            info.update(latency_s=round(time.monotonic() - t0, 3), fallback=why)
            return None, info
        except VlmError as exc:
            info.update(latency_s=round(time.monotonic() - t0, 3), fallback=str(exc))
            return None, info
        except Exception as exc:  # a remote model failing is an answer we record, not a crash
            info.update(
                latency_s=round(time.monotonic() - t0, 3),
                fallback=f"{type(exc).__name__}: {exc}"[:300],
            )
            return None, info
        info.update(latency_s=round(time.monotonic() - t0, 3), raw=text[:RAW_CHARS])
        v = parse_vlm_answer(text, self.name)
        if v.reason.startswith("vlm answer unparseable"):
            info["fallback"] = f"malformed: {v.reason}"
            return None, info
        return v, info

    def _encode(self, frames: list[Any]) -> list[bytes]:
        return [
            cv2.imencode(".jpg", f, [cv2.IMWRITE_JPEG_QUALITY, self.jpeg_quality])[1].tobytes()
            for f in frames
        ]

    async def _judge(self, ev: JudgeEvidence, what: str, prompt: str) -> Verdict:
        vlm, info = await self._ask(ev, prompt)
        if self.fallback is None and self.override is None and self.human is None:
            return self._bare(vlm, info)
        geo = (
            await getattr(self.fallback, f"judge_{what}")(ev) if self.fallback is not None else None
        )
        decisive, dist = (
            await to_thread(getattr(self.override, what), ev)
            if self.override is not None
            else (False, None)
        )
        human = await getattr(self.human, f"judge_{what}")(ev) if self.human is not None else None
        # the operator answered when the human judge gives a confidence (no answer: "no", 0)
        human_v = human.verdict if human is not None and human.confidence > 0 else None
        details: dict[str, Any] = {
            "vlm_verdict": None if vlm is None else _short(vlm),
            "human_verdict": human_v,
            "dist_override": dist if decisive else None,
            "dist_mm": dist,
            **info,
            "geometric": None if geo is None else _short(geo),
            "calls": self.calls,
        }
        details.setdefault("fallback", None)
        if human is not None and human_v is not None:
            out = Verdict(human.verdict, human.confidence, human.reason, "vlm->human")
            adopted = "human"
        elif decisive:
            where = "still at its mat position" if what == "pick" else "outside the box"
            out = Verdict(
                "no", 0.95, f"distance override: block {where} ({dist} mm)", "vlm->distance"
            )
            adopted = "dist_override"
        elif vlm is not None and vlm.confidence >= self.confidence_min:
            out = Verdict(vlm.verdict, vlm.confidence, vlm.reason, self.name)
            adopted = "vlm"
        else:
            if vlm is not None:
                details["fallback"] = (
                    f"low_confidence: {vlm.confidence:.2f} < {self.confidence_min:.2f}"
                )
            why = details["fallback"]
            if geo is None:
                out = Verdict("no", 0.0, f"vlm judge: {why}", self.name)
            else:
                out = Verdict(geo.verdict, geo.confidence, f"vlm judge: {why}; {geo.judge}: {geo.reason}",
                              f"{self.name}->{geo.judge}")  # fmt: skip
            adopted = "geometric"
        details["adopted"] = adopted
        if details["fallback"]:
            log.warning("vlm_fallback", what=what, reason=details["fallback"], adopted=adopted)
        log.info("vlm_judgement", what=what, adopted=adopted, verdict=out.verdict,
                 latency_s=info.get("latency_s"), model=self.model)  # fmt: skip
        return Verdict(out.verdict, out.confidence, out.reason, out.judge, details)

    def _bare(self, vlm: Verdict | None, info: dict[str, Any]) -> Verdict:
        if vlm is not None:
            return vlm
        why = str(info.get("fallback", ""))
        if why.startswith("malformed: "):
            return Verdict("no", 0.0, why[len("malformed: ") :], self.name)
        return Verdict("no", 0.0, f"vlm call failed: {why}", self.name)


def _short(v: Verdict) -> dict[str, Any]:
    return {"verdict": v.verdict, "confidence": v.confidence, "reason": v.reason[:200]}
