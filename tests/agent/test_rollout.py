"""Multi-turn rollouts on synthetic tasks in the real sandbox: the token-level transcript, the loss mask (exactly the
model's tokens), termination reasons, the hidden tests kept out of the work dir, and the rows GRPO trains on."""

from __future__ import annotations

import concurrent.futures
import os

import numpy as np
import pytest

from experiments import agent_tiny_cpu
from swerl_jax.agent.env import SWEEnv
from swerl_jax.agent.rollout import SYSTEM, ChatFormat, Conversation, run_episodes, score_episode
from swerl_jax.agent.sft import Scripted, gold_actions
from swerl_jax.agent.synthetic import SyntheticTasks
from swerl_jax.rl.rollouts import build_train_batch
from swerl_jax.sampler.types import SamplingParams
from swerl_jax.tokenizer import tokenizer_for
from tests.conftest import requires_smollm2

pytestmark = requires_smollm2


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    return SyntheticTasks(tmp_path_factory.mktemp("synthetic"), n=2, seed=0)


@pytest.fixture(scope="module")
def chat():
    return ChatFormat(tokenizer_for(agent_tiny_cpu.get_config().model))


def _env(tasks, instance, work, max_turns=6):
    return SWEEnv(instance, tasks.root / "repos", work, executor=tasks.executor(work / "grade"), max_turns=max_turns,
                  step_timeout_s=30.0, compact=True)


def _episodes(tasks, chat, work, scripts_for, max_turns=6, samples=1):
    envs = [[_env(tasks, inst, work, max_turns) for _ in range(samples)] for inst in tasks.instances]
    scripts = {chat.prompt(SYSTEM, envs[i][0].task()).tobytes(): scripts_for(inst)
               for i, inst in enumerate(tasks.instances)}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        groups, times = run_episodes(envs, Scripted(chat.tokenizer, scripts), chat, SYSTEM, SamplingParams(),
                                     max_context=2048, seed=0, step=1, policy_version=0, pool=pool)
    return groups, times


def test_gold_episodes_resolve_and_the_mask_is_exactly_the_models_tokens(tasks, chat, tmp_path):
    groups, times = _episodes(tasks, chat, tmp_path, gold_actions)
    tok = chat.tokenizer
    for (r,), inst in zip(groups, tasks.instances):
        assert r.reward == 1.0 and r.termination == "finish" and not r.truncated, r.reward_info
        assert r.reward_info["turns"] == 3 and r.reward_info["tool_errors"] == 0
        mask = r.token_mask.astype(bool)
        assert mask.shape == r.completion_tokens.shape
        # the model's tokens are exactly its three actions, each closed by the end-of-turn token it sampled
        runs, start = [], None
        for i, m in enumerate(np.append(mask, False)):
            if m and start is None:
                start = i
            elif not m and start is not None:
                runs.append(r.completion_tokens[start:i])
                start = None
        want = [tok.encode(a, add_special_tokens=False) + [tok.eos_token_id] for a in gold_actions(inst)]
        assert [x.tolist() for x in runs] == want
        # what lies between them is the observations (the view of the file, the edit's report), all masked
        between = tok.decode(r.completion_tokens[~mask].tolist())
        assert inst["gold_edit"]["path"] in r.completion and "user" in between
        assert np.all(r.sampler_logprobs[~mask] == 0)
    assert times.generate_s >= 0 and times.env_wait_s > 0

    batch = build_train_batch(groups, prompt_len=max(len(g[0].prompt_tokens) for g in groups),
                              completion_len=max(len(g[0].completion_tokens) for g in groups),
                              advantages=np.zeros((len(groups), 1)))
    for i, (r,) in enumerate(groups):
        c = len(r.completion_tokens)
        np.testing.assert_array_equal(batch["loss_mask"][i, :c], r.token_mask)
        assert batch["loss_mask"][i, c:].sum() == 0
        k = int(r.token_mask.sum())
        np.testing.assert_array_equal(batch["score_positions"][i, :k], np.flatnonzero(r.token_mask))
        assert np.all(batch["score_positions"][i, k:] == batch["loss_mask"].shape[1])


def test_malformed_actions_are_observations_and_the_episode_ends_at_max_turns(tasks, chat, tmp_path):
    groups, _ = _episodes(tasks, chat, tmp_path, lambda inst: ["I think the bug is in the loop."], max_turns=3)
    for (r,) in groups:
        assert r.termination == "max_turns" and r.truncated  # compact filtering masks it
        assert r.reward_info["turns"] == 3 and r.reward_info["tool_errors"] == 3
        assert r.completion.count("ERROR: No function call found") == 2  # the third turn ends the episode
        assert r.reward == 0.0 and r.reward_info["status"] == "unresolved"


def test_the_first_failed_tool_call_is_located_at_the_end_of_its_model_turn(tasks, chat, tmp_path):
    slip = "<function=file_editor>\n<parameter=command>veiw</parameter>\n</function>"
    groups, _ = _episodes(tasks, chat, tmp_path, lambda inst: [slip, *gold_actions(inst)])
    tok = chat.tokenizer
    for (r,) in groups:
        assert r.reward == 1.0 and r.reward_info["tool_errors"] == 1, r.reward_info  # recovered after the slip
        end = r.reward_info["first_error_end"]
        assert end == len(tok.encode(slip, add_special_tokens=False)) + 1  # the slip and its end-of-turn token
        assert r.token_mask[:end].all() and not r.token_mask[end]  # the error observation follows
    gold, _ = _episodes(tasks, chat, tmp_path / "gold", gold_actions)
    assert all(r.reward_info["first_error_end"] is None for (r,) in gold)


