"""GH Archive event parsing and PR/issue aggregation."""

import json

import pytest

from swerl_jax.curate import events as ev


def pr_event(action, merged, time, number=4, title="T"):
    return json.dumps({"type": "PullRequestEvent", "repo": {"name": "o/r"}, "created_at": time,
                       "payload": {"action": action, "number": number, "pull_request": {
                           "title": title, "body": None, "user": {"login": "u"}, "merged": merged,
                           "created_at": "2020-01-01T00:00:00Z", "merge_commit_sha": "m" if merged else None,
                           "base": {"sha": "b"}, "head": {"sha": "h", "ref": "br"}}}})


def test_parse_and_aggregate_pr():
    items = [ev.parse_event(pr_event("opened", False, "2020-01-01T00:00:00Z", title="old")),
             ev.parse_event(pr_event("closed", True, "2020-01-02T00:00:00Z", title="new"))]
    for line, user, t in (('{"body": "second"}', "b", "2020-01-01T12:00:00Z"),
                          ('{"body": "first"}', "a", "2020-01-01T06:00:00Z")):
        items.append(ev.parse_event(json.dumps({
            "type": "PullRequestReviewCommentEvent", "repo": {"name": "o/r"}, "created_at": t,
            "actor": {"login": user}, "payload": {"pull_request": {"number": 4}, "comment": json.loads(line)}})))
    assert {k for k, _ in items} == {("o/r", "pr", 4)}
    pr = ev.aggregate_pr("o/r", 4, [i for _, i in items])
    assert pr["title"] == "new" and pr["body"] == "" and pr["merge_commit"] == "m" and pr["base_sha"] == "b"
    assert [c["body"] for c in pr["conversation"]] == ["first", "second"]
    assert ev.aggregate_pr("o/r", 4, [items[0][1]]) is None  # never merged


def test_issue_comment_on_pr_vs_issue():
    base = {"type": "IssueCommentEvent", "repo": {"name": "o/r"}, "created_at": "t", "actor": {"login": "a"}}
    on_pr = ev.parse_event(json.dumps({**base, "payload": {"issue": {"number": 2, "pull_request": {}},
                                                           "comment": {"body": "x"}}}))
    on_issue = ev.parse_event(json.dumps({**base, "payload": {"issue": {"number": 3}, "comment": {"body": "y"}}}))
    assert on_pr[0] == ("o/r", "pr", 2) and on_issue[0] == ("o/r", "issue", 3)


def test_issue_aggregation_latest_title():
    def issue(t, title):
        return ev.parse_event(json.dumps({"type": "IssuesEvent", "repo": {"name": "o/r"}, "created_at": t,
                                          "payload": {"issue": {"number": 9, "title": title, "body": "b",
                                                                "labels": [{"name": "bug"}]}}}))[1]
    agg = ev.aggregate_issue(9, [issue("2", "edited"), issue("1", "first")])
    assert agg["title"] == "edited" and agg["labels"] == ["bug"]


def test_bad_lines():
    assert ev.parse_event('{"type": "WatchEvent"}') is None
    with pytest.raises(ev.EventError) as e:
        ev.parse_event("{oops")
    assert e.value.reason == "unparsable_event"
    with pytest.raises(ev.EventError) as e:
        ev.parse_event('{"type": "PullRequestEvent", "repo": {"name": "o/r"}, "payload": {}}')
    assert e.value.reason == "malformed_event"
    with pytest.raises(ev.EventError) as e:
        ev.parse_issue_line('{"repo": "o/r"}')
    assert e.value.reason == "unparsable_issue"
    assert ev.parse_issue_line('{"repo": "o/r", "number": "5", "title": "t"}') == (
        "o/r", {"number": 5, "title": "t", "body": "", "labels": [], "conversation": []})
