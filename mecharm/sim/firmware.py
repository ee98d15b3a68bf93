"""Serial firmware emulator: the arm's frame protocol on a pseudo-terminal, driven by a SimArm.

Real pymycobot (``MechArm270(port=<pty>)``) talks to it unchanged, so the
``mycobot`` backend is tested end to end without hardware. Frames are
``FE FE LEN CMD DATA.. FA`` with ``LEN = len(DATA) + 2``, int16 big-endian,
angles x100 (docs/daemon.md, "The firmware emulator"). pymycobot 4.x waits for a reply to *every* command
(``_res`` writes, then reads for up to 0.5 s, three tries, then returns -1),
so the emulator acknowledges set commands with one data byte ``01`` and
answers reads with their value.

Timing is real time (pymycobot's timeouts are real time): reads are answered
after ``read_reply_s`` (default 17.5 ms, so static polling through pymycobot
runs at ~50 Hz like the real firmware), writes after ``write_reply_s``.

A USB replug is reproduced with ``link``: the emulator keeps a symlink at that path
pointing to its current pty (what a udev rule gives the real adapter), ``close()``
removes it (the device is gone) and ``start()`` / ``restart()`` bring it back on a
new pty, so a client that reopens the configured path finds the arm again.

No-reply is reproduced two ways: ``drop_replies(n)`` / ``mute()`` here, or a
read fault of the SimArm (``faults.fail_reads``) or a lost link
(``faults.disconnect``): the firmware then stays silent and pymycobot returns
-1 after its three 0.5 s tries.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import struct
import sys
import termios
import threading
import time
import tty
from collections.abc import Callable
from typing import Any

from mecharm.common.logging import configure_logging, get_logger
from mecharm.sim.arm import SimArm, SimArmConfig

__all__ = ["FirmwareEmulator", "build_frame", "main", "parse_frames"]

log = get_logger("mecharm.sim.firmware")

HEADER = 0xFE
FOOTER = 0xFA

# command codes (pymycobot ProtocolCode)
POWER_ON = 0x10
POWER_OFF = 0x11
IS_POWER_ON = 0x12
RELEASE_ALL_SERVOS = 0x13
SET_FRESH_MODE = 0x16
GET_FRESH_MODE = 0x17
GET_ANGLES = 0x20
SEND_ANGLES = 0x22
STOP = 0x29
IS_IN_POSITION = 0x2A
IS_MOVING = 0x2B
GET_GRIPPER_VALUE = 0x65
SET_GRIPPER_STATE = 0x66
SET_GRIPPER_VALUE = 0x67
IS_GRIPPER_MOVING = 0x69

_READS = {
    IS_POWER_ON,
    GET_FRESH_MODE,
    GET_ANGLES,
    IS_IN_POSITION,
    IS_MOVING,
    GET_GRIPPER_VALUE,
    IS_GRIPPER_MOVING,
}


def build_frame(cmd: int, data: bytes = b"") -> bytes:
    """``FE FE LEN CMD DATA FA``."""
    return bytes([HEADER, HEADER, len(data) + 2, cmd]) + data + bytes([FOOTER])


def parse_frames(buf: bytearray) -> list[tuple[int, bytes]]:
    """Remove complete frames from ``buf`` and return them as (cmd, data); garbage is skipped."""
    out: list[tuple[int, bytes]] = []
    while True:
        start = buf.find(b"\xfe\xfe")
        if start < 0:
            # keep a trailing FE: it may be the first half of a header
            del buf[: len(buf) - 1 if buf.endswith(b"\xfe") else len(buf)]
            return out
        if start:
            del buf[:start]
        if len(buf) < 4:
            return out
        length = buf[2]
        if length < 2 or length > 64:
            del buf[:1]  # not a header after all (FE FE FE ...): resync one byte on
            continue
        end = 3 + length  # index one past the footer
        if len(buf) < end:
            return out
        if buf[end - 1] != FOOTER:
            del buf[:1]
            continue
        out.append((buf[3], bytes(buf[4 : end - 1])))
        del buf[:end]


class FirmwareEmulator:
    """Emulated arm firmware on a pty. Use as a context manager; ``path`` is the device to open."""

    def __init__(
        self,
        arm: SimArm | None = None,
        *,
        read_reply_s: float = 0.0175,
        write_reply_s: float = 0.003,
        link: str | os.PathLike[str] | None = None,
    ) -> None:
        # the firmware's own timing replaces the SimArm's call latencies
        self.arm = (
            arm
            if arm is not None
            else SimArm(SimArmConfig(read_latency_s=0.0, write_latency_s=0.0, no_reply_s=0.0))
        )
        self.read_reply_s = read_reply_s
        self.write_reply_s = write_reply_s
        self._master: int | None = None
        self._slave: int | None = None
        self.path: str = ""
        #: a stable path (symlink) to the current pty while running, like a udev symlink
        self.link: str | None = os.fspath(link) if link is not None else None
        self.starts = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._drop = 0
        self._muted = False
        self.counters: dict[str, int] = {"frames": 0, "replies": 0, "silent": 0, "unknown": 0}
        self._handlers: dict[int, Callable[[bytes], bytes | None]] = {
            POWER_ON: lambda d: self._ack(self.arm.power_on()),
            POWER_OFF: lambda d: self._ack(self.arm.release_all_servos()),
            IS_POWER_ON: lambda d: bytes([1 if self.arm.powered else 0]),
            RELEASE_ALL_SERVOS: lambda d: self._ack(self.arm.release_all_servos()),
            SET_FRESH_MODE: self._set_fresh_mode,
            GET_FRESH_MODE: lambda d: self._byte(self.arm.get_fresh_mode()),
            GET_ANGLES: self._get_angles,
            SEND_ANGLES: self._send_angles,
            STOP: lambda d: self._ack(self.arm.stop()),
            IS_IN_POSITION: self._is_in_position,
            IS_MOVING: lambda d: self._byte(self.arm.is_moving()),
            GET_GRIPPER_VALUE: lambda d: self._byte(self.arm.get_gripper_value()),
            SET_GRIPPER_STATE: self._set_gripper_state,
            SET_GRIPPER_VALUE: self._set_gripper_value,
            IS_GRIPPER_MOVING: lambda d: bytes([1 if self.arm.true_gripper_moving() else 0]),
        }

    # ------------------------------------------------------------ life cycle
    def start(self) -> str:
        """Open a pty and start answering; returns the device path to open (``link`` when
        given, else the pty itself). The SimArm keeps its state across a restart."""
        if self._thread is not None:
            raise RuntimeError("firmware emulator already running; close() it first")
        master, slave = os.openpty()
        tty.setraw(slave, termios.TCSANOW)  # no echo, no CR/LF translation: bytes pass untouched
        self._master, self._slave = master, slave
        self.path = os.ttyname(slave)
        if self.link is not None:
            tmp = f"{self.link}.{os.getpid()}.tmp"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            os.symlink(self.path, tmp)
            os.replace(tmp, self.link)  # atomic: the link never points nowhere while we run
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="fake-firmware", daemon=True)
        self._thread.start()
        self.starts += 1
        log.info("firmware_emulator_started", path=self.path, link=self.link, start=self.starts)
        return self.link if self.link is not None else self.path

    def close(self) -> None:
        """Stop and close the pty: an open pymycobot then gets serial errors (device gone),
        and ``link`` disappears."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None
        if self.link is not None and self._master is not None:
            with contextlib.suppress(OSError):
                if os.readlink(self.link) == self.path:  # still ours
                    os.unlink(self.link)
        for fd in (self._master, self._slave):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._master = self._slave = None

    def restart(self) -> str:
        """``close()`` then ``start()``: the device goes away and comes back (on a new pty;
        at the same ``link``)."""
        self.close()
        return self.start()

    def __enter__(self) -> FirmwareEmulator:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------ faults
    def drop_replies(self, n: int) -> None:
        """Stay silent for the next ``n`` frames (pymycobot sends each call up to 3 times)."""
        with self._lock:
            self._drop = int(n)

    def mute(self) -> None:
        """Firmware hangs: no frame is answered until ``unmute()``."""
        self._muted = True

    def unmute(self) -> None:
        self._muted = False

    # ------------------------------------------------------------ loop
    def _run(self) -> None:
        buf = bytearray()
        master = self._master
        assert master is not None
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([master], [], [], 0.05)
                if not ready:
                    continue
                chunk = os.read(master, 4096)
            except OSError:
                return
            if not chunk:
                continue
            buf.extend(chunk)
            for cmd, data in parse_frames(buf):
                self._handle(master, cmd, data)

    def _handle(self, master: int, cmd: int, data: bytes) -> None:
        self.counters["frames"] += 1
        with self._lock:
            drop = self._drop > 0
            if drop:
                self._drop -= 1
        handler = self._handlers.get(cmd)
        if handler is None:
            self.counters["unknown"] += 1
            log.debug("firmware_unknown_command", cmd=hex(cmd), data=data.hex())
            return
        started = time.monotonic()
        try:
            payload = None if drop or self._muted else handler(data)
        except Exception as exc:  # the sim's serial loss or bad data: firmware stays silent
            log.debug("firmware_silent", cmd=hex(cmd), reason=repr(exc))
            payload = None
        if payload is None:
            self.counters["silent"] += 1
            return
        delay = (self.read_reply_s if cmd in _READS else self.write_reply_s) - (
            time.monotonic() - started
        )
        if delay > 0:
            time.sleep(delay)
        try:
            os.write(master, build_frame(cmd, payload))
            self.counters["replies"] += 1
        except OSError:
            pass

    # ------------------------------------------------------------ command handlers
    @staticmethod
    def _ack(result: Any) -> bytes | None:
        return b"\x01" if result == 1 else None

    @staticmethod
    def _byte(value: Any) -> bytes | None:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
            return None  # -1: the sim's "no reply"
        return bytes([value])

    def _get_angles(self, data: bytes) -> bytes | None:
        angles = self.arm.get_angles()
        if not isinstance(angles, list) or len(angles) != 6:
            return None
        return struct.pack(">6h", *(round(a * 100) for a in angles))

    def _send_angles(self, data: bytes) -> bytes | None:
        if len(data) != 13:
            return None
        raw = struct.unpack(">6h", data[:12])
        speed = data[12]
        return self._ack(self.arm.send_angles([r / 100.0 for r in raw], speed))

    def _set_fresh_mode(self, data: bytes) -> bytes | None:
        return self._ack(self.arm.set_fresh_mode(data[0])) if len(data) == 1 else None

    def _set_gripper_state(self, data: bytes) -> bytes | None:
        if len(data) < 2:
            return None
        flag, speed = data[0], data[1]
        if flag not in (0, 1):  # 254 = release: the sim gripper simply stops
            return b"\x01"
        return self._ack(self.arm.set_gripper_state(flag, speed))

    def _set_gripper_value(self, data: bytes) -> bytes | None:
        return self._ack(self.arm.set_gripper_value(data[0], data[1])) if len(data) >= 2 else None

    def _is_in_position(self, data: bytes) -> bytes | None:
        if len(data) != 13 or data[12] != 0:
            return None
        target = [r / 100.0 for r in struct.unpack(">6h", data[:12])]
        now = self.arm.true_angles()
        return bytes([1 if max(abs(a - b) for a, b in zip(now, target, strict=True)) <= 1.0 else 0])


