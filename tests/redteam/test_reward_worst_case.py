"""Red team (issue 30, item 11): a file of n identical lines, the model's answer changing one line and the
oracle changing every line, took ~n^2.8 time in the reward (n = 2000: 29-57 s), with the same reward bits.

Why: every line is "popular" for the release's line diff (difflib's autojunk, n >= 200), so the prediction's
diff rewrites half the file and the oracle's all of it. Their character similarity then recursed ~n times
(one match of "\\n+x = " per line) on pieces of ~n characters, each scanned by the compiled matcher. ratio.py
now solves such a chain of periodic steps once (`_repeats`) and a repetitive piece with a short longest match
from gram sets (`_short_match`); both are exact, so the reward is the release's to the last bit.

The reward has no time bound of its own on every input (README: `reward.timeout_s` bounds each item); this
shape is now far inside it. Timeouts here are hang guards with a 100x margin, never speed checks.
"""

from __future__ import annotations

import struct

import pytest

from swerl_jax.reward import calculate_search_replace_reward, ratio
from swerl_jax.reward.service import RewardService
from tests.reward.helpers import answer, reference_reward


def bits(x: float) -> bytes:
    return struct.pack("<d", x)


def identical_lines(n: int, line: str = "x = 1", changed: str = "x = 2", oracle_line: str = "x = 2",
                    at: int | None = None) -> tuple[dict, dict, dict, str]:
    """(code_context, oracle_new_content, predicted content, model output) of the shape: n equal lines; the
    answer rewrites the file with line `at` (default n // 2) changed; the oracle changes every line."""
    old = (line + "\n") * n
    at = n // 2 if at is None else at
    pred = (line + "\n") * at + changed + "\n" + (line + "\n") * (n - at - 1)
    # One SEARCH/REPLACE block of the whole file (it must be unique, and any shorter span of equal lines is not).
    output = answer([("a.py", old[:-1], pred[:-1])])
    return {"a.py": old}, {"a.py": (oracle_line + "\n") * n}, {"a.py": pred}, output


# (n, line, changed, oracle_line, at): n >= 200 so that autojunk rewrites the file in the diffs
SMALL_CASES = [
    (210, "x = 1", "x = 2", "x = 2", None),
    (210, "x = 1", "y", "z = 2", 0),
    (260, "pass", "return", "pass  # ok", None),
    (220, "a", "b", "b", 200),
]


@pytest.mark.parametrize("n, line, changed, oracle_line, at", SMALL_CASES)
def test_the_reward_is_the_releases_on_identical_lines(n, line, changed, oracle_line, at):
    ctx, oracle, pred, output = identical_lines(n, line, changed, oracle_line, at)
    reward, info = calculate_search_replace_reward(ctx, oracle, output)
    # The standard library's difflib, as the release computes it, on the hand-applied prediction.
    assert bits(reward) == bits(reference_reward(ctx, oracle, pred))
    assert 0.0 < reward < 1.0 and "reason" not in info


# Rewards of the release's computation at sizes where it takes half a minute: measured once with the pre-fix
# code (cydifflib, bit-equal to difflib), 33.8 s and 36.4 s on the project's 2-core VM.
PINNED = [
    ((2000, "x = 1", "x = 2", "x = 2"), 0.6197256757077995),
    ((1000, "    return None", "", "    return None!"), 0.6546466973886329),
]


@pytest.mark.parametrize("case, expected", PINNED)
def test_large_identical_lines_keep_the_pinned_release_reward(case, expected):
    ctx, oracle, _, output = identical_lines(*case)
    assert bits(calculate_search_replace_reward(ctx, oracle, output)[0]) == bits(expected)


def test_the_similarity_solves_a_few_pieces_not_one_per_line(monkeypatch):
    """A deterministic proxy for the work: how many pieces of difflib's recursion the similarity solves.
    difflib's own recursion solves ~n/2 pieces of ~n characters here; the chain of periodic steps is solved
    once, with its repeat count."""
    solved = []
    inner = ratio._repeats

    def counting(*args):
        solved.append(inner(*args))
        return solved[-1]

    monkeypatch.setattr(ratio, "_repeats", counting)
    n = 4000
    for line, changed, oracle_line in [("x = 1", "x = 2", "x = 2"), ("    return None", "", "    return None!")]:
        solved.clear()
        ctx, oracle, _, output = identical_lines(n, line, changed, oracle_line)
        reward, info = calculate_search_replace_reward(ctx, oracle, output)
        assert 0.0 < reward < 1.0 and "reason" not in info
        assert len(solved) <= 10, solved  # pieces with a match
        assert max(solved) >= n // 2 - 10  # one chain stands for ~n/2 of difflib's steps


def test_the_reward_service_scores_the_shape_within_its_time_limit():
    """The service's per-item time limit bounds every reward; this shape must be scored, not timed out.
    4,000 lines take ~0.1-0.5 s now (the limit is 60 s here, 10 s by default) and took minutes before."""
    items = []
    for line, changed, oracle_line in [("x = 1", "x = 2", "x = 2"), ("    return None", "", "    return None!")]:
        ctx, oracle, _, output = identical_lines(4000, line, changed, oracle_line)
        items.append({"code_context": ctx, "oracle_new_content": oracle, "output": output})
    with RewardService(num_workers=1, timeout_s=60.0, fallback_reward=-0.5) as service:
        results = [f.result(timeout=service.hang_guard_s) for f in service.submit(items)]
        assert service.metrics()["timeouts"] == 0, results
    for (reward, info), item in zip(results, items, strict=True):
        assert "reason" not in info, info
        assert bits(reward) == bits(calculate_search_replace_reward(*item.values())[0])
