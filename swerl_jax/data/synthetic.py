"""Synthetic PR records: tiny Python repos with realistic single-file bug fixes.

Used by the tests and the CPU demo, so the project runs without ../shared/data. Files stay short (10-25 lines)
so a full SWE-RL prompt stays far below 1024 SmolLM2 tokens and a tiny model can learn the fix.
Their oracle answers (the SFT targets) come from `swerl_jax.data.targets.oracle_solution`, for any record.
"""

from __future__ import annotations

import difflib
import hashlib
import random
from collections.abc import Sequence

from swerl_jax.data.records import validate_record
from swerl_jax.testbed.tasks import generate_tasks, parse_families

# Each bug: (module template, buggy snippet, fixed snippet, issue title, issue body). Names in {braces} are
# filled from the word lists below so records differ in identifiers, not only in the bug kind.
_BUGS = [
    ("off-by-one",
     '"""Helpers for {noun} lists."""\n\n\ndef last_{noun}s({items}, n):\n    """Return the last n {noun}s."""\n'
     '    if n <= 0:\n        return []\n    return {items}[-n:]\n\n\ndef {noun}_window({items}, start, size):\n'
     '    """Return `size` {noun}s starting at `start` (inclusive)."""\n    end = start + size\n'
     '    return {items}[start:{BUG}]\n\n\ndef count_{noun}s({items}):\n    return len({items})\n',
     "end - 1", "end",
     "{noun}_window drops the last {noun}",
     "Calling `{noun}_window(xs, 0, 3)` returns only 2 {noun}s instead of 3. The window should include "
     "`size` elements."),
    ("wrong-operator",
     '"""{Noun} accounting."""\n\nLIMIT = {limit}\n\n\ndef total_{noun}s(values):\n    total = 0\n'
     '    for v in values:\n        total += v\n    return total\n\n\ndef over_limit(values):\n'
     '    """True when the total exceeds LIMIT."""\n    return total_{noun}s(values) {BUG} LIMIT\n',
     "<", ">",
     "over_limit returns the opposite result",
     "`over_limit([{limit}, 1])` returns False although the total {big} is above LIMIT={limit}."),
    ("missing-none-check",
     '"""Lookup of {noun} settings."""\n\nDEFAULTS = {{"{key}": {limit}}}\n\n\ndef get_{noun}(config, name):\n'
     '    """Value of `name` in config, falling back to DEFAULTS."""\n{BUG}'
     '    return config.get(name, DEFAULTS.get(name))\n\n\ndef names(config):\n    return sorted(config)\n',
     "", "    if config is None:\n        config = {{}}\n",
     "get_{noun} crashes when config is None",
     "`get_{noun}(None, \"{key}\")` raises AttributeError: 'NoneType' object has no attribute 'get'. "
     "It should fall back to DEFAULTS."),
    ("wrong-return",
     '"""Search in {noun} sequences."""\n\n\ndef find_{noun}({items}, target):\n'
     '    """Index of target in {items}, or -1 when absent."""\n    for i, x in enumerate({items}):\n'
     '        if x == target:\n            return i\n    return {BUG}\n\n\ndef has_{noun}({items}, target):\n'
     '    return find_{noun}({items}, target) != -1\n',
     "0", "-1",
     "find_{noun} returns 0 for a missing {noun}",
     "`find_{noun}([5, 6], 7)` returns 0, so `has_{noun}` claims every missing {noun} is present. "
     "The docstring says -1."),
    ("inverted-condition",
     '"""Filtering {noun}s."""\n\n\ndef active_{noun}s({items}):\n'
     '    """Only the {noun}s whose `active` flag is set."""\n'
     '    result = []\n    for item in {items}:\n        if {BUG}item.get("active"):\n'
     '            result.append(item)\n    return result\n',
     "not ", "",
     "active_{noun}s returns the inactive ones",
     "`active_{noun}s([{{\"active\": True}}])` returns an empty list; it should keep active {noun}s."),
    ("wrong-default",
     '"""Retry policy for {noun} requests."""\n\nimport time\n\n\ndef fetch_{noun}(get, retries={BUG}):\n'
     '    """Call get() up to `retries` + 1 times, sleeping between attempts."""\n'
     '    for attempt in range(retries + 1):\n'
     '        try:\n            return get()\n        except IOError:\n            if attempt == retries:\n'
     '                raise\n            time.sleep(0.01 * 2 ** attempt)\n',
     "-1", "3",
     "fetch_{noun} never calls get()",
     "With the default arguments `fetch_{noun}(get)` returns None without calling `get` at all: "
     "the default number of retries is negative. It should retry 3 times."),
    ("string-format",
     '"""Formatting of {noun} reports."""\n\n\ndef {noun}_line(name, count):\n'
     '    """One report line: `name: count`."""\n'
     '    return "{{}}: {{}}".format({BUG})\n\n\ndef report({items}):\n'
     '    return "\\n".join({noun}_line(k, v) for k, v in sorted({items}.items()))\n',
     "count, name", "name, count",
     "{noun} report prints count before name",
     "`{noun}_line(\"a\", 2)` returns `2: a` instead of `a: 2`."),
]
_NOUNS = ["user", "order", "item", "task", "page", "node", "file", "event", "token", "job", "row", "packet"]
_REPOS = ["acme/widgets", "tinyorg/ledger", "pyfoo/core", "example/queue", "demo/shop", "lab/tools"]


