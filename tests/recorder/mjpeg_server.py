"""A real MJPEG-over-HTTP server on loopback, for tests (like the simulated workcell's)."""

from __future__ import annotations

import socket
import threading
import time

import cv2
import numpy as np

__all__ = ["MjpegServer"]


class MjpegServer:
    """Serves numbered JPEG frames as multipart/x-mixed-replace; can drop clients."""

    def __init__(self, fps: float = 30.0, size: tuple[int, int] = (320, 240),
                 with_length: bool = True, boundary: str = "frame") -> None:
        self.fps = fps
        self.w, self.h = size
        self.with_length = with_length
        self.boundary = boundary
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/side.mjpg"
        self.sent = 0
        self.paused = threading.Event()
        self._stop = threading.Event()
        self._clients: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def jpeg(self, n: int) -> bytes:
        img = np.full((self.h, self.w, 3), (n * 7) % 255, np.uint8)
        cv2.putText(img, str(n), (10, self.h // 2), cv2.FONT_HERSHEY_SIMPLEX, 2, (255, 255, 255), 3)
        return cv2.imencode(".jpg", img)[1].tobytes()

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
            conn.recv(4096)
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: multipart/x-mixed-replace; boundary="
                         + self.boundary.encode() + b"\r\n\r\n")
            n = 0
            while not self._stop.is_set():
                if self.paused.is_set():
                    time.sleep(0.01)
                    continue
                data = self.jpeg(n)
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
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._clients.clear()

    def close(self) -> None:
        self._stop.set()
        self.drop_clients()
        self.sock.close()
