"""A repository at a commit, read from its git dir (a bare mirror or a clone): its files, which are tests, which
test files exercise a module, and the task commits the generators add (the bug applied, its hidden tests removed).

Nothing is checked out: files come from `git cat-file --batch`, task commits are made with `git commit-tree` over
an index file, so a mirror is never touched except for the refs the generators add (refs/swerl-tasks/*).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import subprocess
import tempfile

# test files: test_*.py, *_test.py, conftest.py, or anything under a tests/testing folder
_TEST_DIR = re.compile(r"(^|/)(tests?|testing)/")
_TEST_NAME = re.compile(r"(^|/)(test_[^/]*|[^/]*_test|conftest)\.py$")
_NOT_SOURCE = re.compile(r"(^|/)(docs?|examples?|benchmarks?|bench|scripts|setup\.py$|noxfile\.py$|conftest\.py$)")


def git(git_dir: str | pathlib.Path, *args: str, env: dict | None = None, stdin: str | None = None) -> str:
    """Run git on `git_dir`; its stdout, or CalledProcessError with stderr."""
    done = subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, text=True, input=stdin,
                          env=None if env is None else {**os.environ, **env})
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, ["git", *args], done.stdout, done.stderr)
    return done.stdout


def is_test_file(path: str) -> bool:
    """Whether a repository path is a test file (or test support)."""
    return bool(_TEST_DIR.search(path) or _TEST_NAME.search(path))


@dataclasses.dataclass
class Snapshot:
    """The Python files of `repo` at `commit` in `git_dir`: {path: text}."""

    git_dir: pathlib.Path
    commit: str
    files: dict[str, str]
    _tests: dict[str, list[str]] = dataclasses.field(default_factory=dict, repr=False)  # tests_for, memoised

    @classmethod
    def read(cls, git_dir: str | pathlib.Path, commit: str) -> Snapshot:
        """Every .py file at `commit` (resolved to its full sha); an unknown commit is an error naming it."""
        git_dir = pathlib.Path(git_dir)
        try:
            sha = git(git_dir, "rev-parse", "--verify", f"{commit}^{{commit}}").strip()
        except subprocess.CalledProcessError as err:
            raise ValueError(f"commit {commit!r} is not in {git_dir}: {err.stderr.strip()[:200]}") from None
        listing = git(git_dir, "ls-tree", "-r", "-z", sha).split("\0")
        blobs = {}
        for entry in listing:
            if entry:
                meta, path = entry.split("\t", 1)
                mode, kind, obj = meta.split()
                if kind == "blob" and mode == "100644" and path.endswith(".py"):
                    blobs[path] = obj
        return cls(git_dir, sha, read_blobs(git_dir, blobs))

    def source_files(self) -> list[str]:
        """Files mutations may touch: not tests, docs, examples, setup scripts or import-only __init__ files."""
        return [p for p in sorted(self.files) if not is_test_file(p) and not _NOT_SOURCE.search(p)
                and not (p.endswith("__init__.py") and "def " not in self.files[p])]

    def test_files(self) -> list[str]:
        """The test modules (test_*.py / *_test.py; conftest.py is support, not a test module)."""
        return [p for p in sorted(self.files) if is_test_file(p) and _TEST_NAME.search(p)
                and not p.endswith("conftest.py")]

    def module_name(self, path: str) -> str:
        """The dotted module name of a source path (a src/ layout's prefix dropped)."""
        parts = path.removesuffix(".py").split("/")
        if parts[0] in ("src", "lib") and len(parts) > 1:
            parts = parts[1:]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        return ".".join(parts)

    def tests_for(self, path: str) -> list[str]:
        """The test files that exercise a source file: named after it (test_<stem>.py, <stem>_test.py) or
        importing its module by its dotted name (`import a.b`, `from a.b import`, `from a import b`)."""
        if path not in self._tests:
            self._tests[path] = self._find_tests(path)
        return list(self._tests[path])

    def _find_tests(self, path: str) -> list[str]:
        module = self.module_name(path)
        stem = module.rsplit(".", 1)[-1]
        parent, _, leaf = module.rpartition(".")
        imports = [rf"^\s*(from|import)\s+{re.escape(module)}\b"]
        if parent:
            imports.append(rf"^\s*from\s+{re.escape(parent)}\s+import\s+[^\n]*\b{re.escape(leaf)}\b")
        pattern = re.compile("|".join(imports), re.MULTILINE)
        found = []
        for test in self.test_files():
            name = test.rsplit("/", 1)[-1].removesuffix(".py")
            if name in (f"test_{stem}", f"{stem}_test", f"test_{stem}s") or pattern.search(self.files[test]):
                found.append(test)
        return found


def read_blobs(git_dir: pathlib.Path, blobs: dict[str, str]) -> dict[str, str]:
    """{path: text} of blob ids, in one `git cat-file --batch` (undecodable files skipped)."""
    order = sorted(blobs)
    done = subprocess.run(["git", "--git-dir", str(git_dir), "cat-file", "--batch"], capture_output=True,
                          input="".join(f"{blobs[p]}\n" for p in order).encode(), check=True)
    out, data, pos = {}, done.stdout, 0
    for path in order:
        header_end = data.index(b"\n", pos)
        size = int(data[pos:header_end].split()[2])
        body = data[header_end + 1:header_end + 1 + size]
        pos = header_end + 1 + size + 1
        try:
            out[path] = body.decode()
        except UnicodeDecodeError:
            continue
    return out


def words(texts: list[str]) -> set[str]:
    """The identifiers in some texts (which function names a test file mentions)."""
    return {w for text in texts for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)}


