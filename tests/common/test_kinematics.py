import numpy as np
import pytest

from mecharm.common.kinematics import fk_frames, fk_tip, fk_wrist_tip

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


def test_one_pose_gives_the_batch_values_exactly():
    """One pose runs on Python floats (the simulator's and the runtime's path), many on arrays
    (the table builder's): the same arithmetic, so equal to the last bit, not only close."""
    rng = np.random.default_rng(1)
    q = np.concatenate(
        [
            rng.uniform(-180, 180, (300, 6)),
            np.round(rng.uniform(-180, 180, (100, 6)) / 45) * 45,  # exact zeros of sin and cos
            np.zeros((1, 6)),
            [[-31.93, 87.74, -38.33, 18.6, -45.11, -30.0]],
        ]
    )
    for fk in (fk_tip, fk_frames, fk_wrist_tip):
        batch = fk(q)
        for i in range(len(q)):
            assert np.array_equal(fk(q[i]), batch[i]), (fk.__name__, q[i])
            assert np.array_equal(fk(q[i : i + 1]), batch[i : i + 1])
            assert np.array_equal(fk(tuple(q[i].tolist())), batch[i])


def test_bad_shape_rejected():
    with pytest.raises(ValueError, match="6 values"):
        fk_tip([1.0, 2.0])
