"""Synthetic records and the oracle SWE-RL answer."""

import json
import re

import pytest

from swerl_jax.data.records import validate_record
from swerl_jax.data.synthetic import synthetic_records
from swerl_jax.data.targets import oracle_solution
from swerl_jax.reward import calculate_search_replace_reward


def test_records_are_valid_varied_short_and_deterministic():
    records = synthetic_records(60, seed=0)
    assert records == synthetic_records(60, seed=0) and records != synthetic_records(60, seed=1)
    assert len({r["instance_id"] for r in records}) == 60
    assert len({r["source"] for r in records}) >= 6  # every bug kind shows up
    for r in records:
        validate_record(r)
        (path, before), = r["code_context"].items()
        assert 10 <= len(before.splitlines()) <= 25
        compile(before, path, "exec")
        compile(r["oracle_new_content"][path], path, "exec")
    with pytest.raises(ValueError):
        synthetic_records(-1)


def _apply(files: dict, answer: str) -> dict:
    """SWE-RL's edit rule written out independently: every "\\n"+search becomes "\\n"+replace."""
    out = {p: "\n" + c for p, c in files.items()}
    for path, search, replace in re.findall(
            r"```.*?\n### (.*)\n<<<<<<< SEARCH\n([\s\S]*?)\n=======\n([\s\S]*?)\n>>>>>>> REPLACE\n```", answer):
        assert out[path].count("\n" + search) == 1
        out[path] = out[path].replace("\n" + search, "\n" + replace)
    return {p: c[1:] for p, c in out.items()}


def test_oracle_solution_scores_one_on_synthetic_records():
    for r in synthetic_records(40, seed=4):
        answer = oracle_solution(r)
        assert re.fullmatch(r"<think>\n.+\n</think>\n<solution>\n[\s\S]+\n</solution>", answer)
        assert _apply(r["code_context"], answer) == r["oracle_new_content"]
        assert calculate_search_replace_reward(r["code_context"], r["oracle_new_content"], answer)[0] == 1.0


def test_oracle_solution_scores_one_on_real_records(shared_data):
    for line in open(shared_data / "pr_records_requests_flask.jsonl"):
        r = json.loads(line)
        answer = oracle_solution(r)
        assert _apply(r["code_context"], answer) == r["oracle_new_content"], r["instance_id"]
        assert calculate_search_replace_reward(r["code_context"], r["oracle_new_content"], answer)[0] == 1.0


def test_repeated_lines_widen_the_search():
    old = "x = 1\ny = 2\nx = 1\nz = 3\n"
    new = "x = 1\ny = 2\nx = 10\nz = 3\n"
    r = dict(synthetic_records(1)[0], code_context={"a.py": old}, oracle_new_content={"a.py": new})
    answer = oracle_solution(r, thought="fix")
    assert _apply({"a.py": old}, answer) == {"a.py": new}


def test_new_file_is_refused():
    r = synthetic_records(1)[0]
    r = dict(r, oracle_new_content={**r["oracle_new_content"], "new.py": "print(1)\n"})
    with pytest.raises(ValueError, match="'new.py' is a new file"):
        oracle_solution(r)
    # an existing empty file (an __init__.py) was called "a new file" too: it is named as what it is
    r = dict(r, code_context={**r["code_context"], "new.py": ""})
    with pytest.raises(ValueError, match="'new.py' is an empty file, which a SEARCH/REPLACE edit cannot fill"):
        oracle_solution(r)


def test_repos_restrict_the_paths():
    recs = synthetic_records(12, seed=4, repos=["acme/widgets"])
    assert {r["repo"] for r in recs} == {"acme/widgets"}
    assert all(next(iter(r["code_context"])).startswith("widgets/") for r in recs)
    assert synthetic_records(5, seed=4) == synthetic_records(5, seed=4, repos=None)  # the default is unchanged
    with pytest.raises(ValueError, match="owner/name"):
        synthetic_records(1, repos=["nope"])
