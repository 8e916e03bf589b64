"""The sampler fleet: a request split across server processes samples exactly what one process would, and a dead
process, killed mid-call, is dropped with its part re-sent."""

from __future__ import annotations

import concurrent.futures
import logging
import os
import signal
import time

import jax
import numpy as np
import pytest

from swerl_jax.model.config import get_model_config
from swerl_jax.model.llama import init_params
from swerl_jax.runs.affinity import device_env
from swerl_jax.sampler import weights
from swerl_jax.sampler.client import SamplerClient, SamplerError, SamplerRequestError
from swerl_jax.sampler.engine import SamplingEngine
from swerl_jax.sampler.fleet import SamplerFleet, split
from swerl_jax.sampler.types import SamplingParams
from tests.conftest import JAX_CACHE
from tests.sampler.test_server import OVERRIDES  # tiny model, max_batch 8, prompts <= 32, 16 new tokens

PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10, 11], [12, 13], [14] * 20, [15, 16, 17, 18, 19]]
SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=12)


def summary(groups):
    """Everything of every completion that must match: indices, tokens, log-prob bits, lengths, reasons."""
    return [[(c.prompt_index, c.sample_index, c.tokens.tolist(), c.logprobs.tobytes(), c.finish_reason,
              c.prompt_length, c.policy_version) for c in g] for g in groups]


