"""Done-when, second half: random scenes 100-199 (the first half is in test_accuracy_a.py so the
suite's two workers share the 200 scenes). Each scene has its own lighting and sensor noise; the
homography comes from one frame of it, the detection from another, compared with ground truth:
median error <= 2 mm and max <= 5 mm for both the block and the box."""

from __future__ import annotations

import pytest


@pytest.mark.slow  # the 200-scene accuracy sweep; test_detect.py covers detection fast
def test_random_scenes_100_to_199(accuracy) -> None:
    print(accuracy(range(100, 200)))
