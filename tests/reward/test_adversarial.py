"""Hostile outputs get the exact reward the contract gives them: never an exception, never a hang (each
scored in a spawned process under a hang guard), nothing touches the disk."""

import pytest

from swerl_jax.reward import calculate_search_replace_reward
from swerl_jax.reward.functions import compact_info
from tests.reward.helpers import answer, reference_reward, run_guarded

CTX = {"a.py": "def f():\n    return 1\n" * 50}
ORACLE = {"a.py": CTX["a.py"].replace("return 1", "return 2", 1)}
MB = 1024 * 1024
GUARD_S = 120.0  # each case takes well under a second; a backtracking parser would take hours

HOSTILE = {
    "10mb-plain": lambda: "x" * (10 * MB),
    "dup-tags": lambda: "<think>" * (MB // 7) + "</think><solution></solution>",
    "200k-open-blocks": lambda: "<think>t</think><solution>"
    + "```\n### a.py\n<<<<<<< SEARCH\nq\n=======\n" * 200_000 + "</solution>",
    "nested": lambda: "<think><think>t</think></think><solution><solution>s</solution></solution>",
    "binary": lambda: bytes(range(256)).decode("latin-1") * 40_000,
    "surrogates": lambda: "<think>\ud800\udfff</think><solution>\ud800```\n### \ud800\n<<<<<<< SEARCH\n\n"
    "=======\n\ud800\n>>>>>>> REPLACE\n```</solution>",
}


def score_hostile(name: str) -> tuple[float, dict]:
    """The reward of HOSTILE[name] (built here, in the guarded process)."""
    reward, info = calculate_search_replace_reward(CTX, ORACLE, HOSTILE[name]())
    return reward, compact_info(info)


def score_output(output: str) -> tuple[float, dict]:
    reward, info = calculate_search_replace_reward(CTX, ORACLE, output)
    return reward, compact_info(info)


def _tag_count(tag: str) -> tuple[float, dict]:
    return -1.0, {"reason": "tag_count", "tag": tag, "error": f"count of {tag} is not 1"}


@pytest.mark.parametrize(
    "name, expected",
    [
        ("10mb-plain", _tag_count("<think>")),
        ("dup-tags", _tag_count("<think>")),
        # the blocks never close, so none is complete
        ("200k-open-blocks", (-1.0, {"reason": "no_blocks", "error": "No valid search blocks found"})),
        ("nested", _tag_count("<think>")),
        ("binary", _tag_count("<think>")),
    ],
)
def test_hostile_outputs_are_format_errors(name, expected):
    assert run_guarded(score_hostile, name, timeout_s=GUARD_S) == expected


def test_surrogates_score_like_any_text():
    # The block edits the missing path "\ud800": an empty search matches the file's leading "\n", so the new
    # file is "\ud800". a.py is the oracle's change, unmatched -> 0; "\ud800" is not the oracle's -> 0.
    reward, info = run_guarded(score_hostile, "surrogates", timeout_s=GUARD_S)
    expected = reference_reward(CTX, ORACLE, {"\ud800": "\ud800"})
    assert reward == expected == 0.0
    assert {s["path"] for s in info["similarities"]} == {"\ud800", "a.py"}


def test_thousands_of_valid_blocks_in_a_10mb_output():
    blocks = [("a.py", "    return 1", "    return 2"), ("a.py", "    return 2", "    return 1")] * 2500
    out = answer(blocks, thought="t" * (10 * MB))
    assert len(out) > 10 * MB
    # The last block restores the file: no predicted change, the oracle changed -> 0.0.
    reward, info = run_guarded(score_output, out, timeout_s=GUARD_S)
    assert reward == 0.0 and info["similarities"] == [{"path": "a.py", "similarity": 0.0}]


def test_absolute_and_traversal_paths_are_plain_missing_keys(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = answer([("../../etc/passwd", "root", "evil"), ("/etc/passwd", "", "x")])
    reward, info = calculate_search_replace_reward(CTX, ORACLE, out)
    assert reward == -1.0 and info["reason"] == "search_not_found" and info["path"] == "../../etc/passwd"
    reward, info = calculate_search_replace_reward(CTX, ORACLE, answer([("/etc/passwd", "", "x")]))
    assert reward == 0.0 and {s["path"] for s in info["similarities"]} == {"a.py", "/etc/passwd"}
    assert list(tmp_path.iterdir()) == []


def test_multiplying_edit_hits_the_size_guard():
    # An empty search inserts the 1 MB replacement after each of 100 newlines: a 100 MB file.
    reward, info = calculate_search_replace_reward(CTX, ORACLE, answer([("a.py", "", "z" * MB)]))
    assert reward == -1.0 and info["reason"] == "file_too_large" and info["path"] == "a.py"
    # Below the guard the same edit scores normally: "\n" + "" occurs at every "\n" of "\n" + content, and
    # each becomes "\n# z" (applied here by hand), scored with the standard library's difflib.
    reward, _ = calculate_search_replace_reward(CTX, ORACLE, answer([("a.py", "", "# z")]))
    by_hand = {"a.py": ("\n" + CTX["a.py"]).replace("\n", "\n# z")[1:]}
    assert by_hand["a.py"].startswith("# zdef f():\n# z    return 1\n") and by_hand["a.py"].endswith("\n# z")
    expected = reference_reward(CTX, ORACLE, by_hand)
    assert reward == expected and 0.0 < expected < 1.0
