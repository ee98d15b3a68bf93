"""Opening the rig a session runs on, once: the FK table and arcs, the top camera (with its
video), the daemon (its safety envelope checked against what the settings will ask of the
arm), the judge, the recorder link (docs/runtime.md). ``open_rig`` closes all of it again."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from mecharm.cameras import CameraError, CameraSource, open_camera
from mecharm.cameras.threaded import ThreadedCamera
from mecharm.common.envelope import Envelope, RuntimeLimits, wider_than_envelope
from mecharm.common.fsutil import DataRootGuard
from mecharm.common.keyfile import read_daemon_token
from mecharm.common.logging import get_logger
from mecharm.recorder.sender import RecorderSender
from mecharm.runtime.arm import DaemonArm, DryRunArm
from mecharm.runtime.camera_eyes import CameraEyes
from mecharm.runtime.client import DaemonClient, DaemonError, TimeScaleMismatch, connect_fix
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.eyes import DryRunEyes
from mecharm.runtime.lookup import ensure_table, load_arc, load_table, warmed
from mecharm.runtime.lookup.descent import pick_descent_table
from mecharm.runtime.lookup.j0 import ArcPose
from mecharm.runtime.perception import (
    GeometricJudge,
    HumanJudge,
    Judge,
    PerceptionConfig,
    make_judge,
)
from mecharm.runtime.ports import EyesPort, RealClock
from mecharm.runtime.recorder_link import RecorderLink
from mecharm.runtime.terminal import release_prompt
from mecharm.runtime.threads import to_thread
from mecharm.runtime.topvideo import TopVideo
from mecharm.runtime.trial import Rig

__all__ = [
    "DaemonUnavailable",
    "EnvelopeRefused",
    "RecorderRequired",
    "check_envelope",
    "open_rig",
    "rig_judge",
    "runtime_limits",
]

log = get_logger("mecharm.runtime.rigsetup")


class EnvelopeRefused(RuntimeError):
    """The runtime's settings reach beyond the daemon's safety envelope (the CLI exits 7)."""


class DaemonUnavailable(RuntimeError):
    """The daemon could not be reached or refused this runtime at the start (the CLI exits 1);
    the message ends with what to do (client.connect_fix)."""


class RecorderRequired(RuntimeError):
    """``require_recorder`` and no recorder proved it records into this data root (exit 8)."""


def runtime_limits(s: RuntimeSettings, arcs: Sequence[ArcPose] = ()) -> RuntimeLimits:
    """What this runtime's settings will ask of the arm, for ``wider_than_envelope``.

    Every setting that bounds what the runtime sends belongs here (a per-move joint bound
    goes in ``joint_step_max_deg``). ``arcs``: the approach arcs; a trial moves between HOME
    and their poses in one send, the largest move a daemon's per-move bound must allow."""
    largest: tuple[int, float, str] | None = None
    for arc in arcs:
        # HOME to each approach pose; j0 swept aside from it (the retreat after the place)
        swept = arc.phase != "approach_pick"
        for j0 in (arc.points[0][2], arc.points[-1][2]):
            pose = (j0, *arc.base)
            moves = [(s.arm.home, "HOME")] + (
                [((s.pick_place.swept_j0, *arc.base), "pick_place.swept_j0")] if swept else []
            )
            for other, name in moves:
                j = max(range(6), key=lambda i: abs(pose[i] - other[i]))
                deg = abs(pose[j] - other[j])
                if largest is None or deg > largest[1]:
                    largest = (j, deg, f"{name} to the {arc.name} pose")
    return RuntimeLimits(
        j1_max=s.arm.j1_max,
        poses={"arm.home": s.arm.home},
        joints={"pick_place.swept_j0": (0, s.pick_place.swept_j0)},
        joint_step_max_deg=s.arm.joint_step_max_deg if s.arm.joint_step_max_deg > 0 else None,
        largest_move=largest,
    )


