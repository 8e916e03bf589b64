"""Live progress of a GRPO step (issue 57 item 7: SmolLM2's first step took 6m22s with the bar at `0/2` the whole
time): the sampler's activity during a request, each request and the rewards as they are scored. Every wait is on an
event, never on a duration."""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np

from swerl_jax.data.synthetic import synthetic_records
from swerl_jax.data.targets import oracle_solution
from swerl_jax.reward.service import RewardService
from swerl_jax.rl import live
from swerl_jax.rl.collect import collect_rollouts
from swerl_jax.sampler.core import Programs
from swerl_jax.sampler.engine import SamplingParams
from tests.rl.test_collect import ScriptedSampler, _batch


class BusySampler(ScriptedSampler):
    """A request stays in flight until its activity has been asked twice: first compiling, then 3 of 4 prompts."""

    def __init__(self, answers):
        super().__init__(answers, before_return=lambda request: self.asked_twice.wait(timeout=60))
        self.asked, self.asked_twice = 0, threading.Event()

    def activity(self):
        self.asked += 1
        if self.asked >= 2:
            self.asked_twice.set()
            return {"prompts": 4, "prompts_done": 3, "tokens": 120, "compiling": ""}
        return {"prompts": 4, "prompts_done": 0, "tokens": 0, "compiling": "generate_shared"}


def test_a_request_in_flight_reports_the_samplers_compilation_tokens_and_then_the_rewards():
    records = synthetic_records(2, seed=3)
    sampler = BusySampler({i: oracle_solution(r) for i, r in enumerate(records)})
    said: list[str] = []
    with RewardService(num_workers=1) as service:
        collect_rollouts(sampler, service, _batch(records), SamplingParams(), num_samples=2, step=1, seed=0,
                         policy_version=0, progress=said.append)
    assert said[0] == "generating request 1/1 (2 prompts x 2)"
    assert any("compiling generate_shared (a new shape; then it runs)" in s for s in said), said
    assert any(s.startswith("generating request 1/1 (2 prompts x 2): 3/4 prompts, 120 tokens (") for s in said)
    assert said[-1] in ("rewards scored 4/4", "waiting for rewards (4/4 scored)")
    assert "rewards scored 4/4" in said


def test_without_a_report_nothing_polls_the_sampler():
    records = synthetic_records(1, seed=3)
    sampler = ScriptedSampler({0: oracle_solution(records[0])})
    sampler.activity = lambda: (_ for _ in ()).throw(AssertionError("asked without a report"))
    with RewardService(num_workers=1) as service:
        collect_rollouts(sampler, service, _batch(records), SamplingParams(), num_samples=2, step=1, seed=0,
                         policy_version=0)


def test_describe_and_the_engines_compiling_flag_during_a_trace_only():
    assert live.describe({}) == ""
    assert live.describe({"prompts": 2, "prompts_done": 1, "tokens": 9, "compiling": ""}) == "1/2 prompts, 9 tokens"
    programs = Programs()
    seen = []

    def fn(x):
        seen.append(programs.compiling)  # at trace time, i.e. while this call compiles
        return x + 1

    add = programs.define("add", fn)
    assert int(add(jnp.int32(1))) == 2 and programs.compiling == ""
    add(jnp.int32(2))  # cached: no trace
    add(jnp.zeros(3))  # a new shape traces again
    assert seen == ["add", "add"] and programs.compiling == "" and programs.compile_count == 2
    assert add.lower(jnp.int32(1)).compile() is not None  # the jitted program's lowering stays reachable
    np.testing.assert_array_equal(jax.device_get(add(jnp.zeros(2))), [1.0, 1.0])
