"""Hostile outputs get -1 or a score: never an exception, never a hang, nothing touches the disk."""

import pytest

from swerl_jax.reward import calculate_search_replace_reward
from tests.reward.helpers import answer

CTX = {"a.py": "def f():\n    return 1\n" * 50}
ORACLE = {"a.py": CTX["a.py"].replace("return 1", "return 2", 1)}
MB = 1024 * 1024


def score(output: str) -> float:
    reward, info = calculate_search_replace_reward(CTX, ORACLE, output)
    assert reward == -1.0 or 0.0 <= reward <= 1.0, info
    return reward


@pytest.mark.parametrize(
    "output",
    [
        "x" * (10 * MB),  # 10 MB without tags
        "<think>" * (MB // 7) + "</think><solution></solution>",  # duplicated tags
        "<think>t</think><solution>" + "```\n### a.py\n<<<<<<< SEARCH\nq\n=======\n" * 200_000
        + "</solution>",
        "<think><think>t</think></think><solution><solution>s</solution></solution>",  # nested
        bytes(range(256)).decode("latin-1") * 40_000,  # binary junk
        "<think>\ud800\udfff</think><solution>\ud800```\n### \ud800\n<<<<<<< SEARCH\n\n=======\n"
        "\ud800\n>>>>>>> REPLACE\n```</solution>",  # lone surrogates
    ],
    ids=["10mb-plain", "dup-tags", "200k-open-blocks", "nested", "binary", "surrogates"],
)
def test_hostile_outputs_are_minus_one_or_a_score(output):
    score(output)


def test_thousands_of_valid_blocks_in_a_10mb_output():
    blocks = [("a.py", "    return 1", "    return 2"), ("a.py", "    return 2", "    return 1")] * 2500
    out = answer(blocks, thought="t" * (10 * MB))
    assert len(out) > 10 * MB
    # The last block restores the file: no predicted change, the oracle changed -> 0.0.
    assert score(out) == 0.0


def test_absolute_and_traversal_paths_are_plain_missing_keys(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = answer([("../../etc/passwd", "root", "evil"), ("/etc/passwd", "", "x")])
    assert score(out) == -1.0  # "root" is not in an empty (missing) file
    reward, info = calculate_search_replace_reward(CTX, ORACLE, answer([("/etc/passwd", "", "x")]))
    assert reward == 0.0 and {s["path"] for s in info["similarities"]} == {"a.py", "/etc/passwd"}
    assert list(tmp_path.iterdir()) == []


def test_multiplying_edit_hits_the_size_guard():
    # An empty search inserts the 1 MB replacement after each of 100 newlines: a 100 MB file.
    reward, info = calculate_search_replace_reward(CTX, ORACLE, answer([("a.py", "", "z" * MB)]))
    assert reward == -1.0 and info["reason"] == "file_too_large" and info["path"] == "a.py"
    # Below the guard the same edit scores normally (checked against a hand-applied edit).
    small = answer([("a.py", "", "# z")])
    assert 0.0 <= calculate_search_replace_reward(CTX, ORACLE, small)[0] < 1.0
