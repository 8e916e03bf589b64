"""GH Archive events -> merged PRs with their conversation, and issues (pure functions).

One GH Archive line is one JSON event. ``parse_event`` normalises the event types curation needs
(PullRequestEvent, PullRequestReviewEvent, PullRequestReviewCommentEvent, IssueCommentEvent, IssuesEvent)
into ``(key, item)`` with key ``(repo, "pr"|"issue", number)``; the pipeline groups by key and calls
``aggregate_pr`` / ``aggregate_issue``. Bad lines raise ``EventError`` (counted in the funnel, never fatal).
"""

from __future__ import annotations

import json

PR_EVENT_TYPES = ("PullRequestEvent", "PullRequestReviewEvent", "PullRequestReviewCommentEvent")
HANDLED_TYPES = (*PR_EVENT_TYPES, "IssueCommentEvent", "IssuesEvent")


class EventError(ValueError):
    """An event line that cannot be used; ``reason`` is its funnel label."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def _login(obj: dict | None) -> str:
    return (obj or {}).get("login") or ""


def parse_event(line: str) -> tuple[tuple[str, str, int], dict] | None:
    """One GH Archive JSON line -> ``((repo, kind, number), item)``; None for event types curation ignores.

    Raises EventError("unparsable_event") for invalid JSON and EventError("malformed_event") when a
    handled event lacks its repo, number or payload.
    """
    try:
        ev = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise EventError("unparsable_event", f"{e}: {line[:80]!r}") from None
    if not isinstance(ev, dict):
        raise EventError("unparsable_event", f"not a JSON object: {line[:80]!r}")
    etype = ev.get("type")
    if etype not in HANDLED_TYPES:
        return None
    try:
        repo = ev["repo"]["name"]
        payload = ev["payload"]
        time = ev.get("created_at") or ""
        actor = _login(ev.get("actor"))
        if etype == "PullRequestEvent":
            pr = payload["pull_request"]
            number = int(payload.get("number") or pr["number"])
            item = {
                "type": "pr", "time": time, "action": payload.get("action", ""), "title": pr.get("title") or "",
                "body": pr.get("body") or "", "user": _login(pr.get("user")), "merged": bool(pr.get("merged")),
                "created_at": pr.get("created_at") or time, "merge_commit": pr.get("merge_commit_sha") or "",
                "base_sha": (pr.get("base") or {}).get("sha") or "",
                "head_sha": (pr.get("head") or {}).get("sha") or "",
                "branch": (pr.get("head") or {}).get("ref") or "",
            }
            return (repo, "pr", number), item
        if etype in ("PullRequestReviewEvent", "PullRequestReviewCommentEvent"):
            number = int(payload["pull_request"]["number"])
            body_src = payload.get("review") if etype == "PullRequestReviewEvent" else payload.get("comment")
            body = (body_src or {}).get("body") or ""
            return (repo, "pr", number), {"type": "comment", "time": time, "user": actor, "body": body}
        issue = payload["issue"]
        number = int(issue["number"])
        if etype == "IssueCommentEvent":
            kind = "pr" if "pull_request" in issue else "issue"  # the key marks PRs, whatever its value
            body = (payload.get("comment") or {}).get("body") or ""
            return (repo, kind, number), {"type": "comment", "time": time, "user": actor, "body": body}
        labels = [lab.get("name", "") if isinstance(lab, dict) else str(lab) for lab in issue.get("labels") or []]
        return (repo, "issue", number), {
            "type": "issue", "time": time, "title": issue.get("title") or "", "body": issue.get("body") or "",
            "labels": labels, "user": _login(issue.get("user")),
        }
    except (KeyError, TypeError, ValueError) as e:
        raise EventError("malformed_event", f"{etype} {type(e).__name__}: {e}") from None


def _conversation(items: list[dict]) -> list[dict]:
    comments = [i for i in items if i["type"] == "comment" and i["body"].strip()]
    comments.sort(key=lambda c: c["time"])
    return [{"time": c["time"], "user": c["user"], "body": c["body"]} for c in comments]


def aggregate_pr(repo: str, number: int, items: list[dict]) -> dict | None:
    """All events of one PR -> a merged-PR candidate (title/body from its latest state, conversation by time).

    Returns None when no event shows the PR merged (the funnel counts it as "not_merged").
    """
    states = sorted((i for i in items if i["type"] == "pr"), key=lambda i: i["time"])
    merged = [s for s in states if s["merged"]]
    if not merged:
        return None
    last = merged[-1]
    return {
        "number": number, "title": last["title"], "body": last["body"], "user": last["user"],
        "branch": last["branch"], "created_at": states[0]["created_at"], "merge_commit": last["merge_commit"],
        "parents": [], "base_sha": last["base_sha"], "head_sha": last["head_sha"], "kind": "events",
        "conversation": _conversation(items), "repo": repo,
    }


def aggregate_issue(number: int, items: list[dict]) -> dict:
    """All events of one issue -> ``{number, title, body, labels, conversation}`` (latest title/body win)."""
    states = sorted((i for i in items if i["type"] == "issue"), key=lambda i: i["time"])
    last = states[-1] if states else {"title": "", "body": "", "labels": []}
    return {
        "number": number, "title": last["title"], "body": last["body"], "labels": list(last["labels"]),
        "conversation": _conversation(items),
    }


def parse_issue_line(line: str) -> tuple[str, dict]:
    """One line of an issues file (``{"repo", "number", "title", "body", "labels"?}``) -> (repo, issue)."""
    try:
        obj = json.loads(line)
        repo, number = obj["repo"], int(obj["number"])
        title, body = obj.get("title") or "", obj.get("body") or ""
        labels = [str(x) for x in obj.get("labels") or []]
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise EventError("unparsable_issue", f"{type(e).__name__}: {e}: {line[:80]!r}") from None
    return repo, {"number": number, "title": title, "body": body, "labels": labels, "conversation": []}
