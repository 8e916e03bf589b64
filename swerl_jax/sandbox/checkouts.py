"""The one way a repository reaches a sandbox: a checkout of a base commit that holds nothing after it, verified.

Model-written code (an episode's commands, the patch and tests at grading, Agentless's reproduction scripts) runs
next to the checkout it is graded on. A repository's later commits hold the fix and its tests, so a checkout that
still carries them lets a policy copy the answer: `git log --all`, the object store, packs, reflogs, FETCH_HEAD,
alternates into the clone it came from. `history_free_checkout` builds a repository of its own holding exactly
what the official SWE-bench images keep (the base commit, its ancestors, and the tags that point into them, as
light tags), and `verify_history_free` refuses it unless every object, ref and git file in it is part of the base
commit's reachable set. Executors call nothing else to materialise a repository, so a new path cannot skip it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import uuid
from collections.abc import Iterator

from swerl_jax.sandbox import lru

_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# Files git leaves in .git that name commits or object stores beyond a checkout's own (FETCH_HEAD names the
# source's path, ORIG_HEAD a previous HEAD, alternates and grafts other stores and parents, logs the reflog).
FORBIDDEN = ("FETCH_HEAD", "ORIG_HEAD", "MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "BISECT_LOG", "logs",
             "shallow", "info/grafts", "commondir", "modules", "objects/info/alternates",
             "objects/info/http-alternates", "objects/info/commit-graph", "objects/info/commit-graphs")
# Host settings that would write more than the objects fetched (commit graphs, maintenance) are turned off.
_QUIET_GIT = ["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "fetch.writeCommitGraph=false",
              "-c", "gc.auto=0", "-c", "maintenance.auto=false", "-c", "advice.detachedHead=false"]


class CheckoutError(RuntimeError):
    """A checkout could not be made (a git step failed); the message holds the command and git's output."""


class HistoryLeak(CheckoutError):
    """A checkout holds something beyond its base commit's reachable set; the message says what."""


def _git_env() -> dict[str, str]:
    # GIT_DIR, GIT_OBJECT_DIRECTORY or GIT_ALTERNATE_OBJECT_DIRECTORIES in the host's environment would point
    # these commands (and the verification) at another store: none is inherited.
    return {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}


def _git(repo: pathlib.Path, *args: str, stdin: str | None = None) -> str:
    argv = ["git", "-C", str(repo), *_QUIET_GIT, *args]
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=_git_env())
    if done.returncode != 0:
        raise CheckoutError(f"$ {shlex.join(argv)}\n{done.stderr}")
    return done.stdout


def _ancestor_tags(source: pathlib.Path, commit: str) -> list[tuple[str, str]]:
    """(ref name, the commit it peels to) for every tag of `source` that points at `commit` or an ancestor: what
    the official harness keeps (versions from `git describe`, e.g. setuptools-scm's, need them)."""
    fmt = "%(objectname) %(objecttype) %(*objectname) %(*objecttype) %(refname)"
    tags = []
    for line in _git(source, "for-each-ref", f"--merged={commit}", f"--format={fmt}", "refs/tags").splitlines():
        obj, kind, peeled, peeled_kind, ref = (line.split(" ", 4) + [""] * 5)[:5]
        if kind == "commit":
            tags.append((ref, obj))
        elif peeled_kind == "commit":  # an annotated tag becomes a light one: its tag object is not reachable
            tags.append((ref, peeled))
    return tags


def _fetch_checkout(source: pathlib.Path, dest: pathlib.Path, commit: str) -> None:
    """Make `dest` a repository of its own with `commit`, its ancestors and their tags, checked out (unverified)."""
    init = subprocess.run(["git", "init", "-q", "--template=", str(dest)], capture_output=True, text=True,
                          env=_git_env())  # no template: nothing of the host's git templates is copied
    if init.returncode != 0:
        raise CheckoutError(f"git init {dest}: {init.stderr}")
    _git(dest, "config", "core.logAllRefUpdates", "false")  # no reflog, from the first ref on
    _git(dest, "fetch", "-q", "--no-tags", "--no-write-fetch-head", str(source), commit)
    # a git dir's tags; a bundle file (fetched whole, then refused by the verifier) has none to list
    tags = _ancestor_tags(source, commit) if source.is_dir() else []
    if tags:
        _git(dest, "update-ref", "--stdin", stdin="".join(f"create {ref} {sha}\n" for ref, sha in tags))
    _git(dest, "checkout", "-q", "--detach", commit)


