"""`mecharm-runtime` — run pick-and-place trials one after another on the rig (or the simulator).

Exit codes (docs/runtime.md, "Start-up checks"): 0 done, 1 failure during the run,
2 invalid configuration, 3 data root refused, 4 ledger refused, 5 FK table refused,
6 storage failed mid-session, 7 settings wider than the daemon's safety envelope,
8 no recorder proved it records into the data root and ``--require-recorder`` is set,
9 no trial completed (every trial stopped, or none could start).

The console shows what happens (docs/console.md); the full log goes to
``{data root}/logs/runtime_YYYYmmdd_HHMMSS.log``, one file per session.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path

import anyio

from mecharm.common.config import ConfigError, load_settings
from mecharm.common.defaults import RUNTIME_CONFIG
from mecharm.common.fsutil import DataRootGuard, LineFile, StorageFault
from mecharm.common.keyfile import KeyFileError, load_or_create_key, read_daemon_token
from mecharm.common.layout import DataRoot
from mecharm.common.logging import configure_logging, get_logger, log_lines_dropped
from mecharm.common.shutdown import capture_signals
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.console import RuntimeConsole
from mecharm.runtime.records.ledger import LedgerError
from mecharm.runtime.threads import to_thread
from mecharm.runtime.trial import DataRootError

__all__ = ["build_parser", "main"]

#: shipped in the package: the same from any directory (docs/setup.md)
DEFAULT_CONFIG = RUNTIME_CONFIG
#: exit codes (README, "Runtime: running trials"; docs/runtime.md, "Start-up checks")
EXIT_FAILED, EXIT_CONFIG, EXIT_DATA_ROOT, EXIT_LEDGER, EXIT_TABLE = 1, 2, 3, 4, 5
#: the data root failed mid-session and did not come back (records pending or lost)
EXIT_STORAGE = 6
#: the runtime's settings reach beyond the daemon's safety envelope (docs/daemon.md)
EXIT_ENVELOPE = 7
#: --require-recorder and no recorder answered on the data root (docs/recorder.md)
EXIT_RECORDER = 8
#: trials were asked for and none completed (all stopped, or the first could not start)
EXIT_NO_TRIAL = 9
log = get_logger("mecharm.runtime.cli")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mecharm-runtime", description=__doc__.splitlines()[0] if __doc__ else None
    )
    p.add_argument(
        "--config",
        type=Path,
        help="YAML settings (default: the shipped runtime.yaml, docs/setup.md)",
    )
    p.add_argument(
        "--task",
        help="the task the trials run: pick_place (default) or another of "
        "mecharm/runtime/tasks.py (docs/tasks.md)",
    )
    p.add_argument("--trials", type=int, help="number of trials (default: until stopped)")
    p.add_argument(
        "--policy",
        dest="rollout.policy",
        help="--task rollout: the policy that drives the arm: episode:DATASET[#N], "
        "lerobot:PATH or python:MODULE:NAME (docs/rollouts.md)",
    )
    p.add_argument(
        "--confirm", action="store_const", const=True, help="ask before each further trial"
    )
    p.add_argument(
        "--dry-run",
        dest="dry_run",
        action="store_const",
        const=True,
        help="run detection, lookups, guards and decisions without moving the arm",
    )
    p.add_argument(
        "--data-root",
        dest="data_root",
        type=Path,
        help="data root (default $MECHARM_DATA_ROOT, else ~/.local/share/mecharm/data; must exist)",
    )
    p.add_argument("--daemon-host", dest="daemon_host")
    p.add_argument("--daemon-port", dest="daemon_port", type=int)
    p.add_argument("--token-file", dest="daemon_token_file", type=Path)
    p.add_argument("--recorder-port", dest="recorder_port", type=int)
    p.add_argument(
        "--recorder-key-file",
        dest="recorder_key_file",
        type=Path,
        help="secret shared with the recorder (default $XDG_CONFIG_HOME/mecharm/recorder.key)",
    )
    p.add_argument(
        "--no-recorder",
        dest="recorder_enabled",
        action="store_const",
        const=False,
        help="send no recorder events (recording_status none)",
    )
    p.add_argument(
        "--require-recorder",
        dest="require_recorder",
        action="store_const",
        const=True,
        help="refuse to start (exit 8) unless a recorder answers on --recorder-port and "
        "records into this data root (default: a loud warning)",
    )
    p.add_argument(
        "--top-camera", dest="top_camera", help="top camera source (index, name, URL, file)"
    )
    p.add_argument(
        "--no-top-video",
        dest="top_video",
        action="store_const",
        const=False,
        help="do not record the top camera as video (top_camera.mkv in each run folder)",
    )
    p.add_argument(
        "--rig-id", dest="rig_id", help="this rig's name in the run logs (default: host name)"
    )
    p.add_argument(
        "--tag",
        dest="tags",
        action="append",
        metavar="TAG",
        help="a label for this session's trials, in every run log; the report filters by it "
        "(repeat for several, up to 8)",
    )
    p.add_argument(
        "--sim-control",
        dest="sim_control_url",
        help="simulated rig: camera-server URL; a fresh scene is requested between trials",
    )
    p.add_argument("--judge", choices=["geometric", "human", "vlm"])
    p.add_argument(
        "--vlm-model", dest="vlm_model", help="VLM judge: the model (default claude-sonnet-4-6)"
    )
    p.add_argument(
        "--vlm-base-url",
        dest="vlm_base_url",
        help="VLM judge: Messages API base URL (default $ANTHROPIC_BASE_URL, else the vendor's)",
    )
    p.add_argument(
        "--display",
        action="store_const",
        const=True,
        help="stream the trials live to a Rerun viewer (spawns one; see --display-url)",
    )
    p.add_argument(
        "--display-url",
        dest="display_url",
        help="--display into a running Rerun viewer at this gRPC URL (implies --display)",
    )
    p.add_argument(
        "--no-rerun",
        dest="rerun_after_trial",
        action="store_const",
        const=False,
        help="do not build each trial's Rerun file after it",
    )
    # not an option: the time scale is the daemon's; a hint instead of argparse's bare refusal
    p.add_argument("--time-scale", dest="time_scale_flag", help=argparse.SUPPRESS)
    p.add_argument(
        "--log-level",
        dest="log_level",
        choices=["debug", "info", "warning", "error"],
        help="level of the log file (the console shows warnings and errors)",
    )
    return p


#: what ``--time-scale`` answers (exit 2)
TIME_SCALE_FLAG = (
    "--time-scale: the runtime takes the daemon's time scale; start the daemon with --time-scale K"
)


def open_session_log(settings: RuntimeSettings) -> tuple[LineFile, Path]:
    """This session's log file in the data root's logs folder, once the root passes its guard
    (never a folder created anywhere else). Whole lines only, like the trace: a line the
    disk cannot take is cut back and dropped (docs/reliability.md). Raises DataRootError."""
    try:
        guard = DataRootGuard(Path(settings.data_root), settings.require_mount)
        logs = guard.mkdir(DataRoot(Path(settings.data_root)).logs)
        path = logs / f"runtime_{time.strftime('%Y%m%d_%H%M%S')}.log"
        return LineFile(path), path
    except (StorageFault, OSError) as exc:
        raise DataRootError(str(exc)) from None


@contextlib.contextmanager
def session_logging(settings: RuntimeSettings, console: RuntimeConsole) -> Iterator[Path]:
    """The session's log file under the data root's logs folder, with the console echo
    (docs/console.md, "Log lines"); ``mecharm-runtime`` and the demo share it. Says where
    the file is, and at the end how many warnings and errors it got. Raises DataRootError."""
    log_file, log_path = open_session_log(settings)

    def dropped(why: str) -> None:
        console.line(f"log file cannot be written ({why}): log lines are dropped and counted")

    configure_logging(
        settings.log_level, json=True, stream=log_file, echo=console.log_event, on_drop=dropped
    )
    console.line(f"log: {log_path}")
    try:
        yield log_path
    finally:
        lost = log_lines_dropped()
        configure_logging(settings.log_level)  # the file closes below: back to stderr
        with contextlib.suppress(OSError):  # what did not fit is counted above
            log_file.close()
        told = console.logged_summary()
        if told:
            console.line(f"{told}: {log_path}")
        if lost:
            console.line(f"log: {lost} line(s) could not be written to {log_path}")


def fresh_scenes(url: str) -> Callable[[int], Awaitable[int | None]]:
    """Simulated rig: before every trial, the first too (an earlier session may have left the
    block in the box), a fresh scene from the workcell at ``url``; returns its seed."""
    from mecharm.runtime.simcontrol import scene_next

    async def between(i: int) -> int | None:
        info = await to_thread(scene_next, url)
        layout = info.get("layout")
        seed = layout.get("seed") if isinstance(layout, dict) else None
        return seed if isinstance(seed, int) else None

    return between


async def _amain(settings: RuntimeSettings, console: RuntimeConsole) -> int:
    from mecharm.runtime.service import run_service
    from mecharm.runtime.terminal import ask_block_removed, ask_yes

    between = fresh_scenes(settings.sim_control_url) if settings.sim_control_url else None
    with capture_signals() as sigs:
        report = await run_service(
            settings,
            signals=sigs,
            confirm=ask_yes if settings.confirm else None,
            between_trials=between,
            console=console,
            resolve_held=ask_block_removed if settings.confirm else None,
        )
    done = report.completed
    ok = sum(t.succeeded for t in report.trials)
    print(
        f"{len(report.trials)} trial(s): {done} completed, {ok} succeeded"
        + (f"; stopped: {report.stopped_by}" if report.stopped_by else "")
    )
    if report.storage_problem or report.records_lost:
        return EXIT_STORAGE
    if done == 0:
        print(f"mecharm-runtime: no trial completed (exit {EXIT_NO_TRIAL})", file=sys.stderr)
        return EXIT_NO_TRIAL
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.time_scale_flag is not None:
        print(f"mecharm-runtime: {TIME_SCALE_FLAG}", file=sys.stderr)
        return EXIT_CONFIG
    cfg = args.config or (DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None)
    overrides = {k: v for k, v in vars(args).items() if k not in ("config", "time_scale_flag")}
    try:
        settings = load_settings(RuntimeSettings, cfg, overrides)
    except ConfigError as exc:
        print(f"mecharm-runtime: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if settings.recorder.enabled and not settings.dry_run:
        try:  # before any set-up: created if missing, refused if too open (docs/recorder.md)
            load_or_create_key(settings.recorder.key_file)
        except KeyFileError as exc:
            print(f"mecharm-runtime: recorder {exc}", file=sys.stderr)
            return EXIT_CONFIG
    if not settings.dry_run:
        try:  # a missing --token-file is a configuration error, before any set-up
            read_daemon_token(settings.daemon.token_file)
        except KeyFileError as exc:
            print(f"mecharm-runtime: daemon {exc}", file=sys.stderr)
            return EXIT_CONFIG
    if settings.judge.by == "vlm":
        from mecharm.runtime.perception.vlm import VlmConfigError, vlm_env

        try:  # before any set-up: a missing key is a configuration error, not a failed trial
            vlm_env(settings.judge.vlm_base_url)
        except VlmConfigError as exc:
            print(f"mecharm-runtime: {exc}", file=sys.stderr)
            return EXIT_CONFIG
    if settings.task == "rollout":  # the policy loads before anything starts, or nothing does
        from mecharm.runtime.rollout.policies import PolicyError, load_policy

        if settings.rollout.policy is None:
            print(
                "mecharm-runtime: the rollout task needs a policy: --policy episode:DATASET[#N], "
                "lerobot:PATH or python:MODULE:NAME (docs/rollouts.md)",
                file=sys.stderr,
            )
            return EXIT_CONFIG
        try:
            load_policy(settings.rollout.policy, settings)
        except PolicyError as exc:
            print(f"mecharm-runtime: {exc}", file=sys.stderr)
            return EXIT_CONFIG
    if settings.viewing.display_url:
        settings = settings.updated({"viewing.display": True})
    from mecharm.runtime.client import TimeScaleMismatch
    from mecharm.runtime.lookup.table import TableError  # numpy/pyarrow: only once a run starts
    from mecharm.runtime.rigsetup import DaemonUnavailable, EnvelopeRefused, RecorderRequired
    from mecharm.runtime.service import session_console

    console = session_console(settings)
    with contextlib.ExitStack() as session:
        try:
            session.enter_context(session_logging(settings, console))
        except DataRootError as exc:
            print(f"mecharm-runtime: {exc}; refusing to write anywhere else", file=sys.stderr)
            return EXIT_DATA_ROOT
        # each refusal below: logged to the file, said once on stderr (the console echoes only
        # events marked for the operator)
        try:
            return anyio.run(_amain, settings, console)
        except DataRootError as exc:
            print(f"mecharm-runtime: {exc}; refusing to write anywhere else", file=sys.stderr)
            return EXIT_DATA_ROOT
        except LedgerError as exc:
            log.error("ledger_refused", error=str(exc))
            print(f"mecharm-runtime: ledger refused: {exc}", file=sys.stderr)
            return EXIT_LEDGER
        except TableError as exc:
            log.error("fk_table_refused", error=str(exc))
            print(f"mecharm-runtime: FK table refused: {exc}", file=sys.stderr)
            return EXIT_TABLE
        except TimeScaleMismatch as exc:  # the time_scale key is a check (docs/setup.md)
            log.error("time_scale_refused", error=str(exc))
            print(f"mecharm-runtime: refusing to start: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        except EnvelopeRefused as exc:
            log.error("envelope_refused", error=str(exc))
            print(f"mecharm-runtime: refusing to start: {exc}", file=sys.stderr)
            return EXIT_ENVELOPE
        except RecorderRequired as exc:
            print(f"mecharm-runtime: refusing to start: {exc}", file=sys.stderr)
            return EXIT_RECORDER
        except DaemonUnavailable as exc:
            log.error("daemon_unavailable", error=str(exc))
            print(f"mecharm-runtime: cannot start: {exc}", file=sys.stderr)
            return EXIT_FAILED
        except Exception as exc:
            log.error("runtime_failed", error=f"{type(exc).__name__}: {exc}")
            print(f"mecharm-runtime: {type(exc).__name__}: {exc}", file=sys.stderr)
            return EXIT_FAILED
        finally:
            console.close()


if __name__ == "__main__":
    raise SystemExit(main())
