"""structlog set-up: one event per line; JSON when stderr is not a TTY, key=value otherwise.

A process with an operator in front of it (the runtime) sends the log to a file and
gets the warnings and errors back through ``echo``. Its console shows only the events
logged with ``operator=True`` (``FOR_OPERATOR``), one short line each: everything else the
console either says in its own words or leaves to the file, so nothing is shown twice
(docs/console.md, "Log lines").
"""

from __future__ import annotations

import contextlib
import errno
import logging
import sys
from collections.abc import Callable, MutableMapping
from typing import Any

import structlog

__all__ = [
    "FOR_OPERATOR",
    "configure_logging",
    "for_operator",
    "get_logger",
    "log_lines_dropped",
    "short_line",
]

#: the key that marks a log event for the operator's console (``log.warning(..., operator=True)``)
FOR_OPERATOR = "operator"

#: a warning or error as a plain dict (level, event, its fields), for a console
Echo = Callable[[dict[str, Any]], None]


#: told once per sink, with the error's text, when its first line could not be written
OnDrop = Callable[[str], None]


class _LineSink:
    """Where a process's log lines go. A line that cannot be written (disk full, the file's
    folder gone, a closed stream) is dropped and counted, never raised: a log line must not
    end a trial with the block in the air (docs/reliability.md, "No write ends a process")."""

    def __init__(self, stream: Any, on_drop: OnDrop | None) -> None:
        self.stream = stream
        self.on_drop = on_drop
        self.dropped = 0

    def write_line(self, line: str) -> None:
        try:
            self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError) as exc:
            # a LineFile keeps what failed for a later flush: a log line is not worth that
            discard = getattr(self.stream, "discard_pending", None)
            if discard is not None:
                with contextlib.suppress(Exception):
                    discard()
            self.dropped += 1
            if self.dropped == 1 and self.on_drop is not None:
                with contextlib.suppress(Exception):  # the notice must not raise either
                    self.on_drop(_why(exc))


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"{exc.strerror} ({errno.errorcode.get(exc.errno, exc.errno)})"
    return str(exc) or type(exc).__name__


class _SinkLogger:
    """A structlog logger that hands each rendered line to a ``_LineSink``."""

    def __init__(self, sink: _LineSink) -> None:
        self._sink = sink

    def msg(self, message: str) -> None:
        self._sink.write_line(message)

    log = debug = info = warn = warning = err = error = critical = exception = fatal = msg


_SINK = _LineSink(sys.stderr, None)


def log_lines_dropped() -> int:
    """How many log lines the present configuration could not write (0 after a reconfigure)."""
    return _SINK.dropped


def configure_logging(
    level: str = "info",
    json: bool | None = None,
    stream: Any = None,
    *,
    echo: Echo | None = None,
    echo_level: str = "warning",
    on_drop: OnDrop | None = None,
) -> None:
    """Configure structlog for a process. ``json=None`` picks JSON unless the stream is a TTY.

    ``stream`` defaults to stderr (a log file for the runtime). ``echo``, when given, also
    gets every event at ``echo_level`` or above; an echo that fails is ignored (the log
    line is still written). A line the stream refuses is dropped and counted
    (``log_lines_dropped``); ``on_drop`` hears of the first one."""
    global _SINK
    stream = stream or sys.stderr
    if json is None:
        isatty = getattr(stream, "isatty", None)
        json = not (isatty is not None and isatty())
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
    sink = _SINK = _LineSink(stream, on_drop)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(levels[level.upper()]),
        logger_factory=lambda *_args: _SinkLogger(sink),
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
