"""Multi-turn agent rollouts for GRPO: token-level conversations, environments stepped in a host pool.

One step runs P instances x G samples as P x G conversations (a GRPO group per instance). A conversation is token
ids: the chat-templated task (the row's prompt), then turn by turn the model's sampled tokens (loss mask 1, their
sampler log-probs kept) and the observation's tokens (the chat template's user turn and the next assistant header:
loss mask 0). The model's own tokens are exactly the ones it sampled, so the trainer's log-probs of the row are the
sampler's (the GRPO ratio starts at 1); nothing is re-tokenised from text. That is checked, not assumed: each
conversation keeps a ledger of the ids as they arrived (the sampler's completion, the observation's ids), and
`to_rollout` raises `TokenIntegrityError` unless the training row is exactly the ledger (ids, mask, log-probs).

Turns are generated in waves (`waves` > 1 splits the groups): while one wave's environments step in the thread
pool (sandboxed bash, edits, search), the next wave generates, so environment time hides behind generation. An
episode ends at `finish`, `max_turns`, the wall-clock timeout or `max_context` (the next observation would leave
fewer than `min_turn_tokens` for the model); its reward is the environment's (`SWEEnv.reward`). Compact filtering
(DeepSWE) masks the episodes that did not finish: `Rollout.truncated` is True for every termination but `finish`.

Generation is a `TurnGenerator`: `Reprefill` sends each turn's whole context to the trainer's sampler (the process
or the inline engine); a kept-K/V session engine can implement the same two calls.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from swerl_jax.agent.env import SWEEnv
from swerl_jax.chat import encode_parts, render_ids
from swerl_jax.rl.collect import rollout_seed
from swerl_jax.rl.rollouts import Rollout, RolloutGroups
from swerl_jax.sampler.types import Completion, SamplingParams

SYSTEM = "You are a software engineer fixing an issue in a repository, one tool call per turn."


class ChatFormat:
    """Token ids of a conversation from the tokenizer's chat template, derived once from the template itself."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        probe = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                 {"role": "assistant", "content": "\x00A\x00"}, {"role": "user", "content": "\x00B\x00"}]
        text = tokenizer.apply_chat_template(probe, add_generation_prompt=True, tokenize=False)
        after_model = text.split("\x00A\x00", 1)[1]
        self.turn_close, self.observation_open = after_model.split("\x00B\x00", 1)[0], None
        self.observation_close = text.split("\x00B\x00", 1)[1]
        eos = tokenizer.eos_token or ""
        # the model's turn ends with the end-of-turn token it samples; what the template adds after it opens the
        # observation (e.g. ChatML: "<|im_end|>" then "\n<|im_start|>user\n")
        if eos and self.turn_close.startswith(eos):
            self.eos_text, self.observation_open = eos, self.turn_close[len(eos):]
        else:
            self.eos_text, self.observation_open = "", self.turn_close

    def prompt(self, system: str, user: str) -> np.ndarray:
        """The first turn's ids, ending with the assistant header (the task's text, an issue, encoded as text)."""
        return np.asarray(render_ids(self.tokenizer, [{"role": "system", "content": system},
                                                      {"role": "user", "content": user}]), np.int32)

    def observation(self, text: str, model_stopped: bool) -> np.ndarray:
        """An observation's ids: closes a model turn that was cut (no end-of-turn sampled), the user turn, the
        next assistant header. The observation is text a repository or the policy wrote: a role token's string in
        it stays characters (`chat.encode_parts`); only the template's own pieces are control tokens."""
        close = "" if model_stopped else self.eos_text
        return np.asarray(encode_parts(self.tokenizer, [(close + self.observation_open, True), (text, False),
                                                        (self.observation_close, True)]), np.int32)


class TokenIntegrityError(RuntimeError):
    """An episode's training row is not exactly the ids the sampler returned plus the observation ids appended
    (token-in-token-out broken, e.g. a turn re-tokenised from its text): the policy would train on ids it never
    sampled, so the step stops and names the episode and the first differing token."""


class TurnGenerator(Protocol):
    """How turns are sampled: a group's first turn (one prompt, G samples) and later turns (one per context)."""

    def first_turn(self, prompts: Sequence[np.ndarray], num_samples: int, sampling: SamplingParams, seed: int,
                   min_policy_version: int) -> list[list[Completion]]:
        """`num_samples` completions of each prompt."""

    def next_turn(self, contexts: Sequence[np.ndarray], caps: Sequence[int], sampling: SamplingParams, seed: int,
                  min_policy_version: int) -> list[Completion]:
        """One completion per context (whole conversation so far), at most caps[i] new tokens."""