def _fill(template: str, names: dict[str, str]) -> str:
    return template.format(**names)


def synthetic_records(n: int, seed: int = 0, repos: Sequence[str] | None = None) -> list[dict]:
    """`n` valid single-file bug-fix PR records, deterministic in `seed`.

    `repos` ("owner/name", default: six made-up ones) fixes the repositories drawn from; a file's folder is its
    repository's name, which nothing in the issue text names, so with several repositories a policy must copy
    the path from the prompt's file header (a tiny policy learns that slowly; the CPU demo uses one).
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    repos = list(repos) if repos else _REPOS
    if any(r.count("/") != 1 or not all(r.split("/")) for r in repos):
        raise ValueError(f"synthetic repos must look like 'owner/name', got {repos}")
    rng = random.Random(seed)
    records = []
    for i in range(n):
        kind, template, bug, fix, title, body = _BUGS[rng.randrange(len(_BUGS))]
        noun = rng.choice(_NOUNS)
        limit = rng.randrange(5, 100)
        names = {"noun": noun, "Noun": noun.capitalize(), "items": f"{noun}s", "limit": str(limit),
                 "big": str(limit + 1), "key": f"max_{noun}s"}
        before = _fill(template.replace("{BUG}", "\x00"), names).replace("\x00", _fill(bug, names))
        after = _fill(template.replace("{BUG}", "\x00"), names).replace("\x00", _fill(fix, names))
        repo = rng.choice(repos)
        path = f"{repo.split('/')[1]}/{noun}s.py"
        commit = hashlib.sha1(f"{seed}-{i}-{kind}".encode()).hexdigest()
        diff = "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{path}", f"b/{path}"))
        record = {
            "instance_id": f"{repo.replace('/', '__')}-{seed}-{i}",
            "repo": repo,
            "base_commit": commit,
            "problem_statement": f"{_fill(title, names)}\n{_fill(body, names)}\n",
            "code_context": {path: before},
            "oracle_new_content": {path: after},
            "oracle_patch": f"diff --git a/{path} b/{path}\n{diff}",
            "created_at": f"2024-0{1 + i % 9}-1{i % 10}T12:00:00Z",
            "source": f"synthetic:{kind}",
        }
        records.append(validate_record(record, where=f"synthetic[{i}]"))
    return records


def config_records(data, n: int, seed: int, families: str = "") -> list[dict]:
    """`n` synthetic records of seed `seed` from the generator `data.generator` names (a `data.*` config section):
    "synthetic" (`synthetic_records` over data.synthetic_repos) or "testbed" (`swerl_jax.testbed.tasks`, the
    families `families` names, else data.testbed_families; empty: every family). The training records and the
    held-out ones (`rl.heldout.heldout_records`, another seed) both come from here."""
    if str(data.generator) == "testbed":
        names = parse_families(families, "eval.families") if str(families).strip() else parse_families(
            str(data.testbed_families), "data.testbed_families")
        return generate_tasks(n, seed, names, max_distractors=int(data.testbed_max_distractors),
                              package=str(data.testbed_package) or None)
    repos = [r.strip() for r in str(data.synthetic_repos).split(",") if r.strip()]
    return synthetic_records(n, seed=seed, repos=repos or None)