def check_envelope(
    s: RuntimeSettings,
    client: DaemonClient,
    *,
    warn_missing: bool = True,
    arcs: Sequence[ArcPose] = (),
) -> Envelope | None:
    """The daemon's safety envelope from its hello, once the settings are known to fit in it.

    Raises EnvelopeRefused naming every setting that goes beyond it (or a malformed
    announcement). A daemon older than the envelope announces none: None, and the guard
    keeps to the runtime's own limits (a warning when ``warn_missing``).
    (docs/daemon.md, "Safety envelope")"""
    daemon = f"{client.host}:{client.port}"
    try:
        env = client.envelope()
    except ValueError as exc:
        raise EnvelopeRefused(
            f"daemon {daemon} announced a malformed safety envelope ({exc}); "
            "run a daemon and a runtime of the same version"
        ) from None
    if env is None:
        if warn_missing:
            log.warning(
                "daemon_envelope_missing",
                daemon=daemon,
                reason="the daemon announces no safety envelope (older than it): only the "
                "runtime's own limits apply, other clients are not held to them",
                operator=True,
            )
        return None
    problems = wider_than_envelope(runtime_limits(s, arcs), env)
    if problems:
        raise EnvelopeRefused(
            f"settings wider than the safety envelope of daemon {daemon}: "
            + "; ".join(problems)
            + ". Narrow these runtime settings (configs/runtime.yaml) or widen the daemon's "
            "envelope (configs/daemon.yaml, envelope:)"
        )
    log.info("daemon_envelope", daemon=daemon, **env.to_wire())
    return env


