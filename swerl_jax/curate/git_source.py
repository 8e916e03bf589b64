"""Git access through the ``git`` CLI: clone discovery, PRs recovered from history, diffs and blobs.

Blobs are read through one long-lived ``git cat-file --batch`` process per repository (one round trip per
blob instead of one process); everything else is a short ``git`` call. Errors raise ``GitError`` with a
short ``reason`` that the pipeline counts in the funnel.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
from pathlib import Path

_MERGE_RE = re.compile(r"^Merge pull request #(\d+) from (\S+)")
_SQUASH_RE = re.compile(r"^(?P<title>.*\S)\s+\(#(?P<num>\d+)\)\s*$")
_NAME_RE = re.compile(r"^(?P<owner>[\w.-]+?)__(?P<name>[\w.-]+?)(?:\.git)?$")
_CHERRY_RE = re.compile(r"^\(cherry picked from commit [0-9a-f]{7,40}\)", re.MULTILINE)
# Where merged PRs live: HEAD and every branch and tag, through all parents; never refs/pull/* (unmerged heads).
_HISTORY_REFS = ("HEAD", "--branches", "--remotes", "--tags")
_GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}


class GitError(RuntimeError):
    """A git command failed; ``reason`` is a short funnel label such as "missing_object"."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class FileChange:
    """One entry of ``git diff --raw``: status letter (A/M/D/R/T), paths and blob ids (None when absent)."""

    status: str
    old_path: str | None
    new_path: str | None
    old_blob: str | None
    new_blob: str | None


def repo_name_from_dir(dirname: str) -> str | None:
    """"owner__name" or "owner__name.git" -> "owner/name"; None when the folder name does not follow the rule."""
    m = _NAME_RE.match(dirname)
    return f"{m.group('owner')}/{m.group('name')}" if m else None


def discover_clones(clones_dir: str | os.PathLike) -> list[tuple[str, str]]:
    """(folder name, absolute path) of every entry of ``clones_dir``, sorted; symlinks are followed."""
    root = Path(clones_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"--clones: {root} is not a directory")
    return sorted((p.name, str(p.resolve())) for p in root.iterdir() if p.is_dir())


