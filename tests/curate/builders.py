"""Small git repositories and GH Archive events for the curation tests, built with the git CLI.

``build_world(root)`` makes ``root/clones`` (acme__widget non-bare, acme__gadget.git bare, a bad name and a
folder that is not a repository), ``root/events.jsonl`` and ``root/issues.jsonl``, and returns what the
tests need to know (commit ids, expected outcome of every PR).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

CORE_V0 = "def run(text):\n    return text[0]\n\n\ndef stop():\n    return None\n"
CORE_V1 = "def run(text):\n    if not text:\n        return ''\n    return text[0]\n\n\ndef stop():\n    return None\n"
UTIL_V0 = "def helper():\n    return 1\n"
UTIL_V1 = "def helper():\n    return 1\n\n\ndef helper2():\n    return 2\n"
EXTRA = "from .util import helper\n\nVALUE = helper()\n"
SETUP = 'from setuptools import setup\n\nVERSION = "{version}"\nsetup(name="widget", version=VERSION{extra})\n'
REQS = ', install_requires=["requests>=2.0"]'
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01"

# PR number -> expected funnel outcome in acme/widget ("kept" or the drop reason).
WIDGET_OUTCOMES = {
    1: "kept", 2: "kept", 3: "bot", 4: "lock_only", 5: "version_bump", 6: "docs_only", 7: "kept",
    8: "generated_or_binary_only", 9: "empty", 12: "kept", 13: "duplicate", 14: "non_utf8", 16: "too_large",
    15: "missing_object", 17: "kept", 18: "no_problem_statement",
}


class Repo:
    """A non-bare repository with deterministic dates (one minute per commit)."""

    def __init__(self, path: Path):
        self.path = path
        self.tick = 0
        path.mkdir(parents=True)
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        self.tick += 1
        date = f"2024-01-01T00:{self.tick // 60:02d}:{self.tick % 60:02d}+00:00"
        env = {**os.environ, "GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "dev@example.com",
               "GIT_COMMITTER_NAME": "Dev", "GIT_COMMITTER_EMAIL": "dev@example.com",
               "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(self.path)}
        out = subprocess.run(["git", "-C", str(self.path), *args], check=True, capture_output=True, env=env)
        return out.stdout.decode().strip()

    def write(self, rel: str, content: str | bytes) -> None:
        p = self.path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content.encode() if isinstance(content, str) else content)

    def commit(self, message: str, files: dict[str, str | bytes] = (), remove: tuple[str, ...] = ()) -> str:
        for rel, content in dict(files).items():
            self.write(rel, content)
        for rel in remove:
            self.git("rm", "-q", rel)
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "--allow-empty-message", "-m", message)
        return self.head()

    def head(self) -> str:
        return self.git("rev-parse", "HEAD")

    def merge_pr(self, number: int, branch: str, title: str, body: str, files: dict, base_extra=None,
                 branch_message: str | None = None) -> dict:
        """A PR branch merged with a merge commit; ``base_extra`` lands on main meanwhile (moves the base)."""
        start = self.head()
        self.git("checkout", "-q", "-b", branch)
        head = self.commit(title if branch_message is None else branch_message, files)
        self.git("checkout", "-q", "main")
        if base_extra:
            base_extra()
        message = f"Merge pull request #{number} from {branch}\n\n{title}" + (f"\n\n{body}" if body else "")
        self.git("merge", "-q", "--no-ff", "-m", message, branch)
        return {"start": start, "head": head, "merge": self.head()}


def build_world(root: Path) -> dict:
    """Build the clones, events and issues files; return commit ids and expectations."""
    clones = root / "clones"
    w = Repo(clones / "acme__widget")
    info: dict = {}
    w.commit("Initial", {
        "src/widget/__init__.py": "from .core import run\n", "src/widget/core.py": CORE_V0,
        "src/widget/util.py": UTIL_V0, "README.md": "# widget\n", "poetry.lock": "[[package]]\nname = 'a'\n",
        "setup.py": SETUP.format(version="1.0.0", extra=""),
        "setup.cfg": "[metadata]\nname = widget\n", "docs/guide.md": "Guide\n",
        "src/widget/legacy.py": "OLD = 1\n",
    })
    info["initial"] = w.head()

    def squash_2():
        changes = {"src/widget/util.py": UTIL_V1, "src/widget/extra.py": EXTRA}
        info["pr2"] = w.commit("Add helper2 to util (#2)", changes)

    info["pr1"] = w.merge_pr(1, "alice/fix-crash", "Fix crash when input is empty", "Fixes #10",
                             {"src/widget/core.py": CORE_V1}, base_extra=squash_2)
    info["pr3"] = w.merge_pr(3, "acme/dependabot/pip/requests-2.0", "Bump requests from 1.0 to 2.0", "",
                             {"setup.py": SETUP.format(version="1.0.0", extra=REQS)})
    w.commit("Update lock file (#4)", {"poetry.lock": "[[package]]\nname = 'b'\n"})
    w.commit("Release 1.1.0 (#5)", {"setup.py": SETUP.format(version="1.1.0", extra=REQS)})
    w.commit("Improve guide (#6)", {"docs/guide.md": "Guide\n\nMore words.\n"})
    w.git("mv", "src/widget/util.py", "src/widget/helpers.py")
    info["pr7"] = w.merge_pr(7, "bob/rename", "Rename util to helpers",
                             "Resolves https://github.com/acme/widget/issues/30",
                             {"src/widget/helpers.py": UTIL_V1.replace("return 2", "return 3"),
                              "assets/logo.png": PNG, "setup.cfg": "[metadata]\nname = widget\nversion = 2\n"})
    # Merge commits without the PR title: the commit messages state the task (#17), or nothing does (#18).
    w.merge_pr(17, "x/untitled", "", "", {"src/widget/untitled.py": "U = 1\n"},
               branch_message="Add untitled module\n\nNeeded for U.")
    w.merge_pr(18, "x/silent", "", "", {"src/widget/silent.py": "S = 1\n"}, branch_message="")
    w.commit("Add icon (#8)", {"assets/icon.png": PNG})
    w.commit("Empty change (#9)")
    w.commit("Revert helper2 (#12)\n\nCloses #11", {"src/widget/helpers.py": UTIL_V0}, remove=("src/widget/extra.py",))
    # Restore (not a PR) then revert again: #13 has exactly #12's before/after contents, a duplicate.
    w.commit("Restore helper2", {"src/widget/helpers.py": UTIL_V1.replace("return 2", "return 3"),
                                 "src/widget/extra.py": EXTRA})
    w.commit("Revert helper2 again (#13)", {"src/widget/helpers.py": UTIL_V0}, remove=("src/widget/extra.py",))
    w.commit("Add latin-1 module (#14)", {"src/widget/latin.py": b"# caf\xe9\nX = 1\n"})
    w.commit("Add table (#16)", {"src/widget/table.py": "".join(f"T{i} = {i}\n" for i in range(1500))})
    w.commit("Update legacy (#15)", {"src/widget/legacy.py": "OLD = 2  # unique content\n"})
    missing = w.git("rev-parse", "HEAD:src/widget/legacy.py")
    os.remove(w.path / ".git" / "objects" / missing[:2] / missing[2:])
    info["missing_blob"] = missing

    g = Repo(root / "work" / "gadget")
    g.commit("Initial", {"parser.py": "def parse(s):\n    return s.split(',')\n"})
    g.commit("Fix parse of empty string (#1)\n\nFixes acme/gadget#3",
             {"parser.py": "def parse(s):\n    return s.split(',') if s else []\n"})
    subprocess.run(["git", "clone", "-q", "--bare", str(g.path), str(clones / "acme__gadget.git")], check=True)
    (clones / "not-a-clone-name").mkdir()
    (clones / "broken__repo").mkdir()

    pr1 = info["pr1"]
    events = [
        {"type": "PullRequestEvent", "repo": {"name": "acme/widget"}, "created_at": "2024-01-01T00:00:10Z",
         "actor": {"login": "alice"}, "payload": {"action": "opened", "number": 1, "pull_request": {
             "number": 1, "title": "Fix crash when input is empty", "body": "Fixes #10", "user": {"login": "alice"},
             "merged": False, "created_at": "2024-01-01T00:00:10Z", "base": {"sha": pr1["start"]},
             "head": {"sha": pr1["head"], "ref": "fix-crash"}}}},
        # Repository names are case-insensitive: this comment still joins PR #1.
        {"type": "IssueCommentEvent", "repo": {"name": "Acme/Widget"}, "created_at": "2024-01-01T00:00:30Z",
         "actor": {"login": "carol"}, "payload": {"issue": {"number": 1, "pull_request": {}},
                                                  "comment": {"body": "LGTM after the test passes"}}},
        {"type": "PullRequestReviewEvent", "repo": {"name": "acme/widget"}, "created_at": "2024-01-01T00:00:20Z",
         "actor": {"login": "bob"}, "payload": {"pull_request": {"number": 1}, "review": {"body": "Needs a test"}}},
        {"type": "PullRequestEvent", "repo": {"name": "acme/widget"}, "created_at": "2024-01-01T00:00:40Z",
         "actor": {"login": "bob"}, "payload": {"action": "closed", "number": 1, "pull_request": {
             "number": 1, "title": "Fix crash when input is empty", "body": "Fixes #10", "user": {"login": "alice"},
             "merged": True, "created_at": "2024-01-01T00:00:10Z", "merge_commit_sha": pr1["merge"],
             "base": {"sha": pr1["start"]}, "head": {"sha": pr1["head"], "ref": "fix-crash"}}}},
        {"type": "IssuesEvent", "repo": {"name": "acme/widget"}, "created_at": "2024-01-01T00:00:05Z",
         "actor": {"login": "dave"}, "payload": {"action": "opened", "issue": {
             "number": 10, "title": "Crash on empty input", "body": "run('') raises IndexError",
             "labels": [{"name": "bug"}], "user": {"login": "dave"}}}},
        {"type": "PullRequestEvent", "repo": {"name": "acme/widget"}, "created_at": "2024-01-01T00:01:00Z",
         "actor": {"login": "eve"}, "payload": {"action": "closed", "number": 20, "pull_request": {
             "number": 20, "title": "Rejected idea", "body": "", "user": {"login": "eve"}, "merged": False}}},
        # Closed unmerged on GitHub, yet squashed into history by hand: git wins, the PR counts once.
        {"type": "PullRequestEvent", "repo": {"name": "acme/widget"}, "created_at": "2024-01-01T00:01:00Z",
         "actor": {"login": "eve"}, "payload": {"action": "closed", "number": 5, "pull_request": {
             "number": 5, "title": "Release 1.1.0", "body": "", "user": {"login": "eve"}, "merged": False}}},
        {"type": "PullRequestEvent", "repo": {"name": "ghost/missing"}, "created_at": "2024-01-01T00:01:00Z",
         "actor": {"login": "eve"}, "payload": {"action": "closed", "number": 5, "pull_request": {
             "number": 5, "title": "Fix", "body": "", "user": {"login": "eve"}, "merged": True,
             "merge_commit_sha": "ab" * 20}}},
        {"type": "WatchEvent", "repo": {"name": "acme/widget"}, "created_at": "2024-01-01T00:01:00Z",
         "payload": {}},
    ]
    lines = [json.dumps(e) for e in events] + ["{not json", '{"type": "IssuesEvent", "repo": {"name": "x/y"}}']
    (root / "events.jsonl").write_text("\n".join(lines) + "\n")
    issues = [
        {"repo": "acme/widget", "number": 11, "title": "Document helper2", "body": "Please add docs.",
         "labels": ["enhancement"]},
        {"repo": "acme/widget", "number": 30, "title": "helper2 crashes on unicode", "body": "TypeError raised"},
    ]
    (root / "issues.jsonl").write_text("\n".join(json.dumps(i) for i in issues) + "\n{broken\n")
    return info


def build_integration_history(root: Path) -> dict:
    """A history where PRs hide behind merges and repeat their numbers (pytest's features/maintenance flow).

    main <- "Merge branch 'features'" <- features: a squash "Add feature (#10)", GitHub's merge of #11 whose own
    branch commit repeats "(#11)"; main: a merge commit titled like a squash (#13), a single-parent
    "Merge pull request #14" (a rebased merge), a revert of #10; 1.x (maintenance, merged back into main):
    a ``cherry-pick -x`` of #10 and the backport PR #12 "[1.x] Add feature (#10) (#12)"; release/2.x: a squash
    (#15) only that branch holds; refs/pull/99/head: an unmerged PR head. Returns the commit ids.
    """
    r = Repo(root)
    info: dict = {"init": r.commit("init", {"core.py": "A = 1\n", "util.py": "U = 1\n"})}
    r.git("branch", "1.x")
    r.git("checkout", "-q", "-b", "features")
    info["pr10"] = r.commit("Add feature (#10)\n\nFixes #9", {"feature.py": "F = 1\n"})
    r.git("checkout", "-q", "-b", "u/eleven")
    info["pr11_branch"] = r.commit("Prepare eleven (#11)", {"eleven.py": "E = 1\n"})
    r.git("checkout", "-q", "features")
    r.git("merge", "-q", "--no-ff", "-m", "Merge pull request #11 from u/eleven\n\nEleven", "u/eleven")
    info["pr11"] = r.head()
    r.git("checkout", "-q", "main")
    r.commit("Main moves on", {"core.py": "A = 2\n"})
    r.git("merge", "-q", "--no-ff", "-m", "Merge branch 'features'", "features")
    r.git("checkout", "-q", "-b", "u/thirteen")
    r.commit("Thirteen", {"thirteen.py": "T = 1\n"})
    r.git("checkout", "-q", "main")
    r.git("merge", "-q", "--no-ff", "-m", "Fix thirteen (#13)\n\nCloses #3", "u/thirteen")
    info["pr13"] = r.head()
    info["pr14"] = r.commit("Merge pull request #14 from u/rebased\n\nRebased fix", {"util.py": "U = 2\n"})
    r.commit('Revert "Add feature (#10)"\n\nThis reverts it.', remove=("feature.py",))
    r.git("checkout", "-q", "1.x")
    r.git("cherry-pick", "-x", info["pr10"])
    info["pr10_pick"] = r.head()
    info["pr12"] = r.commit("[1.x] Add feature (#10) (#12)", {"feature.py": "F = 1  # 1.x\n"})
    r.git("checkout", "-q", "main")
    r.git("merge", "-q", "--no-ff", "-m", "Merge branch '1.x'", "1.x")
    r.git("checkout", "-q", "-b", "release/2.x", info["init"])
    info["pr15"] = r.commit("Release-only fix (#15)", {"util.py": "U = 15\n"})
    r.git("checkout", "-q", "-b", "pull99", info["init"])
    r.git("update-ref", "refs/pull/99/head", r.commit("Unmerged (#99)", {"core.py": "A = 99\n"}))
    r.git("checkout", "-q", "main")
    r.git("branch", "-D", "pull99")
    return info
