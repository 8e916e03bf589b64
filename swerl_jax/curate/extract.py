"""One merged PR + its clone -> a PR record (or the funnel reason it was dropped), and the RL-seed test.

``extract_pr`` resolves the PR's base (merge base of its base and head) and head, reads every modified
file at both, applies the filters and builds the record of the DESIGN.md schema. Its ``meta`` (PR number,
linked issues, conversation, content hash) travels beside the record for dedup, relevant files and the
RL-seed selection, and is written as its own output.
"""

from __future__ import annotations

import hashlib
import json

from swerl_jax.curate import filters
from swerl_jax.curate.config import CurateConfig
from swerl_jax.curate.git_source import GitError, GitRepo
from swerl_jax.curate.linking import is_bug_report, linked_issues
from swerl_jax.data.records import RecordError, validate_record

SOURCE_ISSUE = "github-issue"
SOURCE_PR = "github-pr"
SOURCE_COMMITS = "github-commits"


def is_binary(data: bytes) -> bool:
    """git's own heuristic: a NUL byte in the first 8000 bytes."""
    return b"\0" in data[:8000]


def resolve_base_head(repo: GitRepo, pr: dict) -> tuple[str, str]:
    """(base, head) of a merged PR: merge base of its base and head commits.

    Events give base/head shas (used when both are in the clone); otherwise the merge commit decides:
    two parents -> merge base of the parents and the second parent; one parent (squash/rebase) -> the parent.
    """
    base_sha, head_sha, merge = pr.get("base_sha"), pr.get("head_sha"), pr.get("merge_commit")
    if base_sha and head_sha and repo.has_commit(base_sha) and repo.has_commit(head_sha):
        return repo.merge_base(base_sha, head_sha), head_sha
    parents = pr.get("parents")  # known for PRs read from this clone's history: no existence check needed
    if not parents:
        if not merge or not repo.has_commit(merge):
            raise GitError("commit_not_in_clone", f"PR #{pr['number']}: merge commit {merge or '(none)'} not in clone")
        parents = repo.parents(merge)
    if len(parents) >= 2:
        return repo.merge_base(parents[0], parents[1]), parents[1]
    if len(parents) == 1:
        return parents[0], merge
    raise GitError("root_commit", f"PR #{pr['number']}: merge commit {merge} has no parent")


