"""SWE-bench-format instances -> PR records, reading file contents from local git clones.

An instance (SWE-bench / SWE-bench Verified / Loc-Bench format) has ``instance_id, repo, base_commit, patch,
problem_statement`` (+ ``created_at``, ``test_patch``). Its clone is ``CLONES/owner__name`` or
``CLONES/owner__name.git`` (a normal or bare repository: the folder names curation accepts). The files the gold
patch touches are read at ``base_commit`` (``git cat-file``); the gold patch is applied with ``git apply --cached``
against a throw-away index holding ``base_commit``'s tree (no work tree, no checkout, the clone is left untouched)
and the new contents are read from that index. Instances whose clone or commit is missing, whose patch does not
apply, or whose files are not UTF-8 text are reported with the reason, never dropped silently.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Iterator

import unidiff

from swerl_jax.data.records import RecordError, validate_record


class ImportFailure(Exception):
    """An instance that could not become a record; `reason` is a short key for counting."""

    def __init__(self, instance_id: str, reason: str, detail: str = ""):
        self.instance_id, self.reason, self.detail = instance_id, reason, detail
        super().__init__(f"instance {instance_id!r}: {reason}" + (f": {detail}" if detail else ""))


def load_instances(source: str | os.PathLike) -> list[dict]:
    """SWE-bench instances, the one reader every user shares (the record importer, the agent's tasks, the
    harness, `eval run`, test-time scaling): a .json list, a JSONL file (any other suffix: a JSON list when the
    text starts with '[', else one object per line), a .parquet file, or a Hugging Face dataset name
    (``name[:split]``, default split ``test``) when the `datasets` package and the network are available.
    Errors name the file and, for JSONL, the line."""
    path = pathlib.Path(source)
    if path.suffix == ".parquet" and path.is_file():
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ValueError(f"{source}: reading parquet needs pyarrow (pip install pyarrow, or .[curate])") from None
        return pq.read_table(path).to_pylist()
    if path.is_file():
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json" or text.lstrip().startswith("["):
            data = json.loads(text)
            if not isinstance(data, list):
                raise ValueError(f"{source}: expected a JSON list of instances, got {type(data).__name__}")
            return data
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    raise ValueError(f"{source}:{number}: not a JSON object: {err}") from err
                if not isinstance(row, dict):
                    raise ValueError(f"{source}:{number}: not a JSON object ({type(row).__name__})")
                rows.append(row)
        return rows
    if path.suffix in (".json", ".jsonl", ".parquet") or path.exists():
        raise FileNotFoundError(f"instances file {source} does not exist")
    try:
        import datasets
    except ImportError:
        raise ValueError(f"{source!r} is not a .json/.jsonl/.parquet file and the `datasets` package is not "
                         "installed to load it as a Hugging Face dataset name") from None
    name, _, split = str(source).partition(":")
    return [dict(row) for row in datasets.load_dataset(name, split=split or "test")]


def _git(clone: pathlib.Path, *args: str, env: dict | None = None, stdin: bytes | None = None) -> bytes:
    proc = subprocess.run(["git", f"--git-dir={_git_dir(clone)}", *args], input=stdin, capture_output=True,
                          env={**os.environ, **(env or {})}, check=False)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, args, proc.stdout, proc.stderr)
    return proc.stdout


def _git_dir(clone: pathlib.Path) -> pathlib.Path:
    # An explicit --git-dir stops git from walking up into a parent repository.
    return clone / ".git" if (clone / ".git").exists() else clone


def find_clone(clones: str | os.PathLike, repo: str) -> pathlib.Path | None:
    """CLONES/owner__name, else CLONES/owner__name.git (the names curation's --clones accepts); None if neither."""
    base = pathlib.Path(clones) / repo.replace("/", "__")
    for clone in (base, base.with_name(base.name + ".git")):
        if clone.is_dir():
            return clone
    return None


def _text(iid: str, path: str, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ImportFailure(iid, "file not UTF-8", f"{path} (byte {e.start})") from None


def touched_files(iid: str, patch: str) -> list[tuple[str | None, str | None]]:
    """(path before, path after) of every text file the patch touches (None for an added/removed side)."""
    try:
        patch_set = unidiff.PatchSet(patch)
    except unidiff.UnidiffParseError as e:
        raise ImportFailure(iid, "patch does not parse", str(e)) from None
    files = []
    for f in patch_set:
        if f.is_binary_file:
            raise ImportFailure(iid, "binary file in patch", f.path)
        src = None if f.is_added_file else f.source_file.removeprefix("a/")
        dst = None if f.is_removed_file else f.target_file.removeprefix("b/")
        files.append((src, dst))
    if not files:
        raise ImportFailure(iid, "patch does not parse", "no file in the patch")
    return files


def import_instance(instance: dict, clones: str | os.PathLike, source: str = "swe-bench") -> dict:
    """One SWE-bench instance as a validated PR record (raises ImportFailure with the reason)."""
    iid = str(instance.get("instance_id") or "?")
    for field in ("instance_id", "repo", "base_commit", "patch", "problem_statement"):
        if not isinstance(instance.get(field), str) or not instance[field]:
            raise ImportFailure(iid, "missing field", field)
    repo, base, patch = instance["repo"], instance["base_commit"], instance["patch"]
    clone = find_clone(clones, repo)
    if clone is None:
        tried = pathlib.Path(clones) / repo.replace("/", "__")
        bundle = tried.with_name(tried.name + ".bundle")
        if bundle.is_file():  # the harness reads bundles; git here needs a repository: say how to make one
            raise ImportFailure(iid, "clone missing", f"{tried} (or {tried}.git); {bundle} is a bundle: make a "
                                f"clone of it first (git clone --mirror {bundle} {tried}.git)")
        raise ImportFailure(iid, "clone missing", f"{tried} (or {tried}.git)")
    try:
        _git(clone, "cat-file", "-e", f"{base}^{{commit}}")
    except subprocess.CalledProcessError:
        raise ImportFailure(iid, "base commit not in clone", f"{base} in {clone}") from None
    files = touched_files(iid, patch)
    code_context, oracle = {}, {}
    with tempfile.TemporaryDirectory(prefix="swerl_swebench_") as tmp:
        env = {"GIT_INDEX_FILE": str(pathlib.Path(tmp, "index"))}
        _git(clone, "read-tree", base, env=env)
        try:
            # --cached applies to the temporary index only; the clone's own index and files are not touched.
            _git(clone, "apply", "--cached", "--whitespace=nowarn", "-", env=env, stdin=patch.encode("utf-8"))
        except subprocess.CalledProcessError as e:
            raise ImportFailure(iid, "patch does not apply", e.stderr.decode(errors="replace").strip()) from None
        for src, dst in files:
            if src is not None:
                try:
                    code_context[src] = _text(iid, src, _git(clone, "cat-file", "blob", f"{base}:{src}"))
                except subprocess.CalledProcessError:
                    raise ImportFailure(iid, "file missing at base commit", src) from None
                if dst != src:
                    oracle[src] = ""  # removed, or renamed away: the old path ends empty
            if dst is not None:
                entry = _git(clone, "ls-files", "-s", "--", dst, env=env).split()
                oracle[dst] = _text(iid, dst, _git(clone, "cat-file", "blob", entry[1].decode()))
    record = {
        "instance_id": iid, "repo": repo, "base_commit": base, "problem_statement": instance["problem_statement"],
        "code_context": code_context, "oracle_new_content": oracle, "oracle_patch": patch,
        "created_at": str(instance.get("created_at") or ""), "source": source,
    }
    if instance.get("test_patch"):
        record["test_patch"] = instance["test_patch"]
    try:
        return validate_record(record, where=iid)
    except RecordError as e:
        raise ImportFailure(iid, f"invalid record: {e.reason}", str(e)) from None


def import_swebench(instances: Iterable[dict], clones: str | os.PathLike, source: str = "swe-bench",
                    on_error: Callable[[ImportFailure], None] | None = None) -> Iterator[dict]:
    """Records of the instances that import; each failure goes to `on_error` (default: raise it)."""
    for instance in instances:
        try:
            yield import_instance(instance, clones, source)
        except ImportFailure as e:
            if on_error is None:
                raise
            on_error(e)
