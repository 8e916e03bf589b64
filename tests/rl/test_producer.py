"""Collecting ahead of the trainer (`rl.producer`, rl.max_staleness = k): the bound holds whichever side is slow,
errors reach the trainer, and the data position checkpointed with step t is the one after step t's draw.

The "slow" side is held on an event, never on a sleep: a held trainer publishes nothing, so the producer must stop
at step published + 1 + k; a held sampler returns nothing, so the trainer must wait."""

from __future__ import annotations

import threading

import grain
import numpy as np
import pytest

from swerl_jax.rl.collector import Collector, Groups
from swerl_jax.rl.producer import AheadProducer, FrozenPosition, SerialSampler, check_token_staleness, staleness
from swerl_jax.rl.rollouts import Rollout

WAIT_S = 30.0  # a bound on how long an event may take to arrive; only a broken producer ever reaches it


def _groups(version: int, step: int) -> Groups:
    rollouts = [[Rollout(prompt_id=f"s{step}", group=0, sample=j, prompt_tokens=np.asarray([1], np.int32),
                         completion_tokens=np.asarray([2], np.int32), sampler_logprobs=np.zeros(1, np.float32),
                         finish_reason="stop", completion="", policy_version=version, reward=float(j))
                 for j in range(2)]]
    return Groups.scored(rollouts, 2)


class HeldCollector(Collector):
    """Collects step t from the newest version the `published` callable reports (as the sampler process serves
    the newest version it has), after `gates[t]` is set when `hold` is on; records (step, asked, served,
    published when asked)."""

    completion_cap = 8

    def __init__(self, published, hold: bool = False) -> None:
        self.published = published
        self.hold = hold
        self.gates = {t: threading.Event() for t in range(1, 50)}
        self.calls: list[tuple[int, int, int, int]] = []
        self.called = threading.Condition()
        self.data_iter = iter(grain.MapDataset.range(100).to_iter_dataset())
        self.fail_at: int | None = None

    def collect(self, sampler, step: int, policy_version: int) -> Groups:
        next(self.data_iter)
        seen = self.published()
        with self.called:
            self.calls.append((step, policy_version, seen, seen))
            self.called.notify_all()
        if self.fail_at == step:
            raise ValueError("the reward service died")
        if self.hold:
            assert self.gates[step].wait(WAIT_S)
        return _groups(max(policy_version, self.published()), step)

    def wait_calls(self, n: int) -> None:
        with self.called:
            assert self.called.wait_for(lambda: len(self.calls) >= n, WAIT_S), self.calls


def _producer(k: int, hold: bool = False, last: int = 20, fail_at: int | None = None):
    box = {"p": None}
    collector = HeldCollector(lambda: box["p"].published if box["p"] else 0, hold=hold)
    collector.fail_at = fail_at
    box["p"] = producer = AheadProducer(collector, SerialSampler(object()), max_staleness=k, first_step=1,
                                        last_step=last, published=0)
    return producer, collector


@pytest.mark.parametrize("k", [1, 2])
def test_held_trainer_stops_the_producer_k_steps_ahead(k):
    producer, collector = _producer(k)
    try:
        # the trainer takes nothing and publishes nothing: version 0 allows steps 1 .. k + 1 only
        collector.wait_calls(k + 1)
        assert not _more_calls(collector, k + 1)
        assert [c[0] for c in collector.calls] == list(range(1, k + 2))
        for step in range(1, 8):  # now the trainer runs: take step, train (nothing), publish step
            item, _, depth = producer.take(step)
            age_mean, age_max = staleness(item.groups, step)
            assert age_max <= k and item.version >= step - 1 - k and 1 <= depth <= k + 1
            producer.publish(step)
            collector.wait_calls(min(step + k + 1, 20))
            assert not _more_calls(collector, step + k + 1)
    finally:
        producer.close()
    for step, asked, _, published in collector.calls:  # no step was started before its bound allowed
        assert asked == published >= step - 1 - k