def main(argv: list[str] | None = None) -> int:
    """``mecharm-fake-arm``: run the emulator, print the pty path, serve until Ctrl-C."""
    parser = argparse.ArgumentParser(prog="mecharm-fake-arm", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--time-scale", type=float, default=1.0, help="sim speed-up (default 1.0 = real time)"
    )
    parser.add_argument("--seed", type=int, default=0, help="sim random seed")
    parser.add_argument("--read-reply", type=float, default=0.0175, help="reply delay for reads, s")
    parser.add_argument(
        "--write-reply", type=float, default=0.003, help="reply delay for writes, s"
    )
    parser.add_argument(
        "--link",
        help="also keep a symlink at this path to the pty (a stable device path, like udev's)",
    )
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    try:
        cfg = SimArmConfig(
            time_scale=args.time_scale,
            seed=args.seed,
            read_latency_s=0.0,
            write_latency_s=0.0,
            no_reply_s=0.0,
        )
    except ValueError as exc:
        print(f"mecharm-fake-arm: invalid option: {exc}", file=sys.stderr)
        return 2
    emu = FirmwareEmulator(
        SimArm(cfg), read_reply_s=args.read_reply, write_reply_s=args.write_reply, link=args.link
    )
    stop = threading.Event()
    reason: list[str] = []

    def on_signal(signum: int, _frame: Any) -> None:
        reason.append(signal.Signals(signum).name)
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    path = emu.start()
    print(path, flush=True)
    try:
        stop.wait()
    finally:
        emu.close()
        for s, h in old.items():
            signal.signal(s, h)
        log.info(
            "firmware_emulator_stopped",
            reason=f"signal {reason[0]}" if reason else "exit",
            **emu.counters,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
