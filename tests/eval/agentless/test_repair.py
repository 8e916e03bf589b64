"""Repair's parsing, edit application and patch, on fixed model outputs (the release's behaviour)."""

import random

from swerl_jax.eval.agentless import repair

OLD = "def f(x):\n    return x + 1\n\n\ndef g(y):\n    return y + 1\n"


def block(path, search, replace):
    return f"```python\n### {path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n```"


def test_edits_grouped_by_file_in_order_repeats_dropped_path_carried_within_a_block():
    answer = "\n".join([block("a.py", "x", "y"), block("b.py", "1", "2"), block("a.py", "x", "y"),
                        "```python\n### a.py\n<<<<<<< SEARCH\np\n=======\nq\n>>>>>>> REPLACE\n"
                        "<<<<<<< SEARCH\nr\n=======\ns\n>>>>>>> REPLACE\n```"])
    edits = repair.edits_by_file(answer)
    assert list(edits) == ["a.py", "b.py"]
    assert len(edits["a.py"]) == 3  # x->y once (repeat dropped), p->q, r->s (path carried within the block)
    assert edits["a.py"][2].startswith("<<<<<<< SEARCH\nr\n")


def test_unmatched_edits_dropped_matched_applied_in_order_every_occurrence():
    edits = repair.edits_by_file(block("m.py", "    return x + 1", "    return x + 2")
                                 + block("m.py", "no such line", "boom")
                                 + block("m.py", "+ 1", "+ 3"))
    new = repair.apply_edits(edits["m.py"], OLD)
    # x + 1 -> x + 2 first; then "+ 1" (matched in the original) replaces the remaining occurrence in g.
    assert new == "def f(x):\n    return x + 2\n\n\ndef g(y):\n    return y + 3\n"


def test_answer_patch_is_a_git_diff_and_empty_when_new_code_does_not_parse_or_only_blank_lines_change():
    good = repair.answer_patch(block("m.py", "    return x + 1", "    return x - 1"), {"m.py": OLD})
    assert good["model_patch"].startswith("diff --git a/m.py b/m.py\n") and "-    return x + 1\n+    return x - 1" \
        in good["model_patch"]
    bad = repair.answer_patch(block("m.py", "    return x + 1", "    return (x"), {"m.py": OLD})
    assert bad["model_patch"] == "" and bad["raw_model_patch"]
    blank = repair.answer_patch(block("m.py", "def g(y):", "\ndef g(y):"), {"m.py": OLD})
    assert blank["model_patch"] == ""
    elsewhere = repair.answer_patch(block("other.py", "x", "y"), {"m.py": OLD})
    assert elsewhere["edited_files"] == [] and elsewhere["model_patch"] == ""


def test_context_skips_files_over_budget_keeps_first_when_none_fits_shuffles_with_rng():
    contents = {"a.py": "a" * 40, "b.py": "b" * 400, "c.py": "c" * 40}
    count = len
    assert repair.repair_context(["a.py", "b.py", "c.py"], contents, 120, count) == \
        f"### a.py\n{'a' * 40}\n\n### c.py\n{'c' * 40}"
    assert repair.repair_context(["b.py"], contents, 10, count) == f"### b.py\n{'b' * 400}"
    shuffled = {repair.repair_context(["a.py", "c.py"], contents, 999, count, random.Random(s)) for s in range(20)}
    assert len(shuffled) == 2


def test_sample_patch_takes_the_files_from_the_solution_and_the_edits_from_the_whole_generation():
    from swerl_jax.eval.agentless.pipeline import sample_patch

    contents = {"m.py": OLD, "n.py": "z = 1\n"}
    draft = block("m.py", "def g(y):", "def g(y):\n    y = -y")  # drafted in <think>, matches the file
    final = block("m.py", "    return x + 1", "    return x - 1")
    other = block("n.py", "z = 1", "z = 2")  # only in <think>: its file is not edited by the solution
    made = sample_patch(f"<think>{draft}\n{other}</think>\n<solution>\n{final}\n</solution>", contents, True)
    assert made["edited_files"] == ["m.py"]
    assert made["new_file_content"] == ["def f(x):\n    return x - 1\n\n\ndef g(y):\n    y = -y\n    return y + 1\n"]
    # a syntax-breaking draft in <think> empties the patch, as in the release's post_process_repair
    broken = block("m.py", "def g(y):", "def g(:")
    assert sample_patch(f"<think>{broken}</think><solution>{final}</solution>", contents, True)["model_patch"] == ""
    # no solution edits: nothing from <think> applies
    assert sample_patch(f"<think>{final}</think><solution>none</solution>", contents, True)["edited_files"] == []
