"""Suite-wide fixtures. Each area keeps its own fixtures in tests/<area>/conftest.py."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import structlog


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def tcp_port() -> int:
    return free_port(socket.SOCK_STREAM)


@pytest.fixture
def udp_port() -> int:
    return free_port(socket.SOCK_DGRAM)


@pytest.fixture(autouse=True)
def _fresh_structlog() -> Iterator[None]:
    """A test that configures logging (a CLI main, level=error) must not hide the next test's
    events from ``structlog.testing.capture_logs``."""
    yield
    structlog.reset_defaults()
