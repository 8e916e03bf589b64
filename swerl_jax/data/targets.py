"""SFT targets: the answer whose reward is 1.0 for a PR record (a short thought + SEARCH/REPLACE edits).

    answer = oracle_solution(record)   # the SFT stage's target; scripted "gold" models in tests and evaluation

The edits are derived from the record's change with difflib (one block per hunk group, widened until each search
text occurs once) and written in the answer format (`swerl_jax.answer`); every target is checked with the reward
itself, so a target the reward would not score 1.0 is never trained on.
"""

from __future__ import annotations

import difflib

from swerl_jax.answer import format_answer, format_edit_block
from swerl_jax.data.records import changed_paths
from swerl_jax.reward import calculate_search_replace_reward


def _search_replace_blocks(old: str, new: str, context: int = 1) -> list[tuple[str, str]]:
    """(search, replace) pairs turning `old` into `new` under SWE-RL's rule ("\\n"+search -> "\\n"+replace).

    One block per difflib hunk group; each search is widened by more context lines until it occurs exactly
    once (str.replace replaces every occurrence).
    """
    a, b = old.split("\n"), new.split("\n")
    blocks = []
    for group in difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        while True:
            search, replace = "\n".join(a[i1:i2]), "\n".join(b[j1:j2])
            if search.strip() and ("\n" + old).count("\n" + search) == 1 and search != replace:
                break
            # Widen both sides by one line; lines outside a hunk group are equal in old and new (a widening
            # that runs into another group is caught by the reward check in oracle_solution).
            grown = False
            if i1 > 0 and j1 > 0:
                i1, j1, grown = i1 - 1, j1 - 1, True
            if i2 < len(a) and j2 < len(b):
                i2, j2, grown = i2 + 1, j2 + 1, True
            if not grown:
                break
        blocks.append((search, replace))
    return blocks


def oracle_solution(record: dict, thought: str | None = None) -> str:
    """The SWE-RL answer whose reward is 1.0 for `record`: a thought and SEARCH/REPLACE blocks.

    Raises:
      ValueError: naming the record and path when the change cannot be written as SEARCH/REPLACE edits
        (a new or emptied file: SWE-RL's format cannot create or delete files).
    """
    rid = record.get("instance_id", "?")
    paths = changed_paths(record)
    edits = []
    for path in paths:
        old, new = record["code_context"].get(path), record["oracle_new_content"][path]
        if path not in record["code_context"]:
            raise ValueError(f"record {rid!r}: {path!r} is a new file, which SEARCH/REPLACE edits cannot create")
        if not old:  # an empty search would match anywhere: SWE-RL's format cannot write into an empty file
            raise ValueError(f"record {rid!r}: {path!r} is an empty file, which a SEARCH/REPLACE edit cannot fill "
                             "(its search text would be empty)")
        blocks = _search_replace_blocks(old, new)
        edits.append((path, blocks))
    if thought is None:
        title = record["problem_statement"].strip().splitlines()[0]
        thought = (f"The issue says: {title}. The code responsible is in {', '.join(paths)}. "
                   f"I change the lines that cause it and keep the rest of the file as is.")
    answer = format_answer(thought, [format_edit_block(path, s, r) for path, blocks in edits for s, r in blocks])
    reward, meta = calculate_search_replace_reward(record["code_context"], record["oracle_new_content"], answer)
    if reward != 1.0:
        # Edits that interact (a replacement creating another block's search text) fall back to whole files.
        ctx, new = record["code_context"], record["oracle_new_content"]
        answer = format_answer(thought, [format_edit_block(p, ctx[p], new[p]) for p in paths])
        reward, meta = calculate_search_replace_reward(record["code_context"], record["oracle_new_content"], answer)
    if reward != 1.0:
        raise ValueError(f"record {rid!r}: no SEARCH/REPLACE answer reproduces the oracle (reward {reward}, {meta})")
    return answer
