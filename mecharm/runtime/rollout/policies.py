"""The policies a rollout can run, named by a spec string (``rollout.policy``).

- ``episode:DATASET[#N]``: play back episode N (default 0) of a LeRobot v3.0 dataset's
  actions — an export of scripted trials (docs/lerobot.md) or a ``lerobot-record``
  dataset of this robot. The next recorded action is sent once the arm has reached the
  present one (every joint within ``playback_tol_deg``) or after ``playback_wait_s`` of
  trying, so the arm follows the recorded path whatever the step bound cuts.
- ``lerobot:PATH``: a trained LeRobot policy (a ``pretrained_model`` folder, as
  ``lerobot-train`` writes it), run through lerobot's own inference (lerobot_policy.py;
  lerobot is imported only then).
- ``python:MODULE:NAME``: ``NAME(settings)`` in an importable module returns a callable
  policy (an ``Observation`` in, an ``Action`` or None out): the seam for a policy of the
  caller's own.

A policy is a plain callable the control loop calls once per tick (control.py); ``None``
ends the episode (the policy's own done). Loading is checked once, before any motion, and
every failure is a ``PolicyError`` that says what was wrong (docs/rollouts.md).
"""

from __future__ import annotations

import importlib
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from mecharm.common.kinematics import JOINT_MAX, JOINT_MIN
from mecharm.common.layout import EXPORT_MANIFEST
from mecharm.runtime.control import GRIPPER_KEY, JOINT_KEYS, Action, Observation

__all__ = [
    "JOINT_FEATURES",
    "EpisodePlayback",
    "PolicyError",
    "RolloutPolicy",
    "load_policy",
    "parse_policy_spec",
    "policy_spec_problem",
    "read_episode_actions",
]

#: the action names a dataset of this robot uses (lerobot's ``<motor>.pos``, robot.py),
#: and the names of exports from before them
JOINT_FEATURES: tuple[str, ...] = (*JOINT_KEYS, GRIPPER_KEY)
_LEGACY_FEATURES: tuple[str, ...] = (*(f"j{i}" for i in range(6)), "gripper")

#: the settings this module reads (docs/settings.md, "What each stage reads"; a test
#: checks it against the code)
SETTINGS_READ: frozenset[str] = frozenset({
    "arm.j1_max", "rollout.device", "rollout.playback_path", "rollout.playback_tol_deg",
    "rollout.playback_wait_s", "rollout.rate_hz",
})  # fmt: skip

KINDS = ("episode", "lerobot", "python")
#: the cameras a rollout can give a policy: the runtime's top camera (the side camera is
#: the recorder's, which never serves the arm)
POLICY_CAMERAS = ("top",)
_PYTHON_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class PolicyError(ValueError):
    """A policy that cannot be loaded or run; the message says what to do."""


class RolloutPolicy(Protocol):
    """What the rollout task needs of a policy."""

    #: how the records name it (the spec, as given)
    name: str
    #: the cameras its observations must carry (``top``: the runtime's top camera)
    cameras: tuple[str, ...]

    def reset(self) -> None:
        """A new episode starts."""

    def __call__(self, obs: Observation) -> Action | None: ...


def parse_policy_spec(spec: str) -> tuple[str, str]:
    """``kind:rest`` → (kind, rest); PolicyError when the kind is not one of ``KINDS``."""
    kind, sep, rest = spec.partition(":")
    if not sep or kind not in KINDS or not rest.strip():
        raise PolicyError(
            f"policy {spec[:200]!r}: give episode:DATASET[#N], lerobot:PATH or python:MODULE:NAME"
        )
    return kind, rest.strip()


def policy_spec_problem(spec: str) -> str | None:
    """What is wrong with the spec's form (None: nothing); the files are checked at load."""
    try:
        kind, rest = parse_policy_spec(spec)
    except PolicyError as exc:
        return str(exc)
    if kind == "python" and not _PYTHON_SPEC.match(rest):
        return f"policy {spec[:200]!r}: python: takes MODULE:NAME (e.g. python:my_policies:make)"
    if kind == "episode":
        _path, sep, num = rest.rpartition("#")
        if sep and not re.fullmatch(r"[0-9]{1,9}", num):
            return f"policy {spec[:200]!r}: the episode after # must be a whole number of at most 9 digits (#0, #3)"
    return None


# ---------------------------------------------------------------- episode playback


def _dataset_and_episode(rest: str) -> tuple[Path, int]:
    path, sep, num = rest.rpartition("#")
    return (Path(path), int(num)) if sep else (Path(rest), 0)


def _time_scale(root: Path, episode: int) -> float:
    """The time scale episode ``episode`` was recorded at (an export's manifest says; a
    dataset without one, e.g. lerobot-record's, is real time)."""
    try:
        manifest = json.loads((root / EXPORT_MANIFEST).read_text(encoding="utf-8"))
        eps = manifest["episodes"]
    except (OSError, ValueError, KeyError, TypeError):
        return 1.0
    for e in eps if isinstance(eps, list) else []:
        if isinstance(e, dict) and e.get("episode_index") == episode:
            scale = e.get("time_scale")
            if isinstance(scale, int | float) and 0 < scale <= 1000:
                return float(scale)
    return 1.0