class Reprefill:
    """A `TurnGenerator` over a stateless sampler (`SamplerClient`, `InlineSampler`): every turn re-prefills."""

    def __init__(self, sampler, tokenizer=None) -> None:
        self.sampler, self.tokenizer = sampler, tokenizer

    def first_turn(self, prompts, num_samples, sampling, seed, min_policy_version):
        return self.sampler.generate(list(prompts), sampling, num_samples=num_samples, seed=seed,
                                     min_policy_version=min_policy_version)

    def next_turn(self, contexts, caps, sampling, seed, min_policy_version):
        # The stateless protocol takes one max_new_tokens per request: sample up to the largest cap and cut each
        # completion at its own (the kept tokens are exactly what was sampled; a cut one ends as "length").
        part = dataclasses.replace(sampling, max_new_tokens=int(max(caps)))
        got = self.sampler.generate(list(contexts), part, num_samples=1, seed=seed,
                                    min_policy_version=min_policy_version)
        return [cut_completion(g[0], cap, self.tokenizer) for g, cap in zip(got, caps)]


def cut_completion(c: Completion, cap: int, tokenizer) -> Completion:
    """`c` cut to its first `cap` tokens (finish "length"), its text decoded again; `c` itself when it fits."""
    if len(c.tokens) <= cap:
        return c
    tokens = c.tokens[:cap]
    return dataclasses.replace(c, tokens=tokens, logprobs=c.logprobs[:cap], finish_reason="length",
                               completion_length=int(cap),
                               text=tokenizer.decode(tokens.tolist(), skip_special_tokens=True) if tokenizer else None)


@dataclasses.dataclass
class Conversation:
    """One episode's token-level transcript and its environment."""

    env: SWEEnv
    group: int
    sample: int
    prompt: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int32))
    tokens: list[int] = dataclasses.field(default_factory=list)
    mask: list[float] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    versions: list[int] = dataclasses.field(default_factory=list)  # per token: the sampling version (-1: observation)
    done: bool = False
    termination: str | None = None
    policy_version: int = -1  # of the newest model turn
    first_version: int = -1  # of the first model turn: an episode spanning versions counts by its oldest
    error: str | None = None
    first_error_end: int | None = None  # len(tokens) after the model turn whose tool call failed first
    # (ids, sampler log-probs or None for an observation) as they arrived: what `check_token_integrity` compares
    ledger: list[tuple[np.ndarray, np.ndarray | None]] = dataclasses.field(default_factory=list)

    def context(self) -> np.ndarray:
        """The prompt and every token after it: what the next turn continues."""
        return np.concatenate([self.prompt, np.asarray(self.tokens, np.int32)])

    def receive(self, ids: Sequence[int], logprobs: Sequence[float] | None) -> None:
        """Record ids where they arrive (a sampler's completion with its log-probs, or an observation with None)
        in the ledger, copied: the transcript (`add`) is checked against it."""
        self.ledger.append((np.array(ids, np.int32), None if logprobs is None else np.array(logprobs, np.float32)))

    def add(self, ids: Sequence[int], logprobs: Sequence[float] | None, version: int | Sequence[int] = -1) -> None:
        """Append a model turn (with its behaviour log-probs and the policy version that sampled it, one or one
        per token: a partial rollout's) or, with `logprobs` None, an observation."""
        if logprobs is not None and not isinstance(version, (int, np.integer)):
            self.versions += [int(v) for v in version]
        else:
            self.versions += [int(version) if logprobs is not None else -1] * len(ids)
        self.tokens += [int(t) for t in ids]
        self.mask += [1.0 if logprobs is not None else 0.0] * len(ids)
        self.logprobs += list(map(float, logprobs)) if logprobs is not None else [0.0] * len(ids)


@dataclasses.dataclass
class EpisodeTimes:
    """Wall time of a step's episodes: generation vs environment work (resets, steps, rewards) not hidden."""

    generate_s: float = 0.0
    env_wait_s: float = 0.0
    env_busy_s: float = 0.0
    reward_s: float = 0.0


