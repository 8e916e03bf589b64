"""The testbed: every family's records are valid, their oracle passes the hidden tests and the buggy repository
fails exactly the FAIL_TO_PASS ones (run in the sandbox, one batch); generation is deterministic across processes;
the seed and family splits are disjoint; adversarial answers end as unresolved outcomes, never host exceptions."""

from __future__ import annotations

import ast
import collections
import json
import os
import shutil
import subprocess
import sys

import pytest

from swerl_jax.data.records import validate_record
from swerl_jax.data.targets import oracle_solution
from swerl_jax.reward.functions import calculate_discrete_reward, calculate_search_replace_reward
from swerl_jax.testbed.hidden_tests import answer_content, execution_reward, run_hidden_tests_many
from swerl_jax.testbed.tasks import FAMILY_NAMES, HELDOUT_OFFSET, generate_tasks, split_families, task_key

requires_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
REQUIRED_FAMILIES = ("off_by_one", "wrong_comparison", "wrong_arithmetic", "inverted_condition", "wrong_return",
                     "missing_none_check", "wrong_variable", "swapped_args", "mutable_default", "wrong_exception",
                     "missing_return", "wrong_default", "format_order", "wrong_key", "early_break", "api_misuse")


@pytest.fixture(scope="module")
def per_family() -> list[dict]:
    """3 tasks of every family (the draw is round-robin, so 3 * len(FAMILY_NAMES) tasks hold exactly that)."""
    return generate_tasks(3 * len(FAMILY_NAMES), seed=11)


def test_families_cover_the_required_kinds_and_are_drawn_evenly(per_family):
    assert len(FAMILY_NAMES) >= 16 and set(REQUIRED_FAMILIES) <= set(FAMILY_NAMES)
    assert collections.Counter(r["family"] for r in per_family) == {f: 3 for f in FAMILY_NAMES}


def test_records_are_valid_and_self_consistent(per_family):
    assert len({r["instance_id"] for r in per_family}) == len(per_family)
    for r in per_family:
        assert validate_record(r) is r
        assert r["instance_id"].startswith(f"testbed__{r['family']}-11-") and r["source"] == f"testbed:{r['family']}"
        assert r["repo"].count("/") == 1 and len(r["base_commit"]) == 40
        (path,) = r["oracle_new_content"]  # one changed file, shown in the context (api_misuse: the caller)
        assert path in r["code_context"] and r["oracle_patch"].startswith(f"diff --git a/{path} b/{path}\n")
        assert r["relevant_files"] == [p for p in r["code_context"] if p != path]
        assert not set(r["hidden_tests"]) & set(r["code_context"])
        assert r["fail_to_pass"] and r["pass_to_pass"] and not set(r["fail_to_pass"]) & set(r["pass_to_pass"])
        test_text = "\n".join(r["hidden_tests"].values())
        assert all(t.rsplit(".", 1)[1] in test_text for t in r["fail_to_pass"] + r["pass_to_pass"])
        pkg = path.split("/")[0]
        assert all(p.startswith(f"{pkg}/") and p.endswith(".py") for p in r["code_context"])
        assert pkg not in sys.stdlib_module_names  # the package dir would shadow a stdlib module
        if r["family"] == "api_misuse":
            assert len(r["code_context"]) >= 2


def test_modules_parse_and_define_each_name_once():
    for r in generate_tasks(200, seed=4):
        for path, text in [*r["code_context"].items(), *r["oracle_new_content"].items(), *r["hidden_tests"].items()]:
            names = [n.name for n in ast.parse(text).body if isinstance(n, ast.FunctionDef | ast.ClassDef)]
            assert len(names) == len(set(names)), (r["instance_id"], path)


