"""The Raspberry Pi's install profile, installed for real: ``pip install '.[pi]'`` in a
fresh venv serves the arm (sim backend) and has none of the control computer's
heavy libraries. Slow (a venv and a download), so marked ``slow``; ``make test``
runs it. It needs the package index, as ``make test`` itself does.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

#: what ``pip install .`` reads from the tree: the build's metadata, the readme it names, the
#: package (``[tool.setuptools.packages.find]`` includes ``mecharm`` only)
WHEEL_SOURCES = ("pyproject.toml", "README.md", "mecharm")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _install(venv: Path, src: Path) -> subprocess.CompletedProcess[str]:
    """``pip install '.[pi]'`` into a fresh venv. The venv gets no pip of its own (bootstrapping
    one is most of this test's CPU) and the suite's pip installs into it (``--python``); no
    byte-code is compiled. What lands in the venv is what the Pi's pip would put there."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
         "--disable-pip-version-check", "--no-compile", f"{src}[pi]"],
        capture_output=True, text=True, timeout=840,
    )  # fmt: skip


def _request(port: int, line: dict[str, object]) -> dict[str, object]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall((json.dumps(line) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf)


def test_pi_profile_serves_get_angles_without_heavy_libraries(tmp_path: Path) -> None:
    # a clean copy of what the wheel is built from (pyproject.toml: the metadata, the readme and
    # the one package): no egg-info, build dir or venv of a working tree leaks in (a working
    # tree may hold GBs of them, a lerobot venv for instance)
    src = tmp_path / "src"
    src.mkdir()
    for name in WHEEL_SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, src / name)
    venv = tmp_path / "venv"
    res = _install(venv, src)
    assert res.returncode == 0, f"pip install '.[pi]' failed:\n{res.stderr[-3000:]}"
    py = str(venv / "bin" / "python")
    for mod in ("cv2", "av", "pyarrow", "scipy"):
        probe = subprocess.run([py, "-c", f"import {mod}"], capture_output=True, text=True)
        assert probe.returncode != 0, f"the Pi profile installed {mod}"
        assert "ModuleNotFoundError" in probe.stderr
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MECHARM_")}
    log_path = tmp_path / "daemon.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(venv / "bin" / "mecharm-daemon"), "--backend", "sim", "--port", str(port)],
            cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        reply: dict[str, object] | None = None
        for _ in range(300):  # up to ~30 s for the daemon to listen on a loaded machine
            if proc.poll() is not None:
                break
            try:
                reply = _request(port, {"id": 1, "cmd": "get_angles"})
                break
            except OSError:
                time.sleep(0.1)
        assert proc.poll() is None, f"daemon exited: {log_path.read_text(errors='replace')}"
        assert reply is not None and reply["ok"] is True, reply
        angles = reply["result"]
        assert isinstance(angles, list) and len(angles) == 6
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()  # an unclosed pipe is a ResourceWarning, an error in this suite
