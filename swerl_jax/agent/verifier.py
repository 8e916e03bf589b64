"""The execution-free verifier of test-time scaling: a model fine-tuned to say whether a trajectory resolved its issue.

DeepSWE's (R2E-Gym's) execution-free verifier is an LLM trained with SFT on agent trajectories labelled by the
harness, asked "does this trajectory resolve the issue?" and read as the probability of YES over NO. Here the
verifier reads the issue, the tail of the trajectory's transcript (the model's tool calls and their observations)
and its final diff, in the policy's chat template; the label is the harness's grade (hidden FAIL_TO_PASS /
PASS_TO_PASS tests for SWE-bench instances, the hidden unit tests for synthetic tasks). It is trained with the
project's SFT trainer (`VerifierTrainer`: checkpoints, resume and metrics as any SFT run; loss on the answer token
and the end of turn) and scores with `token_logprobs` at the answer position:
score = P(YES) / (P(YES) + P(NO)).

    examples = [verifier_example(tokenizer, instance, trajectory, max_len) for ...]
    params = VerifierTrainer(config, workdir, examples).run()
    scores = verifier_scores(model_config, params, tokenizer, [verifier_prompt(...), ...])
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from swerl_jax.agent.sft import examples_iterator
from swerl_jax.batching import bucket_length, pack_rows
from swerl_jax.chat import render_ids
from swerl_jax.model.llama import token_logprobs
from swerl_jax.sft.trainer import SFTTrainer

ANSWERS = ("YES", "NO")
_PROMPT = ("An agent worked on this issue in its repository.\n\n<issue>\n{issue}\n</issue>\n\n"
           "The end of its trajectory:\n<trajectory>\n{transcript}\n</trajectory>\n\n"
           "Its final patch:\n<patch>\n{patch}\n</patch>\n\n"
           "Does the patch resolve the issue (the issue's tests would pass)? Answer YES or NO.")


def answer_ids(tokenizer) -> tuple[int, int]:
    """The first token of "YES" and of "NO" (the verifier's two answers); ValueError if they coincide."""
    yes, no = (tokenizer.encode(a, add_special_tokens=False)[0] for a in ANSWERS)
    if yes == no:
        raise ValueError("the tokenizer starts YES and NO with the same token: the verifier cannot tell them apart")
    return int(yes), int(no)


def _chat_ids(tokenizer, text: str) -> np.ndarray:
    # the issue, the transcript (role tokens included) and the patch are text: none may open a turn of its own
    return np.asarray(render_ids(tokenizer, [{"role": "user", "content": text}]), np.int32)


def verifier_prompt(tokenizer, problem_statement: str, transcript: str, patch: str, max_len: int) -> np.ndarray:
    """The verifier's prompt ids, at most `max_len - 2` tokens: the transcript's tail is shortened first, then the
    patch's and the issue's ends (a trajectory is judged on what it did last and what it changed)."""
    budget = max_len - 2
    issue, tail, diff = problem_statement, transcript, patch or "(empty: no change)"
    for _ in range(12):
        ids = _chat_ids(tokenizer, _PROMPT.format(issue=issue, transcript=tail, patch=diff))
        if len(ids) <= budget:
            return ids
        excess_chars = (len(ids) - budget) * 4 + 64  # ~4 characters a token: cut a little more than needed
        if len(tail) > 200:
            tail = tail[-max(200, len(tail) - excess_chars):]
        elif len(diff) > 400:
            diff = diff[:max(400, len(diff) - excess_chars)]
        elif len(issue) > 400:
            issue = issue[:max(400, len(issue) - excess_chars)]
        else:
            tail, diff, issue = tail[-100:], diff[:200], issue[:200]
    ids = _chat_ids(tokenizer, _PROMPT.format(issue=issue, transcript=tail, patch=diff))
    if len(ids) > budget:
        raise ValueError(f"the verifier prompt needs {len(ids)} tokens even cut down: raise the verifier's max_len "
                         f"({max_len})")
    return ids


def verifier_example(tokenizer, prompt_ids: np.ndarray, resolved: bool) -> dict:
    """An SFT row: the prompt, the answer token (YES when the harness resolved the trajectory) and end of turn."""
    yes, no = answer_ids(tokenizer)
    target = np.asarray([yes if resolved else no, tokenizer.eos_token_id], np.int32)
    return {"prompt_ids": np.asarray(prompt_ids, np.int32), "target_ids": target}


class VerifierTrainer(SFTTrainer):
    """The SFT trainer over labelled verifier rows (`verifier_example`s), reshuffled each epoch."""

    def __init__(self, config: Any, workdir: str | pathlib.Path, examples: Sequence[dict],
                 initial_params: Any = None) -> None:
        if not examples:
            raise ValueError("the verifier has no labelled trajectories to train on")
        self.examples = list(examples)
        super().__init__(config, workdir, initial_params)

    def make_data_iter(self) -> Any:
        """Batches of the labelled rows (the SFT trainer's loss on the answer and end-of-turn tokens)."""
        longest = max(len(e["prompt_ids"]) + len(e["target_ids"]) for e in self.examples)
        if longest > int(self.config.sft.max_len):
            raise ValueError(f"sft.max_len={self.config.sft.max_len} is shorter than a verifier row ({longest})")
        return examples_iterator(self.examples, int(self.config.sft.batch_size), int(self.config.seed))


def verifier_scores(model_config: Any, params: Any, tokenizer, prompts: Sequence[np.ndarray],
                    batch_size: int = 4) -> list[float]:
    """P(YES) / (P(YES) + P(NO)) at each prompt's answer position, in fp32, `batch_size` prompts at a time."""
    yes, no = answer_ids(tokenizer)
    score = jax.jit(lambda p, tokens, mask: token_logprobs(model_config, p, tokens, mask, start=tokens.shape[1] - 2,
                                                          length=1)[:, 0])
    out: list[float] = []
    for start in range(0, len(prompts), batch_size):
        chunk = list(prompts[start:start + batch_size])
        chunk += [chunk[-1]] * (batch_size - len(chunk))  # one shape per prompt bucket: fewer compilations
        p_len = bucket_length(max(len(x) for x in chunk), 64, 1 << 20)
        logp = []
        for answer in (yes, no):
            rows = pack_rows(chunk, [[answer]] * len(chunk), p_len, 1)
            logp.append(np.asarray(score(params, rows["tokens"], rows["attention_mask"]), np.float64))
        p_yes = 1.0 / (1.0 + np.exp(logp[1] - logp[0]))
        out += [float(v) for v in p_yes[:min(batch_size, len(prompts) - start)]]
    return out