def test_hidden_tests_never_enter_the_work_dir_and_grade_the_diff(tasks, tmp_path):
    inst = tasks.instances[0]
    env = _env(tasks, inst, tmp_path)
    env.reset()
    checkout = env.workspace.repo
    assert not (checkout / inst["test_file"]).exists()
    assert not any("test" in p.name for p in checkout.rglob("*.py"))
    assert env.reward()[0] == 0.0  # no change: the test fails
    (checkout / inst["gold_edit"]["path"]).write_text(inst["gold_edit"]["after"])
    reward, info = env.reward()
    assert reward == 1.0, info
    assert not (checkout / inst["test_file"]).exists()  # graded in the grader's own checkout
    env.close()
    # every file the reward info names (what the rollouts' reward_info keeps) is still there once the episode ended:
    # "log" named the grading log in the host folder close() removes
    named = [v for v in info.values() if isinstance(v, str) and v.startswith(str(tmp_path))]
    assert "log" not in info and all(os.path.exists(v) for v in named), info


def test_a_retokenised_turn_breaks_token_in_token_out_and_is_named(tasks, chat, tmp_path, monkeypatch):
    """A transcript that takes a model turn through its text (decode, then encode: the end-of-turn token the model
    sampled is lost) no longer holds the ids the sampler returned: the episode's row is refused, named."""
    from swerl_jax.agent.rollout import Conversation, TokenIntegrityError

    tok, add = chat.tokenizer, Conversation.add

    def retokenising_add(self, ids, logprobs, version=-1):
        if logprobs is not None:  # a model turn: re-tokenised from its decoded text
            ids = tok.encode(tok.decode(list(ids), skip_special_tokens=True), add_special_tokens=False)
            logprobs = list(logprobs)[:len(ids)]
        add(self, ids, logprobs, version)

    monkeypatch.setattr(Conversation, "add", retokenising_add)
    with pytest.raises(TokenIntegrityError, match=r"episode '.*' sample 0: its training row .* first difference at "
                                                  r"token \d+ .* re-tokenised"):
        _episodes(tasks, chat, tmp_path, gold_actions)


def test_the_token_integrity_check_compares_ids_mask_and_log_probs():
    import types

    from swerl_jax.agent.rollout import Conversation, TokenIntegrityError, check_token_integrity

    c = Conversation(types.SimpleNamespace(instance={"instance_id": "t-1"}), 0, 2)
    for ids, lp in (([5, 6], [-0.5, -0.25]), ([7, 8, 9], None), ([10], [-1.0])):
        c.receive(ids, lp)
        c.add(ids, lp)
    check_token_integrity(c)  # the transcript is the ledger
    assert c.mask == [1, 1, 0, 0, 0, 1] and c.logprobs == [-0.5, -0.25, 0, 0, 0, -1.0]
    c.logprobs[5] = -0.9  # a log-prob that is not the sampler's
    with pytest.raises(TokenIntegrityError, match="episode 't-1' sample 2: its loss mask or behaviour log-probs"):
        check_token_integrity(c)
    c.logprobs[5] = -1.0
    c.tokens.append(11)  # an id nobody returned
    c.mask.append(0.0)
    c.logprobs.append(0.0)
    with pytest.raises(TokenIntegrityError, match=r"\(7 ids\) is not the 6 ids .* token 6 \(row \[11\], "
                                                  r"received \[\]\)"):
        check_token_integrity(c)


def test_a_graded_episode_names_its_own_grading_seconds():
    """Issue 58 item 7: the grading cost per episode was only the step's time/reward_s (over agent.env_workers
    threads); each scored episode now carries grade_s, its own grading wall clock (an env error has none)."""
    class Graded:
        closed = False

        def reward(self):
            return 1.0, {"status": "resolved", "patch": "diff", "nested": {"dropped": 1}}

        def close(self):
            self.closed = True

    env = Graded()
    reward, info = score_episode(Conversation(env=env, group=0, sample=0))
    assert reward == 1.0 and info["status"] == "resolved" and "nested" not in info and env.closed
    assert isinstance(info["grade_s"], float) and info["grade_s"] >= 0.0
    _, failed = score_episode(Conversation(env=Graded(), group=0, sample=1, termination="env_error", error="x"))
    assert "grade_s" not in failed


def test_a_partial_rollouts_turn_keeps_each_tokens_version():
    """A model turn whose tokens span versions (the sampler took a new version mid-turn) keeps one version per
    token; its first is the episode's oldest; an observation is -1."""
    import types

    from swerl_jax.agent.rollout import Conversation, add_turn
    from swerl_jax.sampler.types import Completion

    c = Conversation(types.SimpleNamespace(instance={"instance_id": "t-1"}), 0, 0)
    add_turn(c, Completion(0, 0, np.asarray([5, 6, 7], np.int32), np.full(3, -0.5, np.float32), None, "stop", 2, 3,
                           3, token_versions=np.asarray([3, 4, 4], np.int32)))
    c.receive([8], None)
    c.add([8], None)
    add_turn(c, Completion(0, 0, np.asarray([9], np.int32), np.full(1, -0.5, np.float32), None, "stop", 2, 1, 4))
    assert c.versions == [3, 4, 4, -1, 4] and c.first_version == 3