def content_hash(code_context: dict[str, str], oracle_new_content: dict[str, str]) -> str:
    """sha256 of the change (before and after contents of every modified path): the dedup key."""
    blob = json.dumps([sorted(code_context.items()), sorted(oracle_new_content.items())], ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def _decode(data: bytes, path: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise GitError("non_utf8", f"{path} is not UTF-8") from None


def extract_pr(
    repo: GitRepo, repo_name: str, pr: dict, issues: dict[int, dict], config: CurateConfig
) -> tuple[str | None, dict | None, dict | None]:
    """Build one PR's record. Returns ``(drop_reason, None, None)`` or ``(None, record, meta)``.

    Drop reasons are the filter names of ``filters.FILTER_ORDER`` and git failures ("missing_object",
    "commit_not_in_clone", "non_utf8", ...); a GitError never escapes.
    """
    texts = [pr.get("title", ""), pr.get("body", ""), pr.get("user", ""), pr.get("branch", "")]
    if filters.is_bot(texts):  # cheap, before any git work
        return "bot", None, None
    try:
        base, head = resolve_base_head(repo, pr)
        changes, patch_bytes = repo.diff(base, head)
        patch = _decode(patch_bytes, "the PR's diff")
        code_context: dict[str, str] = {}
        new_content: dict[str, str] = {}
        binary_paths: list[str] = []
        paths: list[str] = []
        max_bytes = 0
        limit = config.max_file_bytes
        for ch in changes:
            old = repo.read_blob(ch.old_blob, limit) if ch.old_blob else b""
            new = repo.read_blob(ch.new_blob, limit) if ch.new_blob else b""
            if old is None or new is None:  # a file over the limit: never loaded, the PR is too large
                return "too_large", None, None
            max_bytes = max(max_bytes, len(old), len(new))
            names = [p for p in (ch.old_path, ch.new_path) if p]
            paths.extend(p for p in names if p not in paths)
            if is_binary(old) or is_binary(new):
                binary_paths.extend(names)
                continue
            if ch.old_path:
                code_context[ch.old_path] = _decode(old, ch.old_path)
            if ch.new_path:
                new_content[ch.new_path] = _decode(new, ch.new_path)
            if ch.old_path and ch.status in "DR":  # the old path is gone after the change
                new_content[ch.old_path] = ""
        if pr.get("kind") == "git-squash":  # one commit, whose message is the PR's title and body
            messages = []
        else:
            messages = repo.git("log", "--format=%B%x00", f"{base}..{head}").decode("utf-8", "replace").split("\0")
    except GitError as e:
        return e.reason, None, None
    size = sum(map(len, code_context.values())) + sum(map(len, new_content.values()))
    reason = filters.drop_reason(
        texts=texts, paths=paths, binary_paths=binary_paths, patch=patch, context_bytes=size,
        max_file_bytes_seen=max_bytes, config=config,
    )
    if reason is not None:
        return reason, None, None
    if not new_content:  # only binary/generated files changed in a kept PR cannot happen; text must change
        return "empty", None, None

    links = linked_issues([pr.get("title", ""), pr.get("body", ""), *messages], repo_name)
    known = [issues[n] for n in links if n in issues]
    if known:
        issue = known[0]
        problem = f"{issue['title']}\n{issue['body']}".strip() + "\n"
        source = SOURCE_ISSUE
    else:
        problem = f"{pr.get('title', '')}\n{pr.get('body', '')}".strip() + "\n"
        source = SOURCE_PR
        if not problem.strip():  # a merge commit without the PR title: the PR's commit messages, oldest first
            problem = "\n\n".join(m.strip() for m in reversed(messages) if m.strip()) + "\n"
            source = SOURCE_COMMITS
    if not problem.strip():  # no PR text and no commit message: nothing states the task
        return "no_problem_statement", None, None
    owner, name = repo_name.split("/", 1)
    instance_id = f"{owner}__{name}-{pr['number']}"
    record = {
        "instance_id": instance_id, "repo": repo_name, "base_commit": base, "problem_statement": problem,
        "code_context": code_context, "oracle_new_content": new_content, "oracle_patch": patch,
        "created_at": pr.get("created_at", ""), "source": source,
    }
    try:  # e.g. only a file mode changed (oracle == context), or a path the loaders refuse (backslash)
        validate_record(record, where=instance_id)
    except RecordError:
        return "invalid_record", None, None
    meta = {
        "instance_id": instance_id, "pr_number": pr["number"], "kind": pr.get("kind", ""), "title": pr.get("title", ""),
        "user": pr.get("user", ""), "head_commit": head, "merge_commit": pr.get("merge_commit", ""),
        "linked_issues": links, "issue": known[0] if known else None,
        "issue_is_bug": bool(known) and is_bug_report(known[0]["title"], known[0]["body"], known[0]["labels"]),
        "programming_only": all(filters.is_programming_file(p) for p in paths if p not in binary_paths),
        "conversation": pr.get("conversation", []), "content_hash": content_hash(code_context, new_content),
        "modified_paths": paths,
    }
    return None, record, meta


def rl_seed_reason(meta: dict) -> str | None:
    """Why a kept PR is not an RL seed (the paper: linked issue, bug-fix issue, programming files), or None."""
    if not meta["linked_issues"]:
        return "no_linked_issue"
    if meta["issue"] is None:
        return "linked_issue_text_unknown"
    if not meta["issue_is_bug"]:
        return "issue_not_bug_fix"
    if not meta["programming_only"]:
        return "non_programming_files"
    return None
