"""Linked issues by GitHub's closing keywords; bug-report detection."""

from swerl_jax.curate.linking import is_bug_report, linked_issues


def test_keywords_forms_and_order():
    texts = ["Fixes #12 and closes #3", "Resolved: acme/widget#7, fix #12 again",
             "resolves https://github.com/acme/widget/issues/44"]
    assert linked_issues(texts, "acme/widget") == [12, 3, 7, 44]


def test_all_keyword_variants_case_insensitive():
    for kw in ("close", "closes", "closed", "fix", "fixes", "fixed", "resolve", "resolves", "resolved"):
        assert linked_issues([f"{kw.upper()} #5"], "a/b") == [5], kw


def test_other_repos_and_plain_mentions_ignored():
    texts = ["Fixes other/repo#9", "see #4", "refs https://github.com/acme/widget/issues/8",
             "closes https://github.com/x/y/issues/2", "prefix#1", "hotfixes #6"]
    assert linked_issues(texts, "acme/widget") == []
    assert linked_issues(["Fixes ACME/Widget#9"], "acme/widget") == [9]  # GitHub names are case-insensitive


def test_bug_report():
    assert is_bug_report("Crash on empty input", "")
    assert is_bug_report("Feature", "", labels=["type: Bug"])
    assert is_bug_report("x", "Traceback (most recent call last): ...")
    assert not is_bug_report("Document helper2", "Please add docs.", ["enhancement"])
