"""The rig as a LeRobot-shaped robot: connect, observe, act, disconnect (docs/lerobot-robot.md).

lerobot drives a robot synchronously from its own loop (``lerobot-record``,
``lerobot-replay``, ``lerobot-teleoperate``, a policy's rollout): ``get_observation()``
returns the joints and the camera images, ``send_action()`` takes joint targets and
returns what was actually sent. ``MecharmRobot`` gives exactly that over the runtime's own
pieces, so a lerobot session is held to the same rules as a trial:

- the arm is reached only through the daemon (TCP, its token, its safety envelope);
  nothing here opens a serial port;
- every action is a streamed step of the safe arm (``ControlLoop.send_action`` →
  ``SafeArm.stream``): each joint's change bounded against the present reading
  (``max_step_deg``, lerobot's ``max_relative_target``), then the pose guard, the
  envelope and the path check; a refused step is not sent and the arm holds, and the
  returned action says so (the pose held);
- the asyncio side (the daemon client, its keepalive pings) runs in its own thread
  behind an anyio blocking portal, so a policy that thinks for a minute between two
  calls does not lose the daemon's slot (the link pings while lerobot's thread computes).

Features are named like lerobot's own arms: ``j0.pos`` … ``j5.pos`` (degrees) and
``gripper.pos`` (0 closed … 100 open, the value last commanded: not read from the arm,
which would cost a serial read per tick, and an export's is the command too), and one
``(height, width, 3)`` RGB image per camera. A camera whose frames have another size is
resized to the configured one (``INTER_AREA``), which is also how a 1080p stream becomes a
640×360 feature.

The lerobot glue (``RobotConfig`` / ``Robot`` subclasses, registered as ``mecharm270``)
is the separate ``lerobot_robot_mecharm`` package (plugins/), which lerobot discovers by
its name; this module does not import lerobot.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mecharm.cameras.base import CameraSource, fit_image
from mecharm.cameras.factory import open_camera
from mecharm.common.logging import get_logger
from mecharm.runtime.arm import DaemonArm
from mecharm.runtime.blocking_link import BlockingLink, LinkError
from mecharm.runtime.client import DaemonClient, DaemonError
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.control import GRIPPER_KEY, JOINT_KEYS, Action, ControlLoop
from mecharm.runtime.ports import RealClock
from mecharm.runtime.recorder_link import RecorderLink
from mecharm.runtime.records.trace import TraceWriter
from mecharm.runtime.rigsetup import check_envelope
from mecharm.runtime.safe_arm import MotionRefused, SafeArm

__all__ = [
    "GRIPPER_KEY",
    "JOINT_KEYS",
    "CameraSpec",
    "MecharmRobot",
    "RobotError",
    "RobotNotConnected",
]

log = get_logger("mecharm.runtime.robot")

#: trace lines a session keeps in memory (a tick writes two or three; the file has them all)
TRACE_LINES_KEPT = 1000


class RobotError(RuntimeError):
    """The robot cannot do what was asked; the message says why and what to do."""


class RobotNotConnected(RobotError):
    """A call that needs the arm before ``connect()`` (or after ``disconnect()``)."""


@dataclass(frozen=True)
class CameraSpec:
    """One camera of the robot: its source (an index, ``name:...``, an MJPEG URL or a
    file, as the runtime's ``top_camera``) and the image size the features promise."""

    source: str
    width: int
    height: int

    def __post_init__(self) -> None:
        for what, v in (("width", self.width), ("height", self.height)):
            if not (isinstance(v, int) and 16 <= v <= 4096):
                raise ValueError(f"camera {self.source!r}: {what} {v!r} must be 16-4096 pixels")


class MecharmRobot:
    """A synchronous, lerobot-shaped robot over the daemon and the safe arm."""

    def __init__(
        self,
        settings: RuntimeSettings,
        *,
        cameras: Mapping[str, CameraSpec] | None = None,
        max_step_deg: float = 5.0,
        trace_path: Path | None = None,
    ) -> None:
        if not (math.isfinite(max_step_deg) and 0 < max_step_deg <= 30):
            raise ValueError(f"max_step_deg {max_step_deg!r}: give more than 0 and at most 30°")
        self.settings = settings
        self.cameras = dict(cameras or {})
        bad = [n for n in self.cameras if n in (*JOINT_KEYS, GRIPPER_KEY) or not n.isidentifier()]
        if bad:
            raise ValueError(f"camera names {bad}: give names like 'top' (letters, digits, _)")
        self.max_step_deg = max_step_deg
        self.trace_path = trace_path
        #: the daemon client on its own thread, with its keepalive (docs/daemon.md)
        self._link = BlockingLink(settings)
        self._fresh_mode_before: int | None = None
        self._loop: ControlLoop | None = None
        self._open: dict[str, CameraSource] = {}
        self._step = 0
        self._observed = False  # a reading since the last send (the step bound's reference)
        self._lock = threading.Lock()  # one call at a time (lerobot's thread, a teleop's)

    # ---- what it offers
    @property
    def motor_features(self) -> dict[str, type]:
        return {**dict.fromkeys(JOINT_KEYS, float), GRIPPER_KEY: float}

    @property
    def observation_features(self) -> dict[str, Any]:
        cams = {n: (c.height, c.width, 3) for n, c in self.cameras.items()}
        return {**self.motor_features, **cams}

    @property
    def action_features(self) -> dict[str, type]:
        return self.motor_features

    @property
    def is_connected(self) -> bool:
        return self._loop is not None and self._link.is_open

    # ---- life cycle
    def connect(self) -> None:
        """Open the daemon link (token, time scale and envelope checked as a session's
        start checks them), put the arm in fresh mode, open the cameras. Raises RobotError
        with what to do."""
        if self._link.is_open:
            raise RobotError("already connected: disconnect() first")
        try:
            self._link.open()
            self._link.call(self._setup)
            for name, spec in self.cameras.items():
                self._open[name] = open_camera(spec.source)
        except LinkError as exc:
            self.disconnect()
            raise RobotError(str(exc)) from None
        except BaseException:
            self.disconnect()
            raise
        log.info(
            "robot_connected", daemon=f"{self.settings.daemon.host}:{self.settings.daemon.port}",
            cameras=sorted(self.cameras), max_step_deg=self.max_step_deg,
        )  # fmt: skip

    async def _setup(self) -> None:
        client = self._link.client
        s = self.settings.at_time_scale(client.time_scale)
        envelope = check_envelope(s, client)
        clock = RealClock()
        arm = SafeArm(
            s,
            DaemonArm(client, clock, s.arm.j1_max, envelope),
            clock,
            # hours at 30 Hz: the file keeps every step, memory only the last ones
            TraceWriter(self.trace_path, keep_lines=TRACE_LINES_KEPT),
            RecorderLink(None, off_reason="recorder off: lerobot robot"),
            where=lambda: "lerobot",
        )
        # a stream needs the newest command to win (fresh mode 1): queued sends (0, the
        # arm's default) would each run out from the previous target. Put back at the end.
        was = await client.request("get_fresh_mode")
        self._fresh_mode_before = int(was) if was in (0, 1) else 0
        await client.set_fresh_mode(1)
        await arm.read()  # the arm answers, and the step bound has its first reading
        self._loop = ControlLoop(arm, rate_hz=30.0, max_step_deg=self.max_step_deg, note="lerobot")

    def disconnect(self) -> None:
        """Close the cameras and the daemon link; the arm holds where it is."""
        for cam in self._open.values():
            try:
                cam.close()
            except Exception as exc:  # closing the others matters more
                log.warning("robot_camera_close_failed", error=str(exc))
        self._open.clear()
        loop, self._loop = self._loop, None
        mode, self._fresh_mode_before = self._fresh_mode_before, None

        async def restore(client: DaemonClient) -> None:
            if loop is not None:  # a gripper command under way ends first: it holds the link
                try:
                    await loop.gripper_done()
                except (DaemonError, MotionRefused) as exc:  # said; the mode goes back anyway
                    log.warning("robot_gripper_failed", error=str(exc))
            if mode is not None:
                await client.set_fresh_mode(mode)

        self._link.close(restore)
        log.info("robot_disconnected")

    def calibrate(self) -> None:
        """Nothing to do: the mechArm's joint zeros are the firmware's (docs/setup.md)."""

    @property
    def is_calibrated(self) -> bool:
        return True

    def configure(self) -> None:
        """Nothing more to do: ``connect()`` puts the arm in fresh mode (the newest command
        wins, as a stream needs) and ``disconnect()`` puts back the mode it found."""

    # ---- one tick
    def _ready(self) -> tuple[BlockingLink, ControlLoop]:
        if self._loop is None or not self.is_connected:
            raise RobotNotConnected("the robot is not connected: call connect() first")
        return self._link, self._loop

    def get_observation(self) -> dict[str, Any]:
        """The joints as read now, the gripper as last commanded, each camera's newest
        frame as RGB at the configured size."""
        with self._lock:
            link, loop = self._ready()
            try:
                obs = link.call(loop.get_observation, self._step)
            except (DaemonError, MotionRefused) as exc:
                raise _lost(exc) from None
            self._observed = True
            out: dict[str, Any] = dict(zip(JOINT_KEYS, map(float, obs.joints), strict=True))
            out[GRIPPER_KEY] = float(obs.gripper)
            for name, cam in self._open.items():
                out[name] = self._image(name, cam)
            return out

    def _image(self, name: str, cam: CameraSource) -> np.ndarray[Any, Any]:
        spec = self.cameras[name]
        frame = cam.read()
        if not frame.ok or frame.image is None:
            raise RobotError(f"camera {name} ({spec.source}) gave no frame: is it streaming?")
        return fit_image(frame.image, spec.width, spec.height, rgb=True)

    async def _send(self, loop: ControlLoop, action: Action) -> Action:
        # the step bound is against the present reading: a caller that only sends
        # (lerobot-replay, a teleoperator) gets a fresh one per send, as lerobot's own arms
        # read Present_Position in send_action; after get_observation its reading is it
        if not self._observed:
            await loop.refresh()  # (none while a gripper command holds the link)
        self._observed = False
        sent = await loop.send_action(action, self._step)
        self._step += 1
        return sent

    def send_action(self, action: Mapping[str, Any]) -> dict[str, float]:
        """Send joint targets (``j0.pos`` … ``j5.pos``, degrees) and optionally
        ``gripper.pos`` through the safe arm; return the action actually sent: each joint
        bounded against the present reading, or the pose held when the step was refused."""
        joints, gripper = parse_action(action)
        with self._lock:
            link, loop = self._ready()
            try:
                sent = link.call(self._send, loop, Action(joints, gripper))
            except (DaemonError, MotionRefused) as exc:
                raise _lost(exc) from None
        out = dict(zip(JOINT_KEYS, map(float, sent.joints), strict=True))
        out[GRIPPER_KEY] = float(sent.gripper if sent.gripper is not None else loop.gripper)
        return out


def _lost(exc: Exception) -> RobotError:
    """The arm or its link failed mid-session: what happened and what to do."""
    return RobotError(
        f"the arm did not answer: {exc}. Check mecharm-daemon (its log), then disconnect() "
        "and connect() again"
    )


def parse_action(action: Mapping[str, Any]) -> tuple[tuple[float, ...], int | None]:
    """Six finite joint targets and an optional gripper value 0-100 from a lerobot action;
    ValueError naming what is missing or wrong (nothing is sent then)."""
    missing = [k for k in JOINT_KEYS if k not in action]
    if missing:
        raise ValueError(f"action lacks {missing}: give all of {list(JOINT_KEYS)} (degrees)")
    unknown = sorted(set(action) - {*JOINT_KEYS, GRIPPER_KEY})
    if unknown:
        raise ValueError(f"action has keys this robot does not know: {unknown}")
    joints: list[float] = []
    for k in JOINT_KEYS:
        v = _number(action[k], k)
        joints.append(v)
    gripper = None
    if GRIPPER_KEY in action and action[GRIPPER_KEY] is not None:
        g = _number(action[GRIPPER_KEY], GRIPPER_KEY)
        if not 0 <= g <= 100:
            raise ValueError(f"{GRIPPER_KEY} {g:g}: give 0 (closed) to 100 (open)")
        gripper = round(g)
    return tuple(joints), gripper


def _number(v: Any, key: str) -> float:
    try:
        f = float(v.item() if hasattr(v, "item") else v)  # a numpy or torch scalar
    except (TypeError, ValueError):
        raise ValueError(f"{key} = {v!r} is not a number") from None
    if not math.isfinite(f):
        raise ValueError(f"{key} = {f!r} is not a finite number")
    return f
