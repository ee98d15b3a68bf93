"""Recorder test fixtures: settings on a tmp data root, an in-process recorder, an MJPEG server."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from mecharm.recorder.config import RecorderSettings, VideoSettings
from mecharm.recorder.service import RecorderService


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_settings(root: Path, **kw: Any) -> RecorderSettings:
    """Small, fast settings: 320x240 synthetic camera, quick loss/freeze detection."""
    defaults: dict[str, Any] = dict(
        data_root=root,
        udp_port=free_udp_port(),
        camera="synthetic?fps=30&w=320&h=240",
        camera_retry_sec=0.2,
        camera_lost_after=5,
        frozen_after_sec=0.3,
        status_interval_sec=0,
        mount_check_sec=0.2,
        video=VideoSettings(preset="ultrafast"),
    )
    defaults.update(kw)
    return RecorderSettings(**defaults)


@contextlib.asynccontextmanager
async def run_recorder(
    settings: RecorderSettings, camera: Any = None
) -> AsyncIterator[RecorderService]:
    svc = RecorderService(settings, camera_factory=(lambda: camera) if camera is not None else None)
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop()


async def wait_for(pred: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    return root


class MjpegServer:
    """A real MJPEG-over-HTTP server on loopback (like the simulated workcell's cameras)."""

    def __init__(
        self,
        fps: float = 30.0,
        size: tuple[int, int] = (320, 240),
        with_length: bool = True,
        boundary: str = "frame",
        status: str = "200 OK",
        content_type: str | None = None,
        garbage_every: int = 0,
    ) -> None:
        self.fps = fps
        self.w, self.h = size
        self.with_length = with_length
        self.boundary = boundary
        self.status = status
        self.content_type = content_type or f"multipart/x-mixed-replace; boundary={boundary}"
        self.garbage_every = garbage_every
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/side.mjpg"
        self.sent = 0
        self.requests: list[bytes] = []
        self.paused = threading.Event()
        self._stop = threading.Event()
        self._clients: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def jpeg(self, n: int) -> bytes:
        img = np.full((self.h, self.w, 3), (n * 7) % 255, np.uint8)
        cv2.putText(img, str(n), (10, self.h // 2), cv2.FONT_HERSHEY_SIMPLEX, 2, (255, 255, 255), 3)
        for bit in range(16):  # the frame number as 16 black/white squares (survives JPEG)
            img[self.h - 16 :, bit * 16 : bit * 16 + 16] = 255 if (n >> bit) & 1 else 0
        return cv2.imencode(".jpg", img)[1].tobytes()

    @staticmethod
    def frame_number(img: np.ndarray) -> int:
        h = img.shape[0]
        return sum(
            1 << bit
            for bit in range(16)
            if img[h - 12 : h - 4, bit * 16 + 4 : bit * 16 + 12].mean() > 127
        )

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._clients.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            self.requests.append(conn.recv(4096))
            conn.sendall(
                f"HTTP/1.0 {self.status}\r\nContent-Type: {self.content_type}\r\n\r\n".encode()
            )
            if not self.status.startswith("200"):
                return
            n = 0
            while not self._stop.is_set():
                if self.paused.is_set():
                    time.sleep(0.01)
                    continue
                data = self.jpeg(n)
                if self.garbage_every and n % self.garbage_every == self.garbage_every - 1:
                    data = b"not a jpeg at all" * 10
                head = b"--" + self.boundary.encode() + b"\r\nContent-Type: image/jpeg\r\n"
                if self.with_length:
                    head += b"Content-Length: " + str(len(data)).encode() + b"\r\n"
                conn.sendall(head + b"\r\n" + data + b"\r\n")
                self.sent += 1
                n += 1
                time.sleep(1 / self.fps)
        except OSError:
            pass
        finally:
            conn.close()

    def drop_clients(self) -> None:
        for c in list(self._clients):
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
        self._clients.clear()

    def close(self) -> None:
        """Stop serving. The accept thread is woken (``shutdown`` of the listening socket)
        and joined *before* the socket is closed: closing first freed its file descriptor
        while the thread was about to accept on it, the next server of the same test process
        got that number, and the old thread answered the new server's client (a 404 from
        the previous case, seen with a profiler pausing the processes)."""
        self._stop.set()
        self.drop_clients()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=30)
        self.sock.close()


@pytest.fixture
def mjpeg_server() -> Any:
    servers: list[MjpegServer] = []

    def start(**kw: Any) -> MjpegServer:
        srv = MjpegServer(**kw)
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.close()


@pytest.fixture
def settings_factory(data_root: Path) -> Callable[..., RecorderSettings]:
    """make_settings bound to the test's data root (override any key)."""
    return lambda **kw: make_settings(kw.pop("data_root", data_root), **kw)


@pytest.fixture(name="run_recorder")
def run_recorder_fixture() -> Any:
    return run_recorder


@pytest.fixture(name="wait_for")
def wait_for_fixture() -> Any:
    return wait_for
