"""The agent's SFT warm start: scripted gold episodes run through the real environments, then next-token loss on
the model's turns only.

A synthetic task's gold episode is view the file -> str_replace the buggy lines with the fixed ones -> finish,
each action in the R2E-Gym function-call format. The episode is run through `agent.rollout.run_episodes` with a
scripted `TurnGenerator` (each turn's tokens are the action and the end-of-turn token), so the observations the
SFT rows hold are the environment's real ones and the rows are laid out exactly as GRPO's; a gold episode that
does not resolve its task is an error naming the task. `AgentSFTTrainer` is the SFT trainer over those rows, the
loss mask on the model's tokens (`target_mask`), never on observations.
"""

from __future__ import annotations

import concurrent.futures
import difflib
import pathlib
from collections.abc import Sequence
from typing import Any

import grain
import numpy as np

from swerl_jax.agent.actions import format_action
from swerl_jax.agent.rollout import SYSTEM, ChatFormat, run_episodes
from swerl_jax.agent.tasks import AgentTasks
from swerl_jax.chat import encode_text
from swerl_jax.data.loader import collate
from swerl_jax.sampler.types import Completion, SamplingParams
from swerl_jax.sft.trainer import SFTTrainer
from swerl_jax.tokenizer import tokenizer_for


def gold_actions(instance: dict) -> list[str]:
    """The scripted episode of a synthetic task: view, one str_replace (changed lines + the line before, grown
    until it occurs once), finish."""
    edit = instance["gold_edit"]
    before, after = edit["before"].splitlines(True), edit["after"].splitlines(True)
    ops = [o for o in difflib.SequenceMatcher(None, before, after).get_opcodes() if o[0] != "equal"]
    i1, i2, j1, j2 = ops[0][1], ops[-1][2], ops[0][3], ops[-1][4]
    context = 1
    while True:
        old = "".join(before[max(0, i1 - context):i2])
        if edit["before"].count(old) == 1 or i1 - context <= 0:
            break
        context += 1
    new = "".join(after[max(0, j1 - context):j2])
    return [format_action("file_editor", command="view", path=edit["path"]),
            format_action("file_editor", command="str_replace", path=edit["path"], old_str=old.rstrip("\n"),
                          new_str=new.rstrip("\n")),
            format_action("finish")]


class Scripted:
    """A `TurnGenerator` that answers each conversation with its task's next scripted action (log-probs 0)."""

    def __init__(self, tokenizer, scripts: dict[bytes, list[str]]) -> None:
        self.tokenizer, self.scripts, self.turn = tokenizer, scripts, 0

    def _completion(self, prompt: np.ndarray, turn: int) -> Completion:
        actions = next(s for key, s in self.scripts.items() if prompt.tobytes().startswith(key))
        text = actions[min(turn, len(actions) - 1)]
        # a gold edit is the repository's code: its text is never a role token (the turn's end is one)
        ids = encode_text(self.tokenizer, text) + [self.tokenizer.eos_token_id]
        tokens = np.asarray(ids, np.int32)
        return Completion(0, 0, tokens, np.zeros(len(tokens), np.float32), text, "stop", len(prompt), len(tokens), 0)

    def first_turn(self, prompts, num_samples, sampling, seed, min_policy_version):
        self.turn = 1
        return [[self._completion(p, 0) for _ in range(num_samples)] for p in prompts]

    def next_turn(self, contexts, caps, sampling, seed, min_policy_version):
        turn, self.turn = self.turn, self.turn + 1
        return [self._completion(c, turn) for c in contexts]


def gold_examples(config: Any, workdir: str | pathlib.Path, tasks: AgentTasks | None = None) -> list[dict]:
    """SFT rows (prompt_ids, target_ids, target_mask) of every task's gold episode, run in the real environments."""
    tasks = tasks or AgentTasks.from_config(config, workdir)
    if any("gold_edit" not in inst for inst in tasks.instances):
        raise ValueError("the agent SFT stage scripts synthetic tasks' gold episodes; agent.instances (SWE-bench) has "
                         "no scripted episode: set sft.num_steps=0 or train on synthetic tasks")
    tokenizer = tokenizer_for(config.model)
    chat = ChatFormat(tokenizer)
    envs = [[tasks.env(inst, config)] for inst in tasks.instances]
    scripts = {}
    for inst, (env,) in zip(tasks.instances, envs):
        key = chat.prompt(SYSTEM, env.task()).tobytes()  # the task text does not depend on the checkout
        scripts[key] = gold_actions(inst)
    with concurrent.futures.ThreadPoolExecutor(int(config.agent.env_workers)) as pool:
        groups, _ = run_episodes(envs, Scripted(tokenizer, scripts), chat, SYSTEM, SamplingParams(),
                                 max_context=int(config.agent.max_context), seed=int(config.seed), step=0,
                                 policy_version=0, pool=pool)
    examples = []
    for (r,) in groups:
        if r.reward < 1.0:
            raise RuntimeError(f"the gold episode of agent task {r.prompt_id} does not resolve it "
                               f"(reward {r.reward}, {r.termination}): {r.reward_info}")
        examples.append({"prompt_ids": r.prompt_tokens, "target_ids": r.completion_tokens,
                         "target_mask": r.token_mask})
    return examples


def examples_iterator(examples: Sequence[dict], batch_size: int, seed: int):
    """A checkpointable Grain iterator of SFT batches over `examples` (reshuffled each epoch, forever)."""
    ds = grain.MapDataset.source(list(examples)).shuffle(seed=seed).repeat(None)
    # batched on the iterator side: a MapDataset batch of 1 over an endless repeat overflows its length
    return iter(ds.to_iter_dataset().batch(batch_size, batch_fn=collate))


class AgentSFTTrainer(SFTTrainer):
    """The SFT trainer over gold agent episodes (`target_mask`: the model's turns only)."""

    def make_data_iter(self) -> Any:
        """Batches of the tasks' gold episodes (run once, in the sandboxed environments, before step 1)."""
        examples = gold_examples(self.config, self.workdir.parent if self.workdir.name == "sft" else self.workdir)
        longest = max(len(e["prompt_ids"]) + len(e["target_ids"]) for e in examples)
        if longest > self.max_len:
            raise ValueError(f"sft.max_len={self.max_len} is shorter than the longest gold episode ({longest} "
                             "tokens)")
        return examples_iterator(examples, int(self.config.sft.batch_size), int(self.config.seed))
