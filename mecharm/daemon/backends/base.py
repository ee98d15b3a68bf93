"""The arm backend interface: the only thing the daemon's server talks to.

A backend wraps one SDK-like arm object (pymycobot ``MechArm270`` or ``SimArm``)
and turns its return conventions into values or typed errors: ``-1``/``[]``/
``None`` from the SDK become ``ArmNoReplyError`` (never a made-up value), a
serial exception becomes ``ArmSerialError``. Methods block; the server calls
them one at a time, in a worker thread unless ``blocks`` says a call cannot
block ([concurrency.md](../../docs/concurrency.md)).
"""

from __future__ import annotations

import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from mecharm.daemon.protocol import ErrorCode, wire_angles

__all__ = [
    "ArmBackend",
    "ArmNoReplyError",
    "ArmSerialError",
    "ArmUnavailableError",
    "BackendError",
    "SdkBackend",
]


_NUMBER = frozenset((int, float))  # exact types: a bool or a str is not a reading


class BackendError(RuntimeError):
    """A backend call failed; ``code`` is the protocol error code to answer with."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ArmNoReplyError(BackendError):
    """The firmware did not answer (SDK returned -1, [] or None)."""

    code = ErrorCode.ARM_NO_REPLY


class ArmSerialError(BackendError):
    """The serial port failed (cannot open, unplugged, I/O error)."""

    code = ErrorCode.SERIAL_ERROR


class ArmUnavailableError(BackendError):
    """The serial link is down and being reopened: the command was not sent."""

    code = ErrorCode.ARM_UNAVAILABLE


class ArmBackend(ABC):
    """Blocking arm interface. Every method raises BackendError subclasses on failure."""

    #: short name reported by ``hello``
    name: str = "abstract"

    def capabilities(self) -> dict[str, Any]:
        return {}

    def time_scale(self) -> float:
        """How many times faster than real time this arm moves (``hello`` announces it, the
        runtime scales its waits by it): 1.0 for a real arm."""
        return 1.0

    def blocks(self, call: str) -> bool:
        """Whether method ``call`` may sleep or do I/O. The server runs blocking calls in a
        worker thread (``anyio.to_thread``) and the others inline on the event loop, which
        is far cheaper than a thread hop; either way one at a time."""
        return True

    def reopen_in(self) -> float | None:
        """Seconds until the backend wants its lost link reopened (<= 0: now), or None when
        the link is up or it wants no more attempts. The server asks after every
        ``serial_error`` and calls ``reopen`` then (docs/daemon.md, "Serial link recovery")."""
        return None

    def reopen(self) -> bool:
        """One attempt to reopen the lost link (blocking); True when it is up."""
        return True

    @abstractmethod
    def open(self) -> None: ...

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def get_angles(self) -> list[float]: ...

    @abstractmethod
    def send_angles(self, angles: Sequence[float], speed: int) -> list[float]:
        """Send a pose; return the angles actually sent (after the SDK's x100 truncation)."""

    @abstractmethod
    def set_gripper_state(self, state: int, speed: int) -> None: ...

    @abstractmethod
    def set_gripper_value(self, value: int, speed: int) -> None: ...

    @abstractmethod
    def get_gripper_value(self) -> int: ...

    @abstractmethod
    def set_fresh_mode(self, mode: int) -> None: ...

    @abstractmethod
    def get_fresh_mode(self) -> int: ...

    @abstractmethod
    def is_moving(self) -> bool: ...

    @abstractmethod
    def power_on(self) -> None: ...

    @abstractmethod
    def release_all_servos(self) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...


def _is_no_reply(value: Any) -> bool:
    return (
        value is None
        or (isinstance(value, int) and not isinstance(value, bool) and value == -1)
        or value == []
    )


class SdkBackend(ArmBackend):
    """Shared mapping for objects with pymycobot's API and return conventions.

    Subclasses create ``self._arm`` in ``open()`` and list the exception types
    that mean "serial link failed" in ``serial_errors``.
    """

    serial_errors: tuple[type[BaseException], ...] = (OSError,)

    def __init__(self) -> None:
        self._arm: Any = None
        self._lock = threading.Lock()

    def _not_open(self, what: str, *args: Any) -> Any:
        """Called instead of the SDK while ``self._arm`` is None: raise why, or return the
        reply of a link that was just reopened."""
        raise ArmSerialError(f"{what}: backend {self.name} is not open")

    def _call(self, what: str, *args: Any) -> Any:
        if self._arm is None:
            return self._not_open(what, *args)
        with self._lock:
            try:
                return getattr(self._arm, what)(*args)
            except self.serial_errors as exc:
                raise ArmSerialError(f"{what}: serial error: {exc}") from exc

    def _checked(self, what: str, *args: Any) -> Any:
        value = self._call(what, *args)
        if _is_no_reply(value):
            raise ArmNoReplyError(f"{what}: the arm did not answer (SDK returned {value!r})")
        return value

    def _flag(self, what: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value not in (0, 1):
            raise ArmNoReplyError(f"{what}: unexpected reply {value!r} (expected 0 or 1)")
        return value

    def get_angles(self) -> list[float]:
        value = self._checked("get_angles")
        if type(value) is not list or len(value) != 6 or not _NUMBER.issuperset(map(type, value)):
            raise ArmNoReplyError(f"get_angles: malformed reply {value!r} (expected 6 numbers)")
        out = list(map(float, value))
        if not math.isfinite(sum(out)):  # a NaN or inf anywhere makes the sum non-finite
            raise ArmNoReplyError(f"get_angles: non-finite reading {value!r}")
        return out

    def send_angles(self, angles: Sequence[float], speed: int) -> list[float]:
        self._checked("send_angles", [float(a) for a in angles], int(speed))
        return wire_angles(angles)

    def set_gripper_state(self, state: int, speed: int) -> None:
        self._checked("set_gripper_state", int(state), int(speed))

    def set_gripper_value(self, value: int, speed: int) -> None:
        self._checked("set_gripper_value", int(value), int(speed))

    def get_gripper_value(self) -> int:
        value = self._checked("get_gripper_value")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
            raise ArmNoReplyError(f"get_gripper_value: malformed reply {value!r}")
        return value

    def set_fresh_mode(self, mode: int) -> None:
        self._checked("set_fresh_mode", int(mode))

    def get_fresh_mode(self) -> int:
        return self._flag("get_fresh_mode", self._checked("get_fresh_mode"))

    def is_moving(self) -> bool:
        return bool(self._flag("is_moving", self._checked("is_moving")))

    def power_on(self) -> None:
        self._checked("power_on")

    def release_all_servos(self) -> None:
        self._checked("release_all_servos")

    def stop(self) -> None:
        self._checked("stop")
