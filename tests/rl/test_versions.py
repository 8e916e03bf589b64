"""swerl_jax.rl.versions: each row scored under its own version's params; rows whose version is not held are left
out of the numerics figures (and counted), never compared with other params."""

import numpy as np
import pytest

from swerl_jax.rl.versions import KeptVersions, mismatch_metrics, own_version_logprobs


def test_rows_scored_under_their_own_version_and_unheld_rows_left_out():
    kept = KeptVersions(2)
    for v in (3, 4, 5):  # keeps the last 2: 4 and 5
        kept.keep(v, np.full(1, float(v)))
    assert sorted(kept.params) == [4, 5]
    calls = []

    def logprobs(params):  # a "model" whose log-prob of every token is -params
        calls.append(float(params[0]))
        return np.full((4, 2), -float(params[0]), np.float32)

    versions = np.asarray([6, 5, 4, 2])  # current, held, held, too old
    own, held = own_version_logprobs(versions, 6, np.full(1, 6.0), kept, logprobs, (4, 2),
                                     known={6: np.full((4, 2), -6.0, np.float32)})
    assert held.tolist() == [True, True, True, False] and sorted(calls) == [4.0, 5.0]  # 6 reused, 2 not held
    np.testing.assert_array_equal(own[:, 0], [-6.0, -5.0, -4.0, 0.0])
    sampler = own + np.asarray([[1e-5], [2e-5], [0.0], [0.0]], np.float32)
    sampler[3] = -50.0  # the unheld row: would dominate if it were compared with anything
    m = mismatch_metrics(sampler, own, np.ones((4, 2)), held)
    assert m["logprob_checked_frac"] == pytest.approx(0.75)
    assert m["logprob_max_abs_diff"] == pytest.approx(2e-5, rel=1e-2)
    assert m["logprob_abs_diff"] == pytest.approx((2 * 1e-5 + 2 * 2e-5) / 6, rel=1e-2)
