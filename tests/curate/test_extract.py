"""extract_pr on small repositories: base/head resolution, invalid records, RL-seed reasons."""

import pytest

from swerl_jax.curate.config import CurateConfig
from swerl_jax.curate.extract import content_hash, extract_pr, rl_seed_reason
from swerl_jax.curate.git_source import GitRepo
from tests.curate.builders import Repo

CFG = CurateConfig()


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    r = Repo(tmp_path_factory.mktemp("x") / "o__r")
    r.commit("init", {"run.py": "print(1)\n", "lib.py": "X = 1\n"})
    (r.path / "run.py").chmod(0o755)
    r.commit("Make run executable (#1)")
    r.commit("Fix X (#2)", {"lib.py": "X = 2\n"})
    yield r


def pr(repo_obj, number):
    return {p["number"]: p for p in GitRepo(str(repo_obj.path)).pr_candidates()}[number]


def test_mode_only_change_is_an_invalid_record(repo):
    g = GitRepo(str(repo.path))
    assert extract_pr(g, "o/r", pr(repo, 1), {}, CFG)[0] == "invalid_record"  # oracle == context
    reason, record, meta = extract_pr(g, "o/r", pr(repo, 2), {}, CFG)
    g.close()
    assert reason is None and record["oracle_new_content"] == {"lib.py": "X = 2\n"}
    assert meta["content_hash"] == content_hash({"lib.py": "X = 1\n"}, {"lib.py": "X = 2\n"})


def test_events_pr_resolution(repo):
    g = GitRepo(str(repo.path))
    head = repo.head()
    base = repo.git("rev-parse", "HEAD~1")
    event_pr = {"number": 2, "title": "Fix X", "body": "", "user": "u", "branch": "b", "merge_commit": "",
                "parents": [], "base_sha": base, "head_sha": head, "kind": "events"}
    reason, record, _ = extract_pr(g, "o/r", event_pr, {}, CFG)
    assert reason is None and record["base_commit"] == base
    gone = {**event_pr, "base_sha": "", "head_sha": "", "merge_commit": "f" * 40}
    assert extract_pr(g, "o/r", gone, {}, CFG)[0] == "commit_not_in_clone"
    g.close()


def test_rl_seed_reasons():
    meta = {"linked_issues": [], "issue": None, "issue_is_bug": False, "programming_only": True}
    assert rl_seed_reason(meta) == "no_linked_issue"
    assert rl_seed_reason({**meta, "linked_issues": [3]}) == "linked_issue_text_unknown"
    known = {**meta, "linked_issues": [3], "issue": {"title": "t"}}
    assert rl_seed_reason(known) == "issue_not_bug_fix"
    assert rl_seed_reason({**known, "issue_is_bug": True, "programming_only": False}) == "non_programming_files"
    assert rl_seed_reason({**known, "issue_is_bug": True}) is None


def test_file_over_the_size_limit_is_never_loaded(repo):
    g = GitRepo(str(repo.path))
    assert extract_pr(g, "o/r", pr(repo, 2), {}, CurateConfig(max_file_bytes=5))[0] == "too_large"
    assert extract_pr(g, "o/r", pr(repo, 2), {}, CurateConfig(max_file_bytes=6))[0] is None
    g.close()
