"""Profile part: the rig's timing outside the arm's motion (docs/simulation-timing.md).

Three things of the real rig take time that the arm's motion model does not cover:

* a gripper command holds the SDK call for seconds before it returns
  (``gripper_command_s``; the arm's ``SimArmConfig`` takes it, see ``arm_overrides``);
* a camera delivers its first frame a while after it is opened
  (``camera_first_frame_s``; the camera server's feeds take it);
* the VLM judge answers after a network and inference latency (``judge``; the
  Messages API stand-in, ``python -m mecharm_dev.messages_api --latency rig``).

Every figure and its source is in docs/simulation-timing.md. ``ideal`` is the
simulator as it was before profiles: nothing here adds time.
"""

from __future__ import annotations

import math
import random
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["TIMING_PROFILES", "JudgeLatency", "RigTiming"]


class JudgeLatency(BaseModel):
    """How long one VLM call takes: time to first token (log-normal) plus the answer's tokens.

    All figures are real seconds: a remote model does not run faster when the sim does."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    ttft_median_s: float = Field(
        default=0.0, ge=0, le=120, description="median time to first token"
    )
    ttft_sigma: float = Field(
        default=0.0, ge=0, le=3, description="log-normal shape of the time to first token"
    )
    answer_tokens: int = Field(default=0, ge=0, le=4096, description="tokens of the JSON verdict")
    tokens_per_s: float = Field(
        default=60.0, gt=0, le=100000, description="output speed once it answers"
    )
    max_s: float = Field(
        default=120.0,
        gt=0,
        le=3600,
        description="the longest a drawn latency may be (a cap on the tail)",
    )

    @property
    def zero(self) -> bool:
        return self.ttft_median_s == 0.0 and self.answer_tokens == 0

    def draw(self, rng: random.Random) -> float:
        """One call's latency in seconds (0.0 for the ideal world)."""
        if self.zero:
            return 0.0
        ttft = self.ttft_median_s * math.exp(self.ttft_sigma * rng.gauss(0.0, 1.0))
        return min(self.max_s, ttft + self.answer_tokens / self.tokens_per_s)

    def median_s(self) -> float:
        """The median latency (the log-normal's median plus the fixed generation time)."""
        return 0.0 if self.zero else self.ttft_median_s + self.answer_tokens / self.tokens_per_s


class RigTiming(BaseModel):
    """the rig's timing outside the arm's motion; the defaults are the ideal world.

    Times are the rig's seconds (divided by the sim's time scale where the sim runs them),
    except the judge's, which are real seconds."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    gripper_command_s: float = Field(
        default=0.0, ge=0, le=30, description="how long a gripper command holds the SDK call"
    )
    camera_first_frame_s: float = Field(
        default=0.0, ge=0, le=30, description="open to first frame, for each client of a camera"
    )
    judge: JudgeLatency = Field(default_factory=JudgeLatency)

    def arm_overrides(self) -> dict[str, Any]:
        """What this timing sets in the sim arm's config (``SimArmConfig``); {} changes nothing."""
        return {"gripper_command_s": self.gripper_command_s} if self.gripper_command_s else {}


TIMING_PROFILES: dict[str, RigTiming] = {
    "ideal": RigTiming(),
    # figures and their sources: docs/simulation-timing.md, "Figures"
    "rig": RigTiming(
        gripper_command_s=4.0,
        camera_first_frame_s=1.0,
        judge=JudgeLatency(ttft_median_s=1.8, ttft_sigma=0.35, answer_tokens=60, tokens_per_s=63.0),
    ),
    "harsh": RigTiming(
        gripper_command_s=5.0,
        camera_first_frame_s=2.5,
        judge=JudgeLatency(ttft_median_s=3.5, ttft_sigma=0.6, answer_tokens=60, tokens_per_s=30.0),
    ),
}
