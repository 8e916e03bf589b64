"""Red team (issue 30, item 7): the action parser is linear in its input and bounded, with the old semantics.

The old parser was two lazy regexes; `"<function=a>" * 32000` took 80 s. The reference below is that regex
parser, kept as the oracle: on random texts the new scanner must give the same action or the same error.
"""

from __future__ import annotations

import contextlib
import random
import re
import signal

import pytest

from swerl_jax.agent import actions
from swerl_jax.agent.actions import MAX_ACTION_CHARS, TOOLS, Action, ActionError, parse_action

# --- the old implementation, the oracle --------------------------------------------------------------------------

_OLD_BLOCK = re.compile(r"<function=([^>\s]*)>(.*?)</function>", re.DOTALL)
_OLD_PARAM = re.compile(r"<parameter=([^>\s]*)>(.*?)</parameter>", re.DOTALL)


def _old_parse(text: str) -> Action:
    """parse_action before the fix (regexes), the reference for texts under the length bound."""
    match = _OLD_BLOCK.search(text)
    if match is None:
        raise ActionError("No function call found. Call exactly one tool per turn: "
                          "<function=NAME><parameter=KEY>VALUE</parameter></function>.")
    # the same checks of the name and parameters as today's parser: what changed is how blocks are found
    return actions.make_action(match.group(1), _OLD_PARAM.findall(match.group(2)))


def _outcome(parse, text: str):
    try:
        return parse(text)
    except ActionError as e:
        return ("error", str(e))


# Tag pieces, names, values and separators: small enough that random strings form (partial, nested, unclosed,
# whitespace-broken) blocks often. "\u2028" and "\x1c" are whitespace to `\s` but not to a naive " \t\n" check.
TOKENS = ["<function=", "</function>", "<parameter=", "</parameter>", ">", "<", "=", " ", "\n", "\t", "\u2028",
          "\x1c", "a", "command", "path", "view", "finish", "execute_bash", "file_editor", "search",
          "search_term", "result", "old_str", "new_str", "ls", "x.py", "</func", "<function", "parameter"]


def _random_text(rng: random.Random) -> str:
    return "".join(rng.choice(TOKENS) for _ in range(rng.randint(0, 40)))


def _wellformed_text(rng: random.Random) -> str:
    """Mostly-valid calls with noise around and inside: exercises the success paths too."""
    name = rng.choice(list(TOOLS) + ["nope"])
    required, optional = TOOLS.get(name, (("command",), ()))
    keys = list(required) + rng.sample(list(optional), rng.randint(0, len(optional)))
    values = {"command": rng.choice(["view", "ls", "create"])}
    inner = "".join(f"{rng.choice(['', chr(10)])}<parameter={k}>{rng.choice(['', chr(10)])}"
                    f"{values.get(k, _random_text(rng).replace('</parameter>', ''))}"
                    f"{rng.choice(['', chr(10)])}</parameter>" for k in keys)
    return _random_text(rng) + f"<function={name}>{inner}{_random_text(rng)}</function>" + _random_text(rng)


def test_the_scanner_agrees_with_the_old_regex_parser_on_random_texts():
    rng = random.Random(30)
    successes = 0
    for n in range(20_000):
        text = _wellformed_text(rng) if n % 4 == 0 else _random_text(rng)
        expected = _outcome(_old_parse, text)
        assert _outcome(parse_action, text) == expected, repr(text)
        successes += isinstance(expected, Action)
    assert successes > 1000  # the success path is exercised, not only the errors


def test_the_block_finder_is_the_old_regex_search_from_any_start():
    rng = random.Random(7)
    for _ in range(5_000):
        text = _random_text(rng)
        start = rng.randint(0, len(text))
        for tag in ("function", "parameter"):
            m = re.compile(f"<{tag}=([^>\\s]*)>(.*?)</{tag}>", re.DOTALL).search(text, start)
            got = actions._find_block(text, start, f"<{tag}=", f"</{tag}>")
            assert got == (None if m is None else (m.group(1), m.start(2), m.end(2), m.end())), (text, start)