def _more_calls(collector: HeldCollector, n: int, wait_s: float = 0.2) -> bool:
    """Whether a call past the n-th arrives within `wait_s` (a negative check: slowness can only hide a bug here,
    never fail a correct producer)."""
    with collector.called:
        return collector.called.wait_for(lambda: len(collector.calls) > n, wait_s)


def test_held_sampler_makes_the_trainer_wait_and_staleness_stays_bounded():
    k = 1
    producer, collector = _producer(k, hold=True, last=6)
    got = []

    def trainer():
        for step in range(1, 7):
            item, waited, _ = producer.take(step)
            got.append((step, item.version, staleness(item.groups, step)[1], item.position.get_state()))
            producer.publish(step)

    thread = threading.Thread(target=trainer)
    thread.start()
    try:
        for step in range(1, 7):  # the sampler releases one step at a time, each once it was asked for
            collector.wait_calls(step)
            assert len(got) < step  # the trainer cannot have this step before the sampler returned it
            collector.gates[step].set()
        thread.join(WAIT_S)
        assert not thread.is_alive()
    finally:
        producer.close()
    assert [g[0] for g in got] == list(range(1, 7))
    assert all(age <= k and version >= step - 1 - k for step, version, age, _ in got)
    # each step's checkpointed data position is the one after its own draw (one element per step here)
    assert [g[3]["next_index"] for g in got] == list(range(1, 7))


def test_a_collection_error_reaches_the_trainer():
    producer, collector = _producer(1, fail_at=2)
    try:
        producer.take(1)
        with pytest.raises(RuntimeError, match="failed at step 2.*reward service died"):
            producer.take(2)
    finally:
        producer.close()


def test_frozen_position_is_what_grain_checkpoints(tmp_path):
    it = iter(grain.MapDataset.range(10).to_iter_dataset())
    next(it), next(it)
    frozen = FrozenPosition(it.get_state())
    next(it)
    handler = grain.checkpoint.CheckpointHandler()
    handler.save(tmp_path, args=grain.checkpoint.CheckpointSave(frozen))
    fresh = iter(grain.MapDataset.range(10).to_iter_dataset())
    handler.restore(tmp_path, args=grain.checkpoint.CheckpointRestore(fresh))
    assert next(fresh) == 2  # the position after two draws, not the live iterator's three
    with pytest.raises(TypeError):
        next(frozen)


def test_k0_is_not_a_producer():
    with pytest.raises(ValueError, match="max_staleness=0"):
        AheadProducer(HeldCollector(lambda: 0), None, max_staleness=0, first_step=1, last_step=2, published=0)


class CountingCollector(Collector):
    """The same two groups each step, drawn after one element of a Grain iterator (so the checkpointed data
    position counts the steps collected), tagged with the version the trainer asked for."""

    completion_cap = 32

    def __init__(self) -> None:
        self.data_iter = iter(grain.MapDataset.range(1000).to_iter_dataset())
        self.asked: list[tuple[int, int]] = []

    def collect(self, sampler, step: int, policy_version: int) -> Groups:
        next(self.data_iter)
        self.asked.append((step, policy_version))
        rollouts = [[Rollout(prompt_id=f"p{g}", group=g, sample=j, prompt_tokens=np.asarray([5, 6, 7], np.int32),
                             completion_tokens=np.asarray([10 + j, 30], np.int32),
                             sampler_logprobs=np.full(2, -3.0, np.float32), finish_reason="stop", completion="",
                             policy_version=policy_version, reward=float(j == g)) for j in range(4)]
                    for g in range(2)]
        return Groups.scored(rollouts, 4)

    def state_dict(self) -> dict:
        return {"collected": len(self.asked)}  # e.g. the agent stream's tasks in flight after the last collect


