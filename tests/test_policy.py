"""The trainers' shared policy setup: non-finite guard, micro-batch split, one shape across processes."""

import pytest

from swerl_jax.policy import check_finite, global_max, micro_batches


def test_non_finite_steps_stop_the_run_unless_skipped():
    assert check_finite({"loss": 1.0, "grad_norm": 2.0}, 3, "GRPO", 0)
    with pytest.raises(FloatingPointError, match="GRPO step 3: loss nan.*optim.skip_nonfinite"):
        check_finite({"loss": float("nan"), "grad_norm": 2.0}, 3, "GRPO", 0)
    assert not check_finite({"loss": 1.0, "grad_norm": float("inf")}, 3, "SFT", 2)


def test_micro_batches_and_global_max():
    assert micro_batches(32, 0, "rl.micro_batch_size") == 1 and micro_batches(32, 64, "x") == 1
    assert micro_batches(32, 8, "rl.micro_batch_size") == 4
    with pytest.raises(ValueError, match="rl.micro_batch_size=6 does not divide the step's 32 rows"):
        micro_batches(32, 6, "rl.micro_batch_size")
    assert global_max(7) == 7  # one process
