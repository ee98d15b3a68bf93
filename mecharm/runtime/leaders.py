"""Leaders for teleoperation: where the follower arm should go, read from a person
(docs/lerobot-robot.md, "Leaders").

- ``DragTeachLeader``: a second mechArm whose servos are released, so a person moves it
  by hand; its joints (and jaws) are read through its own ``mecharm-daemon``, never its
  serial port. On disconnect its servos are powered again, holding where it was left.
- ``KeyboardLeader``: keys nudge a target pose from HOME, one joint at a time; the
  gripper opens and closes with the space bar. Keys come from a terminal (a pty or the
  console, read in cbreak mode by a thread), so it needs no display.

Both give lerobot's action dict (``j0.pos`` … ``j5.pos``, ``gripper.pos``); the follower
(``MecharmRobot``) bounds every step and guards every pose, so a leader cannot take the
arm anywhere a policy could not. The lerobot glue is ``lerobot_teleoperator_mecharm``.
"""

from __future__ import annotations

import contextlib
import os
import select
import termios
import threading
import tty
from collections.abc import Mapping
from typing import Any

from mecharm.common.kinematics import JOINT_MAX, JOINT_MIN
from mecharm.common.logging import get_logger
from mecharm.runtime.blocking_link import BlockingLink, LinkError
from mecharm.runtime.client import DaemonClient, DaemonError
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.control import GRIPPER_KEY, JOINT_KEYS

__all__ = ["KEYMAP", "DragTeachLeader", "KeyboardLeader", "LeaderError"]

log = get_logger("mecharm.runtime.leaders")


class LeaderError(RuntimeError):
    """The leader cannot give an action; the message says why and what to do."""


def _action(joints: tuple[float, ...], gripper: float) -> dict[str, float]:
    return {**dict(zip(JOINT_KEYS, map(float, joints), strict=True)), GRIPPER_KEY: float(gripper)}


class DragTeachLeader:
    """A second mechArm moved by hand: servos released at ``connect``, joints and jaws read
    at each ``get_action``, servos powered again at ``disconnect``.

    ``settings.daemon`` is the *leader's* daemon (its host, port and token), not the
    follower's: two arms, two daemons, each the one owner of its arm."""

    def __init__(self, settings: RuntimeSettings) -> None:
        self.settings = settings
        self._link = BlockingLink(settings)
        self.released = False

    @property
    def is_connected(self) -> bool:
        return self._link.is_open and self.released

    def connect(self) -> None:
        try:
            self._link.open()
            self._link.call(self._release)
        except (LinkError, DaemonError) as exc:
            self.disconnect()
            raise LeaderError(f"leader arm: {exc}") from None
        except BaseException:
            self.disconnect()
            raise
        d = self.settings.daemon
        log.info("leader_released", daemon=f"{d.host}:{d.port}")

    async def _release(self) -> None:
        await self._link.client.request("release_all_servos")
        self.released = True

    def get_action(self) -> dict[str, float]:
        """The leader's joints as read now, and its jaws (0 closed … 100 open)."""
        if not self.is_connected:
            raise LeaderError("the leader is not connected: call connect() first")
        try:
            joints, grip = self._link.call(self._read)
        except DaemonError as exc:
            raise LeaderError(
                f"the leader arm did not answer: {exc}; check its mecharm-daemon, then "
                "disconnect() and connect() again"
            ) from None
        return _action(joints, grip)

    async def _read(self) -> tuple[tuple[float, ...], float]:
        client = self._link.client
        joints = await client.get_angles()
        grip = await client.request("get_gripper_value")
        if not isinstance(grip, int | float) or isinstance(grip, bool):
            raise DaemonError(f"get_gripper_value answered {grip!r}")
        return tuple(float(a) for a in joints), float(min(max(grip, 0), 100))

    def disconnect(self) -> None:
        """Power the leader's servos again (it holds where the hand left it), close."""
        released, self.released = self.released, False

        async def hold(client: DaemonClient) -> None:
            if released:
                await client.request("power_on")

        self._link.close(hold)
        log.info("leader_disconnected", servos_powered=released)


