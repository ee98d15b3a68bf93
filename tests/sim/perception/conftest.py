"""Perception fixtures: in-process top-camera renders of random scenes (the workcell ``rig``
fixture they share with the workcell tests is in tests/sim/conftest.py)."""

from __future__ import annotations

import pytest

from mecharm.sim.scene import SceneLayout

HOME = (0.0, 0.0, 0.0, 0.0, 0.0, -30.0)


class TopView:
    """Render top-camera frames of a scene in-process (no HTTP), arm at ``angles``."""

    _renderer = None
    _edits = 0  # negative versions: never equal to a real scene's (positive) version

    def __init__(
        self, seed: int, angles: tuple[float, ...] = HOME, layout: SceneLayout | None = None
    ) -> None:
        from mecharm.sim.render import TOP_CAMERA, Renderer
        from mecharm.sim.scene import SceneState, random_layout

        self.state = SceneState(layout or random_layout(seed))
        if TopView._renderer is None:  # shared: the noise patterns are drawn once per process
            TopView._renderer = Renderer(TOP_CAMERA, 0)
        self.renderer = TopView._renderer
        self.angles = angles

    def frames(self, n: int = 1, **replace: object) -> list:
        import dataclasses

        from mecharm.sim.render import SceneSnapshot

        if replace:  # a modified snapshot must not hit the renderer's static-layer cache
            TopView._edits -= 1
            replace["version"] = TopView._edits
        snap = dataclasses.replace(SceneSnapshot.of(self.state), **replace)
        return [self.renderer.render(snap, self.angles, 100.0) for _ in range(n)]

    def truth(self) -> dict:
        return self.state.truth()


@pytest.fixture
def top_view() -> type[TopView]:
    return TopView


def _accuracy(seeds: range) -> str:
    """Render each random scene, detect, compare with ground truth; assert the done-when figures."""
    import math

    import numpy as np

    from mecharm.runtime.perception import detect_block, detect_box, estimate_homography

    eb, ex, methods = [], [], []
    for seed in seeds:
        view = TopView(seed)
        f = view.frames(2)
        H = estimate_homography(f[:1])
        block = detect_block(f[1], H)
        box = detect_box(f[1], H)
        t = view.truth()
        assert block is not None, f"seed {seed}: block not found"
        eb.append(math.hypot(block.x - t["block"]["x"], block.z - t["block"]["z"]) * 1000)
        ex.append(math.hypot(box.x - t["box"]["x"], box.z - t["box"]["z"]) * 1000)
        methods.append(box.method)
    eb_a, ex_a = np.array(eb), np.array(ex)
    summary = (
        f"{len(eb)} scenes: block median {np.median(eb_a):.2f} max {eb_a.max():.2f} mm; "
        f"box median {np.median(ex_a):.2f} max {ex_a.max():.2f} mm; methods {sorted(set(methods))}"
    )
    assert np.median(eb_a) <= 2.0, summary
    assert eb_a.max() <= 5.0, summary
    assert np.median(ex_a) <= 2.0, summary
    assert ex_a.max() <= 5.0, summary
    assert methods.count("fallback") == 0, summary
    return summary


@pytest.fixture
def accuracy() -> object:
    return _accuracy
