"""The simulated workcell beside a SimArm: scene + physics + rendered cameras served over HTTP.

``start_workcell(sim_arm, scene, seed, host, camera_port)`` is what
``mecharm-daemon --backend sim --scene random --seed 7`` calls. Tests can use
``Workcell`` fully in-process (``render("top")``, ``step()``, ``next_scene()``,
``truth()``) without any server. The runtime and the recorder only ever see
the cameras' MJPEG streams (``urls``); ``/scene/*`` is for test orchestration.
"""

from __future__ import annotations

import threading
from typing import Any

import cv2
import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from mecharm.common.logging import get_logger
from mecharm.sim.camserver import (
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
    CameraFeed,
    CameraServer,
)
from mecharm.sim.faults import CameraFaults, FaultBoard
from mecharm.sim.physics import ArmState, make_physics
from mecharm.sim.profile import SimProfile
from mecharm.sim.render import Renderer, SceneSnapshot, camera_of
from mecharm.sim.scene import SceneLayout, SceneState, load_layout
from mecharm.sim.world_arm import WorldArm

__all__ = ["Workcell", "WorkcellConfig", "start_workcell"]

log = get_logger("mecharm.sim.workcell")


class WorkcellConfig(BaseModel):
    """Camera and physics settings of the simulated workcell (daemon YAML key ``workcell``)."""

    model_config = ConfigDict(extra="forbid")
    top_fps: float = Field(default=10.0, gt=0, le=60)
    side_fps: float = Field(default=30.0, gt=0, le=60)
    top_size: tuple[int, int] = (1920, 1080)
    side_size: tuple[int, int] = (1280, 720)
    jpeg_quality: int = Field(default=80, ge=10, le=100)
    physics_hz: float = Field(default=100.0, gt=0, le=1000)
    noise_sigma: float | None = Field(
        default=None, ge=0, le=15, description="override the scene's sensor noise"
    )
    # camera server limits (docs/workcell.md, "Limits")
    max_connections: int = Field(default=DEFAULT_MAX_CONNECTIONS, ge=1, le=1024)
    idle_timeout_s: float = Field(default=DEFAULT_IDLE_TIMEOUT_S, gt=0, le=300)


