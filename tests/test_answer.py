"""Tag extraction and the linear block parser against re.findall with the release's pattern."""

import random
import re

import pytest

from swerl_jax.answer import (
    ANSWER_END,
    ANSWER_START,
    SEARCH_REPLACE_REGEX,
    THINK_END,
    THINK_START,
    FormatError,
    extract_thought_solution,
    find_blocks,
    format_answer,
    format_edit_block,
    parse_search_replace,
)
from swerl_jax.data.prompts import AGENTLESS_REPAIR, COMPACT_REPAIR, COMPACT_SYSTEM, THINKING_SYSTEM
from tests.reward.helpers import run_guarded

PIECES = ["```", "```python", "\n", "### ", "a.py", "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE", "x", " ",
          "\n\n", "\r", "é", "\ud800", "\x00"]


def test_tags_each_exactly_once_order_unchecked():
    assert extract_thought_solution("<think> t </think><solution> s </solution>") == ("t", "s")
    # Order is not checked: solution before think is accepted.
    assert extract_thought_solution("<solution>s</solution><think>t</think>") == ("t", "s")
    # </think> before <think>: the thought runs to the end of the text, as in the release.
    assert extract_thought_solution("</think><solution>s</solution><think>t") == ("t", "s")


@pytest.mark.parametrize("tag", ["<think>", "</think>", "<solution>", "</solution>"])
def test_tag_missing_or_duplicated_names_the_tag(tag):
    good = "<think>t</think><solution>s</solution>"
    for bad in (good.replace(tag, ""), good + tag):
        with pytest.raises(FormatError) as err:
            extract_thought_solution(bad)
        assert err.value.reason == "tag_count" and err.value.tag == tag
        assert str(err.value) == f"count of {tag} is not 1"


def test_empty_thought():
    with pytest.raises(FormatError) as err:
        extract_thought_solution("<think> \n </think><solution>s</solution>")
    assert err.value.reason == "empty_thought" and str(err.value) == "Thought is empty"


def test_blocks_grouped_by_path_in_order():
    text = ("```\n### a.py\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n```\n"
            "```python\n### b.py\n<<<<<<< SEARCH\n\n=======\nz\n>>>>>>> REPLACE\n```\n"
            "```\n### a.py\n<<<<<<< SEARCH\ny\n=======\nw\n>>>>>>> REPLACE\n```")
    assert parse_search_replace(text) == {"a.py": [("x", "y"), ("y", "w")], "b.py": [("", "z")]}


def test_quirks_of_the_pattern():
    # "SEARCH\n=======" has no empty search: the search runs on to the next divider.
    text = "```\n### a\n<<<<<<< SEARCH\n=======\nq\n=======\nr\n>>>>>>> REPLACE\n```"
    assert find_blocks(text) == [("a", "=======\nq", "r")]
    # An unterminated block's replacement swallows the next block up to its terminator.
    text = ("```\n### a\n<<<<<<< SEARCH\nx\n=======\ny\n```\n"
            "```\n### b\n<<<<<<< SEARCH\nu\n=======\nv\n>>>>>>> REPLACE\n```")
    assert find_blocks(text) == re.findall(SEARCH_REPLACE_REGEX, text)
    assert find_blocks(text)[0][0] == "a" and len(find_blocks(text)) == 1


def test_equals_re_findall_on_random_texts():
    rng = random.Random(1)
    for _ in range(3000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 60)))
        assert find_blocks(text) == re.findall(SEARCH_REPLACE_REGEX, text), repr(text)


UNTERMINATED = "```\n### a.py\n<<<<<<< SEARCH\nx\n=======\ny\n"


def unterminated_blocks(headers: int, tail: str) -> list:
    """find_blocks of ``headers`` unterminated headers, then ``tail`` (built here, in the guarded process)."""
    return find_blocks(UNTERMINATED * headers + tail)


def test_linear_where_the_regex_is_quadratic():
    # Unterminated headers: the regex rescans the tail from each one; the parser stops at the first.
    small = UNTERMINATED * 60
    assert find_blocks(small) == re.findall(SEARCH_REPLACE_REGEX, small) == []
    block = "```\n### b.py\n<<<<<<< SEARCH\nu\n=======\nv\n>>>>>>> REPLACE\n```"
    small = UNTERMINATED * 60 + block  # a complete block after them: the first header's replace swallows it
    want = re.findall(SEARCH_REPLACE_REGEX, small)
    assert find_blocks(small) == want and len(want) == 1 and want[0][0] == "a.py"
    # 100k headers (4 MB): the regex would rescan ~2 MB from each one, hours of work; the parser is linear,
    # so it finishes far inside the hang guard (a spawned process: a regex in C could not be interrupted).
    assert run_guarded(unterminated_blocks, 100_000, "", timeout_s=120) == []
    got = run_guarded(unterminated_blocks, 100_000, block, timeout_s=120)
    text, n = UNTERMINATED * 100_000 + block, len(UNTERMINATED)
    assert got == [("a.py", "x", text[n - 2:n * 100_000 + block.index("\n>>>>>>> REPLACE")])]