def test_split_deals_whole_batches_in_order():
    assert split(5, 2, 2) == [(0, 4), (4, 5)]  # batches [0,2) [2,4) [4,5): two to the first client
    assert split(5, 3, 2) == [(0, 2), (2, 4), (4, 5)]
    assert split(5, 4, 2) == [(0, 2), (2, 4), (4, 5)]  # fewer batches than clients
    assert split(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert split(0, 3, 4) == [(0, 0)]


def test_fleet_equals_one_process_and_survives_a_killed_one(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(JAX_CACHE))
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    policy = tmp_path / "policy"
    v1 = jax.tree.map(lambda x: x * 1.25, init_params(get_model_config("tiny"), jax.random.PRNGKey(0)))
    weights.publish(policy, v1, 1)  # both processes serve version 1 from the shared directory
    clients = []
    try:
        for i in range(2):  # one core each (--cpus), so the two processes run side by side
            clients.append(SamplerClient(config_path="experiments/tiny_cpu.py", overrides=OVERRIDES,
                                         weights_dir=str(policy), timeout_s=120, max_restarts=0,
                                         log_dir=str(tmp_path / f"log{i}"), server_args=[f"--cpus={i}"],
                                         server_env=device_env(str(7 - i))))  # ignored by JAX on CPU
        fleet = SamplerFleet(clients)
        for i, c in enumerate(clients):  # each logs where it runs: its GPUs (here only the variable) and cores
            assert f"(CUDA_VISIBLE_DEVICES={7 - i}), cores [{i}]" in c.log_path.read_text()
        assert len(fleet) == 2 and fleet.ping()["max_batch"] == 8
        # one process, all 5 prompts (8 rows // 3 samples: batches of 2 prompts)
        one = clients[1].generate(PROMPTS, SAMPLING, num_samples=3, seed=7, min_policy_version=1)
        got = fleet.generate(PROMPTS, SAMPLING, num_samples=3, seed=7, min_policy_version=1)
        assert summary(got) == summary(one)
        # ... and what this process's engine gives, to the bit (same programs, same batches)
        local = SamplingEngine(get_model_config("tiny"), v1, max_batch=8, max_prompt_len=32, max_new_tokens=16,
                               policy_version=1).generate(PROMPTS, SAMPLING, num_samples=3, seed=7)
        assert summary(got) == summary(local)
        assert [[(c.prompt_index, c.sample_index) for c in g] for g in got] == [[(i, j) for j in range(3)]
                                                                                 for i in range(5)]
        assert len({tuple(c.tokens.tolist()) for c in got[3]}) > 1  # sampled, not greedy
        assert all(c.policy_version == 1 for g in got for c in g)
        with pytest.raises(SamplerRequestError, match="too_large"):  # a bad request is raised, nobody dropped
            fleet.generate(PROMPTS + [[1] * 40], SAMPLING, num_samples=3, seed=7)
        assert len(fleet) == 2

        # kill -9 the process holding prompts 0..3 *mid-call* (no restarts left): both servers hold their part,
        # waiting for version 2; once 0 is dead, version 2 is published and its part goes to the other one
        with concurrent.futures.ThreadPoolExecutor(1) as pool, caplog.at_level(logging.WARNING,
                                                                                 logger="swerl_jax.sampler"):
            call = pool.submit(fleet.generate, PROMPTS, SAMPLING, num_samples=3, seed=7, min_policy_version=2,
                               wait_timeout_s=300)
            deadline = time.monotonic() + 300  # a hang guard only: wait on the servers' log lines, not a clock
            while not all("waiting for policy version 2" in c.log_path.read_text() for c in clients):
                assert not call.done(), call.exception()
                assert time.monotonic() < deadline, "the fleet's parts never reached both servers"
                time.sleep(0.05)
            os.kill(clients[0].proc.pid, signal.SIGKILL)
            clients[0].proc.wait()
            weights.publish(policy, jax.tree.map(lambda x: x * 0.5, v1), 2)
            again = call.result(timeout=300)
        assert len(fleet) == 1 and fleet.clients == (clients[1],)
        assert summary(again) == summary(clients[1].generate(PROMPTS, SAMPLING, num_samples=3, seed=7,
                                                             min_policy_version=2))
        assert all(c.policy_version == 2 for g in again for c in g) and summary(again) != summary(one)
        assert any("dropping sampler 0" in r.message and str(clients[0].log_path) in r.message
                   for r in caplog.records), caplog.text
        assert any("re-sending prompts 0..3" in r.message for r in caplog.records), caplog.text
        # the last one dies too: a clear error, not a hang
        os.kill(clients[1].proc.pid, signal.SIGKILL)
        clients[1].proc.wait()
        with pytest.raises(SamplerError, match="no sampler left"):
            fleet.generate(PROMPTS, SAMPLING, num_samples=3, seed=7)
        assert len(fleet) == 0
    finally:
        for c in clients:
            c.close()
    assert all(c.proc.poll() is not None for c in clients)


class _Fake:
    """A client stand-in: answers from a function of (prompts, offset), or fails."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.fail, self.proc, self.address, self.calls = fail, None, ("fake", 0), []
        self.stopping = False

    def kill(self):
        self.stopping = True

    def ping(self):
        return {"max_batch": 4}

    def generate(self, prompts, sampling, num_samples, seed, min_policy_version, wait_timeout_s, *, prompt_offset):
        self.calls.append((prompt_offset, len(prompts)))
        if self.fail is not None:
            raise self.fail
        return [[(prompt_offset + i, j, seed) for j in range(num_samples)] for i in range(len(prompts))]

    def close(self):
        pass


def test_failover_and_bad_requests_without_processes(caplog):
    prompts = [np.array([i + 1]) for i in range(10)]
    want = [[(i, j, 3) for j in range(2)] for i in range(10)]
    good, dead, other = _Fake(), _Fake(SamplerError("died")), _Fake()
    fleet = SamplerFleet([good, dead, other])
    # 4 rows // 2 samples = batches of 2 prompts: 5 batches dealt 2, 2, 1
    assert fleet.generate(prompts, num_samples=2, seed=3) == want
    assert dead.calls == [(4, 4)] and len(fleet) == 2  # its part, cut again over the two left:
    assert sorted(good.calls[1:] + other.calls[1:]) == [(4, 2), (6, 2)]
    assert "dropping sampler 1" in caplog.text
    bad = SamplerFleet([_Fake(SamplerRequestError("too_large", "no")), _Fake()])
    with pytest.raises(SamplerRequestError, match="too_large"):
        bad.generate(prompts, num_samples=2)
    assert len(bad) == 2


def test_a_fleet_stopped_by_its_own_shutdown_neither_drops_nor_resends(caplog):
    """Issue 46 item 15: on Ctrl-C the log said "re-sending prompts" for the samplers our shutdown had stopped."""
    prompts = [np.array([i + 1]) for i in range(10)]
    fleet = None

    class _StoppedMidRequest(_Fake):
        def generate(self, *args, **kwargs):
            fleet.kill()  # the trainer's shutdown, while this request is in flight
            raise SamplerError("the sampler at fake was stopped while a request was in flight")

    stopped, good = _StoppedMidRequest(), _Fake()
    fleet = SamplerFleet([stopped, good])
    with caplog.at_level(logging.WARNING, logger="swerl_jax.sampler"), pytest.raises(SamplerError, match="stopped"):
        fleet.generate(prompts, num_samples=2)
    assert "re-sending" not in caplog.text and "dropping" not in caplog.text, caplog.text
    assert len(good.calls) <= 1  # its own part at most: nothing re-sent to it


def test_a_bad_cpus_flag_fails_the_server_start_naming_it(tmp_path, monkeypatch):
    """A fleet member's `--cpus` share that is not a CPU list stops its server before any weights load, and the
    client's error carries the server's one line naming the flag (no hang, no retry loop)."""
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    one_line = r"(?s)exited with code 1.*log tail:\nswerl_jax.sampler.server: --cpus='0-x': not a CPU list"
    with pytest.raises(SamplerError, match=one_line):
        SamplerClient(config_path="experiments/tiny_cpu.py", overrides=OVERRIDES, server_args=["--cpus=0-x"],
                      weights_dir=str(tmp_path / "policy"), log_dir=str(tmp_path / "log"), timeout_s=60,
                      max_restarts=0)
