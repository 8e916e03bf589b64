"""The testbed generator: PR records of small Python bug fixes with hidden unit tests, and their splits.

    records = generate_tasks(1000, seed=0)                       # training tasks
    heldout = generate_tasks(200, seed=0 + HELDOUT_OFFSET)       # never equal to a training task (task_key)
    train_families, eval_families = split_families(["api_misuse", "missing_copy"])

A task is one bug family's `Bug` (swerl_jax/testbed/families.py) dressed as a tiny package: the module with the bug,
1-3 unrelated helper functions around the buggy code (order shuffled), 0-`max_distractors` distractor modules the
fix does not touch, the two-file family's helper module, procedural package/repo/module names and a paraphrased
issue (symptom only, or quoting a failing call). The calls of the `Bug` are run here on both versions of the code
(our own generated code, in this process) to write the hidden tests' expected values and the issue's "got"/"want",
and to check that every FAIL_TO_PASS test fails on the bug and every PASS_TO_PASS test passes on both.

Prompt budget: a tiny policy reads the compact prompt (swerl_jax.data.prompts, style "compact") within ~512
SmolLM2 tokens, so files stay 8-30 lines and code_context under ~1,600 characters. Measured on 200 tasks with the
default `max_distractors=2`: code_context ~200-1,050 characters (median ~470), the compact prompt ~185-485 tokens
(median ~295); `max_distractors` is the knob (each distractor module adds ~100-250 characters; with 0 the prompt
is ~170-350 tokens).

Determinism: a task depends only on (seed, index, family list, max_distractors): its rng is seeded with a string
(hashed with SHA-512 by `random`), never `hash()`, set order or time, so any process writes the same records.
"""

from __future__ import annotations

import builtins
import difflib
import hashlib
import json
import math
import random
import re
import sys
import types
from collections.abc import Sequence

from swerl_jax.data.records import validate_record
from swerl_jax.testbed.families import FAMILIES, NOUNS, SEQS, WORDS, Bug, plural

FAMILY_NAMES: tuple[str, ...] = tuple(FAMILIES)
HELDOUT_OFFSET = 1000  # evaluation uses seed + HELDOUT_OFFSET (the project's eval.heldout_seed convention)
TEST_PATH = "tests/test_issue.py"
TEST_MODULE = "tests.test_issue"
_OWNERS = ("acme", "tinyorg", "pyfoo", "opendata", "labkit", "northwind", "bytefarm", "quietcode", "mossworks")
_SUFFIXES = ("kit", "lib", "hub", "desk", "flow", "ly", "base", "board", "works", "tools", "ops")
_MODULES = ("core", "service", "logic", "handlers", "ops", "views", "reports", "engine", "process", "api", "jobs")
_DISTRACTORS = ("utils", "compat", "constants", "registry", "validators", "formatting", "logs", "config", "cache",
                "events", "schema", "paths")
