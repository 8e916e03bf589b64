"""Problem statements for generated tasks, written from the failing tests as a user files an issue: which tests
fail, the assertion, the tail of the traceback. Never the diff: every line of the gold patch's changed code is cut
from what is quoted (a short traceback shows the buggy line itself).

    text = statement(repo, f2p, output, gold_patch)                # template, from the bug run's pytest output
    text = statement(..., rewrite=client_rewriter(client))         # optional: an LLM rephrases it; checked again
"""

from __future__ import annotations

import re
from collections.abc import Callable

import unidiff

Rewriter = Callable[[str], str]
_HEADER = re.compile(r"^_{3,} (.+?) _{3,}$", re.MULTILINE)
QUOTED_TESTS = 3  # tests quoted in full; the rest are listed
TAIL_LINES = 12
MIN_QUOTE = 8  # a changed line this long is a leak anywhere in a line (shorter ones: when the whole line)


def changed_lines(patch: str) -> set[str]:
    """The stripped text of every added or removed line of a patch (both sides: the bug and the fix)."""
    lines = set()
    for patched in unidiff.PatchSet(patch):
        for hunk in patched:
            for line in hunk:
                if (line.is_added or line.is_removed) and line.value.strip():
                    lines.add(line.value.strip())
    return lines


def failure_blocks(output: str) -> dict[str, str]:
    """pytest's failure sections (--tb=short) by their header ("TestX.test_y", "test_z[1]")."""
    blocks = {}
    headers = list(_HEADER.finditer(output))
    for i, match in enumerate(headers):
        end = headers[i + 1].start() if i + 1 < len(headers) else len(output)
        body = output[match.end():end]
        body = re.split(r"^={5,}", body, maxsplit=1, flags=re.MULTILINE)[0]
        blocks[match.group(1).strip()] = body.strip("\n")
    return blocks


def _block_for(test_id: str, blocks: dict[str, str]) -> str:
    """The failure block of a test id (tests/test_a.py::TestX::test_y[1] -> header TestX.test_y[1])."""
    parts = test_id.split("::")[1:]
    header = ".".join(parts)
    return blocks.get(header) or blocks.get(parts[-1] if parts else test_id, "")


def scrub(text: str, forbidden: set[str]) -> str:
    """`text` without any line whose stripped content (after pytest's `>`/`E` marks) is a changed line."""
    kept = []
    for line in text.splitlines():
        bare = re.sub(r"^(>|E)\s", "", line.strip()).strip()
        if bare in forbidden or line.strip() in forbidden or any(f in line for f in forbidden
                                                                   if len(f) >= MIN_QUOTE):
            continue
        kept.append(line)
    return "\n".join(kept)


def statement(repo: str, fail_to_pass: list[str], output: str, gold_patch: str,
              rewrite: Rewriter | None = None) -> str:
    """An issue text from the tests a bug breaks and the pytest output of the bug run; with `rewrite`, its
    rephrasing (kept only when it still quotes no changed line, else the template is returned)."""
    forbidden = changed_lines(gold_patch)
    blocks = failure_blocks(output)
    shown = fail_to_pass[:QUOTED_TESTS]
    title = f"{shown[0].split('::')[-1]} fails" if len(fail_to_pass) == 1 else \
        f"{len(fail_to_pass)} tests fail in {sorted({t.split('::')[0] for t in fail_to_pass})[0]}"
    parts = [f"{title}\n", f"In {repo}, running the test suite gives {len(fail_to_pass)} failing "
             f"test{'s' if len(fail_to_pass) != 1 else ''} that should pass:\n"]
    parts += [f"- `{t}`" for t in fail_to_pass[:20]]
    if len(fail_to_pass) > 20:
        parts.append(f"- ... and {len(fail_to_pass) - 20} more")
    for test in shown:
        block = scrub(_block_for(test, blocks), forbidden)
        lines = [line for line in block.splitlines() if line.strip()]
        asserted = [line for line in lines if line.lstrip().startswith("E ")]
        tail = lines[-TAIL_LINES:]
        if not tail:
            continue
        parts.append(f"\nFor `{test}`:\n```\n" + "\n".join(tail) + "\n```")
        if asserted:
            parts.append(f"The failure: {asserted[0].strip()[1:].strip()}")  # the first E line: the error
    parts.append("\nThe behaviour looks like a regression: these tests describe what the code should do.")
    text = "\n".join(parts) + "\n"
    if rewrite is not None:
        rewritten = rewrite(text)
        if isinstance(rewritten, str) and rewritten.strip() and scrub(rewritten, forbidden) == rewritten.rstrip(
                "\n") and not leaks(rewritten, gold_patch):
            return rewritten
    return text


def leaks(text: str, gold_patch: str) -> list[str]:
    """The changed lines of `gold_patch` that `text` quotes (a statement must quote none)."""
    lines = {line.strip() for line in text.splitlines()}
    bare = {re.sub(r"^(>|E)\s", "", line).strip() for line in lines}
    return sorted(c for c in changed_lines(gold_patch)
                  if c in lines or c in bare or (len(c) >= MIN_QUOTE and c in text))


def client_rewriter(generate: Callable[[str], str]) -> Rewriter:
    """A rewriter over any text-in, text-out model call (`sampler_generate` makes one from the sampler's
    client): asks it to restate the report as a user's issue, without proposing a fix."""
    def rewrite(text: str) -> str:
        return generate("Rewrite this bug report as a GitHub issue a user would file. Keep the test ids and the "
                        "error messages; do not guess at the cause or propose code.\n\n" + text)
    return rewrite


def sampler_generate(client, tokenizer, sampling) -> Callable[[str], str]:
    """A text-in, text-out call through a `sampler.client.SamplerClient`: the prompt encoded by `tokenizer`
    (`encode`/`decode`), one sample with `sampling` (a `sampler.types.SamplingParams`), decoded."""
    def generate(prompt: str) -> str:
        completion = client.generate([tokenizer.encode(prompt)], sampling)[0][0]
        return completion.text if completion.text is not None else tokenizer.decode(list(completion.tokens))
    return generate
