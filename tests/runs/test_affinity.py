"""CPU lists for `sampler.cpus` / `rl.trainer_cpus`, and the settings that must not meet rl.max_staleness > 0."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from experiments import base
from swerl_jax.resolve import resolve_config
from swerl_jax.runs.affinity import (
    ONLINE_CPUS,
    cpu_shares,
    device_env,
    fleet_placement,
    parse_cpus,
    pin,
    shared_device_problem,
)


def test_parse_cpus():
    assert parse_cpus("", "k") is None and parse_cpus("  ", "k") is None
    assert parse_cpus("0", "k") == {0}
    if len(ONLINE_CPUS) >= 2 and {0, 1} <= ONLINE_CPUS:
        assert parse_cpus("0-1", "k") == {0, 1} and parse_cpus("1,0", "k") == {0, 1}
    for bad, why in (("0-x", "not a CPU list"), ("a", "not a CPU list"), ("1-0", "runs backwards"),
                     (str(max(ONLINE_CPUS) + 1), "do not exist")):
        with pytest.raises(ValueError, match=rf"sampler.cpus='{bad}': .*{why}"):
            parse_cpus(bad, "sampler.cpus")


def test_pin_then_widen_in_a_child():
    """A process pins itself; a child it starts inherits that and may move to another core (the sampler of a
    trainer pinned to core 1 runs on core 0)."""
    first, last = min(ONLINE_CPUS), max(ONLINE_CPUS)
    code = ("import os\nfrom swerl_jax.runs.affinity import pin\n"
            f"pin(frozenset({{{first}}}), 'rl.trainer_cpus')\nprint(sorted(os.sched_getaffinity(0)))\n"
            "import subprocess, sys\n"
            f"print(subprocess.run([sys.executable, '-c', 'import os; from swerl_jax.runs.affinity import pin; "
            f"pin(frozenset({{{last}}}), \\'sampler.cpus\\'); print(sorted(os.sched_getaffinity(0)))'], "
            "capture_output=True, text=True, check=True).stdout.strip())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [str([first]), str([last])]
    assert pin(None, "k") is None and os.sched_getaffinity(0) >= {first}  # None pins nothing


@pytest.mark.parametrize("overrides, message", [
    ({"rl.max_staleness": -1}, "rl.max_staleness must be >= 0"),
    ({"rl.max_staleness": 1, "rl.old_logprobs": "recompute"}, "rl.old_logprobs='recompute' with rl.max_staleness=1"),
    ({"rl.off_policy": "decoupled", "rl.old_logprobs": "recompute"}, "rl.off_policy='decoupled'"),
    ({"rl.max_staleness": 1, "rl.task": "agent", "agent.kv_cache": "kept"}, "agent.kv_cache='kept' with"),
    ({"rl.trainer_cpus": "0-x"}, "rl.trainer_cpus='0-x': not a CPU list"),
    ({"rl.task": "agent", "agent.stream_ahead_batches": 1}, "agent.stream_ahead_batches=1: .* got 0"),
    ({"rl.task": "agent", "agent.stream_ahead_batches": 1, "rl.max_staleness": 1, "agent.waves": 2},
     "and agent.waves=1"),
    ({"sampler.devices": "6,x"}, "sampler.devices='6,x': not a device list"),
    ({"sampler.devices": "6", "sampler.num_processes": 2}, "sampler.devices has 1 devices for sampler.num_processes=2"),
    ({"sampler.devices": "0", "sampler.mode": "inline"}, "sampler.devices='0' with sampler.mode='inline'"),
    # issue 59: both were found only when the sampler started, after the SFT stage
    ({"sampler.partial_rollouts": True, "sampler.mode": "process", "sampler.partial_segment": 0},
     "sampler.partial_segment=0: the decode steps"),
    ({"sampler.partial_rollouts": True, "sampler.mode": "inline"}, "sampler.partial_rollouts=True with sampler.mode"),
    ({"sampler.memory_fraction": 1.2}, "sampler.memory_fraction=1.2: a share"),
    ({"rl.trainer_memory_fraction": -0.1}, "rl.trainer_memory_fraction=-0.1: a share"),
    # both roles on one GPU asking for 90% each: the second to allocate would fail on real hardware
    ({"rl.trainer_memory_fraction": 0.9, "sampler.memory_fraction": 0.9},
     "rl.trainer_memory_fraction=0.9 \\+ sampler.num_processes=1 x sampler.memory_fraction=0.9 = 1.8"),
    ({"rl.trainer_memory_fraction": 0.5, "sampler.memory_fraction": 0.3, "sampler.num_processes": 2},
     "sampler.num_processes=2 x sampler.memory_fraction=0.3 = 1.1 of each GPU"),
])
def test_resolve_names_the_key(overrides, message):
    c = base.get_config()
    for key, value in overrides.items():
        section, field = key.split(".")
        c[section][field] = value
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        resolve_config(c)


def test_cpu_shares_split_the_cores_of_a_fleet():
    assert cpu_shares(None, 3) == ["", "", ""]
    assert cpu_shares(frozenset({0}), 1) == ["0"]
    assert cpu_shares(frozenset({4, 5, 6, 7, 9}), 2) == ["4,5,6", "7,9"]
    with pytest.raises(ValueError, match="sampler.cpus has 1 cores for sampler.num_processes=2"):
        cpu_shares(frozenset({0}), 2)


def test_fleet_placement_gives_each_sampler_its_cores_and_gpus():
    """A node's GPUs 4-7 for a fleet of 2 (the trainer launched on 0-3): each member its own pair, as
    CUDA_VISIBLE_DEVICES; one process keeps its config's sampler.cpus (it pins itself) and gets its GPUs."""
    assert fleet_placement("", "4-7", 2) == [("", "4,5"), ("", "6,7")]
    assert fleet_placement("", "", 3) == [("", "")] * 3
    assert fleet_placement("0", "5", 1) == [("", "5")]
    if len(ONLINE_CPUS) >= 2:
        first, last = min(ONLINE_CPUS), max(ONLINE_CPUS)
        assert fleet_placement(f"{first},{last}", "2,3", 2) == [(str(first), "2"), (str(last), "3")]
    assert device_env("4,5") == {"CUDA_VISIBLE_DEVICES": "4,5"} and device_env("") == {}


def test_memory_fractions_split_a_shared_gpu():
    """A sampler on its own GPUs, or the two fractions within the budget, are accepted; on a GPU, a sampler process
    sharing the trainer's GPUs without both fractions is refused before SFT starts (each would take 75%)."""
    c = base.get_config()
    c.rl.trainer_memory_fraction, c.sampler.memory_fraction = 0.84, 0.06
    resolve_config(c)
    c.rl.trainer_memory_fraction, c.sampler.memory_fraction, c.sampler.devices = 0.9, 0.9, "1"
    resolve_config(c)  # disjoint GPUs: each fraction is of its own devices
    assert device_env("1", 0.06) == {"CUDA_VISIBLE_DEVICES": "1", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.06"}
    assert device_env("", 0.0) == {}
    assert shared_device_problem("cpu", 0.0, 0.0, "", "process") == ""
    assert shared_device_problem("gpu", 0.0, 0.0, "1", "process") == ""
    assert shared_device_problem("gpu", 0.0, 0.0, "", "inline") == ""
    assert shared_device_problem("gpu", 0.8, 0.1, "", "process") == ""
    why = shared_device_problem("gpu", 0.8, 0.0, "", "process")
    assert "sampler.memory_fraction=0.0" in why and "launch/plan.py" in why