def _indices(info_path: Path, root: Path, feats: Any, key: str) -> tuple[list[int], int]:
    """Where j0..j5 and the gripper sit in feature ``key``'s vector, and its length."""
    feat = feats.get(key) if isinstance(feats, dict) else None
    names = feat.get("names") if isinstance(feat, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise PolicyError(f"{info_path}: no names for {key}; is it a LeRobot v3.0 dataset?")
    for want in (JOINT_FEATURES, _LEGACY_FEATURES):
        if all(n in names for n in want):
            return [names.index(n) for n in want], len(names)
    raise PolicyError(f"{root}: its {key} is {names}; a mechArm dataset has {list(JOINT_FEATURES)}")


def read_episode_actions(
    root: Path, episode: int, path: str = "action"
) -> tuple[list[Action], float]:
    """Episode ``episode`` of the LeRobot v3.0 dataset at ``root`` as actions, in frame
    order — the joints of its ``action`` (what was commanded) or of its
    ``observation.state`` (``path="state"``: where the arm was), the gripper always the
    action's — and their rate in real-rig frames per second: the dataset's fps, over the time
    scale the episode was recorded at (a 10 fps export of a 5x trial is 2 frames per real-rig
    second). PolicyError when the dataset or the episode is not usable."""
    import pyarrow.parquet as pq  # the runtime's own dependency, imported when needed

    info_path = root / "meta" / "info.json"
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PolicyError(f"{root}: not a LeRobot dataset (no meta/info.json)") from None
    except (OSError, ValueError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise PolicyError(f"{info_path}: unreadable ({why})") from None
    fps = info.get("fps") if isinstance(info, dict) else None
    feats = info.get("features") if isinstance(info, dict) else None
    if (
        isinstance(fps, bool)
        or not isinstance(fps, int | float)
        or not 1 <= fps <= 1000  # lerobot's datasets: whole frames per second
        or not isinstance(feats, dict)
    ):
        raise PolicyError(f"{info_path}: no fps or no features; is it a LeRobot v3.0 dataset?")
    act_at, act_n = _indices(info_path, root, feats, "action")
    key = "observation.state" if path == "state" else "action"
    joint_at, joint_n = (
        _indices(info_path, root, feats, key) if path == "state" else (act_at, act_n)
    )
    files = sorted((root / "data").glob("chunk-*/file-*.parquet"))
    if not files:
        raise PolicyError(f"{root}: no data/chunk-*/file-*.parquet files")
    cols = ["episode_index", "frame_index", "action", *([key] if key != "action" else [])]
    rows: list[tuple[int, list[float], list[float]]] = []
    try:
        for f in files:
            t = pq.read_table(f, columns=cols).to_pydict()
            for k, ep in enumerate(t["episode_index"]):
                if ep == episode:
                    act = [float(v) for v in t["action"][k]]
                    rows.append((int(t["frame_index"][k]), act, [float(v) for v in t[key][k]]))
    except Exception as exc:  # pyarrow's errors vary by the way a file is broken
        first = (str(exc).splitlines() or [""])[0][:300]
        raise PolicyError(
            f"{root}: cannot read its data files ({type(exc).__name__}: {first})"
        ) from None
    if not rows:
        raise PolicyError(f"{root}: no episode {episode} in its data")
    rows.sort(key=lambda r: r[0])
    actions: list[Action] = []
    for fr, act, joints in rows:
        ok = len(act) == act_n and len(joints) == joint_n
        grip = act[act_at[6]] if ok else math.nan
        vals = [joints[i] for i in joint_at[:6]] if ok else []
        if not vals or not all(math.isfinite(v) for v in [*vals, grip]):
            raise PolicyError(f"{root}: episode {episode} frame {fr}: not 7 finite values")
        actions.append(Action(tuple(vals), max(0, min(100, round(grip)))))
    return actions, float(fps) / _time_scale(root, episode)


@dataclass
class EpisodePlayback:
    """A recorded episode played at the loop's rate, at the recording's pace, following the arm.

    Each frame is held for the ticks it lasted in the recording (``hold_ticks``) and until
    the arm is within ``tol_deg`` of it; a frame that changes the gripper waits until the arm
    is within ``tol_deg / 3`` of the frame before it (the jaws act where the recording's
    did). After ``wait_ticks`` of trying the next frame is sent anyway (a stall, a refused
    step: ``unreached`` counts them). None after the last frame.
    """

    name: str
    actions: Sequence[Action]
    #: loop ticks one recorded frame lasts (the loop's rate over the episode's pace)
    hold_ticks: int
    tol_deg: float
    wait_ticks: int
    cameras: tuple[str, ...] = ()
    i: int = 0
    #: the tick the present frame was first sent at (ticks count by the loop's schedule, so
    #: ticks an overrun skipped count too: a frame lasts its time, not its calls)
    since: int | None = None
    #: frames left without the arm reaching them (it stalled or the guards refused)
    unreached: int = 0

    def reset(self) -> None:
        self.i, self.since, self.unreached = 0, None, 0

    def _ready(self, obs: Observation, ticks: int) -> bool:
        """May the next frame go? The present one's time is up and the arm reached it
        (closer for a gripper change)."""
        cur = self.actions[self.i]
        nxt = self.actions[self.i + 1] if self.i + 1 < len(self.actions) else None
        there = max(abs(a - b) for a, b in zip(obs.joints, cur.joints, strict=True))
        tol = self.tol_deg / 3 if nxt is not None and nxt.gripper != cur.gripper else self.tol_deg
        return ticks >= self.hold_ticks and there <= tol

    def __call__(self, obs: Observation) -> Action | None:
        if self.i >= len(self.actions):
            return None
        if self.since is None:  # the first tick sends the first frame
            self.since = obs.step
            return self.actions[0]
        ticks = obs.step - self.since
        ready = self._ready(obs, ticks)
        if ready or ticks >= self.wait_ticks:
            self.unreached += not ready
            self.i, self.since = self.i + 1, obs.step
            return self.actions[self.i] if self.i < len(self.actions) else None
        return self.actions[self.i]


# ---------------------------------------------------------------- python factories


@dataclass
class _Wrapped:
    name: str
    fn: Callable[[Observation], Action | None]
    cameras: tuple[str, ...]

    def reset(self) -> None:
        reset = getattr(self.fn, "reset", None)
        if callable(reset):
            reset()

    def __call__(self, obs: Observation) -> Action | None:
        return self.fn(obs)


def _python_policy(spec: str, rest: str, settings: Any) -> RolloutPolicy:
    module, _, attr = rest.partition(":")
    try:
        mod = importlib.import_module(module)
    except (Exception, SystemExit) as exc:  # not found, or its own code failed on import
        raise PolicyError(
            f"policy {spec[:200]!r}: module {module!r} cannot be imported ({type(exc).__name__}: {str(exc)[:200]})"
        ) from None
    factory = getattr(mod, attr, None)
    if factory is None:
        raise PolicyError(f"policy {spec[:200]!r}: module {module!r} has no {attr!r}")
    try:
        fn = factory(settings)
    except (Exception, SystemExit) as exc:  # a factory that exits is a broken factory too
        raise PolicyError(
            f"policy {spec[:200]!r}: {attr}(settings) failed: {type(exc).__name__}: {str(exc)[:200]}"
        ) from None
    if not callable(fn):
        raise PolicyError(
            f"policy {spec[:200]!r}: {attr}(settings) returned {type(fn).__name__}, not a callable"
        )
    cams = getattr(fn, "cameras", ())
    if (
        not isinstance(cams, tuple | list)
        or not all(isinstance(c, str) for c in cams)
        or [c for c in cams if c not in POLICY_CAMERAS]
    ):
        raise PolicyError(
            f"policy {spec[:200]!r}: its cameras are {cams!r}; a rollout gives "
            f"{list(POLICY_CAMERAS)} (the side camera is the recorder's)"
        )
    return _Wrapped(spec, fn, tuple(cams))


def _expand(spec: str, path: Path) -> Path:
    """``~`` and ``~user`` expanded; PolicyError for a user this machine has not got."""
    try:
        return path.expanduser()
    except RuntimeError as exc:
        raise PolicyError(f"policy {spec[:200]!r}: {path}: {exc}") from None


def load_policy(spec: str, settings: Any) -> RolloutPolicy:
    """The policy ``spec`` names, loaded and checked (PolicyError otherwise). ``settings``:
    the runtime's (``rollout.*`` say how to play back, which device)."""
    kind, rest = parse_policy_spec(spec)
    problem = policy_spec_problem(spec)
    if problem:
        raise PolicyError(problem)
    if kind == "episode":
        root, episode = _dataset_and_episode(rest)
        actions, fps = read_episode_actions(
            _expand(spec, root), episode, settings.rollout.playback_path
        )
        # a measured pose can lie past the guard's limits where the commanded one did not (an
        # arm sagging under its command at j1_max): aim at the limit, which the guard allows,
        # instead of a pose it refuses and the arm never reaches
        hi = [*JOINT_MAX[:1], min(JOINT_MAX[1], settings.arm.j1_max), *JOINT_MAX[2:]]
        actions = [
            Action(tuple(min(max(v, lo), up) for v, lo, up in zip(a.joints, JOINT_MIN, hi, strict=True)),
                   a.gripper)
            for a in actions
        ]  # fmt: skip
        hold = max(1, round(settings.rollout.rate_hz / fps))
        wait = max(1, math.ceil(settings.rollout.playback_wait_s * settings.rollout.rate_hz))
        return EpisodePlayback(spec, actions, hold, settings.rollout.playback_tol_deg, wait)
    if kind == "python":
        return _python_policy(spec, rest, settings)
    from mecharm.runtime.rollout.lerobot_policy import load_lerobot_policy

    return load_lerobot_policy(spec, _expand(spec, Path(rest)), settings.rollout.device)
