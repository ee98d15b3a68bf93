"""The recorder's ping (docs/recorder.md, "Ping: proving the data root").

A real recorder process (synthetic 640x360 side camera); the runtime's sender pings it
within the recorder's pong budget (0.11 s apart) and a port nobody listens on.

Figures: the ping's round trip (p50, p95, max), the ping and pong datagram sizes, how a
port without a recorder is reported (reason, time, tries) with the runtime's default
timeout. Baseline: the same number of round trips, paced alike, to a bare UDP echo in
another process that answers each datagram with as many bytes as a pong (the loopback's
own limit), reported as a ratio of the medians.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import Row, has
from mecharm.recorder.sender import RecorderSender
from mecharm.tools.simrig import free_port, start_recorder

_ECHO = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1], flush=True)
size = int(sys.argv[1])
while True:
    data, addr = s.recvfrom(65535)
    s.sendto(data[:size].ljust(size, b"x"), addr)
"""


def echo_rtts_ms(n: int, ping: bytes, pong_size: int) -> list[float]:
    """Round trips to a bare UDP echo process (the baseline), paced as the pings are."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _ECHO, str(pong_size)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        out = []
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("127.0.0.1", port))
            sock.settimeout(2.0)
            for _ in range(n):
                t0 = time.perf_counter()
                sock.send(ping)
                sock.recv(65535)
                out.append((time.perf_counter() - t0) * 1e3)
                time.sleep(0.11)
        return sorted(out)
    finally:
        proc.kill()
        proc.wait()


def run(quick: bool = False) -> dict[str, Any]:
    n = 20 if quick else 100
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "root"
        root.mkdir()
        child, port = start_recorder(Path(d) / "logs", root, "synthetic?fps=30&w=640&h=360")
        try:
            sender = RecorderSender(port=port)
            rtts = []
            for _ in range(n):
                r = sender.ping(2.0)
                if r.rtt_ms is None:
                    raise RuntimeError(f"no pong: {r.reason}")
                rtts.append(r.rtt_ms)
                time.sleep(0.11)  # within the recorder's 10 pongs a second
            _seq, _nonce, ping = sender._ping_datagram()
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.connect(("127.0.0.1", port))
                sock.send(ping)
                sock.settimeout(2.0)
                pong = sock.recv(65535)
            sender.close()
        finally:
            child.stop()
    t0 = time.monotonic()
    missing = RecorderSender(port=free_port(socket.SOCK_DGRAM)).ping(1.0)
    took = (time.monotonic() - t0) * 1e3
    rtts.sort()
    base = echo_rtts_ms(n, ping, len(pong))
    return {
        "pings": n,
        "rtt_p50_ms": round(rtts[len(rtts) // 2], 2),
        "rtt_p95_ms": round(rtts[int(len(rtts) * 0.95) - 1], 2),
        "rtt_max_ms": round(rtts[-1], 2),
        "baseline_udp_echo_p50_ms": round(base[len(base) // 2], 3),
        "p50_over_udp_echo": round(rtts[len(rtts) // 2] / base[len(base) // 2], 2),
        "ping_bytes": len(ping),
        "pong_bytes": len(pong),
        "no_listener": f"{missing.reason} after {took:.0f} ms ({missing.tries} tries)",
    }


def rows(result: dict[str, Any]) -> list[Row]:
    """The table's lines: the ping's round trip against a bare UDP echo, and a missing recorder."""
    r, out = result, []
    if has(r, "rtt_p50_ms", "rtt_p95_ms", "baseline_udp_echo_p50_ms"):
        out.append(
            Row(
                "recorder",
                f"ping round trip ({r.get('pings', '?')} pings)",
                f"p50 {r['rtt_p50_ms']} ms, p95 {r['rtt_p95_ms']} ms, max {r.get('rtt_max_ms', '?')} ms",
                "—",
                f"bare UDP echo p50 {r['baseline_udp_echo_p50_ms']} ms "
                f"(ratio {r.get('p50_over_udp_echo', '?')})",
            )
        )
    if has(r, "no_listener"):
        out.append(
            Row("recorder", "ping to a port without a recorder", str(r["no_listener"]), "—", "—")
        )
    return out
