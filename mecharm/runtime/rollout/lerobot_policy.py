"""A trained LeRobot policy as a rollout's policy (``rollout.policy: lerobot:PATH``).

Loaded and run the way ``lerobot-record --policy.path`` does it in lerobot 0.4.4: the
config and weights from the ``pretrained_model`` folder, its saved pre- and post-processor
pipelines (normalisation, device), ``predict_action`` per tick. The observation is built
under the dataset names a policy trained on this robot's data knows
(``observation.state`` = the six joints and the gripper, ``observation.images.<camera>``
RGB at the size the policy was trained at); a policy that wants a camera the runtime has
not got is refused before anything moves.

lerobot (and torch) are imported here only, so the runtime runs without them; without
lerobot installed this is a PolicyError that says how to install it (docs/rollouts.md).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from mecharm.runtime.control import Action, Observation
from mecharm.runtime.rollout.policies import POLICY_CAMERAS as CAMERAS
from mecharm.runtime.rollout.policies import PolicyError

__all__ = ["load_lerobot_policy"]

STATE_KEY, IMAGE_PREFIX = "observation.state", "observation.images."


@dataclass
class LerobotPolicy:
    name: str
    policy: Any
    pre: Any
    post: Any
    device: Any
    cameras: tuple[str, ...]
    #: camera → (height, width) the policy was trained at
    sizes: dict[str, tuple[int, int]]
    task: str

    def reset(self) -> None:
        self.policy.reset()  # action chunks queued by the last episode are dropped

    def observation(self, obs: Observation) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {
            STATE_KEY: np.asarray([*obs.joints, float(obs.gripper)], dtype=np.float32)
        }
        for cam in self.cameras:
            f = obs.frames.get(cam)
            if f is None or not f.ok or f.image is None:
                raise PolicyError(f"{self.name}: no frame from the {cam} camera this tick")
            h, w = self.sizes[cam]
            img = f.image if f.image.shape[:2] == (h, w) else cv2.resize(f.image, (w, h))
            out[IMAGE_PREFIX + cam] = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
        return out

    def __call__(self, obs: Observation) -> Action | None:
        from lerobot.utils.control_utils import predict_action

        act = predict_action(
            self.observation(obs), self.policy, self.device, self.pre, self.post,
            use_amp=False, task=self.task, robot_type="mecharm270",
        )  # fmt: skip
        vals = [float(v) for v in act.reshape(-1).tolist()]
        if len(vals) != 7 or not all(math.isfinite(v) for v in vals):
            raise PolicyError(f"{self.name}: the policy gave {vals}, not 7 finite values")
        return Action(tuple(vals[:6]), max(0, min(100, round(vals[6]))))


#: policies loaded in this process, by (folder, device, config's mtime): a session loads its
#: policy once (the command line checks it before the first trial, each trial asks again)
_LOADED: dict[tuple[str, str, float], LerobotPolicy] = {}


def load_lerobot_policy(spec: str, path: Path, device: str) -> LerobotPolicy:
    """The policy saved at ``path`` on ``device``; PolicyError when lerobot is missing, the
    folder is not a policy, or its inputs are not ones the rig can give."""
    try:
        key = (str(path.resolve()), device, (path / "config.json").stat().st_mtime)
    except OSError:
        key = None
    if key is not None and key in _LOADED:  # under the name this spec gives it
        return dataclasses.replace(_LOADED[key], name=spec)
    loaded = _load(spec, path, device)
    if key is not None:
        _LOADED[key] = loaded
    return loaded


def _load(spec: str, path: Path, device: str) -> LerobotPolicy:
    try:
        import torch
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors
    except ImportError as exc:
        raise PolicyError(
            f"policy {spec[:200]!r}: lerobot is not installed here ({exc}); install it beside the "
            "runtime: pip install 'lerobot>=0.4.4,<0.5' (docs/rollouts.md)"
        ) from None
    if not (path / "config.json").is_file():
        raise PolicyError(
            f"policy {spec[:200]!r}: {path} has no config.json; give a pretrained_model folder "
            "(outputs/train/.../checkpoints/last/pretrained_model)"
        )
    try:
        cfg = PreTrainedConfig.from_pretrained(str(path))
        cfg.pretrained_path = str(path)
        cfg.device = device
        policy = get_policy_class(cfg.type).from_pretrained(str(path), config=cfg)
        policy.eval()
        pre, post = make_pre_post_processors(
            policy_cfg=cfg, pretrained_path=str(path),
            preprocessor_overrides={"device_processor": {"device": device}},
        )  # fmt: skip
    except Exception as exc:
        raise PolicyError(
            f"policy {spec[:200]!r}: cannot load it: {type(exc).__name__}: {exc}"
        ) from None
    feats = dict(cfg.input_features)
    state = feats.pop(STATE_KEY, None)
    if state is None or tuple(state.shape) != (7,):
        raise PolicyError(
            f"policy {spec[:200]!r}: it takes {STATE_KEY} of shape "
            f"{None if state is None else tuple(state.shape)}; the mechArm gives 7 values"
        )
    sizes: dict[str, tuple[int, int]] = {}
    for key, feat in feats.items():
        cam = key.removeprefix(IMAGE_PREFIX)
        if not key.startswith(IMAGE_PREFIX) or cam not in CAMERAS:
            raise PolicyError(
                f"policy {spec[:200]!r}: it takes {key}, which a rollout cannot give (only "
                f"{STATE_KEY} and {', '.join(IMAGE_PREFIX + c for c in CAMERAS)}); train it "
                "without that feature (lerobot-train --dataset.video_backend ... "
                "--policy.input_features, or an export without the side camera)"
            )
        shape = tuple(feat.shape)
        if len(shape) != 3 or shape[0] != 3:
            raise PolicyError(f"policy {spec[:200]!r}: its {key} has shape {shape}, not (3, H, W)")
        sizes[cam] = (int(shape[1]), int(shape[2]))
    out = cfg.output_features.get("action")
    if out is None or tuple(out.shape) != (7,):
        raise PolicyError(
            f"policy {spec[:200]!r}: its action is not 7 values (the mechArm's j0..gripper)"
        )
    return LerobotPolicy(
        spec, policy, pre, post, torch.device(device), tuple(sizes), sizes,
        task="put the red block into the white box",
    )  # fmt: skip