class Workcell:
    """Scene, physics and cameras around one SimArm."""

    def __init__(
        self,
        sim_arm: ArmState,
        scene: str = "random",
        seed: int = 0,
        config: WorkcellConfig | None = None,
        profile: SimProfile | None = None,
    ) -> None:
        self.config = config or WorkcellConfig()
        self.profile = profile or SimProfile()
        self.arm = sim_arm
        self.world = WorldArm(self.profile.arm, sim_arm, holding=lambda: self.scene.grasped)
        self.scene_spec = scene
        self.seed = seed
        self._trial = 0
        self._gain_range = self.profile.optics.gain_range
        self.scene = SceneState(self._layout(load_layout(scene, seed, self._gain_range)))
        self.physics = make_physics(self.scene, sim_arm, self.world, self.profile.contact)
        optics = self.profile.optics  # the cameras' true optics (docs/simulation-optics.md)
        self._optics = {"top": optics.top, "side": optics.side}
        cams = {
            "top": camera_of("top", optics.top, self.config.top_size),
            "side": camera_of("side", optics.side, self.config.side_size),
        }
        self.cameras = cams
        ideal = optics == type(optics)()
        self._renderers = {
            name: Renderer(
                cam,
                seed=seed * 7 + i,
                world=self.world,
                optics=None if ideal else self._optics[name],
                shadow=optics.shadow,
                moving=getattr(sim_arm, "true_moving", None),
            )
            for i, (name, cam) in enumerate(cams.items())
        }
        self._render_locks = {name: threading.Lock() for name in cams}
        # faults armed from outside: POST /faults or the scene file (docs/simulation-faults.md)
        self.camera_faults = CameraFaults(list(cams), seed=seed)
        self.faults = FaultBoard(
            getattr(sim_arm, "faults", None), self.physics, self.scene, self.camera_faults
        )
        self.faults.arm_all(self.scene.layout.faults)
        self._server: CameraServer | None = None
        self._physics_thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.urls: dict[str, str] = {}
        log.info(
            "workcell_scene",
            scene=scene,
            seed=seed,
            profile=self.profile.name,
            **self._short_truth(),
        )

    def _layout(self, layout: SceneLayout) -> SceneLayout:
        if self.config.noise_sigma is not None:
            layout = layout.model_copy(
                update={
                    "lighting": layout.lighting.model_copy(
                        update={"noise_sigma": self.config.noise_sigma}
                    )
                }
            )
        return layout

    def _short_truth(self) -> dict[str, Any]:
        t = self.scene.truth()
        return {
            "block": [round(t["block"]["x"], 4), round(t["block"]["z"], 4)],
            "box": [round(t["box"]["x"], 4), round(t["box"]["z"], 4)],
        }

    # ---------------------------------------------------------------- in-process API
    def step(self) -> None:
        """Advance the physics to the arm's current true state."""
        self.physics.step()

    def render(self, camera: str) -> NDArray[np.uint8]:
        """A fresh BGR frame of ``camera`` ("top" or "side") showing the state now."""
        if camera not in self._renderers:
            raise ValueError(f"unknown camera {camera!r}; cameras: {sorted(self._renderers)}")
        self.physics.step()
        snap = SceneSnapshot.of(self.scene)
        angles = self.arm.true_angles()
        grip = self.arm.true_gripper()
        with self._render_locks[camera]:
            return self._renderers[camera].render(snap, angles, grip)

    def jpeg(self, camera: str) -> bytes:
        quality = self._optics[camera].jpeg_quality if camera in self._optics else None
        ok, buf = cv2.imencode(
            ".jpg",
            self.render(camera),
            [cv2.IMWRITE_JPEG_QUALITY, quality or self.config.jpeg_quality],
        )
        if not ok:
            raise RuntimeError(f"JPEG encoding of camera {camera} failed")
        return buf.tobytes()

    def truth(self) -> dict[str, Any]:
        """Ground truth (tests only): block, box, grasped, collisions, place outcome, events."""
        self.physics.step()
        return self.scene.truth()

    def next_scene(
        self, seed: int | None = None, layout: SceneLayout | None = None
    ) -> dict[str, Any]:
        """Lay out the next trial (what the operator does by hand). ``seed=None``: the next seed
        of this workcell's sequence (random scenes) or the same scene file again."""
        self._trial += 1
        if layout is None:
            if seed is None:
                seed = self.seed + self._trial
            layout = load_layout(self.scene_spec, seed, self._gain_range)
        with self.scene.lock:
            self.scene.reset(self._layout(layout))
            self.physics.reset()
        self.faults.arm_all(layout.faults)
        log.info("workcell_next_scene", seed=seed, **self._short_truth())
        return self.truth()

    # ---------------------------------------------------------------- serving
    def start_physics(self) -> None:
        """Step the physics in a background thread at ``physics_hz``."""
        if self._physics_thread is not None:
            return
        period = 1.0 / self.config.physics_hz

        def run() -> None:
            while not self._stop.wait(period):
                try:
                    self.physics.step()
                except Exception as exc:  # never kill the thread; report it
                    log.error("workcell_physics_failed", error=f"{type(exc).__name__}: {exc}")

        self._physics_thread = threading.Thread(target=run, name="workcell-physics", daemon=True)
        self._physics_thread.start()

    def serve(self, host: str = "127.0.0.1", port: int = 8080) -> dict[str, str]:
        """Start the physics thread and the camera server; returns the camera URLs."""
        # a camera's first frame comes a while after it is opened (docs/simulation-timing.md)
        scale = float(getattr(getattr(self.arm, "config", None), "time_scale", 1.0))
        first = self.profile.timing.camera_first_frame_s / scale
        feeds = {
            "top": CameraFeed(
                "top",
                self.camera_faults.wrap("top", lambda: self.jpeg("top")),
                self.config.top_fps,
                first,
            ),
            "side": CameraFeed(
                "side",
                self.camera_faults.wrap("side", lambda: self.jpeg("side")),
                self.config.side_fps,
                first,
            ),
        }
        self._server = CameraServer(
            (host, port),
            feeds,
            self.truth,
            lambda s: self.next_scene(s),
            max_connections=self.config.max_connections,
            idle_timeout_s=self.config.idle_timeout_s,
            faults=self.faults,
            drag=getattr(self.arm, "drag", None),
        )
        self._server.serve_in_thread()
        self.start_physics()
        actual = self._server.port
        self.urls = {name: f"http://{host}:{actual}/{name}.mjpg" for name in feeds}
        log.info(
            "workcell_serving",
            urls=self.urls,
            top_fps=self.config.top_fps,
            side_fps=self.config.side_fps,
        )
        return self.urls

    @property
    def server(self) -> CameraServer | None:
        return self._server

    def close(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._physics_thread is not None:
            self._physics_thread.join(timeout=2.0)
            self._physics_thread = None
        self.physics.detach()
        self.world.detach()
        log.info("workcell_closed")

    def __enter__(self) -> Workcell:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_workcell(
    sim_arm: ArmState,
    scene: str,
    seed: int,
    host: str = "127.0.0.1",
    camera_port: int = 8080,
    config: WorkcellConfig | None = None,
    profile: SimProfile | None = None,
) -> Workcell:
    """Build the workcell around ``sim_arm`` and serve its cameras on ``host:camera_port``
    (0 = any free port; the chosen URLs are in ``.urls``). Raises SceneError for a bad
    scene spec and OSError when the port cannot be bound (nothing is left running)."""
    wc = Workcell(sim_arm, scene, seed, config, profile)
    try:
        wc.serve(host, camera_port)
    except BaseException:
        wc.close()
        raise
    return wc
