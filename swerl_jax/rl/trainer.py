"""The GRPO trainer: a collector's scored groups -> advantages -> sharded policy update -> publish -> log.

    trainer = GRPOTrainer(config, workdir, collector, evaluator)   # or swerl_jax.rl.build.build_grpo_trainer(...)
    summary = trainer.run()                     # resumes from workdir/checkpoints when there is one

The trainer owns the policy, its reference, the sampler it publishes each policy version to, metrics and
checkpoints. Where a step's data comes from is the injected `collector` (`swerl_jax.rl.collector.Collector`: the
repair task's loader + reward service, the agent's tasks + environments, or a test's scripted groups); what is
measured every eval.every_steps is the injected `evaluator` (`(sampler, version) -> metrics`). It knows neither
kind: it reads rewards [P, G] and hands advantages and credit masks to `build_train_batch` as arrays.

One step s (1-based; checkpoint s holds the state after s updates):
  1. `collector.collect(sampler, s, version=s - 1)`: P groups of rl.num_samples scored rollouts, rewards [P, G];
  2. `objectives.group_advantages` per group (compact-filtered samples, and those the collector excludes, stay
     out of the baselines when configured), the collector's credit ends, rows packed (lengths bucketed);
  3. old log-probs from the sampler (`rl.old_logprobs=sampler`) or recomputed by the trainer (`recompute`),
     reference log-probs when rl.kl_coef > 0 (the reference is the policy RL started from; never loaded at 0);
  4. rl.update_epochs x rl.ppo_minibatches updates of `grpo_loss` (`minibatch`; micro-batched, fp32, `optim.*`),
     which also measure the sampler/trainer log-prob mismatch (at k >= 1 per rollout version: `versions`);
  5. params published as policy version s (`sampler.weights`), the evaluator when due, metrics + rollouts written,
     then checkpoint s (with the collector's data position and state).

rl.max_staleness = k >= 1 (asynchronous RL): step 1 comes from `rl.producer.AheadProducer`, a thread that
collects step s + 1 from the newest published version while step s trains (versions >= s - k), and step 5 also
tells it that version s exists. Everything else is the same step; `staleness_mean/max` and `async/*` (queue depth,
the trainer's wait and idle fraction, the producer's blocked time and idle fraction) are logged. At k = 0 no thread
exists: the loop above, bit for bit. rl.off_policy = "decoupled" adds the proximal log-probs (these params, before
the update) to step 3 and uses AReaL's decoupled objective (`objectives.decoupled_policy_loss`).

Timings per step (`time/*`): the collector's (e.g. data, generate, reward_wait, reward_wall), logprobs, train,
sync (publish), eval, step, idle fractions, tokens/s (`rl.idle`): the only metrics a resumed run does not repeat.
"""

from __future__ import annotations

import functools
import pathlib
import time
from typing import Any

import jax
import numpy as np

from swerl_jax import sharding
from swerl_jax.batching import row_shape
from swerl_jax.model.llama import token_logprobs
from swerl_jax.policy import Policy, check_finite, micro_batches
from swerl_jax.resolve import ensure_resolved
from swerl_jax.rl import minibatch
from swerl_jax.rl.collect import InlineSampler
from swerl_jax.rl.collector import COMPLETION_BUCKET, PROMPT_BUCKET, Collector, Evaluator, local_prompts
from swerl_jax.rl.host_batches import gather_groups, local_rows, sharding_sync
from swerl_jax.rl.idle import TimedSampler, generated_tokens, sampler_device_count, step_time_metrics
from swerl_jax.rl.objectives import GRPOLossConfig, advantage_stats, group_advantages, grpo_loss, logprob_mismatch
from swerl_jax.rl.producer import AheadProducer, SerialSampler, taken_metrics
from swerl_jax.rl.rollouts import build_train_batch, flatten_groups, joined_for_training, rollout_metrics
from swerl_jax.rl.versions import KeptVersions, own_version_mismatch
from swerl_jax.runs.affinity import device_env, fleet_placement
from swerl_jax.runs.checkpoint import Checkpointer
from swerl_jax.runs.loop import TrainLoop
from swerl_jax.runs.metrics import device_memory_metrics
from swerl_jax.sampler import weights
from swerl_jax.sampler.client import SamplerClient
from swerl_jax.sampler.factory import build_engine
from swerl_jax.sampler.fleet import SamplerFleet


