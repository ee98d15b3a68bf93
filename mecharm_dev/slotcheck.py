"""Attacks on the daemon's client slot from this machine, and how soon the operator's
client is served anyway (docs/daemon.md, "Client slot"); the serial link's recovery.

Loopback only: every connection goes to 127.0.0.1, counted and bounded in time.
tests/chaos/test_daemon_slot.py runs these against a daemon process;
``python -m mecharm_dev.slotcheck`` starts the daemons itself and prints the figures:

    python -m mecharm_dev.slotcheck --tries 20
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from mecharm.daemon.config import is_loopback
from mecharm.runtime.client import DaemonClient, DaemonError

__all__ = ["KINDS", "Attacker", "Flood", "Try", "operator_tries", "stale_takeover"]

#: what each attacker does; every kind reconnects as soon as the daemon drops it
KINDS = {
    "idle": "keeps `width` connections open that send nothing",
    "drip": "keeps `width` connections open that send a byte every 0.2 s, never a newline",
    "reconnect": "opens a new silent connection every `every` s, each kept until dropped",
    "wrong_token": "opens a new connection every `every` s; hello with a wrong token, again "
    "after each refusal",
    "stale": "takes the slot with one request (no token), then stays silent (a hung client)",
}

_LINE_MAX = 1 << 16


@dataclass
class AttackStats:
    connections: int = 0
    refused: int = 0  # connect() failed
    answers: Counter[str] = field(default_factory=Counter)  # "ok" or the error code
    took_slot_at: float | None = None  # stale: when its request was answered
    dropped_at: float | None = None  # stale: when the daemon closed it


class Attacker:
    """One attack on the daemon at ``host:port`` (loopback), run until cancelled."""

    def __init__(
        self,
        kind: str,
        port: int,
        *,
        host: str = "127.0.0.1",
        every: float = 0.5,
        width: int = 3,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown attack {kind!r}; one of {', '.join(KINDS)}")
        if not is_loopback(host):
            raise ValueError(f"{host} is not a loopback address: attacks stay on this machine")
        self.kind, self.host, self.port = kind, host, port
        self.every, self.width = every, width
        self.stats = AttackStats()
        self._n = 0

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            if self.kind in ("idle", "drip"):
                for _ in range(self.width):
                    tg.start_soon(self._keep_one)
            elif self.kind == "stale":
                await self._session()
            else:
                while True:
                    tg.start_soon(self._session)
                    await anyio.sleep(self.every)

    async def _keep_one(self) -> None:
        while True:
            await self._session()
            await anyio.sleep(0.01)  # reconnect as soon as dropped

    def _note(self, line: bytes) -> None:
        try:
            msg = json.loads(line)
            key = "ok" if msg.get("ok") else str(msg["error"]["code"])
        except (ValueError, KeyError, TypeError):
            key = "garbled"
        self.stats.answers[key] += 1

    async def _session(self) -> None:
        try:
            stream = await anyio.connect_tcp(self.host, self.port)
        except OSError:
            self.stats.refused += 1
            await anyio.sleep(0.1)
            return
        self.stats.connections += 1
        self._n += 1
        n = self._n
        async with stream, anyio.create_task_group() as tg:
            reader = BufferedByteReceiveStream(stream)
            if self.kind == "drip":
                tg.start_soon(self._drip, stream)
            with contextlib.suppress(
                anyio.EndOfStream,
                anyio.IncompleteRead,
                anyio.BrokenResourceError,
                anyio.ClosedResourceError,
                anyio.DelimiterNotFound,
                OSError,
            ):
                if self.kind == "wrong_token":
                    await stream.send(_hello(f"guess-{n}"))
                elif self.kind == "stale":
                    await stream.send(b'{"id": 1, "cmd": "get_angles"}\n')
                while True:
                    line = await reader.receive_until(b"\n", _LINE_MAX)
                    self._note(line)
                    if self.kind == "stale" and self.stats.took_slot_at is None:
                        if self.stats.answers["ok"]:
                            self.stats.took_slot_at = time.monotonic()
                    elif self.kind == "wrong_token" and b'"unauthorized"' in line:
                        await stream.send(_hello(f"guess-{n}-again"))
            if self.kind == "stale":
                self.stats.dropped_at = time.monotonic()
            tg.cancel_scope.cancel()

    async def _drip(self, stream: anyio.abc.SocketStream) -> None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            while True:
                await stream.send(b"{")
                await anyio.sleep(0.2)


def _hello(token: str) -> bytes:
    return json.dumps({"id": 1, "cmd": "hello", "args": {"token": token}}).encode() + b"\n"


@dataclass
class Try:
    """One attempt of the operator's client: seconds until its hello succeeded, or why not."""

    served_s: float | None
    error: str = ""


