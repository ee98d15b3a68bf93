"""`mecharm doctor` — check the whole rig before a session; for each failure, what to do.

It reads the runtime's own settings (the same file, ``MECHARM_RUNTIME_*`` environment and
flags as ``mecharm-runtime``), so it checks exactly what a run would use, with the
runtime's own checks: the mount guard, the ledger check, the FK table's checksum, the
arcs' loader, the daemon client's ``hello`` and ``check_envelope``, the camera factory and
the freshness rule, the recorder probe. It never moves the arm: the daemon gets a
``hello`` and nothing else. Exit 0 all ok, 1 any failure, 2 bad flags or settings.
docs/doctor.md lists the checks and their fixes.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

import anyio

from mecharm.common.config import ConfigError, load_settings
from mecharm.common.fsutil import check_data_root
from mecharm.common.keyfile import KeyFileError, read_daemon_token, read_key
from mecharm.common.layout import DataRoot
from mecharm.common.logging import configure_logging
from mecharm.runtime.config import RuntimeSettings

__all__ = ["Check", "Doctor", "register", "render", "run"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
#: frames read from the top camera; the first may predate the request (a device buffer)
_CAMERA_FRAMES = 5

Status = Literal["ok", "FAIL", "skip"]


@dataclass(frozen=True)
class Check:
    """One line of the checklist: ``fix`` says what to do when it failed."""

    name: str
    status: Status
    detail: str
    fix: str = ""

    @property
    def failed(self) -> bool:
        return self.status == "FAIL"


def _ok(name: str, detail: str) -> Check:
    return Check(name, "ok", detail)


def _fail(name: str, detail: str, fix: str) -> Check:
    return Check(name, "FAIL", detail, fix)


def _skip(name: str, detail: str) -> Check:
    return Check(name, "skip", detail)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


class Doctor:
    """The checks, in the order a session needs them; each returns a Check, none raises."""

    def __init__(
        self, settings: RuntimeSettings, *, min_free_mb: float = 1024, camera_timeout_s: float = 10
    ) -> None:
        self.s = settings
        self.min_free_mb = min_free_mb
        self.camera_timeout_s = camera_timeout_s
        self.arcs: list[Any] = []

    async def run(self) -> list[Check]:
        root = self.data_root()
        checks = [root, self.ledger(root.failed)]
        checks.append(await self.fk_table())
        checks += self.arc_files()
        daemon, envelope = await self.daemon()
        checks += [daemon, envelope]
        checks.append(await self.top_camera())
        checks.append(await self.recorder())
        return checks

    # ---- storage -------------------------------------------------------------------------
    def data_root(self) -> Check:
        root = Path(self.s.data_root).absolute()
        problem = check_data_root(root, self.s.require_mount)
        if problem is not None:
            fix = (
                "mount the SSD at that path"
                if self.s.require_mount or not root.exists()
                else "make it writable for this user"
            )
            return _fail(
                "data root",
                problem,
                f"{fix}, or point --data-root at the folder the runtime and the recorder "
                "share (it is never created for you: a missing SSD must not become a local folder)",
            )
        free_mb = shutil.disk_usage(root).free / 2**20
        mount = ", a mount point" if os.path.ismount(root) else ""
        if free_mb < self.min_free_mb:
            return _fail(
                "data root",
                f"{root}: only {free_mb:.0f} MB free (below {self.min_free_mb:g} MB)",
                "free space on that disk (old runs can be exported and moved away) or use a "
                "larger one",
            )
        return _ok("data root", f"{root}: writable{mount}, {free_mb / 1024:.1f} GB free")

    def ledger(self, root_failed: bool) -> Check:
        from mecharm.runtime.records.ledger import LedgerError, check_ledger_ready
        from mecharm.runtime.tasks import task_records

        # the ledger of the task the session would run (docs/tasks.md)
        path = DataRoot(self.s.data_root, self.s.task).ledger
        if root_failed:
            return _skip("ledger", "data root not usable")
        try:
            check_ledger_ready(path, task_records(self.s.task).ledger_columns)
        except LedgerError as exc:
            return _fail("ledger", str(exc), "the message names the command; then run again")
        if not path.is_file():
            return _ok("ledger", f"{path}: none yet (the first trial starts it)")
        rows = max(0, sum(1 for _ in path.open("rb")) - 1)
        return _ok("ledger", f"{path}: {rows} row(s), header current")

    # ---- the FK table and the arcs ----------------------------------------------------------
    async def fk_table(self) -> Check:
        from mecharm.runtime.lookup.table import TableError, load_table

        path = DataRoot(self.s.fk_dir).fk_table
        if not path.is_file():
            # not a fault: the runtime builds it at its first start (a fresh set-up has none)
            return _ok(
                "FK table",
                f"{path}: not built yet; the first run builds it at start (seconds here, "
                f"minutes on a Pi), or now: mecharm fk build --data-dir {self.s.fk_dir}",
            )
        try:  # re-hash the CSV: a table changed since its record is refused by the runtime too
            table = await anyio.to_thread.run_sync(
                lambda: load_table(path, verify=True, j1_max=self.s.arm.j1_max),
                abandon_on_cancel=True,
            )
        except TableError as exc:
            return _fail(
                "FK table",
                str(exc),
                f"after checking the change: mecharm fk adopt --table {path}; else rebuild or "
                "restore it (docs/lookup.md)",
            )
        return _ok(
            "FK table",
            f"{path}: {table.n_rows} rows, sha256 {table.checksum[:12]} matches its record",
        )

    def arc_files(self) -> list[Check]:
        from mecharm.runtime.lookup import load_arc

        out = []
        for key in ("approach_pick_arc", "approach_place_arc"):
            path = Path(getattr(self.s.pick_place, key))
            name = f"arc {key.removesuffix('_arc')}"
            try:
                arc = load_arc(path)
            except ValueError as exc:
                fix = (
                    f"set pick_place.{key} to the adopted pose file (absolute, or relative to the folder "
                    "you run in), or regenerate it: mecharm fk adopt-arc ... --out FILE"
                )
                out.append(_fail(name, str(exc), fix))
                continue
            self.arcs.append(arc)
            out.append(_ok(name, f"{path}: {len(arc.points)} points, sha256 {_sha(path)}"))
        return out

    # ---- the daemon ---------------------------------------------------------------------------
    async def daemon(self) -> tuple[Check, Check]:
        from mecharm.runtime.client import (
            DaemonBusy,
            DaemonClient,
            DaemonError,
            TimeScaleMismatch,
            Unauthorized,
            connect_fix,
        )
        from mecharm.runtime.rigsetup import EnvelopeRefused, check_envelope

        s = self.s
        where = f"{s.daemon.host}:{s.daemon.port}"
        try:  # as the runtime: --token-file, else the default file when it exists (docs/setup.md)
            token = read_daemon_token(s.daemon.token_file)
        except KeyFileError as exc:
            return (
                _fail(
                    "daemon",
                    str(exc),
                    "--token-file must name a readable copy of the daemon's token file",
                ),
                _skip("envelope", "daemon not reached"),
            )
        client = DaemonClient(
            s.daemon.host,
            s.daemon.port,
            token=token or None,
            request_timeout=s.daemon.request_timeout_s,
            connect_timeout=s.daemon.connect_timeout_s,
            client_name="mecharm-doctor",
            busy_wait_s=0.0,
            time_scale=s.time_scale,  # the runtime's check (docs/setup.md, "Time scale")
        )
        try:
            try:
                hello = await client.connect()
            except TimeScaleMismatch as exc:
                why = str(exc).partition("; ")[0]
                return _fail("daemon", why, connect_fix(exc, token_given=bool(token))), _skip(
                    "envelope", "time scale refused"
                )
            except DaemonError as exc:
                fix = connect_fix(exc, token_given=bool(token), token_file=s.daemon.token_file)
                if isinstance(exc, Unauthorized):
                    what, skip = f"{where} refused the hello: {exc.message}", "not authenticated"
                elif isinstance(exc, DaemonBusy):
                    what, skip = f"{where}: {exc}", "daemon busy"
                else:
                    what, skip = f"{where} not reachable: {exc}", "daemon not reached"
                return _fail("daemon", what, fix), _skip("envelope", skip)
            caps = hello.get("capabilities") or {}
            auth = "authenticated" if caps.get("auth_required") else "no token required"
            scale = caps.get("time_scale")
            detail = (
                f"{where}: {hello.get('backend', '?')} backend, protocol "
                f"{hello.get('protocol_version', '?')}, {auth}"
                + (f", time scale {scale:g}" if isinstance(scale, int | float) else "")
            )
            daemon = _ok("daemon", detail)
            try:
                env = check_envelope(s, client, warn_missing=False, arcs=self.arcs)
            except EnvelopeRefused as exc:
                envelope = _fail(
                    "envelope",
                    str(exc).split(". Narrow")[0],
                    "narrow these runtime settings (configs/runtime.yaml) or widen the "
                    "daemon's envelope (configs/daemon.yaml, envelope:)",
                )
            else:
                if env is None:
                    envelope = _ok(
                        "envelope",
                        "the daemon announces none (older than it): only the runtime's own "
                        "limits apply",
                    )
                else:
                    step = env.max_step_deg
                    envelope = _ok(
                        "envelope",
                        f"the runtime's settings fit the daemon's (j1 max {env.joint_max[1]:g}, "
                        f"step bound {'off' if step is None else f'{step:g} deg'}"
                        + ("" if self.arcs else "; arcs not loaded, so not checked against it")
                        + ")",
                    )
            return daemon, envelope
        finally:
            await client.aclose()

    # ---- the top camera -------------------------------------------------------------------------
    async def top_camera(self) -> Check:
        spec = self.s.perception.top_camera
        holder: list[Any] = []
        with anyio.move_on_after(self.camera_timeout_s) as scope:
            try:
                return await anyio.to_thread.run_sync(_look, spec, holder, abandon_on_cancel=True)
            except Exception as exc:  # the camera's own error names the source and the cause
                return _fail(
                    "top camera",
                    f"{spec}: {type(exc).__name__}: {exc}",
                    "check the camera is connected and not open in another program (a busy "
                    "camera cannot be opened), or fix --top-camera; the simulated rig serves "
                    "it from mecharm-daemon --backend sim --scene ...",
                )
        assert scope.cancelled_caught
        for cam in holder:  # unblock the read left in the thread
            cam.close()
        return _fail(
            "top camera",
            f"{spec}: no frames within {self.camera_timeout_s:g} s",
            "the source opens but sends nothing: restart the camera (or its app/server)",
        )

    # ---- the recorder ------------------------------------------------------------------------------
    async def recorder(self) -> Check:
        from mecharm.recorder.sender import RecorderSender
        from mecharm.runtime.recorder_link import RecorderLink

        s = self.s
        if not s.recorder.enabled:
            return _skip("recorder", "recorder off (--no-recorder): trials will have no side video")
        try:  # never create the key here: the recorder and the runtime do at their start
            key = read_key(Path(s.recorder.key_file).expanduser())
        except KeyFileError as exc:
            fix = (
                "start the recorder once (it creates the key), or point --recorder-key-file "
                "at the recorder's key file"
                if "does not exist" in str(exc)
                else "fix the key file as the message says"
            )
            return _fail("recorder", str(exc), fix)
        link = RecorderLink(
            RecorderSender(s.recorder.host, s.recorder.port, key=key), data_root=s.data_root
        )
        try:
            probe = await link.probe(s.recorder.probe_timeout_s)
        finally:
            link.close()
        if probe.ok:
            rtt = f", answered in {probe.rtt_ms:.1f} ms" if probe.rtt_ms is not None else ""
            return _ok("recorder", probe.detail + rtt)
        return _fail("recorder", probe.detail + (f" ({probe.why})" if probe.why else ""), probe.fix)


def _look(spec: str, holder: list[Any]) -> Check:
    """Open the camera and read a few frames (in a worker thread): fresh and live, as the
    runtime needs them (docs/recorder.md#frame-freshness, docs/perception.md "Frozen feed")."""
    from mecharm.cameras import is_fresh, make_camera

    cam = make_camera(spec)
    holder.append(cam)
    try:
        cam.open()
        asked = time.monotonic_ns()
        frames, failed, fresh, keys = 0, 0, 0, set()
        shape: tuple[int, ...] = ()
        t0 = time.monotonic()
        while frames < _CAMERA_FRAMES and failed < 30:
            f = cam.read()
            if not f.ok or f.image is None:
                failed += 1
                continue
            frames += 1
            shape = f.image.shape
            fresh += is_fresh(f.mono_ns, 0.0, asked)
            data = f.jpeg if f.jpeg is not None else f.image.tobytes()
            keys.add(hashlib.blake2b(data, digest_size=16).digest())
        took = time.monotonic() - t0
    finally:
        cam.close()
    if frames == 0:
        return _fail(
            "top camera",
            f"{spec}: opened, but {failed} reads in a row failed",
            "restart the camera (or its app/server); check the cable",
        )
    if fresh == 0:
        return _fail(
            "top camera",
            f"{spec}: {frames} frames, all captured before they were asked for (a stale buffer)",
            "the runtime would refuse them: restart the camera, or use a source without a "
            "frame buffer",
        )
    if len(keys) == 1 and frames > 1:
        return _fail(
            "top camera",
            f"{spec}: {frames} identical frames in a row (the feed is frozen)",
            "a live camera never repeats a frame: restart the camera (or its app)",
        )
    fps = (frames - 1) / took if took > 0 and frames > 1 else 0.0
    h, w = shape[:2] if len(shape) >= 2 else (0, 0)
    return _ok(
        "top camera", f"{spec}: {w}x{h}, {frames} live frames ({fresh} fresh), {fps:.0f} fps"
    )


# ---- output -----------------------------------------------------------------------------------
def render(checks: Sequence[Check], out: TextIO, *, rich: bool | None = None) -> None:
    """The checklist: a rich table on a terminal, plain lines otherwise (logs, pipes, tests)."""
    failed = sum(c.failed for c in checks)
    summary = (
        f"all {len(checks)} checks ok" if not failed else f"{failed} of {len(checks)} checks FAILED"
    )
    if rich is None:
        rich = out.isatty()
    if rich:
        from rich.console import Console
        from rich.table import Table

        table = Table(show_header=False, box=None, pad_edge=False)
        styles = {"ok": "bold green", "FAIL": "bold red", "skip": "dim"}
        for c in checks:
            text = c.detail + (f"\n[bold]do:[/bold] {c.fix}" if c.fix else "")
            table.add_row(f"[{styles[c.status]}]{c.status}[/]", c.name, text)
        console = Console(file=out)
        console.print(table)
        console.print(f"[{'bold red' if failed else 'bold green'}]{summary}[/]")
        return
    width = max((len(c.name) for c in checks), default=0)
    for c in checks:
        print(f"{c.status:<4}  {c.name:<{width}}  {c.detail}", file=out)
        if c.fix:
            print(f"{'':<4}  {'':<{width}}  do: {c.fix}", file=out)
    print(summary, file=out)


# ---- command line --------------------------------------------------------------------------------
def register(parser: argparse.ArgumentParser) -> None:
    """The ``mecharm doctor`` flags: the runtime's, for the parts of the rig it checks."""
    p = parser
    p.description = (
        "Check the rig with the runtime's own settings and checks; one line per check, "
        "with what to do for each failure. Never moves the arm. Exit 0 all ok, 1 a "
        "failure, 2 bad flags (docs/doctor.md)."
    )
    p.add_argument(
        "--config", type=Path, metavar="FILE",
        help="runtime YAML settings (default: the shipped runtime.yaml, as mecharm-runtime)",
    )  # fmt: skip
    p.add_argument("--data-root", dest="data_root", type=Path, metavar="DIR")
    p.add_argument("--daemon-host", dest="daemon_host", metavar="HOST")
    p.add_argument("--daemon-port", dest="daemon_port", type=int, metavar="PORT")
    p.add_argument("--token-file", dest="daemon_token_file", type=Path, metavar="FILE")
    p.add_argument("--top-camera", dest="top_camera", metavar="SRC")
    p.add_argument("--recorder-port", dest="recorder_port", type=int, metavar="PORT")
    p.add_argument("--recorder-key-file", dest="recorder_key_file", type=Path, metavar="FILE")
    p.add_argument(
        "--no-recorder", dest="recorder_enabled", action="store_const", const=False,
        help="the session runs without a recorder: its check is skipped",
    )  # fmt: skip
    p.add_argument(
        "--min-free-mb", type=float, default=1024, metavar="MB",
        help="free space the data root must have (default 1024 MB)",
    )  # fmt: skip
    p.add_argument(
        "--camera-timeout", type=float, default=10.0, metavar="S",
        help="seconds to wait for the top camera's frames (default 10)",
    )  # fmt: skip
    p.set_defaults(func=run)


_OWN = ("config", "min_free_mb", "camera_timeout", "func", "group")


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Load the runtime's settings as ``mecharm-runtime`` would, run every check, print them."""
    from mecharm.runtime.cli import DEFAULT_CONFIG

    out = out or sys.stdout
    cfg = args.config or (DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None)
    overrides = {k: v for k, v in vars(args).items() if k not in _OWN and v is not None}
    try:
        settings = load_settings(RuntimeSettings, cfg, overrides)
    except ConfigError as exc:
        print(f"mecharm doctor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.min_free_mb < 0 or args.camera_timeout <= 0:
        print("mecharm doctor: --min-free-mb must be >= 0, --camera-timeout > 0", file=sys.stderr)
        return EXIT_USAGE
    configure_logging("error")  # the checklist is the output; the checks' own logs stay quiet
    doctor = Doctor(settings, min_free_mb=args.min_free_mb, camera_timeout_s=args.camera_timeout)
    print(
        f"mecharm doctor: the runtime's settings from {cfg or 'defaults'} "
        "(+ environment and flags); the arm is not moved",
        file=out,
    )
    checks = anyio.run(doctor.run)
    render(checks, out)
    return EXIT_FAILED if any(c.failed for c in checks) else EXIT_OK
