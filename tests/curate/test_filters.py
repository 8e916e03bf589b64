"""Each filter on hand-made inputs, and the order in which ``drop_reason`` applies them."""

import pytest

from swerl_jax.curate import filters
from swerl_jax.curate.config import CurateConfig

CFG = CurateConfig(max_changed_files=3, max_changed_lines=10, max_file_bytes=1000, max_context_bytes=5000)
PATCH = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"


def reason(**kw):
    args = dict(texts=["Fix x", "", "alice", "fix-x"], paths=["x.py"], binary_paths=[], patch=PATCH,
                context_bytes=100, max_file_bytes_seen=10, config=CFG)
    args.update(kw)
    return filters.drop_reason(**args)


def test_keeps_a_normal_change():
    assert reason() is None


@pytest.mark.parametrize("text", ["dependabot[bot]", "Bump lodash", "renovate/configure", "AutoMerge it", "x[bot]"])
def test_bot(text):
    assert reason(texts=["t", text]) == "bot"


def test_empty_and_too_large():
    assert reason(paths=[]) == "empty"
    assert reason(paths=["a.py", "b.py", "c.py", "d.py"]) == "too_large"
    assert reason(patch=PATCH + "".join(f"+l{i}\n" for i in range(10))) == "too_large"
    assert reason(max_file_bytes_seen=1001) == "too_large"
    assert reason(context_bytes=5001) == "too_large"


def test_lock_version_docs_generated():
    assert reason(paths=["poetry.lock", "web/package-lock.json", "go.sum"]) == "lock_only"
    bump = '--- a/v.py\n+++ b/v.py\n@@ -1 +1 @@\n-__version__ = "2.0.1"\n+__version__ = "2.1.0.dev0"\n'
    assert reason(paths=["v.py"], patch=bump) == "version_bump"
    assert reason(paths=["setup.cfg"], patch="-version = 1.2\n+version = 1.3\n") == "version_bump"
    assert reason(paths=["docs/api.py", "README.rst", "CHANGES"], patch="+Some prose\n") == "docs_only"
    assert reason(paths=["HISTORY.rst"], patch=bump) == "docs_only"  # docs first: a changelog is docs
    assert reason(paths=["a.png", "dist/app.min.js"], binary_paths=["a.png"]) == "generated_or_binary_only"
    # A code change mixed into each kind keeps the PR.
    assert reason(paths=["poetry.lock", "x.py"]) is None
    assert reason(paths=["README.md", "x.py"]) is None
    assert reason(paths=["a.png", "x.py"], binary_paths=["a.png"]) is None


def test_version_bump_needs_only_version_lines():
    assert not filters.is_version_bump('-VERSION = "1.0"\n+VERSION = "1.1"\n+import os\n')
    assert not filters.is_version_bump("")


def test_order_is_first_match():
    # A bot PR that is also lock-only counts as bot: the funnel is sequential.
    assert reason(texts=["Bump x"], paths=["yarn.lock"]) == "bot"
    assert filters.FILTER_ORDER[0] == "bot" and filters.FILTER_ORDER[-1] == "generated_or_binary_only"


def test_programming_files():
    assert filters.is_programming_file("src/a.py") and filters.is_programming_file("lib/x.RS")
    assert not filters.is_programming_file("setup.cfg") and not filters.is_programming_file("README.md")


def test_bot_co_author_trailer_is_not_a_bot_pr():
    """pylint-dev/pylint#7080 (SWE-bench Lite) was dropped as "bot": its squash body credits pre-commit-ci."""
    body = ("Normalize the path.\n\n"
            "Co-authored-by: pre-commit-ci[bot] <66853113+pre-commit-ci[bot]@users.noreply.github.com>")
    assert not filters.is_bot(["Normalize path before checking if path should be ignored", body, "Matus", ""])
    assert filters.is_bot(["Update hooks", "", "pre-commit-ci[bot] <x@y>", ""])  # a bot's own PR still is one
    assert filters.is_bot(["Fix", "made by [bot]\nCo-authored-by: alice", "alice", ""])
