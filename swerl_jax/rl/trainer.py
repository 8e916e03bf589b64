"""The GRPO trainer: prompts -> sampler -> rewards -> advantages -> sharded policy update -> publish -> log.

    trainer = GRPOTrainer(config, workdir)           # or initial_params= the SFT stage's result
    summary = trainer.run()                           # resumes from workdir/checkpoints when there is one

One step s (1-based; checkpoint s holds the state after s updates):
  1. the Grain loader's next `rl.prompts_per_step` prompts (this process's share);
  2. `collect.collect_rollouts`: the sampler (a separate process by default) draws `rl.num_samples` completions
     per prompt from policy version s - 1, and the reward service scores each request's groups while the next
     request is generated;
  3. `objectives.group_advantages` per group; rollouts packed into fixed-shape rows (lengths bucketed);
  4. old log-probs from the sampler (`rl.old_logprobs=sampler`) or recomputed by the trainer (`recompute`),
     reference log-probs when rl.kl_coef > 0 (the reference is the policy RL started from; never loaded at 0);
  5. one optimizer update of `grpo_loss` (micro-batched, fp32 accumulation, `optim.*`), which also measures the
     sampler/trainer log-prob mismatch on the same tokens;
  6. params published as policy version s (`sampler.weights`), metrics + rollouts written, then checkpoint s.

Timings per step (`time/*`): data, generate, reward_wait (reward time not hidden behind generation),
reward_wall, logprobs, train, sync (publish), step. They are the only metrics a resumed run does not repeat.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import pathlib
import time
from typing import Any

import jax
import numpy as np

from swerl_jax import sharding
from swerl_jax.batching import row_shape
from swerl_jax.checkpoint import Checkpointer
from swerl_jax.config import resolve_config
from swerl_jax.data.budget import answer_budget_warning
from swerl_jax.data.loader import data_metrics, rl_dataset_from_config
from swerl_jax.eval.repair_score import heldout_records, repair_score
from swerl_jax.loop import TrainLoop
from swerl_jax.model.llama import token_logprobs
from swerl_jax.policy import Policy, check_finite, micro_batches
from swerl_jax.reward.service import RewardService
from swerl_jax.rl.collect import InlineSampler, collect_rollouts
from swerl_jax.rl.objectives import GRPOLossConfig, advantage_stats, group_advantages, grpo_loss, logprob_mismatch
from swerl_jax.rl.rollouts import RolloutGroups, build_train_batch, flatten_groups, reward_matrix, rollout_metrics
from swerl_jax.sampler import weights
from swerl_jax.sampler.client import SamplerClient
from swerl_jax.sampler.engine import SamplingParams
from swerl_jax.sampler.factory import build_engine
from swerl_jax.tokenizer import tokenizer_for

log = logging.getLogger("swerl_jax.rl")
PROMPT_BUCKET, COMPLETION_BUCKET = 64, 32  # few distinct shapes, few train-step compilations


def make_rl_loss(model_config: Any, loss_cfg: GRPOLossConfig, prompt_len: int, completion_len: int,
                 temperature: float):
    """`loss_fn(params, batch)` for rows laid out by `rollouts.build_train_batch(prompt_len, completion_len)`."""
    def loss_fn(params: Any, batch: dict) -> tuple[jax.Array, dict]:
        logp, entropy = token_logprobs(model_config, params, batch["tokens"], batch["attention_mask"],
                                       with_entropy=True, temperature=temperature, start=prompt_len - 1,
                                       length=completion_len, positions=batch.get("score_positions"))
        loss, metrics = grpo_loss(logp, batch["old_logp"], batch.get("ref_logp"), batch["advantages"],
                                  batch["loss_mask"], loss_cfg, entropy=entropy, truncated=batch["truncated"])
        metrics.update(logprob_mismatch(batch["sampler_logp"], jax.lax.stop_gradient(logp), batch["loss_mask"]))
        return loss, metrics

    return loss_fn


def sampling_params(config: Any) -> SamplingParams:
    """The `sampler` section as SamplingParams (stop at the tokenizer's end of turn)."""
    s = config.sampler
    try:
        return SamplingParams(temperature=float(s.temperature), top_p=float(s.top_p), top_k=int(s.top_k),
                              max_new_tokens=int(s.max_new_tokens)).validate()
    except ValueError as err:  # name the config key (the fields are the sampler section's), not the dataclass
        raise ValueError(str(err).replace("sampling.", "sampler.", 1)) from err


class GRPOTrainer(TrainLoop):
    """Owns the policy, the reference, the loader, the sampler, the reward service, metrics and checkpoints."""

    stage = "grpo"

    def __init__(self, config: Any, workdir: str | pathlib.Path, initial_params: Any = None) -> None:
        """Set everything up (nothing is sampled yet). `initial_params` (e.g. from SFT) replaces model.hf_dir."""
        # typed sections, every key checked (swerl_jax.config): rl.num_samples >= 2, the loss, sampler.mode, ...
        self.config = config = resolve_config(config)
        self.workdir = pathlib.Path(workdir)
        rl = config.rl
        self.num_steps = int(rl.num_steps)
        self.num_samples = int(rl.num_samples)
        processes = jax.process_count()
        if int(rl.prompts_per_step) % processes:
            raise ValueError(f"rl.prompts_per_step={rl.prompts_per_step} is not divisible by the {processes} "
                             "processes (each samples its own share of the prompts)")
        self.local_prompts = int(rl.prompts_per_step) // processes
        self.loss_cfg = GRPOLossConfig.from_config(config)
        self.sampling = sampling_params(config)
        self.temperature = float(config.sampler.temperature) or 1.0  # greedy rows report T = 1 log-probs
        rows = int(rl.prompts_per_step) * self.num_samples
        self.num_micro = micro_batches(rows, int(rl.micro_batch_size), "rl.micro_batch_size")
        # rl.update_epochs (GRPO's mu): optimizer updates per batch; the schedule counts updates
        self.update_epochs = int(rl.update_epochs)
        # each micro-batch is what gets sharded over the batch axes: rl.micro_batch_size must split over them
        self.policy = Policy.create(config, self.num_steps * self.update_epochs, params=initial_params,
                                    global_batch=rows // self.num_micro)
        # The reference is the policy RL starts from (pretrained or SFT'd); a copy, because the state is donated.
        self.reference = (jax.tree.map(lambda x: x.copy(), self.policy.state.params)
                          if self.loss_cfg.needs_reference else None)
        self.data_iter = self.make_data_iter()
        self.checkpointer = Checkpointer.from_config(config, self.workdir)
        self.reward_service = self.make_reward_service()
        self.weights_dir = str(config.sampler.weights_dir or self.workdir / "policy")
        self.sampler = None
        self._logprob_fns: dict = {}
        self.is_main = sharding.is_main_process()
        self.save_rollouts = bool(config.logging.save_rollouts)
        # held-out repair evaluation (eval.*): greedy answers to records the run never trains on, on process 0
        self.eval_every = int(config.eval.every_steps)
        self.eval_records = heldout_records(config) if self.eval_every > 0 and self.is_main else []

    # --- what a task variant overrides (the agent trainer: swerl_jax/agent/trainer.py) ---------------------------

    def make_data_iter(self) -> Any:
        """The Grain iterator of this process's prompt batches (checkpointed with each step)."""
        if sharding.is_main_process() and (warning := answer_budget_warning(self.config)):
            log.warning("this config cannot learn: %s", warning)
        return iter(rl_dataset_from_config(self.config))

    def make_reward_service(self) -> RewardService | None:
        """The host-side reward workers (the SWE-RL reward of each answer)."""
        r = self.config.reward
        return RewardService(num_workers=int(r.num_workers), timeout_s=float(r.timeout_s),
                             fallback_reward=float(r.fallback_reward), kind=str(r.kind))

    def collect(self, step: int) -> tuple[RolloutGroups, dict, dict]:
        """Step `step`'s scored rollouts [P][G], its timings (`time/*`, seconds) and extra metrics."""
        t0 = time.perf_counter()
        batch = next(self.data_iter)
        t_data = time.perf_counter() - t0
        # Groups are numbered within this process (its prompts); only process 0 writes rollout files.
        groups, times = collect_rollouts(
            self.sampler, self.reward_service, batch, self.sampling, self.num_samples, step, int(self.config.seed),
            policy_version=step - 1, prompts_per_request=int(self.config.sampler.prompts_per_request))
        return groups, {"data_s": t_data, "generate_s": times.generate_s, "reward_wall_s": times.reward_wall_s,
                        "reward_wait_s": times.reward_wait_s, "reward_hidden_frac": times.reward_hidden_frac}, \
            data_metrics(self.data_iter)

    def baseline_mask(self, groups: RolloutGroups) -> np.ndarray | None:
        """[P, G] bool: which samples enter their group's advantage baseline (None: all of them)."""
        rl = self.config.rl
        if not (rl.compact_filtering and rl.baseline_excludes_filtered):
            return None
        valid = np.ones((len(groups), self.num_samples), bool)  # DeepSWE: truncated samples stay out
        for p, group in enumerate(groups):
            for r in group:
                valid[p, r.sample] = not r.truncated
        return valid

    def assign_credit(self, groups: RolloutGroups) -> dict[str, float]:
        """After the advantages are set, before the batch: which tokens carry them (a subclass may narrow
        `Rollout.token_mask`). Returns metrics; GRPO's single-turn rows keep every completion token."""
        return {}

    def completion_cap(self) -> int:
        """The longest completion a train row holds (a multi-turn transcript is longer than one answer)."""
        return max(COMPLETION_BUCKET, int(self.config.sampler.max_new_tokens))

    # --- sampler ----------------------------------------------------------------------------------------------

    def _start_sampler(self, version: int) -> None:
        """Publish the current params as `version` and start (or refresh) the sampler on them."""
        mode = str(self.config.sampler.mode)
        if mode == "inline":
            if jax.process_count() > 1:
                raise ValueError("sampler.mode='inline' is single-process only; use sampler.mode='process'")
            engine = build_engine(self.config)
            self.sampler = InlineSampler(engine)
            self.sampler.update(self.policy.host_params(), version)
            return
        weights.reset(self.weights_dir)  # a resumed run starts over from its checkpoint's params
        weights.publish(self.weights_dir, self.policy.state.params, version)
        config_path = self.workdir / "config.json"
        if self.is_main:
            self.workdir.mkdir(parents=True, exist_ok=True)
            config_path.write_text(self.config.to_json(indent=1))
        sharding_sync("config written")
        self.sampler = SamplerClient(config_json=str(config_path), weights_dir=self.weights_dir,
                                     log_dir=str(self.workdir / "sampler" / f"process_{jax.process_index()}"),
                                     timeout_s=float(self.config.sampler.request_timeout_s))

    def _publish(self, version: int) -> None:
        if isinstance(self.sampler, InlineSampler):
            self.sampler.update(self.policy.host_params(), version)
        else:
            weights.publish(self.weights_dir, self.policy.state.params, version, keep_last=2)

    # --- one step ---------------------------------------------------------------------------------------------

    def _logprobs(self, params: Any, batch: dict, prompt_len: int, completion_len: int) -> np.ndarray:
        """Log-probs of the completion tokens under `params` (no gradient), as host rows of this process."""
        key = (prompt_len, completion_len)
        if key not in self._logprob_fns:
            self._logprob_fns[key] = jax.jit(functools.partial(
                token_logprobs, self.policy.model_config, temperature=self.temperature, start=prompt_len - 1,
                length=completion_len))
        sharded = self.policy.shard({"tokens": batch["tokens"], "attention_mask": batch["attention_mask"]})
        with sharding.mesh_context(self.policy.mesh, self.policy.rules):
            out = self._logprob_fns[key](params, sharded["tokens"], sharded["attention_mask"])
        return local_rows(out)

    def train_step(self, step: int) -> tuple[dict, list]:
        """Run step `step` (1-based) and return (metrics, rollouts)."""
        rl = self.config.rl
        t_step = time.perf_counter()
        groups, collect_times, collect_metrics = self.collect(step)
        rewards = reward_matrix(groups, self.num_samples)  # [P, G]
        valid = self.baseline_mask(groups)
        advantages = np.asarray(group_advantages(rewards, str(rl.advantage), float(rl.std_eps), int(rl.std_ddof),
                                                 valid))
        for p, group in enumerate(groups):
            for r in group:
                r.advantage = float(advantages[p, r.sample])
        credit_metrics = self.assign_credit(groups)
        rollouts = flatten_groups(groups)

        # one shape on every process (the longest row anywhere), bucketed so a run compiles a few programs
        prompt_len, completion_len = row_shape(
            [r.prompt_tokens for r in rollouts], [r.completion_tokens for r in rollouts],
            prompt_bucket=PROMPT_BUCKET, completion_bucket=COMPLETION_BUCKET,
            prompt_cap=int(self.config.data.max_prompt_len),
            completion_cap=self.completion_cap())
        batch_np = build_train_batch(groups, prompt_len, completion_len)
        batch_np["sampler_logp"] = batch_np["old_logp"]
        t0 = time.perf_counter()
        if str(rl.old_logprobs) == "recompute":
            batch_np["old_logp"] = self._logprobs(self.policy.state.params, batch_np, prompt_len, completion_len)
        if self.reference is not None:
            batch_np["ref_logp"] = self._logprobs(self.reference, batch_np, prompt_len, completion_len)
        t_logprobs = time.perf_counter() - t0

        t0 = time.perf_counter()
        loss_fn = make_rl_loss(self.policy.model_config, self.loss_cfg, prompt_len, completion_len,
                               self.temperature)
        step_fn = self.policy.train_step(loss_fn, batch_np, self.num_micro, key=("rl", prompt_len, completion_len))
        sharded = self.policy.shard(batch_np)
        self.policy.state, train_metrics = step_fn(self.policy.state, sharded)
        train_metrics = jax.device_get(train_metrics)  # epoch 0: the on-policy figures (mismatch, ratio 1)
        for _ in range(1, self.update_epochs):  # later epochs: the ratio moves and the clip bounds it
            self.policy.state, later = step_fn(self.policy.state, sharded)
        if self.update_epochs > 1:
            later = jax.device_get(later)
            train_metrics.update({f"last_epoch/{k}": later[k] for k in ("loss", "clip_frac", "ratio_mean",
                                                                         "approx_kl", "grad_norm")})
        t_train = time.perf_counter() - t0
        skip = int(self.config.optim.skip_nonfinite)
        finite = check_finite(train_metrics, step, "GRPO", skip)
        if self.update_epochs > 1:
            finite &= check_finite(later, step, "GRPO (last epoch)", skip)

        t0 = time.perf_counter()
        eval_due = self.eval_every > 0 and (step % self.eval_every == 0 or step == self.num_steps)
        if step < self.num_steps or eval_due:  # else the last step's policy is only in the checkpoint
            self._publish(step)
        t_sync = time.perf_counter() - t0

        all_rewards, all_adv = gather_groups(rewards), gather_groups(advantages)
        metrics = {k: float(v) for k, v in train_metrics.items()}
        metrics.update({k: float(v) for k, v in advantage_stats(all_rewards, all_adv).items()})
        metrics.update(rollout_metrics(rollouts))
        metrics["policy_version"] = step - 1
        metrics["nonfinite_update"] = int(not finite)
        metrics.update(collect_metrics)  # e.g. records skipped as invalid or too long, by reason
        metrics.update(credit_metrics)
        if self.reward_service is not None:
            metrics["reward_service"] = {k: v for k, v in self.reward_service.metrics().items()
                                         if k in ("items", "timeouts", "crashes", "exceptions", "nonfinite",
                                                  "format_error_total")}
        t_eval = None
        if eval_due:
            t0 = time.perf_counter()
            metrics.update(self.evaluate(step))
            t_eval = time.perf_counter() - t0
        metrics["time"] = {**collect_times, "logprobs_s": t_logprobs, "train_s": t_train, "sync_s": t_sync,
                           "step_s": time.perf_counter() - t_step}
        if t_eval is not None:
            metrics["time"]["eval_s"] = t_eval
        return metrics, rollouts

    def evaluate(self, version: int) -> dict:
        """The repair metric of policy `version` on the held-out records (greedy): eval/format_rate, eval/score,
        eval/exact_rate, eval/mean_reward. Process 0 only (the others return {})."""
        if not self.eval_records:
            return {}
        greedy = dataclasses.replace(self.sampling, temperature=0.0)
        chunk = max(1, int(self.config.sampler.max_batch))

        def generate(prompts: list[np.ndarray]) -> list[list[str]]:
            out = []
            for start in range(0, len(prompts), chunk):
                groups = self.sampler.generate(prompts[start:start + chunk], greedy, num_samples=1, seed=0,
                                               min_policy_version=version)
                out += [[c.text or "" for c in group] for group in groups]
            return out

        d = self.config.data
        result = repair_score(self.eval_records, generate, tokenizer_for(self.config.model), d.max_prompt_len,
                              d.prompt_style, self.config.reward.kind)
        return {"eval/format_rate": result.format_rate, "eval/score": result.score,
                "eval/exact_rate": result.exact_rate, "eval/mean_reward": result.mean_reward,
                "eval/answers": result.answers}

    # --- the loop (swerl_jax.loop.TrainLoop) -----------------------------------------------------------------

    def host_state(self) -> dict:
        """The reward service's counters, checkpointed with each step."""
        return {"reward_service": self.reward_service.state_dict()} if self.reward_service is not None else {}

    def load_host_state(self, state: dict) -> None:
        """Restore the reward service's counters from a checkpoint."""
        if self.reward_service is not None:
            self.reward_service.load_state_dict(state["reward_service"])

    def before_steps(self, start: int) -> None:
        """Start the sampler on the restored (or initial) params as policy version `start`."""
        self._start_sampler(version=start)

    def run(self) -> dict:
        """Train from the latest checkpoint (or from scratch) to rl.num_steps, then publish the final policy as
        version rl.num_steps (`publish_final`); returns a summary."""
        start = self.run_loop()
        final = self.publish_final()
        writer = self.metrics_writer
        return {"workdir": str(self.workdir), "steps": self.num_steps, "resumed_from": start,
                "metrics": str(writer.metrics_path), "tensorboard": str(writer.tensorboard_dir),
                "checkpoints": self.checkpointer.directory, "final_policy_version": final}

    def publish_final(self) -> int:
        """Publish the params after the last update to `policy/` as version rl.num_steps (on disk whatever the
        sampler mode), unless it is there already: during the run the sampler only ever needs the policy before
        each step, so without this `policy/` would end one step old (or empty, with the inline sampler), and
        every reader of the newest version (repair-score, export, Agentless, test-time scaling) would evaluate
        step N-1 without saying so."""
        if weights.latest_version(self.weights_dir) != self.num_steps:
            weights.publish(self.weights_dir, self.policy.state.params, self.num_steps, keep_last=2)
        return self.num_steps

    def close(self) -> None:
        """Stop the sampler and the reward workers; finish pending checkpoint writes."""
        if self.sampler is not None:
            self.sampler.close()
            self.sampler = None
        if self.reward_service is not None:
            self.reward_service.close()
        self.checkpointer.close()


def local_rows(x: jax.Array) -> np.ndarray:
    """This process's rows of a batch-sharded global array, as numpy (the whole array in one process)."""
    if jax.process_count() == 1:
        return np.asarray(jax.device_get(x))
    shards = sorted(x.addressable_shards, key=lambda s: s.index[0].start or 0)
    seen, rows = set(), []
    for s in shards:
        start = s.index[0].start or 0
        if start not in seen:
            seen.add(start)
            rows.append(np.asarray(s.data))
    return np.concatenate(rows)


def gather_groups(x: np.ndarray) -> np.ndarray:
    """[P_local, G] per process -> [P, G] over all processes (for global reward metrics)."""
    if jax.process_count() == 1:
        return x
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def sharding_sync(name: str) -> None:
    """A barrier across processes (no-op in one)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)
