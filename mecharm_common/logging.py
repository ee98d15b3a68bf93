"""structlog set-up: one event per line; JSON when stderr is not a TTY, key=value otherwise."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

__all__ = ["configure_logging", "get_logger"]


def configure_logging(level: str = "info", json: bool | None = None, stream: Any = None) -> None:
    """Configure structlog for a process. ``json=None`` picks JSON unless stderr is a TTY."""
    stream = stream or sys.stderr
    if json is None:
        json = not stream.isatty()
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(colors=False, pad_event_to=0)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=False),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> Any:
    # "logger" would clash with wrap_logger()'s own parameter name
    return structlog.get_logger(logger_name=name)