def make_rl_loss(model_config: Any, loss_cfg: GRPOLossConfig, prompt_len: int, completion_len: int,
                 temperature: float, mismatch_prefix: str = ""):
    """`loss_fn(params, batch)` for rows laid out by `rollouts.build_train_batch(prompt_len, completion_len)`.

    The sampler/trainer mismatch is logged as `{mismatch_prefix}logprob_*`: "" where the batch is fresh (k = 0:
    numerics), "stale_" at k >= 1, where the current params are not the rollouts' (`swerl_jax.rl.versions`)."""
    def loss_fn(params: Any, batch: dict) -> tuple[jax.Array, dict]:
        logp, entropy = token_logprobs(model_config, params, batch["tokens"], batch["attention_mask"],
                                       with_entropy=True, temperature=temperature, start=prompt_len - 1,
                                       length=completion_len, positions=batch.get("score_positions"))
        loss, metrics = grpo_loss(logp, batch["old_logp"], batch.get("ref_logp"), batch["advantages"],
                                  batch["loss_mask"], loss_cfg, entropy=entropy, truncated=batch["truncated"],
                                  prox_logp=batch.get("prox_logp"), sampler_logp=batch["sampler_logp"])
        loss = minibatch.scale_loss(loss, batch)  # rl.ppo_minibatches > 1 only
        mismatch = logprob_mismatch(batch["sampler_logp"], jax.lax.stop_gradient(logp), batch["loss_mask"])
        metrics.update({mismatch_prefix + k: v for k, v in mismatch.items()})
        metrics["num_loss_tokens"] = batch["loss_mask"].sum()  # the mismatch's tokens (before compact filtering)
        return loss, metrics

    return loss_fn