_TOPICS = ("helpers", "utilities", "logic", "handling", "operations", "support code")
# Unrelated helper functions (source, a call over `m` for its PASS_TO_PASS test): {n}/{ns} a noun, {seq} a
# parameter name, {a}/{b} small ints, {w} a word. Their names always hold their noun, which differs from the bug's.
_HELPERS = (
    ("def count_{ns}({seq}):\n    return len({seq})\n", "m.count_{ns}([{a}, {b}])"),
    ("def first_{n}({seq}, default=None):\n    return {seq}[0] if {seq} else default\n", "m.first_{n}([], {a})"),
    ("def {n}_title(name):\n    return name.strip().title()\n", 'm.{n}_title("  {w} {n} ")'),
    ("def is_{n}_id(value):\n    return isinstance(value, int) and value > 0\n", "m.is_{n}_id({a})"),
    ("def merge_{ns}(a, b):\n    return {{**a, **b}}\n", 'm.merge_{ns}({{"x": {a}}}, {{"y": {b}}})'),
    ('def {n}_ids({seq}):\n    return [x["id"] for x in {seq}]\n', 'm.{n}_ids([{{"id": {a}}}, {{"id": {b}}}])'),
    ("def total_{n}_length({seq}):\n    return sum(len(x) for x in {seq})\n", 'm.total_{n}_length(["{w}", "ab"])'),
    ('def normalize_{n}_text(text):\n    return " ".join(text.split()).lower()\n', 'm.normalize_{n}_text(" {w}  X ")'),
    ("def {n}_pairs({seq}):\n    return list(zip({seq}, {seq}[1:]))\n", "m.{n}_pairs([{a}, {b}, 7])"),
    ("def unique_{ns}({seq}):\n    seen = []\n    for x in {seq}:\n        if x not in seen:\n"
     "            seen.append(x)\n    return seen\n", "m.unique_{ns}([{a}, {b}, {a}])"),
    ("def {n}_percent(part, whole):\n    return 0.0 if not whole else round(100.0 * part / whole, 1)\n",
     "m.{n}_percent({a}, {b})"),
    ('def is_blank_{n}(value):\n    return value is None or value.strip() == ""\n', 'm.is_blank_{n}("  ")'),
    ('def {n}_key(name):\n    return name.strip().lower().replace(" ", "_")\n', 'm.{n}_key("{w} Two")'),
    ("def chunk_{ns}({seq}, size):\n    return [{seq}[i:i + size] for i in range(0, len({seq}), size)]\n",
     "m.chunk_{ns}([{a}, {b}, 1, 2, 3], 2)"),
    ("def largest_{n}({seq}, default=0):\n    return max({seq}, default=default)\n", "m.largest_{n}([{a}, {b}])"),
    ('def {n}_count_text(count):\n    return f"{{count}} {ns}" if count != 1 else "1 {n}"\n', "m.{n}_count_text({a})"),
    ("def reversed_{ns}({seq}):\n    return list(reversed({seq}))\n", "m.reversed_{ns}([{a}, {b}])"),
)
_TITLES = ("{title}", "{title}", "Bug in `{fn}`", "`{fn}` returns the wrong result", "Unexpected behaviour of {fn}()",
           "{fn}: {got_short}", "`{shown}` {got_short}")
_BODIES = ("Calling `{shown}` {got}; I expected {want}.",
           "Steps to reproduce:\n\n    >>> {shown}\n\nActual: it {got}.\nExpected: {want}.",
           "{detail}For example `{shown}` {got} instead of {want}.",
           "{detail}`{fn}` {symptom}; its docstring says otherwise.",
           "`{fn}` misbehaves: `{shown}` {got}, but the expected result is {want}.",
           "I think `{fn}` has a bug. {detail}`{shown}` should give {want}.")


