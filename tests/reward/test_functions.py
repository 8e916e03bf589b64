"""Conformance of the reward functions: every rule on hand-built cases, real PR records, real predictions.

The independent reference is the standard library: expected scores are difflib ratios of
difflib.unified_diff outputs computed here, or hand-derived values.
"""

import difflib
import json

import pytest

from swerl_jax.reward import (
    calculate_discrete_reward,
    calculate_reward_unidiff,
    calculate_search_replace_reward,
    get_reward_fn,
)
from tests.reward.helpers import answer, gold_block

CTX = {"a.py": "def f():\n    return 1\n\nx = 2\n", "b.py": "y = 3\ny = 3\n"}
ORACLE = {"a.py": "def f():\n    return 2\n\nx = 2\n"}


def stdlib_diff(old: str, new: str) -> str:
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), "old", "new", lineterm="", n=3))
    return "\n".join(lines[2:])


def ratio(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def test_gold_edit_scores_one_and_info_says_why():
    out = answer([("a.py", "    return 1", "    return 2")])
    reward, info = calculate_search_replace_reward(CTX, ORACLE, out)
    assert reward == 1.0 and info["thought"] == "reasoning"
    assert [s["path"] for s in info["similarities"]] == ["a.py"]


def test_wrong_edit_is_the_difflib_ratio():
    out = answer([("a.py", "    return 1", "    return 3")])
    pred = stdlib_diff(CTX["a.py"], CTX["a.py"].replace("return 1", "return 3"))
    expected = ratio(pred, stdlib_diff(CTX["a.py"], ORACLE["a.py"]))
    assert calculate_search_replace_reward(CTX, ORACLE, out)[0] == expected
    assert 0.0 < expected < 1.0


def test_all_occurrences_replaced_and_extra_file_halves():
    # b.py has the line twice: both change; b.py is not in the oracle -> similarity 0 -> mean 0.5.
    out = answer([("a.py", "    return 1", "    return 2"), ("b.py", "y = 3", "y = 4")])
    reward, info = calculate_search_replace_reward(CTX, ORACLE, out)
    assert reward == 0.5
    b = next(s for s in info["similarities"] if s["path"] == "b.py")
    assert b["pred_change"].count("+y = 4") == 2 and b["oracle_change"] == ""


def test_empty_search_inserts_after_every_newline():
    out = answer([("b.py", "", "# c")])
    # "\n" + "" matches at every newline of "\n" + content, the leading one included (hand-derived).
    oracle = {"b.py": "# cy = 3\n# cy = 3\n# c"}
    assert calculate_search_replace_reward(CTX, oracle, out)[0] == 1.0


def test_trailing_newline_only_change_is_no_change():
    # Only the final newline differs: splitlines() hides it, the diff is empty.
    oracle = {"b.py": "y = 3\ny = 3"}
    out = answer([("a.py", "    return 1", "    return 2")])
    assert calculate_search_replace_reward(CTX, oracle, out)[0] == 0.0  # a.py vs no oracle change
    only_newline = answer([("b.py", "y = 3\ny = 3\n", "y = 3\ny = 3")])
    assert calculate_search_replace_reward(CTX, oracle, only_newline)[0] == 1.0


def test_oracle_rediffed_from_full_contents_and_no_files_is_one():
    # The oracle's b.py equals the context (no change) and the prediction only drops the final newline:
    # neither side has a diff, so there are no files at all -> 1.0.
    out = answer([("b.py", "y = 3\ny = 3\n", "y = 3\ny = 3")])
    assert calculate_search_replace_reward(CTX, {"b.py": CTX["b.py"]}, out) == (
        1.0, {"similarities": [], "thought": "reasoning", "answer": out.split("<solution>")[1][:-11].strip()}
    )


@pytest.mark.parametrize(
    "output, reason, where",
    [
        ("no tags", "tag_count", {"tag": "<think>"}),
        ("<think></think><solution>s</solution>", "empty_thought", {}),
        ("<think>t</think><solution>no blocks</solution>", "no_blocks", {}),
        (answer([("a.py", "x = 2", "x = 2")]), "identical_search_replace",
         {"path": "a.py", "block_index": 0}),
        (answer([("a.py", "x = 2", "x = 3"), ("a.py", "nope", "z")]), "search_not_found",
         {"path": "a.py", "block_index": 1}),
    ],
)
def test_format_errors_are_minus_one_with_reason(output, reason, where):
    reward, info = calculate_search_replace_reward(CTX, ORACLE, output)
    assert reward == -1.0 and info["reason"] == reason
    assert {k: info[k] for k in where} == where


def test_discrete_variant_and_registry():
    gold = answer([("a.py", "    return 1", "    return 2")])
    near = answer([("a.py", "    return 1", "    return 3")])
    assert calculate_discrete_reward(CTX, ORACLE, gold)[0] == 1.0
    assert calculate_discrete_reward(CTX, ORACLE, near)[0] == 0.0
    assert calculate_discrete_reward(CTX, ORACLE, "junk")[0] == -1.0
    assert get_reward_fn("continuous") is calculate_search_replace_reward
    assert get_reward_fn("python:swerl_jax.reward.calculate_discrete_reward") is calculate_discrete_reward
    for bad in ("nope", "python:nomodule_xyz.fn", "python:swerl_jax.reward.missing", "python:fn"):
        with pytest.raises(ValueError, match="reward.kind"):
            get_reward_fn(bad)


def _records(shared_data):
    return [json.loads(line) for line in open(shared_data / "pr_records_requests_flask.jsonl")]


def test_real_records_gold_mutated_partial_extra(shared_data):
    for rec in _records(shared_data):
        ctx, oracle = rec["code_context"], rec["oracle_new_content"]
        blocks = [gold_block(ctx.get(p, ""), new, p) for p, new in oracle.items() if ctx.get(p, "") != new]
        assert calculate_search_replace_reward(ctx, oracle, answer(blocks))[0] == 1.0, rec["instance_id"]
        oracle_diff = {p: stdlib_diff(ctx.get(p, ""), oracle[p]) for p in oracle}
        path, search, replace = blocks[0]
        # Mutated: one extra line in the replacement.
        mutated = replace + "\n    # TODO"
        reward, _ = calculate_search_replace_reward(ctx, oracle, answer([(path, search, mutated)]))
        new = ("\n" + ctx[path]).replace("\n" + search, "\n" + mutated)[1:]
        assert reward == ratio(stdlib_diff(ctx[path], new), oracle_diff[path]) < 1.0
        # Partial: only the first changed line of the gold replacement.
        part = "\n".join(replace.split("\n")[:1] + search.split("\n")[1:])
        if part != search:
            new = ("\n" + ctx[path]).replace("\n" + search, "\n" + part)[1:]
            pred_diff = stdlib_diff(ctx[path], new)
            want = ratio(pred_diff, oracle_diff[path]) if pred_diff else 0.0
            got = calculate_search_replace_reward(ctx, oracle, answer([(path, search, part)]))[0]
            assert got == want
        # Extra file: gold plus a new file the oracle does not touch -> (1 + 0) / 2.
        extra = blocks + [("../../etc/passwd", "", "root:x:0:0")]
        assert calculate_search_replace_reward(ctx, oracle, answer(extra))[0] == 0.5


def test_unidiff_variant_on_real_gpt4_predictions(shared_data):
    gold = {r["instance_id"]: r["patch"] for r in json.load(open(shared_data / "swebench_lite.json"))}
    preds = [json.loads(line) for line in open(shared_data / "swebench_lite_gpt4_preds.jsonl")]
    rewards = [calculate_reward_unidiff([gold[p["instance_id"]]], [p["model_patch"] or ""])[0] for p in preds]
    assert len(rewards) == 168 and all(0.0 <= r <= 1.0 for r in rewards)
    # Measured once; the official swe-rl calculate_reward_unidiff gives the same bits (see BENCHMARKS.md).
    assert sum(rewards) / len(rewards) == 0.21482581435647216
    first = gold[preds[0]["instance_id"]]
    assert calculate_reward_unidiff([first], [first])[0] == 1.0
    assert calculate_reward_unidiff([], ["not a diff"]) == (1.0, {"similarities": []})


def test_unidiff_rename_header():
    patch = ("diff --git a/x.py b/y.py\nsimilarity index 90%\nrename from x.py\nrename to y.py\n"
             "--- a/x.py\n+++ b/y.py\n@@ -1 +1 @@\n-a\n+b\n")
    reward, info = calculate_reward_unidiff([patch], [patch])
    assert reward == 1.0 and info["similarities"][0]["path"] == "x.py"
    assert info["similarities"][0]["oracle_change"] == "rename from x.py to y.py\n@@ -1,1 +1,1 @@\n-a\n+b"


def test_a_reward_function_must_return_a_float_dict_pair():
    import numpy as np

    from swerl_jax.reward.functions import reward_pair
    from swerl_jax.reward.worker import score_item

    assert reward_pair((1, {})) == (1.0, {}) and reward_pair([np.float32(0.5), {"a": 1}]) == (0.5, {"a": 1})
    for bad, shown in ((0.5, "returned 0.5 (float)"), (("0.5", {}), "returned reward '0.5' (str)"),
                       ("0.5", "returned '0.5' (str)"), ((0.5, "ok"), "returned info 'ok' (str)"),
                       ((True, {}), "returned reward True (bool)")):
        with pytest.raises(TypeError, match=r"expected a \(float, dict\) pair") as err:
            reward_pair(bad, "reward.kind 'python:m.f'")
        assert str(err.value).startswith(f"reward.kind 'python:m.f' {shown}")

    # in the service's worker: the fallback, reason exception, with that one line (a str "0.5" was taken as 0.5;
    # a bare float was "cannot unpack non-iterable float object")
    def bare(code_context, oracle_new_content, output):
        return 0.5

    def text(code_context, oracle_new_content, output):
        return "0.5", {}

    for fn, shown in ((bare, "returned 0.5 (float)"), (text, "returned reward '0.5' (str)")):
        reward, info = score_item(fn, CTX, ORACLE, "out", -1.0)
        assert reward == -1.0 and info["reason"] == "exception", info
        assert shown in info["error"] and "expected a (float, dict) pair" in info["error"]
