"""The repair GRPO trainer (`rl.build.build_grpo_trainer`: GRPOTrainer + RepairCollector) in this process
(sampler.mode=inline, the 7M demo model, 8 new tokens): the switches the slow end-to-end tests leave at their
defaults -- kl_coef > 0 (reference log-probs), old_logprobs=recompute, a micro-batched update -- and every
constructor config error, named by its key."""

from __future__ import annotations

import json
import math

import pytest

from experiments import base
from swerl_jax.data.synthetic import synthetic_records
from swerl_jax.rl.build import build_grpo_trainer
from swerl_jax.runs.metrics import read_metrics


def tiny_config(**rl):
    """2 prompts x 8 samples (one row per fake device and micro-batch) of the compact synthetic prompt (~200
    tokens), 8 new tokens, a reward that varies with the text."""
    c = base.get_config()
    c.model.name = "demo-7m"  # the smallest registry model with the tokenizer's 49152-token vocabulary
    c.data.synthetic_num_records = 4
    c.data.rl_num_records = 2
    c.data.prompt_style = "compact"
    c.data.max_prompt_len = 256
    c.sampler.update(mode="inline", max_new_tokens=8, max_batch=16)
    c.rl.update(num_steps=2, prompts_per_step=2, num_samples=8, kl_coef=0.0, old_logprobs="sampler",
                micro_batch_size=0)
    c.rl.update(rl)
    c.reward.update(kind="python:tests.rl.reward_hooks.vowel_reward", num_workers=1)
    c.optim.learning_rate = 1e-2  # one update moves the policy measurably away from the reference
    c.checkpoint.every_steps = 1
    c.logging.update(tensorboard=False, progress_bar=False)
    return c


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The plain step (1 step) and the one with every switch on (2 steps), from the same seed."""
    out = {}
    for name, steps, rl in (("plain", 1, {}),
                            ("switches", 2, {"kl_coef": 0.05, "old_logprobs": "recompute", "micro_batch_size": 8})):
        trainer = build_grpo_trainer(tiny_config(num_steps=steps, **rl), tmp_path_factory.mktemp(name))
        has_reference, num_micro = trainer.reference is not None, trainer.num_micro
        reports: list[str] = []
        trainer.report = reports.append  # what the progress bar would show, in order
        summary = trainer.run()
        out[name] = (read_metrics(summary["metrics"]), has_reference, num_micro)
        out[f"{name}_reports"] = reports
    return out


def test_the_step_in_flight_is_reported_stage_by_stage(runs):
    """Issue 57 item 7: SmolLM2's first GRPO step took 6m22s with the bar at `0/2` and nothing else. Each stage
    of a step is reported as it starts, from inside the collection too, and a first update says it compiles."""
    said = runs["plain_reports"]
    stages = ["starting the sampler", "step 1: collecting rollouts", "step 1: generating request 1/1 (2 prompts x 8)",
              "step 1: waiting for rewards", "step 1: log-probs of 16 rollouts", "step 1: policy update (compiling it "
              "for rows "]
    at = [next((i for i, s in enumerate(said) if s.startswith(stage)), None) for stage in stages]
    assert None not in at and at == sorted(at), said
    assert any(s.startswith("step 1: rewards scored ") and s.endswith("/16") for s in said), said
    assert said[-1] == ""  # cleared when the step is done


def test_heldout_repair_evaluation_every_step_and_at_the_end(tmp_path):
    """eval.every_steps=1: each step's metrics carry the greedy repair metric of the policy it just published, on
    held-out synthetic records (another seed than the training records)."""
    c = tiny_config(num_steps=2)
    c.eval.update(every_steps=1, num_records=3)
    trainer = build_grpo_trainer(c, tmp_path)
    train_ids = {r["instance_id"] for r in synthetic_records(4, seed=c.seed, repos=None)}
    records = trainer.evaluator.records
    assert len(records) == 3 and not train_ids & {r["instance_id"] for r in records}
    rows = read_metrics(trainer.run()["metrics"])
    for r in rows:
        assert r["eval/answers"] == 3 and r["time/eval_s"] > 0
        assert 0.0 <= r["eval/exact_rate"] <= r["eval/format_rate"] <= 1.0 and 0.0 <= r["eval/score"] <= 100.0
        assert -1.0 <= r["eval/mean_reward"] <= r["eval/score"] / 100
        # the per-answer rows of that evaluation, the same answers the metric counts
        path = tmp_path / "eval" / f"heldout_{r['step']:06d}.jsonl"
        answers = [json.loads(x) for x in path.read_text().splitlines()]
        assert [a["instance_id"] for a in answers] == [rec["instance_id"] for rec in records]
        assert sum(a["reward"] for a in answers) / 3 == pytest.approx(r["eval/mean_reward"])


def test_no_evaluation_by_default(runs):
    assert not [k for r in runs["plain"][0] for k in r if k.startswith("eval/")]


def test_switches_kl_recompute_and_micro_batches(runs):
    plain, plain_ref, plain_micro = runs["plain"]
    rows, has_ref, num_micro = runs["switches"]
    assert (plain_ref, plain_micro) == (False, 1)  # kl_coef 0: no reference is kept
    assert (has_ref, num_micro) == (True, 2)
    assert [r["step"] for r in rows] == [1, 2] and [r["policy_version"] for r in rows] == [0, 1]
    for r in rows:
        assert math.isfinite(r["loss"]) and r["grad_norm"] > 0 and r["nonfinite_update"] == 0
        # recompute: old log-probs are the trainer's own, so the first update's ratio is 1 on every token
        assert abs(r["ratio_max"] - 1) < 1e-5 and abs(r["ratio_mean"] - 1) < 1e-6
        # and the sampler's log-probs of the same tokens are measured against them
        assert 0 <= r["logprob_max_abs_diff"] < 1e-3
    # step 1: the policy is the reference (KL 0); after one update at lr 1e-2 it is not
    assert rows[0]["kl"] == pytest.approx(0.0, abs=1e-6) and rows[1]["kl"] > 1e-4
    # step 1 with KL (at 0), recomputed old log-probs and 2 micro-batches is the plain whole-batch step: same
    # rollouts (same seed and policy), same loss and gradient up to float32 summation order
    for key in ("reward_mean", "advantage_std"):
        assert rows[0][key] == plain[0][key], key
    for key in ("loss", "pg_loss", "grad_norm", "entropy"):
        assert rows[0][key] == pytest.approx(plain[0][key], rel=1e-4, abs=1e-6), key


@pytest.mark.parametrize("key,value,message", [
    ("rl.advantage", "nope", r"rl.advantage='nope' is not one of"),
    ("rl.std_ddof", 8, r"rl.std_ddof=8 needs more than 8 samples per prompt"),
    ("rl.old_logprobs", "x", r"rl.old_logprobs='x' is not one of \['sampler', 'recompute'\]"),
    ("rl.micro_batch_size", 3, r"rl.micro_batch_size=3 does not divide the step's 16 rows"),
    ("rl.update_epochs", 0, r"rl.update_epochs must be >= 1"),
    ("rl.ppo_minibatches", 3, r"rl.ppo_minibatches=3 does not divide the step's 16 rows"),
    ("rl.ppo_minibatches", 0, r"rl.ppo_minibatches must be >= 1"),
    ("rl.kl_estimator", "k9", r"rl.kl_estimator='k9' is not one of"),
    ("rl.loss_agg", "x", r"rl.loss_agg='x' is not one of"),
    ("rl.clip_eps_low", -0.1, r"rl.clip_eps_low must be in \[0, 1\)"),
    ("rl.dual_clip", 0.5, r"rl.dual_clip must be 0 \(off\) or > 1"),
    ("rl.num_samples", 1, r"rl.num_samples must be >= 2"),
    ("sampler.temperature", -1.0, r"sampler.temperature must be >= 0"),
    ("sampler.top_p", 0.0, r"sampler.top_p must be in \(0, 1\]"),
])
def test_constructor_names_the_bad_config_key(tmp_path, key, value, message):
    c = tiny_config()
    section, field = key.split(".")
    c[section][field] = value
    with pytest.raises(ValueError, match=message):
        build_grpo_trainer(c, tmp_path)


def test_unknown_sampler_mode_is_named_before_anything_starts(tmp_path):
    """sampler.mode is checked with the rest of the config when the trainer is built (it used to fail only when
    the sampler started, after the policy was placed and compiled)."""
    c = tiny_config(num_steps=1)
    c.sampler.mode = "threads"
    with pytest.raises(ValueError, match=r"sampler.mode='threads' is not one of \['process', 'inline'\]"):
        build_grpo_trainer(c, tmp_path)
    assert not (tmp_path / "checkpoints").exists()


def test_ppo_minibatches_clip_acts_from_the_second_update(tmp_path):
    """rl.ppo_minibatches=2 (issue 47 item 1): each step's 16 rows are 2 sequential updates with the proximal
    policy fixed, so the first minibatch's ratio is 1 (clip fraction 0) and the second's has moved (lr 1e-2);
    the learning-rate schedule counts every update."""
    c = tiny_config(num_steps=2, ppo_minibatches=2, off_policy="decoupled")
    trainer = build_grpo_trainer(c, tmp_path)
    rows = read_metrics(trainer.run()["metrics"])
    assert int(trainer.policy.state.step) == 2 * 2
    for r in rows:
        assert r["clip_frac"] == 0.0 and abs(r["ratio_max"] - 1) < 1e-5  # the first update: prox = params
        assert r["later_updates/ratio_max_max"] > 1 + 1e-3
    assert max(r["later_updates/clip_frac_max"] for r in rows) > 0


def test_ppo_minibatch_loss_scales_weigh_every_token_alike():
    """n * W_i / W: a token counts n / W whichever minibatch holds it; compact-filtered rows weigh nothing."""
    import numpy as np

    from swerl_jax.rl.minibatch import loss_scales, split

    mask = np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]], np.float32)  # 5 and 4 tokens
    truncated = np.array([False, False, False, True])
    np.testing.assert_allclose(loss_scales(mask, truncated, 2, "token-mean", "active", False), [10 / 9, 8 / 9])
    np.testing.assert_allclose(loss_scales(mask, truncated, 2, "token-mean", "active", True), [10 / 6, 2 / 6])
    np.testing.assert_allclose(loss_scales(mask, truncated, 2, "seq-mean-token-mean", "active", True), [4 / 3, 2 / 3])
    parts = split({"x": np.arange(4)}, 2, np.array([0.5, 1.5], np.float32))
    assert [p["x"].tolist() for p in parts] == [[0, 1], [2, 3]] and parts[1]["loss_scale"].tolist() == [1.5, 1.5]


def test_async_k1_plumbing_end_to_end(tmp_path):
    """Issue 47 items 4-5, at rl.max_staleness=1 with the decoupled loss and 2 minibatches on the 7M model (inline
    sampler): every batch's behaviour log-probs are the sampler's and equal the trainer's under each rollout's own
    version (params snapshotted as each version is published); the proximal log-probs are the params before the
    update (ratio 1, clip 0 at the first update); the behaviour weights are exp(prox - behav). The logged
    `logprob_*` measure that numerics gap (against the rollout's version), `stale_logprob_*` the gap to the trainer
    now, and `policy_version` is the step's oldest rollout version."""
    import functools

    import jax
    import numpy as np

    from swerl_jax.model.llama import token_logprobs

    trainer = build_grpo_trainer(tiny_config(num_steps=4, max_staleness=1, off_policy="decoupled",
                                             ppo_minibatches=2), tmp_path)
    snapshots, batches = {}, []
    start, publish, shard = trainer._start_sampler, trainer._publish, trainer.policy.shard

    def snap(version):
        snapshots[version] = trainer.policy.host_params()

    trainer._start_sampler = lambda version: (snap(version), start(version))[1]
    trainer._publish = lambda version: (snap(version), publish(version))[1]
    trainer.policy.shard = lambda batch: (batches.append(dict(batch)) if "old_logp" in batch else None, shard(batch))[1]
    rows = read_metrics(trainer.run()["metrics"])
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    stale_steps = 0  # each step shards its 2 minibatches in order: the first is the first update's
    for r, first, second in zip(rows, batches[::2], batches[1::2]):
        step = r["step"]
        rollouts = [json.loads(x) for x in (tmp_path / "rollouts" / f"step_{step:06d}.jsonl").read_text().splitlines()]
        versions = np.asarray([x["policy_version"] for x in rollouts])
        assert r["policy_version"] == versions.min() and r["staleness_max"] <= 1
        stale_steps += int(versions.min() < step - 1)
        batch = {k: np.concatenate([first[k], second[k]]) for k in first}
        mask = batch["loss_mask"] > 0
        p = batch["tokens"].shape[1] - batch["old_logp"].shape[1]
        logp = functools.partial(token_logprobs, trainer.policy.model_config, start=p - 1,
                                 length=batch["old_logp"].shape[1], temperature=trainer.temperature)
        own = np.zeros_like(batch["old_logp"])
        for v in np.unique(versions):
            lp = np.asarray(jax.jit(logp)(snapshots[v], batch["tokens"], batch["attention_mask"]))
            own[versions == v] = lp[versions == v]
        assert np.abs(own - batch["old_logp"])[mask].max() < 1e-3  # sampler == trainer under its own version
        assert r["logprob_max_abs_diff"] < 1e-3 and r["logprob_checked_frac"] == 1.0
        prox = np.asarray(jax.jit(logp)(snapshots[step - 1], batch["tokens"], batch["attention_mask"]))
        np.testing.assert_allclose(batch["prox_logp"][mask], prox[mask], atol=1e-5)  # params before the update
        assert r["clip_frac"] == 0.0 and abs(r["ratio_max"] - 1) < 1e-5
        m = first["loss_mask"] > 0
        assert r["behav_weight_mean"] == pytest.approx(np.exp(first["prox_logp"] - first["old_logp"])[m].mean(),
                                                       rel=1e-5)
        if versions.min() < step - 1:  # a stale batch: the trainer moved (lr 1e-2) beyond the sampler's numerics
            assert r["stale_logprob_abs_diff"] > 10 * r["logprob_abs_diff"]
    assert stale_steps >= 1


def test_idle_fractions_and_generated_tokens_per_second_are_logged(runs):
    """The synchronous step's trainer waits for the whole collection, in which the (timed, inline) sampler runs:
    its busy share cannot exceed the trainer's idle one; both are fractions; tokens per second count the answers."""
    for name in ("plain", "switches"):
        for r in runs[name][0]:
            trainer_idle, sampler_idle = r["time/trainer_idle_frac"], r["time/sampler_idle_frac"]
            assert 0 < trainer_idle < 1 and 0 < sampler_idle < 1, r
            assert 1 - sampler_idle <= trainer_idle + 1e-9
            assert r["time/generated_tokens_per_s_per_device"] > 0