async def operator_tries(
    port: int,
    *,
    token: str | None,
    tries: int = 20,
    bound: float = 3.0,
    pause: tuple[float, float] = (0.05, 0.3),
    seed: int = 0,
    host: str = "127.0.0.1",
) -> list[Try]:
    """``tries`` times: the runtime's client connects (hello, then one ``get_angles``), holds
    the arm a moment and lets go. A try counts as served when both succeed within ``bound``."""
    rng = random.Random(seed)
    out: list[Try] = []
    for _ in range(tries):
        client = DaemonClient(
            host,
            port,
            token=token,
            connect_timeout=bound,
            request_timeout=bound,
            busy_wait_s=bound,
            client_name="slotcheck-operator",
        )
        t0 = time.monotonic()
        result = Try(None, f"no hello within {bound} s")
        with anyio.move_on_after(bound):
            try:
                await client.connect()
                await client.get_angles()
                result = Try(time.monotonic() - t0)
            except DaemonError as exc:
                result = Try(None, f"{type(exc).__name__}: {exc}")
        await anyio.sleep(rng.uniform(*pause))  # holds the arm a moment
        await client.aclose()
        out.append(result)
        await anyio.sleep(rng.uniform(*pause))
    return out


#: one flood process: non-blocking connects to 127.0.0.1:PORT, each closed at once, for
#: SECONDS at niceness NICE; prints its connects per second
_FLOOD_CHILD = """
import os, signal, socket, sys, time
port, secs, nice = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
os.nice(nice)
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
t0 = time.monotonic()
end, n = t0 + secs, 0
while not stop and time.monotonic() < end:
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", port))
    s.close()
    n += 1
took = time.monotonic() - t0
print(round(n / took), n)
"""


class Flood:
    """A connect flood from ``processes`` processes of this machine (docs/daemon.md,
    "Connect flood"): each opens non-blocking connections to 127.0.0.1 and closes them at
    once, as fast as it can, until the ``with`` block ends (at most ``seconds``): the flood
    lasts as long as what it attacks, not a fixed time after it. ``with Flood(...) as f:``
    then ``f.rates`` (connections a second, per process) and ``f.connects`` (in all).

    ``nice`` lowers the flood's priority: at 0 on a busy machine it also takes the CPU from
    the daemon, which is a different attack (CPU exhaustion) that no accept path survives;
    at 10 it gets the CPU nobody else wants, which is all of it on a quiet machine."""

    def __init__(self, port: int, processes: int = 4, seconds: float = 30.0, nice: int = 0) -> None:
        self.port, self.processes, self.seconds, self.nice = int(port), processes, seconds, nice
        self._procs: list[subprocess.Popen[str]] = []
        self.rates: list[int] = []
        self.connects = 0

    def __enter__(self) -> Flood:
        self._procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _FLOOD_CHILD,
                    str(self.port),
                    str(self.seconds),
                    str(self.nice),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(self.processes)
        ]
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self._procs:
            if p.poll() is None:
                p.terminate()  # the child stops its loop and reports
        for p in self._procs:
            try:
                out, _ = p.communicate(timeout=self.seconds + 30)
                rate, count = (int(v) for v in out.split())
                self.rates.append(rate)
                self.connects += count
            except (subprocess.TimeoutExpired, ValueError):
                p.kill()
                p.communicate()


async def stale_takeover(port: int, *, wait: float, host: str = "127.0.0.1") -> float | None:
    """A client takes the slot and hangs (no token needed); the runtime's client, waiting
    while the daemon answers busy, gets the arm. Returns seconds from the hung client's
    last answer to the runtime's hello, or None when it was not served within ``wait``."""
    stale = Attacker("stale", port, host=host)
    client = DaemonClient(host, port, busy_wait_s=wait, connect_timeout=wait)
    served: float | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(stale.run)
        with anyio.fail_after(10):
            while stale.stats.took_slot_at is None:
                await anyio.sleep(0.01)
        with anyio.move_on_after(wait):
            with contextlib.suppress(DaemonError):
                await client.connect()
                served = time.monotonic() - stale.stats.took_slot_at
        tg.cancel_scope.cancel()
    await client.aclose()
    return served


# ---------------------------------------------------------------- the figures


def _summary(tries: list[Try], bound: float) -> dict[str, Any]:
    served = [t.served_s for t in tries if t.served_s is not None]
    return {
        "served": f"{len(served)} of {len(tries)} within {bound:g} s",
        "max_s": round(max(served), 3) if served else None,
        "median_s": round(statistics.median(served), 3) if served else None,
        "errors": sorted({t.error for t in tries if t.served_s is None}),
    }