def run_episodes(envs: Sequence[Sequence[SWEEnv]], generator: TurnGenerator, chat: ChatFormat, system: str,
                 sampling: SamplingParams, *, max_context: int, seed: int, step: int, policy_version: int,
                 pool: concurrent.futures.Executor, waves: int = 1, min_turn_tokens: int = 16,
                 on_turn: Callable[[int], None] | None = None) -> tuple[RolloutGroups, EpisodeTimes]:
    """Run every environment's episode (envs[p][g]: group p, sample g) and return scored rollouts [P][G]."""
    times = EpisodeTimes()
    convs = [[Conversation(env, p, g) for g, env in enumerate(group)] for p, group in enumerate(envs)]
    flat = [c for group in convs for c in group]

    t0 = time.perf_counter()
    tasks = list(pool.map(reset_episode, flat))
    times.env_wait_s += time.perf_counter() - t0
    for c, task in zip(flat, tasks):
        if isinstance(task, Exception):
            c.done, c.termination, c.error = True, "env_error", str(task)
        else:
            c.prompt = chat.prompt(system, task)
    wave_of = [list(range(w, len(convs), max(1, waves))) for w in range(max(1, waves))]
    pending: dict[int, list[concurrent.futures.Future]] = {}
    turn = 0
    while any(not c.done for c in flat):
        for w, groups in enumerate(wave_of):
            if w in pending:
                t0 = time.perf_counter()
                apply_steps(pending.pop(w), chat, max_context, min_turn_tokens)
                times.env_wait_s += time.perf_counter() - t0
            active = [c for p in groups for c in convs[p] if not c.done]
            if not active:
                continue
            request_seed = rollout_seed(seed, step, turn * max(1, waves) + w)
            t0 = time.perf_counter()
            if turn == 0:
                firsts = [p for p in groups if any(not c.done for c in convs[p])]
                got = generator.first_turn([convs[p][0].prompt for p in firsts], len(convs[firsts[0]]), sampling,
                                           request_seed, policy_version)
                completions = {id(c): got[i][c.sample] for i, p in enumerate(firsts) for c in convs[p]}
            else:
                caps = [min(sampling.max_new_tokens, max_context - len(c.prompt) - len(c.tokens)) for c in active]
                got = generator.next_turn([c.context() for c in active], caps, sampling, request_seed,
                                          policy_version)
                completions = {id(c): got[i] for i, c in enumerate(active)}
            times.generate_s += time.perf_counter() - t0
            futures = []
            for c in active:
                if c.done:  # a reset that failed in turn 0: nothing to step
                    continue
                done = completions[id(c)]
                add_turn(c, done)
                futures.append(pool.submit(step_episode, c, done, chat.tokenizer))
            pending[w] = futures
        turn += 1
        if on_turn is not None:
            on_turn(turn)
    for w in list(pending):
        t0 = time.perf_counter()
        apply_steps(pending.pop(w), chat, max_context, min_turn_tokens)
        times.env_wait_s += time.perf_counter() - t0

    t0 = time.perf_counter()
    scored = list(pool.map(score_episode, flat))
    times.reward_s = time.perf_counter() - t0
    times.env_busy_s = sum(c.env.stats.env_seconds for c in flat if c.env.stats)
    groups: RolloutGroups = []
    for group in convs:
        groups.append([to_rollout(c, chat, scored[flat.index(c)]) for c in group])
    return groups, times


def add_turn(c: Conversation, completion: Completion) -> None:
    """Append a model turn: its tokens, their behaviour log-probs and the policy version that sampled it."""
    c.receive(completion.tokens, completion.logprobs)  # the ledger: exactly what the sampler returned
    c.add(completion.tokens, completion.logprobs, completion.policy_version if completion.token_versions is None
          else completion.token_versions)
    c.policy_version = completion.policy_version
    if c.first_version < 0:
        c.first_version = completion.policy_version


def reset_episode(c: Conversation) -> str | Exception:
    """The environment's task text, or the exception its reset raised (the episode is then masked)."""
    try:
        return c.env.reset()
    except Exception as err:  # one broken environment never stops the step: its episode is masked
        return err


def step_episode(c: Conversation, completion: Completion, tokenizer) -> tuple[Conversation, Completion, str, bool]:
    """Run the model turn `completion` (already added) in the environment: (c, completion, observation, done)."""
    text = completion.text
    if text is None:
        body = completion.tokens[:-1] if completion.finish_reason == "stop" else completion.tokens
        text = tokenizer.decode(np.asarray(body).tolist(), skip_special_tokens=True)
    observation, done, info = c.env.step(text)
    if info.get("error") and c.first_error_end is None:  # the turn's tokens are the last ones added
        c.first_error_end = len(c.tokens)
    return c, completion, observation, done