def _release_extract(output: str) -> tuple[str, str]:
    """The release's extract_thought_solution: four counts, then splits."""
    for tag in ("<think>", "</think>", "<solution>", "</solution>"):
        if output.count(tag) != 1:
            raise FormatError(f"count of {tag} is not 1", "tag_count")
    thought = output.split("<think>")[1].split("</think>")[0].strip()
    answer = output.split("<solution>")[1].split("</solution>")[0].strip()
    if len(thought) == 0:
        raise FormatError("Thought is empty", "empty_thought")
    return thought, answer


def test_tag_extraction_equals_the_release_on_random_texts():
    # One scan for all tags instead of four counts, slices instead of splits: same result or same error.
    rng = random.Random(2)
    pieces = ["<think>", "</think>", "<solution>", "</solution>", "<", ">", "/", "think", "solution", " ", "\n",
              "x", "<thin", "k>", "</", "<<think>>", "é"]
    valid = 0
    for _ in range(20_000):
        parts = [rng.choice(pieces) for _ in range(rng.randint(0, 10))]
        if rng.random() < 0.7:  # each tag once, in any order, among the noise
            for tag in pieces[:4]:
                parts.insert(rng.randint(0, len(parts)), tag)
        text = "".join(parts)
        try:
            want = _release_extract(text)
        except FormatError as e:
            with pytest.raises(FormatError) as err:
                extract_thought_solution(text)
            assert str(err.value) == str(e), text
        else:
            valid += 1
            assert extract_thought_solution(text) == want, text
    assert valid > 2_000


# --- formatting (the SFT targets' and scripted models' side of the format) ------------------------------------


def test_format_answer_is_the_documented_layout_and_round_trips():
    blocks = [format_edit_block("pkg/a.py", "    x = 1", "    x = 2"), format_edit_block("b.py", "é\r", "é")]
    answer = format_answer("the bug is in a.py", blocks)
    assert answer == ("<think>\nthe bug is in a.py\n</think>\n<solution>\n"
                      "```python\n### pkg/a.py\n<<<<<<< SEARCH\n    x = 1\n=======\n    x = 2\n>>>>>>> REPLACE\n```\n"
                      "```python\n### b.py\n<<<<<<< SEARCH\né\r\n=======\né\n>>>>>>> REPLACE\n```\n</solution>")
    thought, solution = extract_thought_solution(answer)
    assert thought == "the bug is in a.py"
    assert find_blocks(solution) == re.findall(SEARCH_REPLACE_REGEX, solution) == [
        ("pkg/a.py", "    x = 1", "    x = 2"), ("b.py", "é\r", "é")]
    assert parse_search_replace(solution) == {"pkg/a.py": [("    x = 1", "    x = 2")], "b.py": [("é\r", "é")]}


def test_code_with_fences_and_dividers_inside_round_trips_when_not_on_own_line():
    search, replace = 'doc = """```\n==== not a divider\n"""', 'doc = """```\n=======x\n"""'
    solution = extract_thought_solution(format_answer("t", [format_edit_block("m.py", search, replace)]))[1]
    assert find_blocks(solution) == re.findall(SEARCH_REPLACE_REGEX, solution) == [("m.py", search, replace)]


def test_empty_thought_written_by_format_answer_is_a_format_error():
    with pytest.raises(FormatError) as err:
        extract_thought_solution(format_answer("  ", [format_edit_block("a.py", "x", "y")]))
    assert err.value.reason == "empty_thought"


def test_the_prompt_asks_for_exactly_this_format():
    """The release's prompt text is quoted verbatim in data/prompts.py: every marker the parser needs is in it."""
    markers = (THINK_START, THINK_END, ANSWER_START, ANSWER_END, "### ", "<<<<<<< SEARCH", "=======",
               ">>>>>>> REPLACE", "```")
    for text in (THINKING_SYSTEM + AGENTLESS_REPAIR, COMPACT_SYSTEM + COMPACT_REPAIR):
        assert [m for m in markers if m not in text] == []