# What a checkout cache keeps by default: an instance's store is reused across an RL run's episodes, and a
# harness run over Lite without a bound left 14 GB of stores, one per instance, each used once.
CACHE_BYTES = 4 << 30


@contextlib.contextmanager
def _cached_store(source: pathlib.Path, commit: str, cache: pathlib.Path,
                  cache_bytes: int) -> Iterator[pathlib.Path]:
    """A verified history-free repository of `commit` under `cache`, made once per (source, commit) and reused:
    the fetch packs the whole ancestry (0.5 s for flask, far more for larger repositories), a copy does not.

    Held under a shared lock while the caller copies it, so no eviction removes it mid-copy; a store is built
    under the exclusive lock (one build per key, across threads and processes). After a build the cache is cut
    back to `cache_bytes`, least recently used first (`_evict`)."""
    cache.mkdir(parents=True, exist_ok=True)
    key = f"{commit}-{hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:8]}"
    store, lock_path, built = cache / key, cache / f"{key}.lock", False
    try:
        with open(lock_path, "a") as lock:
            while True:  # an evictor can take the store between our build and the shared lock: then build again
                fcntl.flock(lock, fcntl.LOCK_SH)
                if store.is_dir():
                    break
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not store.is_dir():
                    tmp = cache / f".{key}.{uuid.uuid4().hex[:8]}"
                    try:
                        _fetch_checkout(source, tmp, commit)
                        verify_history_free(tmp, commit)
                        tmp.rename(store)  # atomic: a half-made store is never seen under its name
                        lru.remember_size(store)
                        built = True
                    finally:
                        shutil.rmtree(tmp, ignore_errors=True)
            os.utime(lock_path)  # the lock file's mtime is the store's last use
            yield store
    finally:  # also when the copy failed (a full disk is when the cache must give space back)
        if built:
            _evict(cache, cache_bytes, keep=key)


def _evict(cache: pathlib.Path, cache_bytes: int, keep: str) -> None:
    """Remove stores, least recently used first, until those left fit `cache_bytes`; never `keep` (just built)
    nor a store another checkout holds (its shared lock makes the evictor's non-blocking exclusive one fail)."""
    lru.remove_trash(cache)
    for stale in cache.glob(".*.*"):  # a build a killed process left half done: `.KEY.RANDOM`
        lru.remove_abandoned(stale, cache / stale.name[1:].split(".", 1)[0])
    stores = [cache / lock.name[:-len(".lock")] for lock in cache.glob("*.lock")]
    lru.evict_least_recent(stores, cache_bytes, keep=cache / keep)


def history_free_checkout(source: pathlib.Path, dest: pathlib.Path, commit: str,
                          cache: pathlib.Path | None = None, cache_bytes: int = CACHE_BYTES) -> None:
    """Check `commit` (a full hash) out of the git dir `source` into the new directory `dest`, as a repository of
    its own holding the commit, its ancestors and the tags that point into them, then `verify_history_free` it.

    A fetch by hash from a local repository sends exactly the objects reachable from it (the source's other
    commits stay behind); no remote is configured, no FETCH_HEAD written, no reflog kept. `cache` (a host folder
    no sandbox sees): fetch once per (source, commit) into it and copy that store's .git (copies, never hard
    links: a sandbox owns and may rewrite its checkout's files), keeping at most `cache_bytes` of stores there (and
    always the one just built). `dest` is verified either way. Raises
    CheckoutError when a step fails and HistoryLeak when the result holds more (a bundle source, for one, brings
    its whole pack).
    """
    if not _SHA.fullmatch(commit):
        raise CheckoutError(f"{commit!r} is not a full commit hash (a name could resolve differently here)")
    source, dest = pathlib.Path(source), pathlib.Path(dest)
    if dest.exists():
        raise CheckoutError(f"{dest} exists: a checkout goes into a new directory")
    if cache is None:
        _fetch_checkout(source, dest, commit)
    else:
        with _cached_store(source, commit, pathlib.Path(cache), cache_bytes) as store:
            dest.mkdir(parents=True)
            shutil.copytree(store / ".git", dest / ".git", symlinks=True)
        _git(dest, "checkout", "-q", "-f", "--detach", commit)  # the work tree (reset would write ORIG_HEAD)
    verify_history_free(dest, commit)


