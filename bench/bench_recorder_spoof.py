"""The recorder under spoofed traffic (docs/recorder.md, "Authenticated events").

A real recorder process records a real trial from the legitimate sender while a
hostile local process, without the key, fires 10,000 datagrams at the same port:
spoofed ``trial_start``/``trial_end``/``frame_request``/state events as plain JSON,
the same signed with a wrong key under the real session id, captured datagrams of
the real trial altered, replays of captured datagrams (this trial's and an older
session's), garbage and oversized datagrams. ``tests/chaos/test_recorder_spoof.py``
runs this scenario and asserts on it.

Figures:
- the real recording: frames kept (written of captured), status, closed by the real
  trial_end, state rows kept of those sent;
- attacker folders under the data root (target 0), replies the attacker received (0);
- hostile datagrams dropped, by reason (target all);
- the MAC's cost per datagram (timeit): signing on the sender, verifying on the
  recorder; baselines in the same run: the JSON of the event, parse_event.
"""

from __future__ import annotations

import json
import socket
import tempfile
import threading
import time
import timeit
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench import Row, has
from mecharm.common.layout import DataRoot, format_run_stem
from mecharm.recorder.envelope import EVENT_LABEL, seal, unseal
from mecharm.recorder.events import (
    MAX_EVENT_BYTES,
    Arrival,
    Commanded,
    FrameRequest,
    Measured,
    RecordingMeta,
    Stage,
    TrialEnd,
    TrialStart,
    parse_event,
)
from mecharm.recorder.sender import RecorderSender
from mecharm.tools.simrig import start_recorder

__all__ = ["SpoofRun", "Tap", "mac_cost_us", "run", "run_spoof_scenario"]

#: the poses and stages the legitimate sender uses: any other value in states.csv came from outside
LEGIT_ANGLES = [0.0, 10.0, -20.0, 0.0, -45.0, -30.0]
LEGIT_STAGES = ("approach", "grasp", "lift", "place")
WRONG_KEY = b"the attacker's guess at the key, 64 characters long, still wrong"


