"""Arm backends: ``base.ArmBackend`` (the interface), ``sim`` and ``mycobot``."""

from __future__ import annotations

from mecharm.daemon.backends.base import ArmBackend, ArmNoReplyError, ArmSerialError, BackendError

__all__ = ["ArmBackend", "ArmNoReplyError", "ArmSerialError", "BackendError"]