def task_key(record: dict) -> str:
    """SHA-1 of the canonical JSON of a record's code_context and oracle_new_content: equal tasks, equal keys."""
    blob = json.dumps([record["code_context"], record["oracle_new_content"]], sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(blob.encode("utf-8")).hexdigest()


def _check_families(names: Sequence[str]) -> None:
    for name in names:
        if name not in FAMILIES:
            close = difflib.get_close_matches(name, FAMILY_NAMES, n=3)
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise ValueError(f"unknown testbed family {name!r}{hint} (families: {', '.join(FAMILY_NAMES)})")


def parse_families(text: str, key: str = "families") -> tuple[str, ...] | None:
    """Comma-separated family names (a config value) as a tuple, None when empty (every family); an unknown name
    raises ValueError naming `key`, with close names."""
    names = tuple(dict.fromkeys(n.strip() for n in str(text).split(",") if n.strip()))
    try:
        _check_families(names)
    except ValueError as e:
        raise ValueError(f"{key}={text!r}: {e}") from None
    return names or None


def split_families(held_out: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(training families, held-out families), both in FAMILY_NAMES order; unknown names raise ValueError."""
    if isinstance(held_out, str):  # a bare string would be split into letters
        held_out = [held_out]
    _check_families(held_out)
    return (tuple(f for f in FAMILY_NAMES if f not in held_out), tuple(f for f in FAMILY_NAMES if f in held_out))


def _literal(value: object) -> bool:
    """Whether repr(value) is a Python literal equal to `value` (what a hidden test compares against)."""
    kind = type(value)
    if kind is float:
        return math.isfinite(value)
    if kind in (int, str, bool, type(None)):
        return True
    if kind in (list, tuple):
        return all(_literal(v) for v in value)
    return kind is dict and all(_literal(k) and _literal(v) for k, v in value.items())


class _Versions:
    """Both versions of a task's module and its test calls in one compiled unit, run in this process (our own
    generated code): the unchanged code (header, unchanged blocks, helpers) at top level, the changed blocks inside
    two factory functions `__bug__` / `__fix__` that return them, the calls as lambdas over `m` (one compile, not
    four: compiling is ~half of the generation time)."""

    def __init__(self, bug: Bug, helper_sources: list[str], calls: Sequence[str], where: str):
        self.support = {}
        for stem, source in bug.support:
            self.support[stem] = {}
            exec(compile(source, stem, "exec"), self.support[stem])
        header = re.sub(r"^from \..*$", "", bug.header, flags=re.M)  # relative imports: bound from `support`
        parts = [header, *(b for b, f in bug.blocks if b == f), *helper_sources]
        for name, side in (("__bug__", 0), ("__fix__", 1)):
            body = "\n".join(pair[side] for pair in bug.blocks if pair[0] != pair[1])
            parts.append(f"def {name}():\n" + re.sub(r"^", "    ", body, flags=re.M) + "\n    return locals()\n")
        parts.append(f"__calls__ = ({''.join(f'lambda m: {c}, ' for c in calls)})\n")
        self.code = compile("\n\n".join(parts), where, "exec")

    def run(self, version: str, k: int) -> tuple[str, object]:
        """("ok", value) or ("raise", exception type) of call `k` over a fresh copy of the "bug" or "fix" module
        (mutable defaults start empty, as in the test's own process)."""
        ns: dict = {"__name__": "testbed_module"}
        for stem, names in self.support.items():
            ns[stem] = types.SimpleNamespace(**names)
            ns.update({k: v for k, v in names.items() if not k.startswith("__")})
        exec(self.code, ns)
        ns.update(ns[f"__{version}__"]())
        try:
            return "ok", ns["__calls__"][k](types.SimpleNamespace(**ns))
        except Exception as e:  # the buggy side may raise anything; _fails compares like assertEqual does
            return "raise", type(e)


class _Degenerate(RuntimeError):
    """A drawn task whose FAIL_TO_PASS call does not fail on the bug (or whose PASS_TO_PASS call differs): a corner
    of a family's random values. Drawing again (a new rng) keeps generation total; a family that always does this
    is a bug that the tests catch."""


_ATTEMPTS = 5


def _fails(bug: tuple[str, object], fix: tuple[str, object]) -> bool:
    """Whether the FAIL_TO_PASS test written from `fix` fails on `bug` (assertEqual / assertRaises semantics)."""
    if fix[0] == "raise":
        return not (bug[0] == "raise" and issubclass(bug[1], fix[1]))
    return bug[0] == "raise" or bug[1] != fix[1]


def _assertion(expr: str, result: tuple[str, object]) -> str:
    if result[0] == "raise":
        name = result[1].__name__
        if getattr(builtins, name, None) is not result[1]:
            raise RuntimeError(f"testbed: expected exception {name} is not a builtin")
        return f"        with self.assertRaises({name}):\n            {expr}\n"
    if not _literal(result[1]):
        raise RuntimeError(f"testbed: {result[1]!r} is not a literal a test can compare with")
    return f"        self.assertEqual({expr}, {result[1]!r})\n"


def _phrases(result: tuple[str, object]) -> tuple[str, str, str]:
    """(got, got_short, want) phrases of a result for the issue text."""
    if result[0] == "raise":
        return f"raises `{result[1].__name__}`", f"raises {result[1].__name__}", f"a `{result[1].__name__}`"
    text = repr(result[1])
    return f"returns `{text}`", f"returns {text}", f"`{text}`"


def _module(doc: str, header: str, blocks: list[str]) -> str:
    """A module: docstring, header, the blocks (already shuffled) two blank lines apart."""
    top = f'"""{doc}"""\n\n' + (f"{header}\n\n" if header else "\n")
    return top + "\n\n".join(blocks)


def _helpers(rng: random.Random, noun: str, k: int) -> list[tuple[str, str]]:
    """k distinct helper functions on `noun` as (source, call)."""
    names = {"n": noun, "ns": plural(noun), "seq": rng.choice((*SEQS, plural(noun))), "a": rng.randint(2, 60),
             "b": rng.randint(2, 60), "w": rng.choice(WORDS)}
    return [(src.format(**names), call.format(**names)) for src, call in rng.sample(_HELPERS, k)]


def _diff(path: str, before: str, after: str) -> str:
    lines = difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{path}", f"b/{path}")
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


def _task(family: str, rng: random.Random, seed: int, index: int, max_distractors: int, package: str | None
          ) -> dict:
    """One record (see the module docstring)."""
    bug: Bug = FAMILIES[family](rng)
    # Names: the helpers' noun differs from every word in the bug's code, so no name is defined twice.
    code_text = " ".join(b for pair in bug.blocks for b in pair)
    noun = rng.choice([x for x in NOUNS if x not in code_text])
    pkg = rng.choice(NOUNS) + rng.choice(_SUFFIXES)  # never a stdlib module name, which the package would shadow
    pkg = package or pkg  # drawn either way: a fixed package changes no other draw
    taken = {stem for stem, _ in bug.support}
    module = rng.choice([m for m in _MODULES if m not in taken])
    helpers = _helpers(rng, noun, rng.randint(1, 3))
    order = list(bug.blocks) + [(src, src) for src, _ in helpers]
    rng.shuffle(order)
    doc = f"{rng.choice(NOUNS).capitalize()} {rng.choice(_TOPICS)}."
    before = _module(doc, bug.header, [b for b, _ in order])
    after = _module(doc, bug.header, [f for _, f in order])
    path = f"{pkg}/{module}.py"
    files = {path: before}
    for stem, source in bug.support:
        files[f"{pkg}/{stem}.py"] = source
    stems = [d for d in _DISTRACTORS if d not in taken]
    for stem in rng.sample(stems, rng.randint(0, min(max_distractors, len(stems)))):
        other = rng.choice([x for x in NOUNS if x != noun])
        blocks = [src for src, _ in _helpers(rng, other, rng.randint(1, 2))]
        files[f"{pkg}/{stem}.py"] = _module(f"{plural(other).capitalize()} {rng.choice(_TOPICS)}.", "", blocks)
    paths = list(files)
    rng.shuffle(paths)
    code_context = {p: files[p] for p in paths}

    # Run every call on both versions: the tests' expected values, the issue's phrases, and the guarantee that each
    # FAIL_TO_PASS test fails on the bug and each PASS_TO_PASS test passes on both.
    where = f"testbed {family} task {seed}:{index}"
    # Helpers are unchanged code (one run suffices); `keep` calls touch the fixed function: run on both.
    checks = [(c, False) for _, c in helpers] + [(c, True) for c in bug.keep]
    versions = _Versions(bug, [src for src, _ in helpers], [*bug.calls, *(c for c, _ in checks)], where)
    tests, f2p, p2p, shows = [], [], [], []
    for k, call in enumerate(bug.calls):
        got, want = versions.run("bug", k), versions.run("fix", k)
        if not _fails(got, want):
            raise _Degenerate(f"{where}: {call} gives {want} before and after the fix")
        tests.append((f"test_issue_{k}", _assertion(call, want)))
        f2p.append(f"{TEST_MODULE}.TestIssue.test_issue_{k}")
        shows.append((got, want))
    for k, (call, both) in enumerate(checks):
        j = len(bug.calls) + k
        want = versions.run("fix", j)
        if want[0] == "raise" or (both and _fails(versions.run("bug", j), want)):
            raise _Degenerate(f"{where}: {call} raises or differs before and after the fix")
        tests.append((f"test_unchanged_{k}", _assertion(call, want)))
        p2p.append(f"{TEST_MODULE}.TestIssue.test_unchanged_{k}")
    test_text = (f"import unittest\n\nfrom {pkg} import {module} as m\n\n\nclass TestIssue(unittest.TestCase):\n"
                 + "\n".join(f"    def {name}(self):\n{body}" for name, body in tests)
                 + '\n\nif __name__ == "__main__":\n    unittest.main()\n')

    shown = bug.shown or re.sub(r"\bm\.", "", bug.calls[0])
    fn = re.search(r"\bm\.(\w+)", bug.calls[0]).group(1)
    got, got_short, _ = _phrases(shows[0][0])
    symptom = bug.title[len(fn) + 1:] if bug.title.startswith(f"{fn} ") else "misbehaves"
    fields = {"title": bug.title, "fn": fn, "symptom": symptom, "shown": shown, "got": got, "got_short": got_short,
              "want": _phrases(shows[0][1])[2], "detail": f"{bug.detail} " if bug.detail else ""}
    title, body = rng.choice(_TITLES).format(**fields), rng.choice(_BODIES).format(**fields)
    if rng.random() < 0.3:
        body += f"\n\nSeen with {pkg} {rng.randint(0, 3)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}."
    created = (f"20{rng.randint(19, 24)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T"
               f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z")
    record = {
        "instance_id": f"testbed__{family}-{seed}-{index}",
        "repo": f"{rng.choice(_OWNERS)}/{pkg}",
        "base_commit": hashlib.sha1(json.dumps(code_context, sort_keys=True).encode()).hexdigest(),
        "problem_statement": f"{title}\n{body}\n",
        "code_context": code_context,
        "oracle_new_content": {path: after},
        "oracle_patch": _diff(path, before, after),
        "created_at": created,
        "source": f"testbed:{family}",
        "family": family,
        "relevant_files": [p for p in code_context if p != path],
        "hidden_tests": {TEST_PATH: test_text},
        "fail_to_pass": f2p,
        "pass_to_pass": p2p,
    }
    return validate_record(record, where=f"testbed[{seed}:{index}]")


def generate_tasks(n: int, seed: int, families: Sequence[str] | None = None, *,
                   max_distractors: int = 2, package: str | None = None) -> list[dict]:
    """`n` testbed records, deterministic in (n, seed, families, max_distractors) and prefix-stable
    (`generate_tasks(10, s)[:5] == generate_tasks(5, s)`).

    Families are drawn round-robin over a fresh shuffle of `families` (default: all) every len(families) tasks, so
    every family is equally represented. Evaluate on seed + HELDOUT_OFFSET: by the tasks' variety (names, values,
    helpers, layout; tens of bits per family) none equals a training task (`task_key`; the tests check 2,000 of
    each). `max_distractors` bounds the untouched modules added per task (0 to it, at most 12): the prompt-length
    knob. `package` (a Python identifier) names every task's package instead of a generated name: the same tasks
    otherwise (no other draw changes), with paths a small policy can memorise instead of copying a name it has
    never seen (ABLATIONS.md, "The CPU testbed").

    Raises:
      ValueError: n or max_distractors negative, no families, or an unknown family (naming it, with close names).
    """
    if n < 0 or max_distractors < 0:
        raise ValueError(f"n and max_distractors must be >= 0, got n={n}, max_distractors={max_distractors}")
    if package is not None and (not package.isidentifier() or package in sys.stdlib_module_names
                                or package == "tests"):
        raise ValueError(f"package={package!r}: must be a Python identifier that is neither a standard-library "
                         "module (it would shadow it) nor 'tests' (the hidden tests' package)")
    if isinstance(families, str):
        families = [families]
    names = FAMILY_NAMES if families is None else tuple(dict.fromkeys(families))
    if not names:
        raise ValueError("families is empty: pass None for all families")
    _check_families(names)
    records, order = [], []
    for i in range(n):
        if i % len(names) == 0:
            order = list(names)
            random.Random(f"testbed-order:{seed}:{i // len(names)}").shuffle(order)
        family = order[i % len(names)]
        for attempt in range(_ATTEMPTS):
            try:
                rng = random.Random(f"testbed:{seed}:{i}:{family}:{attempt}")
                records.append(_task(family, rng, seed, i, max_distractors, package))
                break
            except _Degenerate:
                if attempt == _ATTEMPTS - 1:
                    raise
    return records