class GRPOTrainer(TrainLoop):
    """Owns the policy, the reference, the sampler, metrics and checkpoints; steps come from its collector."""

    stage = "grpo"

    def __init__(self, config: Any, workdir: str | pathlib.Path, collector: Collector,
                 evaluator: Evaluator | None = None, initial_params: Any = None) -> None:
        """Set everything up (nothing is sampled yet). `initial_params` (e.g. from SFT) replaces model.hf_dir;
        the trainer closes `collector` with itself."""
        self.config = config = ensure_resolved(config)  # typed sections (resolved by the entry point)
        self.workdir = pathlib.Path(workdir)
        self.collector, self.evaluator = collector, evaluator
        rl = config.rl
        self.num_steps = int(rl.num_steps)
        self.num_samples = int(rl.num_samples)
        self.local_prompts = local_prompts(config)
        self.loss_cfg = GRPOLossConfig.from_config(config)
        self.temperature = float(config.sampler.temperature) or 1.0  # greedy rows report T = 1 log-probs
        rows = int(rl.prompts_per_step) * self.num_samples
        self.minibatches = int(rl.ppo_minibatches)  # sequential updates per epoch, on rows / n each (`minibatch`)
        minibatch.check_minibatches(rows, self.minibatches, int(rl.micro_batch_size),
                                    self.local_prompts * self.num_samples)
        rows //= self.minibatches
        self.num_micro = micro_batches(rows, int(rl.micro_batch_size), "rl.micro_batch_size")
        # rl.update_epochs (GRPO's mu): optimizer updates per batch; the schedule counts updates
        self.update_epochs = int(rl.update_epochs)
        warmup = int(rl.warmup_steps)  # -1: optim.warmup_steps
        # each micro-batch is what gets sharded over the batch axes: rl.micro_batch_size must split over them
        updates = self.num_steps * self.update_epochs * self.minibatches
        self.policy = Policy.create(config, updates, params=initial_params, global_batch=rows // self.num_micro,
                                    warmup_steps=warmup if warmup >= 0 else None)
        # The reference is the policy RL starts from (pretrained or SFT'd); a copy, because the state is donated.
        self.reference = (jax.tree.map(lambda x: x.copy(), self.policy.state.params)
                          if self.loss_cfg.needs_reference else None)
        self.checkpointer = Checkpointer.from_config(config, self.workdir)
        self.weights_dir = str(config.sampler.weights_dir or self.workdir / "policy")
        self.sampler = None
        self.inline = str(config.sampler.mode) == "inline"
        # rl.max_staleness = k: 0 is the synchronous loop; k >= 1 collects ahead (swerl_jax.rl.producer)
        self.max_staleness = int(rl.max_staleness)
        self.producer: AheadProducer | None = None
        # k >= 1: the params of the last k versions, to measure the sampler's numerics against each rollout's own
        self.kept = KeptVersions(self.max_staleness) if self.max_staleness > 0 else None
        self._position, self._state = None, {}  # k >= 1: data position, collector state of the last trained step
        self._timed: TimedSampler | None = None  # time/sampler_idle_frac's spans (`rl.idle`)
        self._devices = jax.local_device_count() + sampler_device_count(str(config.sampler.devices))
        self._logprob_fns: dict = {}
        self.is_main = sharding.is_main_process()
        self.save_rollouts = bool(config.logging.save_rollouts)
        self.eval_every = int(config.eval.every_steps)

    @property
    def data_iter(self) -> Any:
        """The collector's data position (the loop checkpoints it with each step and restores it); at k >= 1 the
        position after the last trained step's draw, not the producer's, which is ahead."""
        return self._position if self.producer is not None else self.collector.data_iter

    @data_iter.setter
    def data_iter(self, value: Any) -> None:
        self.collector.data_iter = value

    # --- sampler ----------------------------------------------------------------------------------------------

    def _start_sampler(self, version: int) -> None:
        """Publish the current params as `version` and start (or refresh) the sampler on them."""
        if self.inline:
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
        log_dir = self.workdir / "sampler" / f"process_{jax.process_index()}"
        n = int(self.config.sampler.num_processes)
        memory_fraction = float(self.config.sampler.memory_fraction)

        def client(log: pathlib.Path, cpus: str, devices: str) -> SamplerClient:
            return SamplerClient(config_json=str(config_path), weights_dir=self.weights_dir, log_dir=str(log),
                                 timeout_s=float(self.config.sampler.request_timeout_s),
                                 server_args=[f"--cpus={cpus}"] if cpus else [],
                                 server_env=device_env(devices, memory_fraction))

        # sampler.num_processes servers, each on its share of sampler.cpus and sampler.devices; every one loads
        # each version
        places = fleet_placement(str(self.config.sampler.cpus), str(self.config.sampler.devices), n)
        if n == 1:
            self.sampler = client(log_dir, *places[0])
        else:
            self.sampler = SamplerFleet([client(log_dir / f"server_{i}", *p) for i, p in enumerate(places)])

    def _publish(self, version: int) -> None:
        if self.inline:
            self.sampler.update(self.policy.host_params(), version)
        else:  # a collection ahead may still be loading one of the k versions before this one
            weights.publish(self.weights_dir, self.policy.state.params, version, keep_last=2 + self.max_staleness)
        if self.producer is not None:
            self.producer.publish(version)

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
        """Run step `step` (1-based) and return (metrics, rollout rows to write)."""
        rl = self.config.rl
        t_step = time.perf_counter()
        async_metrics: dict = {}
        if self.producer is None:
            self.report(f"step {step}: collecting rollouts")
            groups = self.collector.collect(self.sampler, step, step - 1)
            version = step - 1
            waited = time.perf_counter() - t_step  # the synchronous trainer waits for the whole collection
        else:
            item, waited, depth = self.producer.take(step)
            groups, version, self._position, self._state = item.groups, item.version, item.position, item.state
            async_metrics = taken_metrics(item, waited, depth, step)
        rewards = groups.rewards  # [P, G]
        # DeepSWE (rl.compact_filtering and rl.baseline_excludes_filtered): truncated samples leave the baselines
        valid = groups.baseline_mask(exclude_truncated=bool(rl.compact_filtering and rl.baseline_excludes_filtered))
        advantages = np.asarray(group_advantages(rewards, str(rl.advantage), float(rl.std_eps), int(rl.std_ddof),
                                                 valid))
        credit_end, credit_metrics = self.collector.credit(groups, advantages)
        rollouts = flatten_groups(groups.rollouts)
        rows, credit_end = joined_for_training(groups.rollouts, credit_end)  # an episode's row: max_context wide

        # one shape on every process (the longest row anywhere), bucketed so a run compiles a few programs
        prompt_len, completion_len = row_shape(
            *zip(*((r.prompt_tokens, r.completion_tokens) for r in flatten_groups(rows))),
            prompt_bucket=PROMPT_BUCKET, completion_bucket=COMPLETION_BUCKET,
            prompt_cap=int(self.config.data.max_prompt_len), completion_cap=int(self.collector.completion_cap))
        batch_np = build_train_batch(rows, prompt_len, completion_len, advantages, credit_end)
        batch_np["sampler_logp"] = batch_np["old_logp"]
        t0 = time.perf_counter()
        self.report(f"step {step}: log-probs of {len(rollouts)} rollouts")
        if str(rl.old_logprobs) == "recompute":
            batch_np["old_logp"] = self._logprobs(self.policy.state.params, batch_np, prompt_len, completion_len)
        # the proximal policy: these params, before this update (decoupled; the mismatch correction's trainer side)
        if self.loss_cfg.off_policy == "decoupled" or self.loss_cfg.mismatch_correction != "off":
            batch_np["prox_logp"] = (batch_np["old_logp"] if str(rl.old_logprobs) == "recompute" else
                                     self._logprobs(self.policy.state.params, batch_np, prompt_len, completion_len))
        if self.reference is not None:
            batch_np["ref_logp"] = self._logprobs(self.reference, batch_np, prompt_len, completion_len)
        own_metrics = {} if self.kept is None else own_version_mismatch(  # k >= 1; keeps version step - 1
            self.kept, step - 1, self.policy.state.params, [r.policy_version for r in rollouts], batch_np,
            lambda params: self._logprobs(params, batch_np, prompt_len, completion_len))
        t_logprobs = time.perf_counter() - t0

        t0 = time.perf_counter()
        loss_fn = make_rl_loss(self.policy.model_config, self.loss_cfg, prompt_len, completion_len,
                               self.temperature, mismatch_prefix="stale_" if self.kept is not None else "")
        # n updates on the n row blocks (n = 1: the batch itself); old and proximal log-probs stay as computed
        parts = minibatch.make_parts(batch_np, self.minibatches, self.loss_cfg)
        self.report(f"step {step}: policy update" + ("" if self.policy.compiled(("rl", prompt_len, completion_len))
                                                     else f" (compiling it for rows {prompt_len}+{completion_len})"))
        step_fn = self.policy.train_step(loss_fn, parts[0], self.num_micro, key=("rl", prompt_len, completion_len),
                                         reduction=minibatch.metric_reduction)
        sharded = [self.policy.shard(p) for p in parts]
        # update 1 on-policy; later ones (other minibatches, later epochs): the ratio moves and the clip bounds it
        self.policy.state, train_metrics, later, updates = minibatch.run_updates(step_fn, self.policy.state, sharded,
                                                                                 self.update_epochs)
        train_metrics.update(minibatch.later_update_metrics(updates))
        if self.update_epochs > 1:
            later = jax.device_get(later)
            train_metrics.update({f"last_epoch/{k}": later[k] for k in ("loss", "clip_frac", "ratio_mean",
                                                                         "approx_kl", "grad_norm")})
        t_train = time.perf_counter() - t0
        skip = int(self.config.optim.skip_nonfinite)
        finite = check_finite(train_metrics, step, "GRPO", skip)
        if self.update_epochs > 1:
            finite &= check_finite(later, step, "GRPO (last epoch)", skip)
        for i, update in enumerate(updates):
            finite &= check_finite(update, step, f"GRPO (update {i + 2})", skip)

        t0 = time.perf_counter()
        eval_due = self.eval_every > 0 and (step % self.eval_every == 0 or step == self.num_steps)
        if step < self.num_steps or eval_due:  # else the last step's policy is only in the checkpoint
            self.report(f"step {step}: publishing policy version {step}")
            self._publish(step)
        t_sync = time.perf_counter() - t0

        all_rewards, all_adv = gather_groups(rewards), gather_groups(advantages)
        metrics = {k: float(v) for k, v in train_metrics.items()}
        metrics.update({k: float(v) for k, v in advantage_stats(all_rewards, all_adv).items()})
        metrics.update(rollout_metrics(rollouts))
        metrics.update(own_metrics)
        # a step's version is its oldest rollout's (at k = 0 every rollout's is step - 1)
        known = [r.policy_version for r in rollouts if r.policy_version >= 0]
        metrics["policy_version"] = min(known) if self.kept is not None and known else version
        metrics["nonfinite_update"] = int(not finite)
        metrics.update(groups.metrics)  # e.g. records skipped as invalid or too long, the reward service's counters
        metrics.update(credit_metrics)
        metrics.update(device_memory_metrics())  # the trainer's allocator peak (GPU/TPU; nothing on CPU)
        t_eval = None
        if eval_due:
            t0 = time.perf_counter()
            self.report(f"step {step}: held-out evaluation")
            metrics.update(self.evaluate(step))
            t_eval = time.perf_counter() - t0
        metrics["time"] = {**groups.times, "logprobs_s": t_logprobs, "train_s": t_train, "sync_s": t_sync,
                           "step_s": time.perf_counter() - t_step}
        generated = int(groups.metrics.get("dynamic/generated_tokens", generated_tokens(rollouts)))  # all draws'
        metrics["time"].update(step_time_metrics(self._timed, t_step, metrics["time"]["step_s"], waited, generated,
                                                 self._devices))  # idle, tokens/s
        if async_metrics:  # async/trainer_idle_frac: time/trainer_idle_frac under its k >= 1 name
            metrics.update(async_metrics, **{"async/trainer_idle_frac": metrics["time"]["trainer_idle_frac"]})
        if t_eval is not None:
            metrics["time"]["eval_s"] = t_eval
        rows = [r.to_json(step, advantage=advantages[p, r.sample])
                for p, group in enumerate(groups.rollouts) for r in group]
        return metrics, rows

    def evaluate(self, version: int) -> dict:
        """The evaluator's metrics of policy `version` (published to the sampler); {} without an evaluator."""
        return self.evaluator(self.sampler, version) if self.evaluator is not None else {}

    # --- the loop (swerl_jax.runs.loop.TrainLoop) -----------------------------------------------------------------

    def host_state(self) -> dict:
        """The collector's state (e.g. reward counters) checkpointed with each step; k >= 1: the trained step's."""
        return self._state if self.producer is not None else self.collector.state_dict()

    def load_host_state(self, state: dict) -> None:
        """Restore the collector's state from a checkpoint."""
        if state:
            self.collector.load_state_dict(state)

    def before_steps(self, start: int) -> None:
        """Start the sampler on the restored (or initial) params as policy version `start`; at k >= 1 start
        collecting ahead (the producer and the evaluator then share the sampler one request at a time)."""
        self.report("starting the sampler")
        self._start_sampler(version=start)
        if not (str(self.config.rl.task) == "agent" and str(self.config.agent.kv_cache) == "kept"):
            self.sampler = self._timed = TimedSampler(self.sampler)  # kept K/V drives the engine around generate
        if self.max_staleness == 0 and hasattr(self.collector, "progress"):  # live lines from inside the collection
            self.collector.progress = lambda text: self.report(f"step {self.step_in_flight}: {text}")
        if self.max_staleness > 0:
            self.sampler = SerialSampler(self.sampler)
            self._position, self._state = self.collector.data_iter, self.collector.state_dict()  # until step 1
            self.producer = AheadProducer(self.collector, self.sampler, max_staleness=self.max_staleness,
                                          first_step=start + 1, last_step=self.num_steps, published=start)

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
        """Stop the sampler and the collector (reward workers, environment pool); finish pending checkpoint
        writes."""
        if self.producer is not None:  # first a short wait for the collection in flight, then the sampler: a
            self.producer.close(timeout_s=1.0)  # producer request waiting for a version nobody will publish is
        if self.sampler is not None:  # killed with it (SerialSampler.close) and the thread ends
            self.sampler.close()
            self.sampler = None
        if self.producer is not None:
            self.producer.close()
        self.collector.close()
        self.checkpointer.close()
