"""The SWE-RL prompt: release text, chat rendering, and the context budget's decisions."""

import json
import re

import pytest

from swerl_jax.data.prompts import AGENTLESS_REPAIR, THINKING_SYSTEM, build_prompt, file_blocks
from swerl_jax.data.synthetic import synthetic_records
from swerl_jax.data.targets import oracle_solution
from swerl_jax.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


def _searches(record):
    return re.findall(r"<<<<<<< SEARCH\n([\s\S]*?)\n=======", oracle_solution(record))


def test_release_text_landmarks():
    # Sentences of the released prompts (facebookresearch/swe-rl src/swerl/core/prompts.py).
    assert THINKING_SYSTEM.startswith("A user will ask you to solve a task. You should first draft your thinking")
    assert THINKING_SYSTEM.endswith("<solution>\nFinal solution presented to the user.\n</solution>")
    assert AGENTLESS_REPAIR.count("{problem_statement}") == 1 and AGENTLESS_REPAIR.count("{content}") == 1
    assert "--- BEGIN FILE ---\n```\n{content}\n```\n--- END FILE ---" in AGENTLESS_REPAIR
    assert AGENTLESS_REPAIR.endswith("use a separate code block for each one.")
    assert file_blocks([("a.py", "x = 1"), ("b/c.py", "y")]) == "### a.py\nx = 1\n\n### b/c.py\ny"


def test_rendered_chat(tok):
    r = synthetic_records(1, seed=5)[0]
    p = build_prompt(r, tok, 1024)
    path, content = next(iter(r["code_context"].items()))
    user = AGENTLESS_REPAIR.format(problem_statement=r["problem_statement"], content=f"### {path}\n{content}").strip()
    # SmolLM2's ChatML template, written out by hand.
    expected = f"<|im_start|>system\n{THINKING_SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n" \
               "<|im_start|>assistant\n"
    assert p.text == expected
    assert p.fits and p.num_tokens == len(tok(expected, add_special_tokens=False)["input_ids"])
    assert tok.decode(p.ids) == expected
    assert [d.action for d in p.decisions] == ["kept"]


def test_synthetic_prompts_are_short(tok):
    lengths = [build_prompt(r, tok, 1024).num_tokens for r in synthetic_records(30, seed=0)]
    assert max(lengths) < 800


def _with_relevant(record):
    r = dict(record)
    big = "\n".join(f"def helper_{i}(x):\n    return x + {i}\n" for i in range(60))
    small = "CONSTANT = 1\n"
    r["code_context"] = {**r["code_context"], "pkg/small.py": small, "pkg/big.py": big}
    r["relevant_files"] = ["pkg/small.py", "pkg/big.py"]
    return r


def test_budget_drops_relevant_files_largest_first(tok):
    r = _with_relevant(synthetic_records(1, seed=7)[0])
    full = build_prompt(r, tok, 100_000)
    assert full.fits and [d.action for d in full.decisions] == ["kept"] * 3
    modified = next(iter(synthetic_records(1, seed=7)[0]["code_context"]))
    assert full.shown_files == [modified, "pkg/small.py", "pkg/big.py"]  # modified first
    big = r["code_context"]["pkg/big.py"]
    big_tokens = len(tok(f"### pkg/big.py\n{big}", add_special_tokens=False)["input_ids"])
    p = build_prompt(r, tok, full.num_tokens - big_tokens + 5)
    actions = {d.path: d.action for d in p.decisions}
    assert p.fits and actions == {modified: "kept", "pkg/small.py": "kept", "pkg/big.py": "dropped"}
    assert "relevant-but-unmodified" in {d.path: d.reason for d in p.decisions}["pkg/big.py"]
    assert "### pkg/big.py" not in p.text and "### pkg/small.py" in p.text
    assert p.num_tokens <= p.max_prompt_len