def apply_steps(futures: list[concurrent.futures.Future], chat: ChatFormat, max_context: int,
                min_turn_tokens: int) -> None:
    """Append each stepped conversation's observation, or end it (environment done, or no room left)."""
    for future in futures:
        c, completion, observation, done = future.result()
        if done:
            c.done, c.termination = True, c.env.stats.termination
            continue
        ids = chat.observation(observation, completion.finish_reason == "stop")
        if len(c.prompt) + len(c.tokens) + len(ids) + min_turn_tokens > max_context:
            c.env.end("max_context")
            c.done, c.termination = True, "max_context"
            continue
        c.receive(ids, None)
        c.add(ids, None)


def score_episode(c: Conversation) -> tuple[float, dict]:
    """The ended episode's (reward, info); an environment failure gives (0, env_error) and masks the episode."""
    if c.termination == "env_error":
        return 0.0, {"reason": "env_error", "error": c.error}
    t0 = time.perf_counter()
    try:
        reward, info = c.env.reward()
    except Exception as err:  # grading infrastructure failed: no reward to learn from; the episode is masked
        c.termination, c.error = "env_error", f"reward: {err}"
        return 0.0, {"reason": "env_error", "error": c.error}
    finally:
        c.env.close()
    # grade_s: this episode's grading wall clock (time/reward_s is the step's, over agent.env_workers threads)
    return float(reward), {**{k: v for k, v in info.items() if isinstance(v, (str, int, float, bool)) or v is None},
                           "grade_s": round(time.perf_counter() - t0, 3)}


def check_token_integrity(c: Conversation) -> None:
    """Raise `TokenIntegrityError` unless `c`'s transcript is exactly its ledger: the same ids, loss mask 1 on the
    sampler's and 0 on the observations', and the sampler's own log-probs on its tokens."""
    where = f"episode {c.env.instance.get('instance_id')!r} sample {c.sample}"
    want = np.concatenate([s for s, _ in c.ledger] or [np.zeros(0, np.int32)])
    got = np.asarray(c.tokens, np.int32)
    n = min(len(got), len(want))
    differ = np.flatnonzero(got[:n] != want[:n])
    if len(got) != len(want) or len(differ):
        i = int(differ[0]) if len(differ) else n
        raise TokenIntegrityError(
            f"{where}: its training row ({len(got)} ids) is not the {len(want)} ids the sampler returned and the "
            f"observations appended; first difference at token {i} (row {got[i:i + 4].tolist()}, received "
            f"{want[i:i + 4].tolist()}): a turn was re-tokenised")
    mask = np.concatenate([np.full(len(s), float(lp is not None), np.float32) for s, lp in c.ledger]
                          or [np.zeros(0, np.float32)])
    logprobs = np.concatenate([lp if lp is not None else np.zeros(len(s), np.float32) for s, lp in c.ledger]
                              or [np.zeros(0, np.float32)])
    if not (np.array_equal(np.asarray(c.mask, np.float32), mask)
            and np.array_equal(np.asarray(c.logprobs, np.float32), logprobs)):
        raise TokenIntegrityError(f"{where}: its loss mask or behaviour log-probs are not the sampler's (mask 1 and "
                                  "its log-probs on exactly the sampled ids, 0 on the observations)")


def to_rollout(c: Conversation, chat: ChatFormat, scored: tuple[float, dict]) -> Rollout:
    """The scored episode as a GRPO row source; its `policy_version` is its first model turn's (its oldest).
    Raises `TokenIntegrityError` when the row is not the ids the sampler and the observations gave."""
    check_token_integrity(c)
    reward, info = scored
    stats = c.env.stats
    info = {**info, "turns": stats.turns, "tool_errors": stats.tool_errors, "env_s": round(stats.env_seconds, 3),
            "first_error_end": c.first_error_end}
    tokens = np.asarray(c.tokens, np.int32)
    return Rollout(
        prompt_id=c.env.instance["instance_id"], group=c.group, sample=c.sample, prompt_tokens=c.prompt,
        completion_tokens=tokens, sampler_logprobs=np.asarray(c.logprobs, np.float32),
        finish_reason="stop" if c.termination == "finish" else "length",
        completion=chat.tokenizer.decode(tokens.tolist(), skip_special_tokens=False) if len(tokens) else "",
        policy_version=c.first_version if c.first_version >= 0 else c.policy_version, reward=reward,
        reward_info=info,
        token_mask=np.asarray(c.mask, np.float32), termination=c.termination,
        token_versions=np.asarray(c.versions, np.int32))