class Tap(RecorderSender):
    """The legitimate sender, keeping what it sent: the most an attacker on the host could see."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.captured: list[bytes] = []

    def seal_event(self, body: bytes, trial: str | None) -> tuple[int, bytes]:
        seq, data = super().seal_event(body, trial)
        self.captured.append(data)
        return seq, data


@dataclass
class SpoofRun:
    """What the scenario did and what the recorder made of it."""

    root: Path
    old_stem: str
    stem: str
    attacker_stems: list[str]
    t_start_sent: float = 0.0
    t_end_sent: float = 0.0
    legit_events: int = (
        0  #: datagrams of the real trial, trial_start..trial_end, frame requests too
    )
    legit_frame_reasons: list[str] = field(default_factory=list)
    hostile_sent: int = 0
    hostile_kinds: dict[str, int] = field(default_factory=dict)
    attacker_replies: int = 0
    meta: RecordingMeta | None = None
    stopped: dict[str, Any] = field(default_factory=dict)  #: the recorder's last status line
    log: Path | None = None


def _hostile(
    i: int,
    rng: np.random.Generator,
    run: SpoofRun,
    live: list[bytes],
    old: list[bytes],
    sid: str,
    reply_port: int,
) -> tuple[str, bytes]:
    """The i-th hostile datagram: (kind, bytes). Built without the key."""
    k = i % 10
    stem = run.attacker_stems[i % len(run.attacker_stems)]
    spoofs = (
        TrialStart(run_stem=stem),
        TrialEnd(run_stem=run.stem),
        FrameRequest(tag=f"spoof_{i}", reply_port=reply_port),
        Measured(angles=[66.0] * 6),
        Stage(stage="spoofed"),
    )
    body = spoofs[i // 10 % len(spoofs)].model_dump_json().encode()
    if k <= 2:  # as before the envelope: plain JSON
        return "plain_json", body
    if k == 3:  # signed with a wrong key under the real session, far ahead in sequence
        return "wrong_key", seal(WRONG_KEY, EVENT_LABEL, sid, 10**9 + i, run.stem, body)
    if k == 4 and len(live) > 4:  # a captured datagram with its body (or trial) altered
        cap = live[int(rng.integers(len(live) - 3))]
        head, _, _ = cap.rpartition(b" {")
        return "altered", head + b" " + body if i % 20 == 4 else cap.replace(
            run.stem.encode(), stem.encode()
        )
    if k in (5, 6) and len(live) > 4:  # a replay of a datagram of this trial (never the newest 3)
        return "replay_live", live[int(rng.integers(len(live) - 3))]
    if k == 7 and old:  # a replay of an earlier session's trial
        return "replay_old", old[int(rng.integers(len(old)))]
    if k == 8:
        junk = rng.bytes(int(rng.integers(0, 300)))
        return "garbage", junk if i % 20 == 8 else b"mr1 " + b"0" * 64 + b" " + junk
    if k == 9:
        return "oversized", b"mr1 " + b"f" * 64 + b" " + b"x" * MAX_EVENT_BYTES
    return "plain_json", body  # early in the trial, before there is anything to replay


def _wait_meta(root: Path, stem: str, timeout: float = 30.0) -> RecordingMeta:
    path = DataRoot(root).recording(stem).meta
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {path.name} for {stem} within {timeout:g} s")
        time.sleep(0.05)
    return RecordingMeta.model_validate_json(path.read_text())


def _legit_trial(s: Tap, run: SpoofRun, trial_s: float, frames_every_s: float) -> None:
    """The real trial: stages, sends and arrivals, readings at 50 Hz, side frames."""
    s.notify(TrialStart(run_stem=run.stem))
    run.legit_events += 1
    t0 = time.monotonic()
    next_stage = next_send = next_frame = t0
    n = 0
    while (now := time.monotonic()) - t0 < trial_s:
        if now >= next_stage:
            s.notify(Stage(stage=LEGIT_STAGES[n % len(LEGIT_STAGES)]))
            next_stage, n, run.legit_events = now + 1.0, n + 1, run.legit_events + 1
        if now >= next_send:
            t = time.time()
            s.notify(Commanded(angles=LEGIT_ANGLES, speed=20, ts_send=t, attempt=1))
            s.notify(Arrival(ts_send=t, ts_arrival=t + 0.01, attempt=1, arrived=True))
            next_send, run.legit_events = now + 0.5, run.legit_events + 2
        if now >= next_frame:
            run.legit_frame_reasons.append(s.request_frame(f"side_{n}", timeout=5.0)[2])
            next_frame, run.legit_events = now + frames_every_s, run.legit_events + 1
        s.notify(Measured(angles=LEGIT_ANGLES))
        run.legit_events += 1
        time.sleep(0.02)
    run.t_end_sent = time.time()
    s.notify(TrialEnd(run_stem=run.stem))
    run.legit_events += 1


def run_spoof_scenario(
    workdir: Path,
    *,
    hostile: int = 10_000,
    trial_s: float = 6.0,
    camera: str = "synthetic?fps=30&w=320&h=240",
    seed: int = 0,
) -> SpoofRun:
    """A real recording while ``hostile`` spoofed datagrams arrive; the recorder is stopped after."""
    root = workdir / "data"
    root.mkdir(parents=True)
    key_file = workdir / "config" / "recorder.key"
    now = time.time()
    run = SpoofRun(
        root=root,
        old_stem=format_run_stem(1, now - 120),
        stem=format_run_stem(2, now - 60),
        attacker_stems=[format_run_stem(n, now) for n in (3, 900, 9999)],
    )
    rec, port = start_recorder(workdir / "logs", root, camera, key_file=key_file, log_level="info")
    run.log = rec.log_path
    rng = np.random.default_rng(seed)
    try:
        # an earlier trial, from an earlier session: the attacker saw all of it
        old = Tap(port=port, key_file=key_file)
        old.notify(TrialStart(run_stem=run.old_stem))
        old.notify(Stage(stage=LEGIT_STAGES[0]))
        old.request_frame("old_side", timeout=5.0)
        old.notify(TrialEnd(run_stem=run.old_stem))
        _wait_meta(root, run.old_stem)

        s = Tap(port=port, key_file=key_file)
        stop = threading.Event()
        with (
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx,
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as inbox,
        ):
            inbox.bind(("127.0.0.1", 0))
            inbox.setblocking(False)

            def attacker() -> None:
                pace = hostile / max(0.5, 0.8 * trial_s)  # spread over the trial
                t0 = time.monotonic()
                for i in range(hostile):
                    kind, data = _hostile(
                        i, rng, run, s.captured, old.captured, s.session, inbox.getsockname()[1]
                    )
                    try:
                        tx.sendto(data, ("127.0.0.1", port))
                    except OSError:
                        continue  # counted below as not sent
                    run.hostile_sent += 1
                    run.hostile_kinds[kind] = run.hostile_kinds.get(kind, 0) + 1
                    if i % 50 == 49:
                        due = t0 + (i + 1) / pace
                        while (left := due - time.monotonic()) > 0 and not stop.is_set():
                            time.sleep(min(left, 0.01))

            th = threading.Thread(target=attacker, name="attacker", daemon=True)
            run.t_start_sent = time.time()
            # the attacker starts with the trial: its spoofs land in the middle of the recording
            th.start()
            _legit_trial(s, run, trial_s, frames_every_s=1.0)
            th.join(timeout=120)
            stop.set()
            run.meta = _wait_meta(root, run.stem)
            time.sleep(0.5)  # replies to the attacker's requests, if any were sent
            while True:
                try:
                    inbox.recvfrom(65535)
                    run.attacker_replies += 1
                except BlockingIOError:
                    break
        s.close()
        old.close()
    finally:
        rec.stop(20)
    for line in reversed(rec.log_path.read_text(errors="replace").splitlines()):
        if '"recorder_stopped"' in line:
            run.stopped = json.loads(line)
            break
    return run


def attacker_folders(run: SpoofRun) -> list[str]:
    """Trial folders under the data root that are not the legitimate sender's."""
    folders = DataRoot(run.root).run_folders
    legit = {run.old_stem, run.stem}
    return sorted(p.name for p in folders.iterdir() if p.name not in legit)


