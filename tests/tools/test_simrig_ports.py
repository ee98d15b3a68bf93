"""A port chosen free can be taken before the simulated daemon binds it (a parallel test's
server): the rig starts again on new ports, and the failed start leaves no file open."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from mecharm.tools import simrig


@pytest.mark.slow
def test_a_port_taken_before_the_daemon_binds_it_means_new_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = taken.getsockname()[1]
    real = simrig.free_port
    handed: list[int] = []

    def first_one_taken(kind: int = socket.SOCK_STREAM) -> int:
        port = busy if not handed else real(kind)
        handed.append(port)
        return port

    monkeypatch.setattr(simrig, "free_port", first_one_taken)
    try:
        rig = simrig.start_sim_daemon(tmp_path / "logs", time_scale=20)
    finally:
        taken.close()
    try:
        assert handed[0] == busy and rig.daemon_port != busy
        assert "already in use" in (tmp_path / "logs" / "daemon.log").read_text()
    finally:
        rig.daemon.stop()