async def _with_attack(kind: str, port: int, token: str | None, tries: int) -> dict[str, Any]:
    attacker = Attacker(kind, port, every=0.5, width=3)
    async with anyio.create_task_group() as tg:
        tg.start_soon(attacker.run)
        await anyio.sleep(1.0)  # the attack is under way first
        result = await operator_tries(port, token=token, tries=tries)
        tg.cancel_scope.cancel()
    out = _summary(result, 3.0)
    out["attacker"] = {
        "connections": attacker.stats.connections,
        "answers": dict(attacker.stats.answers),
    }
    return out


async def _serial_recovery(unplugged_s: float) -> dict[str, Any]:
    from mecharm.daemon.backends.mycobot import MyCobotBackend
    from mecharm.daemon.server import run_server
    from mecharm.sim.firmware import FirmwareEmulator

    with tempfile.TemporaryDirectory() as tmp:
        emu = FirmwareEmulator(link=Path(tmp) / "ttyMECHARM")
        link = emu.start()
        backend = MyCobotBackend(link, 1_000_000)  # the daemon's default reopen schedule
        try:
            async with run_server(backend, "127.0.0.1", 0) as srv:
                client = DaemonClient("127.0.0.1", srv.port, request_timeout=5.0)
                await client.connect()
                await client.get_angles()
                emu.close()
                codes: Counter[str] = Counter()
                with contextlib.suppress(DaemonError):
                    await client.get_angles()
                t_gone = time.monotonic()
                while time.monotonic() - t_gone < unplugged_s:
                    try:
                        await client.get_angles()
                        codes["ok"] += 1  # would be a made-up reading: must stay 0
                    except DaemonError:
                        codes["error"] += 1
                    await anyio.sleep(0.1)
                emu.start()
                t_back = time.monotonic()
                with anyio.fail_after(60):
                    while True:
                        try:
                            await client.get_angles()
                            break
                        except DaemonError:
                            await anyio.sleep(0.02)
                back_s = time.monotonic() - t_back
                await client.aclose()
        finally:
            emu.close()
    rec = backend.recoveries[-1]
    return {
        "unplugged_s": unplugged_s,
        "served_again_after_replug_s": round(back_s, 3),
        "attempts": int(rec["attempts"]),
        "link_down_s": round(rec["down_s"], 3),
        "readings_while_unplugged": codes["ok"],
        "errors_while_unplugged": codes["error"],
    }


async def _measure(args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    from mecharm.tools.simrig import start_sim_daemon

    figures: dict[str, Any] = {}
    rig = start_sim_daemon(
        log_dir / "with-token", scene=None, time_scale=20, token="slotcheck-token-0123456789"
    )
    try:
        for kind in ("idle", "drip", "reconnect", "wrong_token"):
            figures[f"token, {kind} attacker"] = await _with_attack(
                kind, rig.daemon_port, "slotcheck-token-0123456789", args.tries
            )
        with Flood(rig.daemon_port, processes=4, seconds=30.0) as flood:
            await anyio.sleep(1.0)  # the flood is under way first
            tries = await operator_tries(
                rig.daemon_port, token="slotcheck-token-0123456789", tries=args.tries
            )
        figures["token, connect flood (4 processes)"] = {
            **_summary(tries, 3.0),
            "flood_connects_per_s": flood.rates,
        }
    finally:
        rig.daemon.stop()
    idle = args.idle_timeout
    rig = start_sim_daemon(
        log_dir / "open",
        scene=None,
        time_scale=20,
        extra_args=["--idle-timeout", str(idle)],
    )
    try:
        for kind in ("idle", "drip"):
            figures[f"no token, {kind} attacker"] = await _with_attack(
                kind, rig.daemon_port, None, args.tries
            )
        takeovers = [
            await stale_takeover(rig.daemon_port, wait=idle + 10) for _ in range(args.takeovers)
        ]
        got = [t for t in takeovers if t is not None]
        figures["no token, hung holder"] = {
            "idle_timeout_s": idle,
            "arm_back_s": [round(t, 3) for t in got],
            "served": f"{len(got)} of {len(takeovers)}",
        }
    finally:
        rig.daemon.stop()
    figures["serial link"] = await _serial_recovery(args.unplugged)
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m mecharm_dev.slotcheck",
        description="Attack a local daemon's client slot and measure how soon the operator is "
        "served; unplug the emulated serial link and measure its recovery.",
    )
    p.add_argument("--tries", type=int, default=20, help="operator tries per attack (20)")
    p.add_argument("--takeovers", type=int, default=5, help="hung-holder takeovers (5)")
    p.add_argument("--idle-timeout", type=float, default=1.0, help="daemon idle timeout, s (1)")
    p.add_argument("--unplugged", type=float, default=3.0, help="serial unplugged for, s (3)")
    args = p.parse_args(argv)
    from mecharm.common.logging import configure_logging

    configure_logging("error")
    with tempfile.TemporaryDirectory() as tmp:
        figures = anyio.run(_measure, args, Path(tmp))
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