def mac_cost_us(n: int = 20_000) -> dict[str, float]:
    """Per-datagram cost of the envelope, µs (best of 5 timeit runs), with same-run baselines."""
    key = b"0" * 64
    body = Measured(angles=[1.0, 87.74, -38.33, 18.6, -45.11, -30.0]).model_dump_json().encode()
    sealed = seal(key, EVENT_LABEL, "0123456789abcdef", 12345, format_run_stem(1, 0), body)

    def best(stmt: Any) -> float:
        return min(timeit.repeat(stmt, number=n, repeat=5)) / n * 1e6

    return {
        "sign_us": best(lambda: seal(key, EVENT_LABEL, "0123456789abcdef", 12345, None, body)),
        "verify_us": best(lambda: unseal(key, EVENT_LABEL, sealed)),
        "baseline_event_json_us": best(
            lambda: Measured(angles=[1.0, 87.74, -38.33, 18.6, -45.11, -30.0]).model_dump_json()
        ),
        "baseline_parse_event_us": best(lambda: parse_event(body)),
        "datagram_bytes": len(sealed),
        "body_bytes": len(body),
    }


def run(quick: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"mode": "quick" if quick else "full"}
    cost = mac_cost_us(5_000 if quick else 50_000)
    out.update({f"mac_{k}": round(v, 2) if isinstance(v, float) else v for k, v in cost.items()})
    out["mac_sign_plus_verify_us"] = round(cost["sign_us"] + cost["verify_us"], 2)
    with tempfile.TemporaryDirectory() as tmp:
        r = run_spoof_scenario(Path(tmp), trial_s=6.0 if quick else 20.0)
        meta = r.meta
        assert meta is not None
        refused = dict(r.stopped.get("refused", {}))
        out["trial_s"] = round(meta.elapsed_sec, 2)
        out["status"] = meta.status
        out["frames_kept"] = meta.frames_written
        out["frames_captured"] = meta.frames_captured
        out["effective_fps"] = meta.effective_fps
        out["closed_by_real_trial_end"] = meta.ended_ts >= r.t_end_sent
        out["state_rows_kept_of_sent"] = f"{meta.states_rows} of {r.legit_events}"
        out["legit_frame_requests"] = {
            x: r.legit_frame_reasons.count(x) for x in set(r.legit_frame_reasons)
        }
        out["attacker_folders"] = len(attacker_folders(r))
        out["attacker_replies"] = r.attacker_replies
        out["hostile_sent"] = r.hostile_sent
        out["hostile_kinds"] = r.hostile_kinds
        out["hostile_dropped"] = sum(refused.values())
        out["dropped_by_reason"] = refused
        out["dropped_during_trial_in_meta"] = sum(meta.events_refused.values())
        out["summary"] = (
            f"spoofed start/end without the secret during a real recording: frames kept "
            f"{meta.frames_written} of {meta.frames_captured}, attacker folders "
            f"{out['attacker_folders']}, datagrams dropped {out['hostile_dropped']:,} of "
            f"{r.hostile_sent:,}"
        )
    return out


def rows(result: dict[str, Any]) -> list[Row]:
    """The table's lines: the MAC's cost against the event's own JSON, and the spoofed recording."""
    r, out = result, []
    if has(
        r,
        "mac_sign_us",
        "mac_verify_us",
        "mac_baseline_event_json_us",
        "mac_baseline_parse_event_us",
    ):
        out.append(
            Row(
                "recorder",
                "the event MAC alone",
                f"sign {r['mac_sign_us']} µs, verify {r['mac_verify_us']} µs",
                "—",
                f"event JSON {r['mac_baseline_event_json_us']} µs, "
                f"`parse_event` {r['mac_baseline_parse_event_us']} µs",
            )
        )
    if has(
        r, "hostile_sent", "frames_kept", "frames_captured", "attacker_folders", "hostile_dropped"
    ):
        out.append(
            Row(
                "recorder",
                f"{r['hostile_sent']:,} spoofed datagrams in a {r.get('trial_s', '?')} s recording",
                f"frames kept {r['frames_kept']} of {r['frames_captured']}, "
                f"{r['attacker_folders']} attacker folders, {r['hostile_dropped']:,} dropped",
                "all kept, 0 folders, all dropped",
                "—",
            )
        )
    return out
