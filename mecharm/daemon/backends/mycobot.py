"""The ``mycobot`` backend: the real arm through pymycobot's ``MechArm270``.

A serial error closes the port and starts the recovery (docs/daemon.md, "Serial link
recovery"): the configured path is reopened after ``reopen_backoff_s``, then after
twice that, up to ``reopen_backoff_max_s`` apart, ``reopen_attempts`` times (the
server calls ``reopen`` on this schedule); after that each command makes one
attempt, at most every ``reopen_backoff_max_s``. Meanwhile every command is answered
``arm_unavailable`` at once: nothing is sent, nothing is made up.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import serial

from mecharm.common.logging import get_logger
from mecharm.daemon.backends.base import ArmSerialError, ArmUnavailableError, SdkBackend

__all__ = ["GRIPPER_TYPE_ADAPTIVE", "MyCobotBackend"]

log = get_logger("mecharm.daemon.backends.mycobot")

GRIPPER_TYPE_ADAPTIVE = 1


class MyCobotBackend(SdkBackend):
    """pymycobot ``MechArm270(port, baudrate)``; Pi defaults /dev/ttyAMA0 at 1,000,000 baud."""

    name = "mycobot"
    serial_errors = (serial.SerialException, OSError)

    def __init__(
        self,
        port: str = "/dev/ttyAMA0",
        baudrate: int = 1_000_000,
        *,
        reopen_backoff_s: float = 0.5,
        reopen_backoff_max_s: float = 5.0,
        reopen_attempts: int = 30,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        if reopen_backoff_s <= 0 or reopen_attempts < 1:
            raise ValueError("reopen_backoff_s must be > 0 and reopen_attempts >= 1")
        self.port = port
        self.baudrate = baudrate
        self.reopen_backoff_s = reopen_backoff_s
        self.reopen_backoff_max_s = max(reopen_backoff_s, reopen_backoff_max_s)
        self.reopen_attempts = reopen_attempts
        self._clock = clock
        self._lost_at: float | None = None  # None: the link is up, or closed on purpose
        self._lost_why = ""
        self._attempts = 0
        self._next_attempt = 0.0
        #: one entry per recovered outage: attempts it took and seconds the link was down
        self.recoveries: list[dict[str, float]] = []

    def capabilities(self) -> dict[str, Any]:
        return {
            "simulated": False,
            "serial_port": self.port,
            "baudrate": self.baudrate,
            "serial_link_up": self._arm is not None,
        }

    def _connect(self) -> Any:
        from pymycobot.mecharm270 import MechArm270  # heavy import; only when used

        try:
            return MechArm270(self.port, self.baudrate)
        except (serial.SerialException, OSError, ValueError) as exc:
            raise ArmSerialError(
                f"cannot open serial port {self.port} at {self.baudrate} baud: {exc}"
            ) from exc

    def open(self) -> None:
        self._arm = self._connect()
        self._lost_at = None

    # ------------------------------------------------------------ link recovery
    def _call(self, what: str, *args: Any) -> Any:
        try:
            return super()._call(what, *args)
        except ArmSerialError as exc:
            if self._arm is not None:  # the link failed under this call: start the recovery
                self._lose_link(exc.message)
            raise

    def _lose_link(self, why: str) -> None:
        with self._lock:
            arm, self._arm = self._arm, None
        if arm is not None:
            with contextlib.suppress(serial.SerialException, OSError):
                arm.close()
        now = self._clock()
        self._lost_at, self._lost_why = now, why
        self._attempts = 0
        self._next_attempt = now + self.reopen_backoff_s
        log.warning(
            "serial_link_lost",
            port=self.port,
            reason=why,
            next_attempt_in_s=self.reopen_backoff_s,
            attempts=self.reopen_attempts,
        )

    def reopen_in(self) -> float | None:
        if self._arm is not None or self._lost_at is None:
            return None
        if self._attempts >= self.reopen_attempts:
            return None  # used up: each command makes one attempt from now on
        return self._next_attempt - self._clock()

    def reopen(self) -> bool:
        if self._arm is not None:
            return True
        if self._lost_at is None:
            return False  # closed on purpose
        self._attempts += 1
        try:
            arm = self._connect()
        except ArmSerialError as exc:
            exhausted = self._attempts >= self.reopen_attempts
            delay = (
                self.reopen_backoff_max_s
                if exhausted
                else min(
                    self.reopen_backoff_max_s, self.reopen_backoff_s * 2 ** min(self._attempts, 30)
                )
            )
            self._next_attempt = self._clock() + delay
            log.warning(
                "serial_reopen_failed",
                port=self.port,
                attempt=self._attempts,
                attempts=self.reopen_attempts,
                reason=exc.message,
                next_attempt_in_s=delay,
                next_by="command" if exhausted else "schedule",
            )
            if self._attempts == self.reopen_attempts:
                log.error(
                    "serial_reopen_gave_up",
                    port=self.port,
                    attempts=self._attempts,
                    reason=f"{self._attempts} attempts failed; each command now makes one "
                    f"attempt, at most every {self.reopen_backoff_max_s:g} s",
                    hint="check the cable, the arm's power and the serial_port setting",
                )
            return False
        with self._lock:
            self._arm = arm
        down = self._clock() - (self._lost_at or 0.0)
        self.recoveries.append({"attempts": self._attempts, "down_s": down})
        log.info(
            "serial_reopened",
            port=self.port,
            attempt=self._attempts,
            down_s=round(down, 3),
            after=self._lost_why,
        )
        self._lost_at = None
        return True

    def _not_open(self, what: str, *args: Any) -> Any:
        if self._lost_at is None:
            return super()._not_open(what, *args)  # never opened, or closed: serial_error
        exhausted = self._attempts >= self.reopen_attempts
        if exhausted and self._clock() >= self._next_attempt and self.reopen():
            return self._call(what, *args)
        now = self._clock()
        if exhausted:
            plan = (
                f"{self._attempts} attempts to reopen it failed; the next command retries "
                f"(at most every {self.reopen_backoff_max_s:g} s): check the cable and the "
                "arm's power"
            )
        else:
            plan = (
                f"reopening it ({self._attempts} of {self.reopen_attempts} attempts made, "
                f"next in {max(0.0, self._next_attempt - now):.1f} s)"
            )
        raise ArmUnavailableError(
            f"{what}: serial link to {self.port} lost {now - self._lost_at:.1f} s ago "
            f"({self._lost_why}); {plan}; nothing was sent to the arm"
        )

    # pymycobot 4.0.7 rejects the gripper calls without an explicit gripper type
    # (its MechArm270 check falls through to a generic one that refuses None), so
    # pass 1 = the adaptive gripper, the SDK's documented default. The frame then
    # carries one extra data byte, which the firmware accepts.
    def set_gripper_state(self, state: int, speed: int) -> None:
        self._checked("set_gripper_state", int(state), int(speed), GRIPPER_TYPE_ADAPTIVE)

    def set_gripper_value(self, value: int, speed: int) -> None:
        self._checked("set_gripper_value", int(value), int(speed), GRIPPER_TYPE_ADAPTIVE)

    def close(self) -> None:
        self._lost_at = None  # no more attempts
        with self._lock:
            arm, self._arm = self._arm, None
        if arm is not None:
            with contextlib.suppress(serial.SerialException, OSError):
                arm.close()
