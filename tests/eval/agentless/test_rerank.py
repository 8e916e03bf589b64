"""Reranking: regression, then reproduction consensus (|T|^2 |P|), then majority vote with ties to the earliest."""

from swerl_jax.eval.agentless.rerank import NO_REGRESSION_RESULT, Sample, select


def s(key, reg=0, rep=()):
    return Sample(patch=f"patch-{key}", normalized=key, regression_failures=reg, reproduction_passed=frozenset(rep))


def test_vote_majority_and_ties_to_the_earliest_and_empty_patches_out():
    assert select([s("a"), s("b"), s("b")]) == 1
    assert select([s("a"), s("b")]) == 0
    assert select([s(""), s("b")]) == 1
    assert select([s(""), s("  ")]) is None


def test_regression_then_reproduction_beats_votes():
    samples = [s("a", reg=2), s("a", reg=2), s("a", reg=2), s("b", reg=0, rep=("t1",)), s("c", reg=0)]
    assert select(samples) == 3  # fewest regression failures: b, c; then b passes a reproduction test
    assert select(samples, use_regression=False, use_reproduction=False) == 0  # plain vote: a


def test_consensus_weighs_tests_squared_times_patches():
    one_test_three = [s("a", rep=("t1",)), s("a", rep=("t1",)), s("a", rep=("t1",))]
    two_tests_one = [s("b", rep=("t1", "t2"))]
    # |T|^2 |P|: 1 x 3 = 3 vs 4 x 1 = 4
    assert select(one_test_three + two_tests_one, use_regression=False) == 3


def test_a_filter_that_keeps_everything_or_nothing_is_skipped():
    samples = [s("a", reg=NO_REGRESSION_RESULT), s("b", reg=NO_REGRESSION_RESULT), s("b", reg=NO_REGRESSION_RESULT)]
    assert select(samples) == 1