def _listing(path: pathlib.Path) -> list[str]:
    return sorted(os.listdir(path)) if path.is_dir() else []


def verify_history_free(repo: pathlib.Path, commit: str) -> None:
    """Raise HistoryLeak unless the checkout `repo` holds nothing beyond `commit`'s reachable set.

    Checked: .git is a directory of its own (not a link or a gitfile into another store); none of `FORBIDDEN`
    exists (reflog, FETCH_HEAD, ORIG_HEAD, alternates, grafts, shallow parents, commit graphs); the object store
    holds only loose-object folders and packs with their indexes; every object in it (`cat-file
    --batch-all-objects`, packed and loose, reachable or not), every ref, every hash in packed-refs and the index
    is reachable from `commit`; HEAD is `commit`; no remote is configured.
    """
    repo = pathlib.Path(repo)
    git_dir = repo / ".git"
    if git_dir.is_symlink() or not git_dir.is_dir():
        raise HistoryLeak(f"{git_dir} is not a directory of its own (a gitfile or link into another store)")
    present = [name for name in FORBIDDEN if os.path.lexists(git_dir / name)]
    if present:
        raise HistoryLeak(f"{repo}: .git holds {present} (they name commits or stores beyond {commit})")
    objects = git_dir / "objects"
    odd = [n for n in _listing(objects) if n not in ("pack", "info") and not re.fullmatch(r"[0-9a-f]{2}", n)]
    odd += [f"info/{n}" for n in _listing(objects / "info") if n != "packs"]
    packs = _listing(objects / "pack")
    odd += [f"pack/{n}" for n in packs if not re.fullmatch(r"pack-[0-9a-f]+\.(pack|idx|rev)", n)]
    # cat-file reads a pack through its index: a pack without one would hold objects no listing below shows
    odd += [f"pack/{n}" for n in packs if n.endswith(".pack") and n[:-5] + ".idx" not in packs]
    if odd:
        raise HistoryLeak(f"{repo}: unexpected entries in .git/objects: {odd[:10]}")
    reachable = {line.split(" ", 1)[0] for line in _git(repo, "rev-list", "--objects", commit).splitlines()}
    stored = _git(repo, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split()
    extra = [sha for sha in stored if sha not in reachable]
    if extra:
        raise HistoryLeak(f"{repo}: {len(extra)} object(s) not reachable from {commit}, e.g. {extra[:3]}")
    refs = _git(repo, "for-each-ref", "--format=%(objectname) %(refname)").splitlines()
    packed = (git_dir / "packed-refs").read_text() if (git_dir / "packed-refs").is_file() else ""
    named = [line.split(" ", 1)[0] for line in refs] + _SHA.findall(packed)
    # index entries, but not submodule links (mode 160000: a commit of another repository, never stored here)
    named += [line.split()[1] for line in _git(repo, "ls-files", "-s").splitlines()
              if line.strip() and not line.startswith("160000")]
    outside = sorted({sha for sha in named if sha not in reachable})
    if outside:
        raise HistoryLeak(f"{repo}: refs, packed-refs or the index name {len(outside)} object(s) beyond "
                          f"{commit}, e.g. {outside[:3]}")
    head = _git(repo, "rev-parse", "HEAD").strip()
    if head != commit:
        raise HistoryLeak(f"{repo}: HEAD is {head}, not the base commit {commit}")
    remotes = subprocess.run(["git", "-C", str(repo), "config", "--local", "--get-regexp", r"^remote\."],
                             capture_output=True, text=True, env=_git_env()).stdout
    if remotes.strip():
        raise HistoryLeak(f"{repo}: a remote is configured ({remotes.split()[0]}): it names the source")