@asynccontextmanager
async def open_rig(
    settings: RuntimeSettings, guard: DataRootGuard | None = None, *, eyes: EyesPort | None = None
) -> AsyncIterator[tuple[Rig, DaemonClient | None]]:
    """Everything a session needs; released in reverse order, also when set-up fails half-way.

    ``eyes``: a camera boundary of the caller's (a scripted or hand-driven one, a replay's)
    instead of the top camera's perception; then no camera is opened and there is no top
    video. Everything else (the daemon's time scale, its envelope, the warmed lookups,
    the keepalive) is the session's own."""
    s = settings
    clock = RealClock()
    table_path = await to_thread(ensure_table, s.fk_dir)
    # the lookups keep to the guard's j1 limit, so they never choose a pose it would refuse
    table = await to_thread(load_table, table_path, j1_max=s.arm.j1_max)
    # build the lookup index and the default bands' views now, not in the first trial's stages
    table = await to_thread(warmed, table, [s.pick_place.pick_band, s.pick_place.place_band])
    arc_pick, arc_place = (
        load_arc(s.pick_place.approach_pick_arc),
        load_arc(s.pick_place.approach_place_arc),
    )
    if s.arm.joint_step_max_deg > 0:  # the bounded pick's extra rows, also before the first trial
        await to_thread(pick_descent_table, table, arc_pick)
    if eyes is not None:
        s = s.updated({"viewing.top_video": False})
        camera: CameraSource | None = None
    else:
        try:
            camera = await to_thread(open_camera, s.perception.top_camera)
        except CameraError as exc:
            raise RuntimeError(
                f"top camera {s.perception.top_camera!r} cannot be opened: {exc}"
            ) from None
    if camera is not None and s.viewing.top_video and not camera.taps_every_frame:
        # a source read on demand (a USB webcam) must be read continuously to be recorded
        # between the stage captures: a reader thread in front of it (docs/top-camera.md)
        camera = ThreadedCamera(camera)
        await to_thread(camera.open)
    client: DaemonClient | None = None
    sender: RecorderSender | None = None
    judge: Judge | None = None
    try:
        judge = rig_judge(s) if camera is not None else None
        cam_eyes = (
            None
            if camera is None
            else CameraEyes(
                camera,
                judge,
                homography_frames=s.perception.homography_frames,
                detect_repeat=s.perception.detect_repeat,
                frozen_frames=s.perception.camera_frozen_frames,
                box_fallback_xz=s.pick_place.box_xz_fallback,
                box_score_thresh=s.perception.box_score_thresh,
                config=PerceptionConfig(top_camera=s.perception.top_camera_calibration),
                guard=guard,
                # --confirm: a refused release asks "release anyway / abort" (docs/stages.md)
                release_prompt=release_prompt(s.pick_place.release_confirm_timeout_s)
                if s.confirm
                else None,
            )
        )
        if s.dry_run:
            s = s.at_time_scale(s.scale)  # no daemon to ask (docs/setup.md, "Time scale")
            arm: Any = DryRunArm(clock, s.arm.home, s.arm.j1_max)
            rig_eyes: EyesPort = DryRunEyes(arm, cam_eyes) if eyes is None else eyes
            alive: Callable[[], bool] = lambda: True  # noqa: E731
        else:
            token = read_daemon_token(s.daemon.token_file)  # docs/setup.md, "Defaults"
            client = DaemonClient(
                s.daemon.host,
                s.daemon.port,
                token=token,
                request_timeout=s.daemon.request_timeout_s,
                connect_timeout=s.daemon.connect_timeout_s,
                busy_wait_s=s.daemon.busy_wait_s,
                keepalive_s=s.daemon.keepalive_s or None,
                time_scale=s.time_scale,  # set: a check, refused when the daemon's differs
            )
            try:
                await client.connect()
            except TimeScaleMismatch:
                raise  # its message says what to do; the CLI exits 2
            except DaemonError as exc:
                fix = connect_fix(exc, token_given=bool(token), token_file=s.daemon.token_file)
                raise DaemonUnavailable(f"{exc}. Do: {fix}") from None
            s = s.at_time_scale(client.time_scale)  # the daemon's (docs/setup.md, "Time scale")
            log.info("time_scale", scale=s.scale, source="daemon")
            # before any motion: settings beyond the daemon's envelope stop the start (exit 7)
            envelope = check_envelope(s, client, arcs=(arc_pick, arc_place))
            arm = DaemonArm(client, clock, s.arm.j1_max, envelope)
            if eyes is None:
                assert cam_eyes is not None  # opened above
                rig_eyes = cam_eyes
            else:
                rig_eyes = eyes
            c = client
            alive = lambda: c.is_connected  # noqa: E731
        if s.recorder.enabled and not s.dry_run:
            # signs every event; a key file that is too open stops the start here
            # events leave from the sender's own thread, never the event loop's (docs/observer.md)
            sender = RecorderSender(
                s.recorder.host, s.recorder.port, key_file=s.recorder.key_file, background=True
            )
        link = RecorderLink(
            sender,
            s.recorder.frame_timeout_s,
            data_root=s.data_root,
            off_reason="recorder off: dry run" if s.dry_run else "recorder off: --no-recorder",
        )
        rig = Rig(
            s,
            arm,
            rig_eyes,
            link,
            clock,
            table,
            arc_pick,
            arc_place,
            arm_alive=alive,
            dry_run=s.dry_run,
            guard=guard,
            top_video=TopVideo(
                camera,
                fps=s.viewing.top_video_fps,
                queue_size=s.viewing.top_video_queue,
                guard=guard,
            )
            if s.viewing.top_video and camera is not None
            else None,
            camera=camera,
        )
        # pings keep the daemon's slot between requests (docs/daemon.md, "Client slot")
        async with client.keepalive() if client is not None else contextlib.nullcontext():
            yield rig, client
    finally:
        if sender is not None:
            sender.close()
        if client is not None:
            await client.aclose()
        judge_close = getattr(judge, "aclose", None)
        if judge_close is not None:  # the VLM judge's HTTP connections
            await judge_close()
        if camera is not None:
            await to_thread(camera.close)


def rig_judge(s: RuntimeSettings) -> Judge:
    """The judge the settings choose; the VLM one with the rig's adoption rule (docs/perception.md,
    "VLM judge"). Raises ``VlmConfigError`` without an API key."""
    if s.judge.by == "human":
        return make_judge("human", timeout=s.judge.human_timeout_s)
    if s.judge.by != "vlm":
        return make_judge(s.judge.by)
    from mecharm.runtime.perception.vlm import DistanceOverride, anthropic_from_env

    client = anthropic_from_env(
        s.judge.vlm_model, s.judge.vlm_base_url, s.judge.vlm_timeout_s, s.judge.vlm_max_tokens
    )
    return make_judge(
        "vlm",
        client=client,
        max_frames=s.judge.vlm_max_images,
        fallback=GeometricJudge(),
        override=DistanceOverride(s.judge.vlm_still_mm, s.judge.vlm_outside_mm),
        human=HumanJudge(timeout=s.judge.human_timeout_s) if s.judge.vlm_ask_human else None,
        confidence_min=s.judge.vlm_confidence_min,
        max_calls=s.judge.vlm_max_calls,
        timeout_s=s.judge.vlm_timeout_s,
    )
