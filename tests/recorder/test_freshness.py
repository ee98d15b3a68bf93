"""The shared frame-freshness rule (mecharm.cameras.freshness), on an injected clock.

The runtime's side of it (the eyes) is in tests/runtime/test_eyes.py; the recorder's
replies (stale_frame, no_frame_available after loss) in test_service.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from mecharm.cameras import (
    FrameBuffer,
    FreezeWatch,
    NoFrameError,
    StaleFrameError,
    frame_age_s,
    is_fresh,
    make_camera,
)

MS = 1_000_000


class Clock:
    """An injected monotonic clock (ns) the test moves by hand."""

    def __init__(self, now_ns: int = 1_000_000 * MS) -> None:
        self.now_ns = now_ns

    def __call__(self) -> int:
        return self.now_ns


class Stamped:
    def __init__(self, mono_ns: int, name: str = "") -> None:
        self.mono_ns, self.name = mono_ns, name


def test_is_fresh_is_inclusive_at_max_age_and_exclusive_beyond():
    asked = 10_000 * MS
    assert is_fresh(asked - 500 * MS, 0.5, asked)
    assert not is_fresh(asked - 500 * MS - 1, 0.5, asked)
    assert is_fresh(asked + 1, 0.0, asked) and is_fresh(
        asked, 0.0, asked
    )  # max_age 0: at or after asking
    assert not is_fresh(asked - 1, 0.0, asked)
    assert frame_age_s(asked - 250 * MS, asked) == pytest.approx(0.25)


def test_buffer_reports_none_yet_fresh_stale_and_lost_with_ages():
    clock = Clock()
    buf: FrameBuffer[Stamped] = FrameBuffer(clock_ns=clock)
    with pytest.raises(NoFrameError, match="none captured yet") as none:
        buf.read_latest(0.5)
    assert none.value.reason == "none captured yet"

    first = Stamped(clock.now_ns, "first")
    buf.put(first)
    clock.now_ns += 200 * MS
    got = buf.read_latest(0.5)
    assert (
        got.frame is first
        and got.age_s == pytest.approx(0.2)
        and got.age_ms == 200.0
        and not got.frozen
    )

    clock.now_ns += 300 * MS  # exactly max_age: still fresh
    assert buf.read_latest(0.5).age_ms == 500.0
    clock.now_ns += 1 * MS
    with pytest.raises(StaleFrameError, match=r"501 ms old \(max 500 ms\)") as stale:
        buf.read_latest(0.5)
    assert stale.value.latest.frame is first and stale.value.latest.age_ms == 501.0
    assert stale.value.max_age_s == 0.5
    assert buf.read_latest(1.0).frame is first  # the age is the reader's choice, the rule is one

    buf.lose("5 consecutive failed reads")
    assert buf.newest is None
    with pytest.raises(NoFrameError, match=r"feed lost \(5 consecutive failed reads\)"):
        buf.read_latest(10.0)  # a lost feed's last frame is never served, however lax the reader

    second = Stamped(clock.now_ns, "second")
    buf.put(second, frozen=True)
    assert buf.newest is second
    got = buf.read_latest(0.5)
    assert got.frame is second and got.age_s == 0.0 and got.frozen  # frozen: fresh, but flagged
    clock.now_ns += 600 * MS
    with pytest.raises(StaleFrameError) as stale:
        buf.read_latest(0.5)
    assert stale.value.latest.frozen  # stale and frozen are separate verdicts


def test_freeze_watch_flags_the_same_image_for_long_enough_and_clears_on_change():
    watch = FreezeWatch(frozen_after_s=0.3)
    a = np.zeros((32, 32, 3), np.uint8)
    b = np.full((32, 32, 3), 9, np.uint8)
    t = 5_000 * MS
    assert watch.update(a, t) is None
    assert watch.update(a, t + 100 * MS) is None and not watch.frozen
    assert watch.update(a, t + 299 * MS) is None and not watch.frozen
    assert watch.update(a, t + 300 * MS) == "frozen" and watch.frozen
    assert watch.frozen_for_s == pytest.approx(0.3)
    assert watch.update(a, t + 400 * MS) is None and watch.frozen  # reported once
    assert watch.update(b, t + 500 * MS) == "unfrozen" and not watch.frozen
    assert watch.frozen_for_s == pytest.approx(0.5)
    assert watch.update(b, t + 900 * MS) == "frozen"
    watch.reset()
    assert not watch.frozen and watch.update(b, t + 1000 * MS) is None


def test_freeze_watch_sees_the_synthetic_cameras_freeze_after():
    cam = make_camera("synthetic?fps=200&w=64&h=48&freeze_after=0.05")
    cam.open()
    watch = FreezeWatch(frozen_after_s=0.05)
    changes = []
    try:
        for _ in range(400):  # a frame budget, not a time limit
            f = cam.read()
            assert f.ok and f.image is not None
            changes.append(watch.update(f.image, f.mono_ns))
            if watch.frozen:
                break
    finally:
        cam.close()
    assert watch.frozen and changes.count("frozen") == 1 and "unfrozen" not in changes