def task_commit(git_dir: pathlib.Path, base: str, changed: dict[str, str], removed: list[str], message: str,
                ref: str) -> str:
    """A commit on top of `base` with `changed` files ({path: new text}) and `removed` paths, under `ref`
    (refs/swerl-tasks/...) so it is kept; its sha. Author and dates are fixed: the same task gives the same sha."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GIT_INDEX_FILE": str(pathlib.Path(tmp) / "index"), "GIT_AUTHOR_NAME": "swerl-tasks",
               "GIT_AUTHOR_EMAIL": "tasks@swerl.invalid", "GIT_COMMITTER_NAME": "swerl-tasks",
               "GIT_COMMITTER_EMAIL": "tasks@swerl.invalid"}
        date = git(git_dir, "show", "-s", "--format=%ct", base).strip()
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = f"{date} +0000"
        git(git_dir, "read-tree", base, env=env)
        for path, text in sorted(changed.items()):
            blob = git(git_dir, "hash-object", "-w", "--stdin", stdin=text).strip()
            git(git_dir, "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env)
        if removed:
            # mode 0 removes the entry (--force-remove wants a work tree, which a mirror has not)
            git(git_dir, "update-index", "--index-info", env=env,
                stdin="".join(f"0 {'0' * 40}\t{path}\n" for path in removed))
        tree = git(git_dir, "write-tree", env=env).strip()
        sha = git(git_dir, "commit-tree", tree, "-p", base, "-m", message, env=env).strip()
        git(git_dir, "update-ref", ref, sha)
    return sha


def task_repo(source: pathlib.Path, repos_dir: pathlib.Path, repo: str) -> pathlib.Path:
    """The generators' own bare clone of `source` (a mirror, clone or bundle) at repos_dir/owner__name.git, where
    the task commits go; the harness and agents find it with --repos repos_dir. Made once, reused."""
    target = repos_dir / f"{repo.replace('/', '__')}.git"
    if not (target / "HEAD").exists():
        if not source.exists():
            raise FileNotFoundError(f"--repo {source}: no such mirror, clone or bundle")
        repos_dir.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        subprocess.run(["rm", "-rf", str(tmp)], check=True)
        subprocess.run(["git", "clone", "-q", "--bare", "--no-hardlinks", str(source), str(tmp)], check=True,
                       capture_output=True)
        tmp.rename(target)
    return target
