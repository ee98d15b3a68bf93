import numpy as np
import pytest

from mecharm.common.kinematics import fk_frames, fk_tip

CALIBRATION_ROWS = [
    ([-31.93, 87.74, -38.33, 18.6, -45.11, -30.0], (0.203019, 0.038917, 0.259061)),
    ([37.059, 66.65, 2.83, -1.4, -78.04, -29.53], (-0.181685, 0.093398, 0.229459)),
]


@pytest.mark.parametrize(("angles", "tip"), CALIBRATION_ROWS)
def test_calibration_rows_within_5mm(angles, tip):
    err_mm = np.linalg.norm(fk_tip(angles) - np.array(tip)) * 1000
    assert err_mm < 5.0


def test_zero_pose_flange_matches_urdf():
    frames = fk_frames([0.0] * 6)
    # flange (0.168, 0, 0.243) URDF -> Unity (0, 0.233, 0.168)
    np.testing.assert_allclose(frames[6], [0.0, 0.233, 0.168], atol=1e-9)


def test_vectorized_matches_single():
    q = np.random.default_rng(0).uniform(-60, 60, (50, 6))
    batch = fk_tip(q)
    for i in range(50):
        np.testing.assert_allclose(batch[i], fk_tip(q[i]), atol=1e-12)


def test_bad_shape_rejected():
    with pytest.raises(ValueError, match="6 values"):
        fk_tip([1.0, 2.0])