def test_trainer_at_k1_trains_stale_batches_with_the_decoupled_loss_and_checkpoints_its_own_position(tmp_path):
    import json

    from experiments import base
    from swerl_jax.rl.trainer import GRPOTrainer

    c = base.get_config()
    c.model.name = "tiny"  # the collector hands over token ids: nothing is tokenized
    c.data.max_prompt_len = 64
    c.rl.update(num_steps=4, prompts_per_step=2, num_samples=4, kl_coef=0.0, max_staleness=1,
                old_logprobs="sampler", off_policy="decoupled", behav_weight_cap=5.0)
    c.sampler.mode = "inline"
    c.eval.every_steps = 0
    c.checkpoint.every_steps = 1
    c.logging.update(tensorboard=False, progress_bar=False, every_steps=1)
    collector = CountingCollector()
    GRPOTrainer(c, tmp_path, collector).run()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for r in rows:  # every batch within the bound, trained with the behaviour weights
        assert r["staleness_max"] <= 1 and r["policy_version"] >= r["step"] - 2
        assert 0 < r["behav_weight_mean"] and "async/trainer_idle_frac" in r and "async/queue_depth" in r
    assert [s for s, _ in collector.asked] == [1, 2, 3, 4]
    # checkpoint s holds the position after step s's draw, whatever the producer had read by then (at step 2 it
    # may have drawn step 3 already)
    for step in (2, 4):
        fresh = CountingCollector()
        trainer = GRPOTrainer(c, tmp_path, fresh)
        try:
            restored = trainer.checkpointer.restore(step, trainer.policy.abstract_state(),
                                                    data_iterator=fresh.data_iter)
            assert next(fresh.data_iter) == step
            # and the collector's state as it was after step s's collection, not after one further ahead
            assert {k: v for k, v in restored.host_state.items() if k == "collected"} == {"collected": step}
        finally:
            trainer.close()


class WaitingSampler:
    """A sampler whose generate waits for a policy version until it is killed (then fails, as a client does)."""

    def __init__(self) -> None:
        self.in_flight, self.released = threading.Event(), threading.Event()
        self.calls: list[str] = []

    def generate(self, prompts, sampling=None, num_samples=1, seed=0, min_policy_version=0):
        self.in_flight.set()
        self.released.wait(60)
        raise RuntimeError("stopped while waiting for a version")

    def close(self) -> None:
        self.calls.append("close")

    def kill(self) -> None:
        self.calls.append("kill")
        self.released.set()


def test_closing_kills_a_sampler_whose_request_waits_for_a_version_nobody_will_publish():
    """Ctrl-C of an asynchronous run: the producer's request waits for policy version t - k, which the stopping
    trainer never publishes. A polite shutdown would queue behind it; the sampler is killed instead."""
    sampler = WaitingSampler()
    serial = SerialSampler(sampler)
    errors: list[BaseException] = []

    def produce():
        try:
            serial.generate([[1, 2]], min_policy_version=7)
        except RuntimeError as e:
            errors.append(e)

    thread = threading.Thread(target=produce)
    thread.start()
    assert sampler.in_flight.wait(10)
    serial.close(wait_s=0.05)
    thread.join(10)
    assert sampler.calls == ["kill"] and not thread.is_alive() and errors
    idle = WaitingSampler()
    SerialSampler(idle).close()  # nothing in flight: the polite close
    assert idle.calls == ["close"]


def test_staleness_is_bounded_per_token():
    """A partial rollout's tokens are checked one by one: one token older than k fails the step, naming it."""
    groups = _groups(3, 5)  # step 5 at k = 1: versions >= 3
    check_token_staleness(groups, 5, 1)
    groups.rollouts[0][1].completion_tokens = np.asarray([2, 3, 4], np.int32)
    groups.rollouts[0][1].token_versions = np.asarray([3, 4, 2], np.int32)  # the last token from version 2
    with pytest.raises(RuntimeError, match="step 5: a token was sampled 2 policy versions .* rl.max_staleness=1"):
        check_token_staleness(groups, 5, 1)
    groups.rollouts[0][1].token_versions = np.asarray([3, 4, 4], np.int32)
    check_token_staleness(groups, 5, 1)
