"""The operator's console: what the person next to the arm sees while trials run.

One line per event as it happens: a stage as it starts (with the time it is expected to
take), each move's target the moment it is decided (before the arm moves), each gripper
action, the stage's end; on a terminal, a status line under them (rich ``Live``, redrawn
by rich's own thread twice a second). After any stop, a plain statement of the arm's last
known state and what to do. It only listens: fed by the trial's callbacks and trace lines,
it never changes a decision or a wait. What it shows is in docs/console.md.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO, cast

from rich.console import Console
from rich.live import Live
from rich.text import Text

from mecharm.common.logging import for_operator, short_line

__all__ = ["RuntimeConsole", "recorder_heartbeat"]

#: the status line's own colours (reset before and after it: docs/console.md)
STATUS_STYLE = "black on white"


def recorder_heartbeat(recorder: Any) -> str:
    """The recorder's last answer as the status shows it: ``ok``, ``NOT RECORDING (...)``,
    or ``unknown`` until a probe has answered (``RecorderLink.last_probe``)."""
    if recorder is not None and not getattr(recorder, "enabled", True):
        return "off (--no-recorder)"
    probe = getattr(recorder, "last_probe", None)
    if probe is None:
        return "unknown"
    if getattr(probe, "ok", False) and getattr(probe, "same_root", True):
        return "ok"
    return f"NOT RECORDING ({getattr(probe, 'detail', '') or 'no answer'})"


def _angles(a: Any) -> str:
    return " ".join(f"{v:.1f}" for v in a) if a else "?"


@dataclass
class _Arm:
    """What the console last heard about the arm (from the trace: readings and decisions)."""

    measured: tuple[float, ...] | None = None
    gripper: str = "unknown"
    #: the exit path's steps of the last stopped trial (where it left the arm)
    exit_steps: list[dict[str, Any]] = field(default_factory=list)


class RuntimeConsole:
    """Prints the session's lines to ``out`` (a text stream or a rich Console).

    ``live`` None: a status line when ``out`` is a terminal. ``heartbeat()`` gives the
    recorder's state for the status line (called from rich's refresh thread: keep it a
    read of what is already known)."""

    def __init__(
        self,
        out: TextIO | Console | None = None,
        *,
        live: bool | None = None,
        heartbeat: Callable[[], str] | None = None,
        refresh_per_second: float = 2.0,
        dry_run: bool = False,
        nominal_s: Mapping[str, float] | None = None,
    ) -> None:
        self.rc = (
            out
            if isinstance(out, Console)
            else Console(
                file=out or sys.stdout, highlight=False, markup=False, emoji=False, soft_wrap=True
            )
        )
        self.want_live = self.rc.is_terminal if live is None else live
        #: a dry run never moves the arm: a stop leaves it where it was
        self.dry_run = dry_run
        #: real-rig seconds each of the task's stages takes before this session has timed
        #: one (``Task.nominal_s``); divided by the time scale when shown
        self.nominal_s: Mapping[str, float] = nominal_s or {}
        #: warnings and errors the log file got ({level: count}), shown or not
        self.logged: dict[str, int] = {}
        self.heartbeat = heartbeat
        #: a stop asked for (the first or second Ctrl-C), shown first on the status line
        self.stopping = ""
        self.time_scale = 1.0
        self.trials: int | None = None
        self.trial_no = 0
        self.trial_t0: float | None = None
        self.stage: str | None = None
        self.stage_t0 = 0.0
        self.history: dict[str, list[float]] = {}
        self.arm = _Arm()
        self._target_xz: Any = None
        self._told_reason = ""
        self._told_state_for: str | None = "-"  # the trial whose state was told last
        self._live: Live | None = None
        self._refresh = refresh_per_second
        self._lock = threading.Lock()
        #: a text stream onto ``line``, for code that prints (``print(..., file=writer)``)
        self.writer = cast(TextIO, _LineWriter(self.line))

    # ------------------------------------------------------------------ lines
    def line(self, text: str | Text, style: str | None = None) -> None:
        """One line above the status (or plain, off a terminal)."""
        with self._lock:
            self.rc.print(text, style=style, markup=False, highlight=False, soft_wrap=True)

    def log_event(self, event: dict[str, Any]) -> None:
        """A warning or error from the log: counted; shown only when its call marked it for
        the operator (``FOR_OPERATOR``). Everything else is either said by the console in its
        own words or kept for the file (``logged_summary`` points to it at the end)."""
        level = str(event.get("level", ""))
        self.logged[level] = self.logged.get(level, 0) + 1
        if for_operator(event):
            self.line(
                short_line(event), style="red" if level in ("error", "critical") else "yellow"
            )

    def logged_summary(self) -> str | None:
        """``log: 2 warning(s), 1 error(s) in the log file`` (None when there were none)."""
        n = [(self.logged.get(k, 0), k) for k in ("warning", "error")]
        n[1] = (n[1][0] + self.logged.get("critical", 0), "error")
        if not any(c for c, _ in n):
            return None
        return "log: " + ", ".join(f"{c} {k}(s)" for c, k in n if c) + " in the log file"

    # ------------------------------------------------------------------ session
    def start(self, trials: int | None, time_scale: float = 1.0) -> None:
        self.trials, self.time_scale = trials, time_scale
        if self.want_live and self._live is None:
            self._live = Live(
                get_renderable=self._status,
                console=self.rc,
                refresh_per_second=self._refresh,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def stop_requested(self, name: str = "SIGINT") -> None:
        """The first Ctrl-C: said at once, so it is not pressed again by mistake."""
        key = "Ctrl-C" if name == "SIGINT" else name
        what = "finishing this trial" if self.stage is not None else "no new trial will start"
        self.stopping = "STOP PENDING: this trial ends the session"
        self.line(f"{key}: {what}; Ctrl-C again stops the arm now", style="bold yellow")

    def force_requested(self, name: str = "SIGINT") -> None:
        key = "Ctrl-C" if name == "SIGINT" else name
        self.stopping = "STOPPING THE ARM"
        self.line(f"{key} again: stopping the arm now", style="bold red")

    # ------------------------------------------------------------------ a trial
    def trial_start(self, i: int) -> None:
        self.trial_no, self.trial_t0 = i, time.monotonic()
        self.arm.exit_steps = []
        self._told_reason = ""
        self.line(f"trial {i}" + (f"/{self.trials}" if self.trials else "") + ":", style="bold")

    def expected(self, stage: str) -> str:
        done = self.history.get(stage)
        if done:
            return f"~{statistics.median(done):.1f} s (median of {len(done)})"
        nominal = self.nominal_s.get(stage)
        if nominal is None:
            return "~? s"
        return f"~{nominal / self.time_scale:.1f} s (nominal)"

    def stage_start(self, stage: str) -> None:
        self.stage, self.stage_t0, self._target_xz = stage, time.monotonic(), None
        if stage == "abort":
            self.line("  > abort                  the exit path: a safe pose, fresh mode off")
            return
        self.line(f"  > {stage:<22} expect {self.expected(stage)}", style="cyan")

    def stage_end(self, stage: str, outcome: str, reason: str) -> None:
        if outcome == "holding":  # the exit path kept the block: the statement says what to do
            if self.stage != "abort":
                self.stage_start("abort")
            said = (
                "BLOCK NOT SEEN IN THE GRIPPER, believed held"
                if reason.startswith("BLOCK NOT SEEN")
                else "BLOCK STILL IN THE GRIPPER"
            )
            self.line(f"  abort                  {said} (what to do: below)")
            return
        took = time.monotonic() - self.stage_t0 if self.stage == stage else None
        if took is not None and outcome == "ok":
            self.history.setdefault(stage, []).append(took)
        if reason:
            self._told_reason = reason
        when = f"  {took:.1f} s" if took is not None else ""
        self.line(
            f"  {stage:<22} {outcome}{when}{'  ' + reason if reason else ''}",
            style=None if outcome == "ok" else "bold red",
        )

    def on_trace(self, line: dict[str, Any]) -> None:
        """Every trace line as the trial writes it: cheap, and never raises into the trial."""
        try:
            self._heard(line)
        except Exception as exc:  # the console must never stop a trial
            self.line(f"(console: {type(exc).__name__}: {exc})")

    def _heard(self, line: dict[str, Any]) -> None:
        event, kind = line.get("event"), line.get("kind")
        value = line.get("value")
        if line.get("stage") == "abort" and self.stage != "abort":
            self.stage_start("abort")
        if event == "input" and kind == "angles" and isinstance(value, dict):
            if value.get("angles"):
                self.arm.measured = tuple(value["angles"])
        elif event != "decision" or not isinstance(value, dict):
            return
        elif kind == "lookup" and value.get("target_xz"):
            self._target_xz = value["target_xz"]
        elif kind == "command":
            xz = self._target_xz
            where = f"  (target x {xz[0]:.3f} z {xz[1]:.3f} m)" if xz else ""
            self._target_xz = None
            self.line(f"      move {value.get('note', '')}: {_angles(value.get('angles'))}{where}")
        elif kind == "gripper":
            action, v = value.get("action", "?"), value.get("value")
            self.arm.gripper = f"{'closed' if action == 'close' else 'open'} ({v})"
            self.line(f"      gripper {action} ({v}): {value.get('note', '')}")
        elif kind == "exit":
            steps = value.get("steps")
            self.arm.exit_steps = steps if isinstance(steps, list) else [value]

    def trial_end(self, summary: Any, text: str, arm_alive: bool = True) -> None:
        """The trial's line (its reason once: not again when a stage line told it), then
        after a stop the arm's last known state."""
        self.stage = None
        if summary.reason and summary.reason == self._told_reason:
            text = text.replace(f" ({summary.reason})", " (reason above)", 1)
        self.line(text, style="bold" if summary.status == "completed" else "bold red")
        if summary.status != "completed":
            self.last_known_state(
                summary.reason,
                summary.held,
                arm_alive,
                evidence=getattr(summary, "held_evidence", ""),
            )
            self._told_state_for = summary.run_stem
        else:
            self._told_state_for = None

    def session_end(self, stopped_by: str, last_stem: str | None, holding: bool) -> None:
        """A session stopped for the daemon or the storage between trials: the state once more,
        unless the last trial's statement already said it."""
        self.close()
        # no fresh scene: between trials, the last trial's end (or its statement) told where
        # the arm is
        if not stopped_by or stopped_by in ("signal", "operator declined"):
            return
        if stopped_by.startswith("no fresh scene"):
            return
        if self._told_state_for is not None and self._told_state_for == last_stem:
            return
        self.last_known_state(stopped_by, holding, arm_alive="daemon unavailable" not in stopped_by)

    # ------------------------------------------------------------------ the statement
    def last_known_state(
        self, why: str, holding: bool, arm_alive: bool = True, evidence: str = ""
    ) -> None:
        """Where the arm is, its pose, the gripper, the block, and what the operator does next.

        ``why``: the stop's reason (told in full above; here only its kind). ``evidence``: with
        ``holding``, what the top camera saw at the tip (seen, not_seen, unknown)."""
        lost = not arm_alive or "daemon connection lost" in why or "daemon unavailable" in why
        forced = why.startswith("forced stop")
        storage = why.startswith("storage")
        kinds = [(lost, "daemon lost"), (forced, "forced stop"), (storage, "storage fault")]
        kind = next((k for hit, k in kinds if hit), "block held" if holding else "trial stopped")
        steps = {s.get("step"): s.get("ok") for s in self.arm.exit_steps if isinstance(s, dict)}
        if self.dry_run:
            where = "where it was: a dry run sends no motion"
        elif lost:
            where = "where it was when the daemon was lost (nothing more could be sent)"
        elif forced:
            where = "stopped where it was (forced stop)"
        elif steps.get("home"):
            where = "at HOME (the exit path took it there)"
        elif steps.get("hover holding the block") or steps.get("hover"):
            where = "in the hover above where it worked, holding the block"
        else:
            where = "where the exit path left it"
        a = self.arm.measured
        pose = f"joints {_angles(a)} (last measured)" if a else "no reading yet"
        if a:
            from mecharm.common.kinematics import fk_tip

            x, y, z = (float(v) for v in fk_tip(a))
            pose += f", tip x {x:.3f} y {y:.3f} z {z:.3f} m"
        steps_todo = []
        if holding:
            steps_todo.append(
                "take the block out of the gripper by hand (the next trial opens it at HOME)"
            )
        if lost:
            steps_todo.append("check the daemon (power, network, its log)")
        if forced or lost:
            steps_todo.append("check the arm is clear of the box and the mat")
        if storage:
            steps_todo.append("free space on the data root or reconnect the disk")
        if steps_todo:
            todo = "; ".join(steps_todo) + "; then restart (the next trial moves HOME first)"
        else:
            todo = "check the block and the box on the mat, then start the next trial"
        self.line(f"ARM STATE after the stop ({kind}):", style="bold red")
        self.line(f"  where:    {where}")
        self.line(f"  pose:     {pose}")
        held = "not holding the block"
        if holding and evidence == "not_seen":
            held = "BLOCK NOT SEEN AT THE TIP by the top camera (believed held: look at the jaws)"
        elif holding:
            held = "HOLDING THE BLOCK" + (" (seen at the tip)" if evidence == "seen" else "")
        self.line(f"  gripper:  {self.arm.gripper}; {held}")
        self.line(f"  to do:    {todo}", style="bold")

    # ------------------------------------------------------------------ the status line
    def _status(self) -> Text:
        """Built in rich's refresh thread from what the trial last told (reads only)."""
        now = time.monotonic()
        parts = []
        if self.stopping:  # first, so a narrow terminal never cuts it
            parts.append(self.stopping)
        if self.trial_t0 is not None:
            n = f"/{self.trials}" if self.trials else ""
            parts.append(f"trial {self.trial_no}{n} {now - self.trial_t0:.0f} s")
        try:
            rec = self.heartbeat() if self.heartbeat is not None else "unknown"
        except Exception:  # a status line never fails
            rec = "unknown"
        # the recorder next: a narrow terminal cuts the end (the arm's numbers), not the alarm
        parts.append(f"recorder {rec}")
        stage = self.stage
        if stage is not None:
            done = self.history.get(stage)
            nominal = self.nominal_s.get(stage)
            want = (
                statistics.median(done)
                if done
                else (nominal / self.time_scale if nominal is not None else None)
            )
            of = f"/~{want:.1f}" if want is not None else ""
            parts.append(f"{stage} {now - self.stage_t0:.1f}{of} s")
        parts.append(f"gripper {self.arm.gripper}")
        parts.append(f"joints {_angles(self.arm.measured)}")
        # its own colours, and cut to one row (rich would wrap it): never the colour of the
        # line above, one row at any width
        text = Text(" | ".join(parts), style=STATUS_STYLE, end="")
        text.truncate(max(self.rc.width - 1, 10), overflow="ellipsis")
        return text


class _LineWriter:
    """A text stream whose whole lines go to ``RuntimeConsole.line`` (for ``print(file=...)``)."""

    def __init__(self, line: Callable[[str], None]) -> None:
        self._line = line
        self._buf = ""

    def write(self, s: str) -> int:
        self._buf += s
        while "\n" in self._buf:
            head, self._buf = self._buf.split("\n", 1)
            self._line(head)
        return len(s)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False