class _CountingText(str):
    """A str that counts the characters its `find` calls examine (a deterministic proxy for the parser's work)."""

    examined = 0

    def find(self, sub, start=0, end=None):  # noqa: D401 - same contract as str.find
        got = str.find(self, sub, start, len(self) if end is None else end)
        _CountingText.examined += (got + len(sub) if got >= 0 else len(self)) - start
        return got


NO_CALL = ("error", "No function call found. Call exactly one tool per turn: "
                    "<function=NAME><parameter=KEY>VALUE</parameter></function>.")
# Each shape is quadratic (or worse) for a lazy regex: many candidates, each scanning to the end of the text.
# name -> (text of about n characters, the parse outcome the old parser gives it)
ADVERSARIAL = {
    "open-blocks": (lambda n: "<function=a>" * (n // 12), NO_CALL),
    "nested-open-tags": (lambda n: "<function=" * (n // 10), NO_CALL),
    "long-name-without-close": (lambda n: "<function=" + "a" * n, NO_CALL),
    "open-params-in-a-block": (lambda n: "<function=execute_bash>" + "<parameter=" * (n // 11) + "</function>",
                               ("error", "Missing parameter(s) ['command'] for execute_bash.")),
    "unclosed-params-in-a-block": (lambda n: "<function=finish>" + "<parameter=a>" * (n // 13) + "</function>",
                                   Action("finish", {})),
    "nested-params": (lambda n: "<function=finish>" + "<parameter=<parameter=x>" * (n // 24) + "</function>",
                      Action("finish", {})),
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_adversarial_shapes_parse_as_the_old_parser_did(name):
    make, expected = ADVERSARIAL[name]
    text = make(2_000)  # small: the old parser is the oracle
    assert _outcome(_old_parse, text) == expected
    assert _outcome(parse_action, text) == expected


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_parsing_work_is_linear_in_the_text(name, monkeypatch):
    """Count what the scanner examines: find's characters and name-run characters, at two sizes."""
    scanned = []
    real_name = actions._NAME

    class CountingName:
        @staticmethod
        def match(text, pos):
            m = real_name.match(text, pos)
            scanned.append(m.end() - pos + 1)
            return m

    monkeypatch.setattr(actions, "_NAME", CountingName)
    work = {}
    for n in (20_000, 200_000):
        text = ADVERSARIAL[name][0](n)
        _CountingText.examined = 0
        scanned.clear()
        block = actions._find_block(_CountingText(text), 0, "<function=", "</function>")
        if block is not None:
            body = _CountingText(text[block[1]:block[2]])
            actions._parameters(body)
        work[n] = _CountingText.examined + sum(scanned)
        # Every character is examined a bounded number of times (find over the text, name runs once).
        assert work[n] <= 4 * len(text) + 64, (n, work[n], len(text))
    assert work[200_000] <= 12 * work[20_000]  # 10x the text, ~10x the work (a quadratic parser: ~100x)


@contextlib.contextmanager
def _hang_guard(seconds: int):
    """Fail (not hang) when the body runs past `seconds`: a guard against a super-linear parser only; the
    inputs below take milliseconds, and quadratic parsing of them takes many minutes."""
    def expire(signum, frame):
        raise TimeoutError(f"parsing ran past the {seconds}s hang guard")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_adversarial_turns_at_the_length_limit_parse_at_once(name):
    make, expected = ADVERSARIAL[name]
    text = make(MAX_ACTION_CHARS - 100)
    assert len(text) <= MAX_ACTION_CHARS
    with _hang_guard(60):  # the old regexes: ~10 minutes for open-blocks, the new scanner milliseconds
        assert _outcome(parse_action, text) == expected


def test_a_turn_over_the_limit_is_refused_with_its_length():
    text = "x" * (MAX_ACTION_CHARS + 1)
    with pytest.raises(ActionError, match=f"{MAX_ACTION_CHARS + 1} characters, over the limit of "
                                          f"{MAX_ACTION_CHARS}"):
        parse_action(text)
    valid = "<function=finish></function>"
    assert parse_action(valid + " " * (MAX_ACTION_CHARS - len(valid))).function == "finish"  # at the limit: parsed
    with pytest.raises(ActionError, match="over the limit"):
        parse_action(valid + " " * (MAX_ACTION_CHARS - len(valid) + 1))