def test_prompts_stay_small():
    """The budget in tasks.py's docstring: code_context under ~1,600 characters (here: all of 200)."""
    records = generate_tasks(200, seed=2)
    sizes = [sum(len(c) for c in r["code_context"].values()) for r in records]
    assert max(sizes) <= 1600
    assert all(8 <= len(c.splitlines()) <= 40 for r in records for c in r["oracle_new_content"].values())
    smaller = [sum(len(c) for c in r["code_context"].values()) for r in generate_tasks(200, seed=2, max_distractors=0)]
    assert sum(smaller) < sum(sizes)
    assert all(len(r["code_context"]) <= 2 for r in generate_tasks(50, 2, max_distractors=0))


def test_oracle_answers_score_one_on_the_similarity_and_discrete_rewards(per_family):
    for r in per_family:
        answer = oracle_solution(r)
        assert answer_content(r, answer) == r["oracle_new_content"]
        assert calculate_search_replace_reward(r["code_context"], r["oracle_new_content"], answer)[0] == 1.0
        assert calculate_discrete_reward(r["code_context"], r["oracle_new_content"], answer)[0] == 1.0


@requires_bwrap
def test_oracle_resolves_and_the_buggy_repository_fails_exactly_fail_to_pass(per_family):
    items = [(r, answer_content(r, oracle_solution(r))) for r in per_family] + [(r, None) for r in per_family]
    outcomes = run_hidden_tests_many(items)
    for (r, content), o in zip(items, outcomes):
        if content is not None:
            assert (o.resolved, o.status, o.failed) == (True, "resolved", ()), (r["instance_id"], o.output_tail)
        else:
            assert not o.resolved and o.status == "failed", (r["instance_id"], o.output_tail)
            assert set(o.failed) == set(r["fail_to_pass"]) and set(o.passed) == set(r["pass_to_pass"])


@requires_bwrap
def test_a_fixed_package_changes_only_the_paths_and_its_tasks_still_resolve():
    generated = generate_tasks(len(FAMILY_NAMES), seed=3)
    fixed = generate_tasks(len(FAMILY_NAMES), seed=3, package="app")
    for g, f in zip(generated, fixed, strict=True):
        pkg = next(iter(g["code_context"])).split("/")[0]
        assert [p.replace(pkg + "/", "app/", 1) for p in g["code_context"]] == list(f["code_context"])
        assert [c.replace(pkg, "app") for c in g["code_context"].values()] == list(f["code_context"].values())
    assert all(o.resolved for o in run_hidden_tests_many([(r, r["oracle_new_content"]) for r in fixed]))
    assert not any(o.resolved for o in run_hidden_tests_many([(r, None) for r in fixed]))
    for bad in ("json", "tests", "a-b"):
        with pytest.raises(ValueError, match="package="):
            generate_tasks(1, 0, package=bad)


@requires_bwrap
def test_execution_reward_follows_the_swe_rl_convention(per_family):
    r = per_family[0]
    assert execution_reward(r, oracle_solution(r)) == 1.0
    assert execution_reward(r, "<think>\nno idea\n</think>\n<solution>\nnothing\n</solution>") == -1.0
    assert execution_reward(r, "no tags at all") == -1.0
    path = next(iter(r["oracle_new_content"]))
    first_line = r["code_context"][path].split("\n")[0]
    harmless = (f"<think>\nx\n</think>\n<solution>\n```python\n### {path}\n<<<<<<< SEARCH\n{first_line}\n=======\n"
                f"{first_line}  # looked\n>>>>>>> REPLACE\n```\n</solution>")
    assert execution_reward(r, harmless) == 0.0  # well-formed, but the bug is still there