#: key -> (joint index, direction); the step is ``KeyboardLeader.step_deg``
KEYMAP: Mapping[str, tuple[int, int]] = {
    "q": (0, +1), "a": (0, -1),
    "w": (1, +1), "s": (1, -1),
    "e": (2, +1), "d": (2, -1),
    "r": (3, +1), "f": (3, -1),
    "t": (4, +1), "g": (4, -1),
    "y": (5, +1), "h": (5, -1),
}  # fmt: skip
#: the gripper toggles open (100) / closed (its close value); HOME again
GRIPPER_KEYS = " "
HOME_KEYS = "0"


class KeyboardLeader:
    """A target pose nudged by keys (``KEYMAP``: q/a j0, w/s j1, e/d j2, r/f j3, t/g j4,
    y/h j5; space the gripper; 0 HOME), starting at ``home`` with the jaws open. Each key
    moves its joint ``step_deg`` within the SDK limits; the follower's guards do the rest.

    ``fd``: the terminal to read (default: the console's stdin). ``feed`` takes keys
    without a terminal (a test, another front end)."""

    def __init__(
        self,
        home: tuple[float, ...],
        *,
        step_deg: float = 2.0,
        close_value: int = 20,
        fd: int | None = None,
    ) -> None:
        if not 0 < step_deg <= 15:
            raise ValueError(f"step_deg {step_deg!r}: give more than 0 and at most 15 degrees")
        if len(home) != 6:
            raise ValueError(f"home {home!r}: give six angles")
        self.home = tuple(float(a) for a in home)
        self.step_deg = float(step_deg)
        self.close_value = int(close_value)
        self.fd = fd
        self._target = list(self.home)
        self._gripper = 100.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._saved: list[Any] | None = None
        self.keys = 0  # keys taken, for the log

    @property
    def is_connected(self) -> bool:
        return self._thread is not None

    def feed(self, keys: str) -> None:
        """Apply ``keys`` as if typed; unknown keys are ignored (and counted nowhere)."""
        with self._lock:
            for key in keys.lower():
                if key in KEYMAP:
                    j, sign = KEYMAP[key]
                    v = self._target[j] + sign * self.step_deg
                    self._target[j] = min(max(v, JOINT_MIN[j]), JOINT_MAX[j])
                elif key in GRIPPER_KEYS:
                    self._gripper = float(self.close_value) if self._gripper > 50 else 100.0
                elif key in HOME_KEYS:
                    self._target = list(self.home)
                else:
                    continue
                self.keys += 1

    def get_action(self) -> dict[str, float]:
        with self._lock:
            return _action(tuple(self._target), self._gripper)

    def connect(self) -> None:
        """Start reading keys from the terminal (cbreak: one key at a time, no echo)."""
        if self._thread is not None:
            raise LeaderError("already connected: disconnect() first")
        fd = self.fd if self.fd is not None else 0
        if not os.isatty(fd):
            raise LeaderError(
                "the keyboard leader reads keys from a terminal, and its input is not one: "
                "run it in a terminal (not a pipe or a service)"
            )
        self._saved = termios.tcgetattr(fd)
        tty.setcbreak(fd)
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._read_keys, args=(fd,), name="keyboard-leader", daemon=True
        )
        self._thread.start()
        log.info("keyboard_leader_started", step_deg=self.step_deg)

    def _read_keys(self, fd: int) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([fd], [], [], 0.1)
            if not ready:
                continue
            try:
                data = os.read(fd, 64)
            except OSError:
                return
            if not data:
                return  # the terminal closed
            self.feed(data.decode("utf-8", errors="ignore"))

    def disconnect(self) -> None:
        """Stop reading keys and give the terminal back as it was."""
        thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None:
            thread.join(timeout=5)
        if self._saved is not None:
            fd = self.fd if self.fd is not None else 0
            with contextlib.suppress(termios.error, OSError):
                termios.tcsetattr(fd, termios.TCSADRAIN, self._saved)
            self._saved = None
        log.info("keyboard_leader_stopped", keys=self.keys)
