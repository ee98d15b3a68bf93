"""Suite-wide fixtures. Each area keeps its own fixtures in tests/<area>/conftest.py."""

from __future__ import annotations

import socket

import pytest


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
