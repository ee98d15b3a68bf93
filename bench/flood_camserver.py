"""The figures of docs/workcell.md, "Limits": 300 idle connections and a request flood
against the sim camera server in its own process, as the daemon runs it.

    python -m bench.flood_camserver                 # this tree
    python -m bench.flood_camserver --src OLD_TREE  # e.g. `git archive REV | tar -x -C OLD_TREE`

Not part of ``make bench`` (no ``bench_`` prefix): it measures the server's limits
(threads, memory, tracebacks, a legitimate client's wait), not a speed against a
baseline. Threads and memory come from ``/proc/PID/status`` of the server process;
its stderr is scanned for tracebacks. All traffic goes to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_SERVER = r"""
import sys
from mecharm.common.logging import configure_logging
from mecharm.sim.arm import SimArm, SimArmConfig
from mecharm.sim.workcell import start_workcell
configure_logging("warning", json=True)
wc = start_workcell(SimArm(SimArmConfig(time_scale=20)), "random", seed=7, camera_port=0)
print(wc.server.port, flush=True)
sys.stdin.read()
wc.close()
"""


def _status(pid: int) -> tuple[int, int, int]:
    """(threads, RSS MB, peak RSS MB) of a process."""
    d = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        d[k] = v.strip()
    return int(d["Threads"]), int(d["VmRSS"].split()[0]) // 1024, int(d["VmHWM"].split()[0]) // 1024


def _get(
    port: int, path: str, method: str = "GET", body: bytes | None = None
) -> tuple[int | str, float]:
    t0 = time.monotonic()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request(method, path, body=body)
        r = c.getresponse()
        r.read()
        c.close()
        return r.status, time.monotonic() - t0
    except (OSError, http.client.HTTPException) as exc:
        return type(exc).__name__, time.monotonic() - t0


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.flood_camserver")
    p.add_argument("--src", type=Path, default=REPO, help="source tree to run the server from")
    p.add_argument("--idle", type=int, default=300, help="idle connections (default 300)")
    p.add_argument("--requests", type=int, default=600, help="flood size (default 600)")
    p.add_argument("--clients", type=int, default=30, help="flood concurrency (default 30)")
    args = p.parse_args()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env={**os.environ, "PYTHONPATH": str(args.src)},
            cwd=args.src,  # `-c` puts the working directory first on sys.path
        )
        assert proc.stdout is not None and proc.stdin is not None
        port = int(proc.stdout.readline())
        time.sleep(1.0)
        st, dt = _get(port, "/top.jpg")
        print(f"first /top.jpg: {st} in {dt:.2f} s; threads %d, rss %d MB" % _status(proc.pid)[:2])
        idle: list[socket.socket] = []
        t0 = time.monotonic()
        for _ in range(args.idle):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=60))
        time.sleep(1.0)
        thr, rss, _ = _status(proc.pid)
        print(f"{args.idle} idle connections (connected in {time.monotonic() - t0:.1f} s): "
              f"threads {thr}, rss {rss} MB")  # fmt: skip
        st, dt = _get(port, "/top.jpg")
        print(f"legitimate /top.jpg with the idle connections open: {st} in {dt:.2f} s")
        kinds: list[tuple[str, str, bytes | None]] = [
            ("/top.jpg", "GET", None),
            ("/scene/truth", "GET", None),
            ("/scene/next", "POST", b"[" * 4000),  # 4,000 deep, under the 4 KB body limit
            ("/nowhere", "GET", None),
            ("/scene/next", "POST", b'{"seed": 5}'),
        ]
        samples: list[tuple[int, int, int]] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                samples.append(_status(proc.pid))
                time.sleep(0.1)

        threading.Thread(target=sample, daemon=True).start()
        t0 = time.monotonic()
        with ThreadPoolExecutor(args.clients) as pool:
            futures = [
                pool.submit(_get, port, *kinds[i % len(kinds)]) for i in range(args.requests)
            ]
            results = Counter(
                (kinds[i % len(kinds)][0], f.result()[0]) for i, f in enumerate(futures)
            )
        stop.set()
        print(f"flood of {args.requests} requests ({args.clients} clients) in "
              f"{time.monotonic() - t0:.1f} s: {dict(results)}")  # fmt: skip
        print(f"during the flood: max threads {max(s[0] for s in samples)}, "
              f"max rss {max(s[1] for s in samples)} MB")  # fmt: skip
        st, dt = _get(port, "/top.jpg")
        print(f"legitimate /top.jpg after the flood: {st} in {dt:.2f} s")
        time.sleep(6.0)
        thr, rss, peak = _status(proc.pid)
        closed = 0
        for s in idle:
            s.setblocking(False)
            try:
                closed += s.recv(1) == b""
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
            s.close()
        print(f"6 s later: threads {thr}, rss {rss} MB, peak rss {peak} MB; "
              f"idle connections closed by the server: {closed}/{args.idle}")  # fmt: skip
        proc.stdin.close()
        proc.wait(timeout=30)
        err.seek(0)
        text = err.read()
        print(
            f"server stderr: {text.count('Traceback')} tracebacks in {len(text.splitlines())} lines"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