class GitRepo:
    """A bare or non-bare clone; owns one ``cat-file --batch`` process (call ``close``)."""

    def __init__(self, path: str):
        self.path = path
        # An explicit --git-dir stops git from walking up into an enclosing repository when ``path`` is not one.
        dot_git = os.path.join(path, ".git")
        self.git_dir = dot_git if os.path.exists(dot_git) else path
        self._batch: subprocess.Popen | None = None

    def git(self, *args: str, check_missing: bool = True) -> bytes:
        """Run ``git --git-dir=... args`` and return stdout; a failure raises GitError naming the reason."""
        cmd = ["git", "-c", "safe.directory=*", "-c", "core.quotepath=off", f"--git-dir={self.git_dir}", *args]
        proc = subprocess.run(cmd, capture_output=True, env={**os.environ, **_GIT_ENV})
        if proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace").strip()
            low = err.lower()
            if check_missing and ("missing" in low or "bad object" in low or "unable to read" in low
                                  or "invalid object" in low or "not a valid" in low or "bad revision" in low):
                raise GitError("missing_object", err[:300])
            if "not a git repository" in low:
                raise GitError("not_a_repository", err[:300])
            raise GitError("git_error", f"git {' '.join(args[:3])}: {err[:300]}")
        return proc.stdout

    def read_blob(self, sha: str, max_bytes: int | None = None) -> bytes | None:
        """Contents of blob ``sha`` via the batch process; a missing object raises GitError("missing_object").

        With ``max_bytes``, a larger blob is skipped in 1 MiB chunks (never held in memory) and None returned.
        """
        if self._batch is None:
            self._batch = subprocess.Popen(
                ["git", "-c", "safe.directory=*", f"--git-dir={self.git_dir}", "cat-file", "--batch"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env={**os.environ, **_GIT_ENV},
            )
        assert self._batch.stdin is not None and self._batch.stdout is not None
        self._batch.stdin.write(sha.encode() + b"\n")
        self._batch.stdin.flush()
        header = self._batch.stdout.readline()
        if not header:
            self.close()
            raise GitError("git_error", f"cat-file --batch exited reading {sha} in {self.path}")
        fields = header.split()
        if len(fields) < 3 or fields[1] == b"missing":
            raise GitError("missing_object", f"blob {sha} missing in {self.path}")
        size = int(fields[2])
        if max_bytes is not None and size > max_bytes:
            left = size + 1  # and the newline after every object
            while left:
                left -= len(self._batch.stdout.read(min(left, 1 << 20)))
            return None
        data = self._batch.stdout.read(size)
        self._batch.stdout.read(1)  # the newline after every object
        return data

    def close(self) -> None:
        """Stop the cat-file process."""
        if self._batch is not None:
            if self._batch.stdin:
                self._batch.stdin.close()
            self._batch.wait(timeout=10)
            self._batch = None

    def parents(self, commit: str) -> list[str]:
        """Parent commit ids of ``commit``."""
        out = self.git("rev-list", "--parents", "-n", "1", commit, "--").decode().split()
        return out[1:]

    def has_commit(self, sha: str) -> bool:
        """Whether ``sha`` names a commit present in this clone."""
        try:
            return self.git("cat-file", "-t", sha, check_missing=False).strip() == b"commit"
        except GitError:
            return False

    def merge_base(self, a: str, b: str) -> str:
        """The best common ancestor of ``a`` and ``b``."""
        out = self.git("merge-base", a, b).decode().strip()
        if not out:
            raise GitError("no_merge_base", f"{a} and {b} share no history")
        return out.split()[0]

    def commit_date(self, commit: str) -> str:
        """Committer date of ``commit`` in strict ISO 8601."""
        return self.git("show", "-s", "--format=%cI", commit).decode().strip()

    def diff(self, base: str, head: str) -> tuple[list[FileChange], bytes]:
        """Changed files and the unified diff (renames detected) from ONE ``git diff --raw -p -z`` call.

        With -z the raw section is NUL-separated and ends with an empty field; the patch text follows.
        """
        out = self.git("diff", "--raw", "-p", "-z", "-M", "--no-abbrev", "--full-index", "--no-color",
                       "--no-ext-diff", base, head)
        end = out.find(b"\0\0")
        if end < 0:
            return self._parse_raw(out), b""
        return self._parse_raw(out[: end + 1]), out[end + 2:]

    def diff_raw(self, base: str, head: str) -> list[FileChange]:
        """Changed files between two commits, with renames detected (``git diff --raw -z -M``)."""
        return self._parse_raw(self.git("diff", "--raw", "-z", "-M", "--no-abbrev", "--no-ext-diff", base, head))

    @staticmethod
    def _parse_raw(raw: bytes) -> list[FileChange]:
        out = raw.split(b"\0")
        changes, i, zero = [], 0, "0" * 40
        while i < len(out) - 1:
            meta = out[i].decode().lstrip(":").split()
            mode_a, mode_b, blob_a, blob_b, status = meta[0], meta[1], meta[2], meta[3], meta[4][0]
            if status in "RC":
                old, new, i = out[i + 1].decode("utf-8", "replace"), out[i + 2].decode("utf-8", "replace"), i + 3
            else:
                old = new = out[i + 1].decode("utf-8", "replace")
                i += 2
            # Submodule pointers (160000) and symlinks (120000) carry no file content.
            if {mode_a, mode_b} & {"160000", "120000"}:
                continue
            changes.append(FileChange(
                status=status,
                old_path=None if status == "A" else old,
                new_path=None if status == "D" else new,
                old_blob=None if status == "A" or blob_a == zero else blob_a,
                new_blob=None if status == "D" or blob_b == zero else blob_b,
            ))
        return changes

    def diff_patch(self, base: str, head: str) -> bytes:
        """The cumulative unified diff (``git diff -M``), as bytes."""
        return self.git("diff", "-M", "--no-color", "--no-ext-diff", "--full-index", base, head)

    def ls_tree(self, commit: str) -> list[tuple[str, str]]:
        """(path, blob id) of every regular file at ``commit``."""
        out = self.git("ls-tree", "-r", "-z", "--full-tree", commit).split(b"\0")
        files = []
        for entry in out:
            if not entry:
                continue
            meta, path = entry.split(b"\t", 1)
            mode, kind, sha = meta.decode().split()
            if kind == "blob" and mode in ("100644", "100755"):
                files.append((path.decode("utf-8", "replace"), sha))
        return files

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        """Whether ``ancestor`` is reachable from ``descendant`` (a commit is its own ancestor)."""
        cmd = ["git", "-c", "safe.directory=*", f"--git-dir={self.git_dir}", "merge-base", "--is-ancestor",
               ancestor, descendant]
        proc = subprocess.run(cmd, capture_output=True, env={**os.environ, **_GIT_ENV})
        if proc.returncode not in (0, 1):
            raise GitError("git_error", f"git merge-base --is-ancestor: {proc.stderr.decode('utf-8', 'replace')[:300]}")
        return proc.returncode == 0

    def pr_candidates(self) -> list[dict]:
        """Merged PRs recovered from the whole merged history, one per PR number.

        History is every commit reachable, through all parents, from HEAD, the branches, remote-tracking
        branches and tags: PRs squashed into an integration branch (``features``, ``develop``) that a later
        merge brought into the default branch, and PRs merged into maintenance branches, count too. GitHub's
        pull refs (``refs/pull/*``) are not read: they hold unmerged heads. A commit is a PR when its subject is
        GitHub's "Merge pull request #N from ..." or ends with "(#N)" (the squash/merge button's title); see
        ``_pick`` for the PR numbers that several commits repeat (backports, cherry-picks).
        """
        fmt = "%H%x00%P%x00%an <%ae>%x00%cI%x00%ct%x00%B%x1e"
        raw = self.git("log", f"--format={fmt}", *_HISTORY_REFS).decode("utf-8", "replace")
        found: dict[int, list[dict]] = {}
        for order, chunk in enumerate(raw.split("\x1e")):
            chunk = chunk.strip("\n")
            if not chunk:
                continue
            sha, parents, author, date, stamp, message = chunk.split("\x00", 5)
            pr = _parse_pr_commit(message, parents.split())
            if pr is None:
                continue
            pr.update(user=author, created_at=date, merge_commit=sha, parents=parents.split(), base_sha="",
                      head_sha="", conversation=[])
            found.setdefault(pr["number"], []).append(
                {"pr": pr, "stamp": int(stamp), "order": order, "cherry": bool(_CHERRY_RE.search(message))})
        return [self._pick(cands) for cands in found.values()]

    def _pick(self, cands: list[dict]) -> dict:
        """The commit that IS the PR among those that name its number.

        A PR is merged exactly once; other commits naming it are its own branch commits (authors amend "(#N)"
        into them) or copies made later (backports, cherry-picks, forward-ports). So: (1) a candidate inside a
        merge candidate's merged-in range (reachable from its second parent, not its first) is one of that PR's
        commits, and the merge is the PR; (2) of the rest, a commit marked "(cherry picked from commit ...)"
        loses, then the earliest committer date wins (a copy is committed after the original); log order breaks
        ties.
        """
        if len(cands) > 1:
            # Only single-parent "(#N)" commits older than the merge can be its branch commits; checking just
            # those keeps the ancestry walks few (sympy repeats "Merge pull request #1" ~50 times: forks' PRs).
            merges = [c for c in cands if len(c["pr"]["parents"]) >= 2]
            inner = {
                c["pr"]["merge_commit"] for c in cands for m in merges
                if len(c["pr"]["parents"]) == 1 and not c["pr"]["branch"] and c["stamp"] <= m["stamp"]
                and not self.is_ancestor(c["pr"]["merge_commit"], m["pr"]["parents"][0])  # usually decides
                and self.is_ancestor(c["pr"]["merge_commit"], m["pr"]["parents"][1])
            }
            cands = [c for c in cands if c["pr"]["merge_commit"] not in inner] or cands
        return min(cands, key=lambda c: (c["cherry"], c["stamp"], c["order"]))["pr"]


def _parse_pr_commit(message: str, parents: list[str]) -> dict | None:
    """The PR a commit message names, as {number, title, body, branch, kind}, or None.

    "Merge pull request #N from B" with two parents is GitHub's merge (the title and body follow the subject);
    with one parent it is such a merge rebased into a single commit. A subject ending with "(#N)" is a squash
    (one parent) or a merge commit titled like one (two parents; pytest merges this way). Reverts such as
    'Revert "Title (#N)"' end with a quote and are not PR N.
    """
    if not parents:
        return None
    subject, _, rest = message.partition("\n")
    m = _MERGE_RE.match(subject)
    if m:
        title, _, body = rest.strip("\n").partition("\n\n")
        kind = "git-merge" if len(parents) >= 2 else "git-squash"
        return {"number": int(m.group(1)), "title": title.strip(), "body": body.strip(), "branch": m.group(2),
                "kind": kind}
    s = _SQUASH_RE.match(subject)
    if not s:
        return None
    kind = "git-merge" if len(parents) >= 2 else "git-squash"
    return {"number": int(s.group("num")), "title": s.group("title").strip(), "body": rest.strip(), "branch": "",
            "kind": kind}
