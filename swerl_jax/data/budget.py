"""Will a config's GRPO stage be able to learn at all? Its sampler budget against the oracle answers' lengths.

    warning = answer_budget_warning(config)   # None, or why every completion would be cut and scored -1
"""

from __future__ import annotations

from swerl_jax.data.loader import decode_any, source_from_config
from swerl_jax.data.records import RecordError
from swerl_jax.data.targets import oracle_solution
from swerl_jax.tokenizer import load_tokenizer, tokenizer_path


def answer_budget_warning(config, num_records: int = 8) -> str | None:
    """A warning when `sampler.max_new_tokens` is shorter than the oracle answer of every one of the first
    `num_records` RL records: then every completion is cut before `</solution>`, scores -1, every group has zero
    variance and GRPO learns nothing, by construction. None when some oracle answer fits (or none can be made)."""
    source = source_from_config(config)
    n = min(int(num_records), len(source))
    if int(config.data.rl_num_records) > 0:
        n = min(n, int(config.data.rl_num_records))
    tok = load_tokenizer(tokenizer_path(config.model))
    lengths = []
    for i in range(n):
        try:
            answer = oracle_solution(decode_any(source[i]))
        except (RecordError, ValueError):
            continue
        lengths.append(len(tok(answer, add_special_tokens=False)["input_ids"]) + 1)  # + the end of turn
    budget = int(config.sampler.max_new_tokens)
    if not lengths or budget >= min(lengths):
        return None
    return (f"sampler.max_new_tokens={budget} is shorter than the oracle answer of each of the first {len(lengths)} "
            f"RL records (shortest {min(lengths)} tokens, longest {max(lengths)}): a completion that answers correctly "
            "cannot fit, so every completion is cut before </solution> and scored -1; raise sampler.max_new_tokens")
