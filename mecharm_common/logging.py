"""structlog set-up: one event per line; JSON when stderr is not a TTY, key=value otherwise.

A process with an operator in front of it (the runtime) sends the log to a file and
gets the warnings and errors back through ``echo``. Its console shows only the events
logged with ``operator=True`` (``FOR_OPERATOR``), one short line each: everything else the
console either says in its own words or leaves to the file, so nothing is shown twice
(docs/console.md, "Log lines").
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, MutableMapping
from typing import Any

import structlog

__all__ = ["FOR_OPERATOR", "configure_logging", "for_operator", "get_logger", "short_line"]

#: the key that marks a log event for the operator's console (``log.warning(..., operator=True)``)
FOR_OPERATOR = "operator"

#: a warning or error as a plain dict (level, event, its fields), for a console
Echo = Callable[[dict[str, Any]], None]


def configure_logging(
    level: str = "info",
    json: bool | None = None,
    stream: Any = None,
    *,
    echo: Echo | None = None,
    echo_level: str = "warning",
) -> None:
    """Configure structlog for a process. ``json=None`` picks JSON unless the stream is a TTY.

    ``stream`` defaults to stderr (a log file for the runtime). ``echo``, when given, also
    gets every event at ``echo_level`` or above; an echo that fails is ignored (the log
    line is still written)."""
    stream = stream or sys.stderr
    if json is None:
        json = not stream.isatty()
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(colors=False, pad_event_to=0)
    )
    levels = logging.getLevelNamesMapping()
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
    ]
    if echo is not None:
        processors.append(_echo(echo, levels[echo_level.upper()]))
    processors += [
        structlog.processors.TimeStamper(fmt="iso", utc=False),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
        renderer,
    ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(levels[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )


def _echo(echo: Echo, min_level: int) -> Callable[[Any, str, MutableMapping[str, Any]], Any]:
    levels = logging.getLevelNamesMapping()

    def processor(_logger: Any, method: str, event: MutableMapping[str, Any]) -> Any:
        if levels.get(str(event.get("level", method)).upper(), 0) >= min_level:
            with contextlib.suppress(Exception):  # the console must never stop the log line
                echo(dict(event))
        return event

    return processor


def for_operator(event: dict[str, Any]) -> bool:
    """Whether a console shows this event: only when its call marked it (never by a list of
    names, which misses the next new event)."""
    return event.get(FOR_OPERATOR) is True


def short_line(event: dict[str, Any]) -> str:
    """``warning not_at_rest: stage=detect note=...``: one line for a console."""
    skip = {"event", "level", "logger_name", "timestamp", FOR_OPERATOR}
    fields = " ".join(f"{k}={v}" for k, v in event.items() if k not in skip and v is not None)
    return f"{event.get('level', 'log')} {event.get('event', '')}" + (
        f": {fields}" if fields else ""
    )


def get_logger(name: str) -> Any:
    # "logger" would clash with wrap_logger()'s own parameter name
    return structlog.get_logger(logger_name=name)