def test_budget_truncates_modified_files_around_the_change(tok):
    r = synthetic_records(1, seed=11)[0]
    path, content = next(iter(r["code_context"].items()))
    r = dict(r, code_context={path: "\n".join(f"# filler line {i}" for i in range(300)) + "\n" + content},
             oracle_new_content={path: "\n".join(f"# filler line {i}" for i in range(300)) + "\n" +
                                 r["oracle_new_content"][path]})
    full = build_prompt(r, tok, 100_000)
    p = build_prompt(r, tok, full.num_tokens // 2)
    (d,) = p.decisions
    assert p.fits and p.num_tokens <= full.num_tokens // 2 and d.action == "truncated"
    assert "\n...\n" in p.text and d.lines[0] > 1
    for search in _searches(r):  # the lines to edit are still shown
        assert search in p.text
    # The widest window that fits: what is left of the budget is less than one more context line (measured: 2
    # tokens left, a filler line is ~7)
    line = len(tok.encode(f"# filler line {d.lines[0] - 1}\n", add_special_tokens=False))
    assert 0 <= full.num_tokens // 2 - p.num_tokens < line


def test_budget_gives_up_when_the_issue_alone_is_too_long(tok):
    r = dict(synthetic_records(1)[0], problem_statement="word " * 3000)
    p = build_prompt(r, tok, 1024)
    assert not p.fits and p.num_tokens > 1024


def test_real_records_budget(tok, shared_data):
    records = [json.loads(line) for line in open(shared_data / "pr_records_requests_flask.jsonl")]
    for r in records:
        p = build_prompt(r, tok, 16384)
        assert p.fits and all(d.action == "kept" for d in p.decisions), r["instance_id"]
    fitting = 0
    for r in records[:6]:
        p = build_prompt(r, tok, 2048)
        if p.fits:
            fitting += 1
            assert p.num_tokens <= 2048
            assert all(s in p.text for s in _searches(r)), r["instance_id"]
    assert fitting >= 5


def test_bad_arguments(tok):
    r = synthetic_records(1)[0]
    with pytest.raises(ValueError, match="prompt_style"):
        build_prompt(r, tok, 100, style="chatgpt")
    with pytest.raises(ValueError, match="max_prompt_len"):
        build_prompt(r, tok, 0)


def appended_at_end_record(shared_data) -> dict:
    """psf/requests-863's record reshaped as the failing case of issue 57: requests/models.py without its final
    newline, the oracle edit appending a function after the last line (an insertion past every old line)."""
    import difflib

    records = [json.loads(line) for line in open(shared_data / "pr_records_requests_flask.jsonl")]
    r = next(r for r in records if r["instance_id"] == "psf__requests-863")
    path = "requests/models.py"
    old = r["code_context"][path].rstrip("\n")
    new = old + "\n\n\ndef hook_names(hooks):\n    return sorted(hooks)\n"
    patch = "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}"))
    return dict(r, code_context={path: old}, oracle_new_content={path: new}, oracle_patch=patch)


def test_lines_appended_to_a_file_without_final_newline_are_prompted(tok, shared_data):
    # was: IndexError in _window (the insertion's span lay past the file's last line, so no line was kept)
    r = appended_at_end_record(shared_data)
    p = build_prompt(r, tok, 1024)
    assert p.fits and p.num_tokens <= 1024
    (d,) = p.decisions
    last = r["code_context"]["requests/models.py"].split("\n")
    assert d.action == "truncated" and d.lines[1] == len(last)  # the window reaches the line the edit goes after
    assert last[-1] in p.text


def test_a_record_that_cannot_be_prompted_is_a_reason_not_an_exception(tok, monkeypatch):
    from swerl_jax.data import prompts

    r = synthetic_records(1)[0]
    monkeypatch.setattr(prompts, "build_prompt", lambda *a, **k: [][0])
    prompt, reason, detail = prompts.prompt_or_reason(r, tok, 1024)
    assert prompt is None and reason == "prompt could not be built (IndexError)"
    assert detail.startswith(r["instance_id"] + ": IndexError")
    with pytest.raises(ValueError, match="max_prompt_len"):  # a bad setting is still the user's error
        prompts.prompt_or_reason(r, tok, 0)