@requires_bwrap
def test_adversarial_answers_are_unresolved_outcomes_and_do_not_touch_other_tasks(per_family):
    r = next(x for x in per_family if x["family"] == "off_by_one")
    path = next(iter(r["oracle_new_content"]))
    buggy, escape = r["code_context"][path], f"/tmp/swerl-testbed-escape-{os.getpid()}"

    def prefix(code: str) -> dict[str, str]:
        return {path: code + "\n" + buggy}

    cases = {
        "loop": (prefix("while True:\n    pass"), {"timeout"}),
        "system": (prefix(f"import os\nos.system('curl -s -m 2 http://example.com; touch {escape}')"), {"failed"}),
        "big_file": (prefix("open('big.bin', 'wb').write(b'0' * (100 << 20))"), {"error"}),
        "dotdot": ({f"{path.split('/')[0]}/../../escape.py": "x = 1"}, {"invalid"}),
        "tests_overwritten": ({"tests/test_issue.py": "import unittest\n"}, {"invalid"}),
        # as root the driver is another uid, out of the answer's reach (its own tests then fail); else it dies
        "kill_runner": (prefix("import os, signal\nos.kill(-1, signal.SIGKILL)"),
                        {"failed"} if os.geteuid() == 0 else {"crashed"}),
        "huge_output": (prefix("import sys\nsys.stdout.write('x' * (20 << 20))"), {"failed"}),
        "fake_results": (prefix("import os, sys\nsys.stderr.write('test_issue_0 (tests.test_issue.TestIssue."
                                "test_issue_0) ... ok\\n')\nos._exit(0)"), {"failed", "error"}),
        "nul_bytes": ({path: buggy + "\n# \x00 \udcff"}, {"error"}),
    }
    items = [(r, content) for content, _ in cases.values()] + [(r, r["oracle_new_content"])]
    outcomes = run_hidden_tests_many(items, timeout_s=2)
    for (name, (_, statuses)), o in zip(cases.items(), outcomes):
        assert not o.resolved and o.status in statuses, (name, o)
    assert outcomes[-1].resolved, outcomes[-1]  # after a runner was killed, the rest ran again in a new sandbox
    assert not os.path.exists(escape)  # the sandbox's /tmp is its own


def test_generation_is_deterministic_and_prefix_stable():
    first = generate_tasks(25, seed=5)
    assert first == generate_tasks(25, seed=5)
    assert generate_tasks(10, seed=5) == first[:10]
    assert generate_tasks(0, seed=5) == []
    assert generate_tasks(6, 5, ["api_misuse"]) == generate_tasks(6, 5, ("api_misuse", "api_misuse"))


def test_task_keys_are_the_same_in_another_process_with_another_hash_seed():
    code = ("import json; from swerl_jax.testbed.tasks import generate_tasks, task_key; "
            "print(json.dumps([task_key(r) for r in generate_tasks(30, 9)]))")
    keys = []
    for hash_seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        keys.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert keys[0] == keys[1] == [task_key(r) for r in generate_tasks(30, 9)]


def test_training_and_held_out_seeds_never_share_a_task():
    train = {task_key(r) for r in generate_tasks(2000, seed=0)}
    held_out = {task_key(r) for r in generate_tasks(2000, seed=0 + HELDOUT_OFFSET)}
    assert len(train) == len(held_out) == 2000  # no collision within a seed either
    assert not train & held_out


def test_family_split_is_disjoint_and_validated():
    train, held = split_families(["api_misuse", "missing_copy"])
    assert held == ("api_misuse", "missing_copy") and not set(train) & set(held)
    assert set(train) | set(held) == set(FAMILY_NAMES) and list(train) == [f for f in FAMILY_NAMES if f not in held]
    assert {r["family"] for r in generate_tasks(40, 0, train)} == set(train)
    assert split_families("api_misuse")[1] == ("api_misuse",)
    with pytest.raises(ValueError, match="unknown testbed family 'of_by_one'.*did you mean 'off_by_one'"):
        split_families(["of_by_one"])
    with pytest.raises(ValueError, match="did you mean 'wrong_key'"):
        generate_tasks(3, 0, ["wrong_keys"])
    with pytest.raises(ValueError, match="families is empty"):
        generate_tasks(3, 0, [])
    with pytest.raises(ValueError, match="must be >= 0"):
        generate_tasks(-1, 0)
