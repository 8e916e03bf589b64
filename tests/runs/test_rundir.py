"""Run directories: variant-aware default names, and a resume with a changed config is refused or recorded."""

import json

import pytest

from experiments import base
from swerl_jax.runs import rundir


def _config(**rl):
    c = base.get_config()
    for k, v in rl.items():
        c.rl[k] = v
    return c.to_json(indent=1)


def test_default_workdir_keeps_variants_apart():
    assert rundir.default_workdir("experiments/tiny_cpu.py") == "workdirs/tiny_cpu"
    assert rundir.default_workdir("experiments/tiny_cpu.py:short") == "workdirs/tiny_cpu-short"
    assert rundir.default_workdir("experiments/deepswe_grpo_pp.py:tiny") == "workdirs/deepswe_grpo_pp-tiny"
    assert rundir.default_workdir("/abs/x.py:a/b c") == "workdirs/x-a_b_c"


def test_fresh_directory_records_config_and_history(tmp_path):
    assert rundir.record_config(tmp_path, _config()) == {}
    # no checkpoints yet: a different config simply replaces the unstarted run's
    rundir.record_config(tmp_path, _config(num_samples=4))
    assert json.loads((tmp_path / "config.json").read_text())["rl"]["num_samples"] == 4
    assert sorted(p.name for p in (tmp_path / "configs").iterdir()) == ["0000.json", "0001.json"]


def test_resume_with_changed_config_is_refused_naming_each_key(tmp_path):
    rundir.record_config(tmp_path, _config())
    (tmp_path / "checkpoints" / "2").mkdir(parents=True)
    (tmp_path / "sft" / "checkpoints" / "100").mkdir(parents=True)
    assert rundir.latest_steps(tmp_path) == {"sft": 100, "grpo": 2}
    rundir.record_config(tmp_path, _config())  # the same config resumes
    with pytest.raises(rundir.ConfigChangeError) as err:
        rundir.record_config(tmp_path, _config(num_samples=4, kl_coef=0.0))
    msg = str(err.value)
    assert "rl.num_samples: 16 -> 4" in msg and "rl.kl_coef: 0.04 -> 0.0" in msg and "--allow_config_change" in msg
    assert json.loads((tmp_path / "config.json").read_text())["rl"]["num_samples"] == 16  # nothing overwritten
    assert not (tmp_path / "config_changes.jsonl").exists()


def test_a_key_added_after_the_run_started_resumes_at_its_default_and_is_refused_otherwise(tmp_path):
    old = json.loads(_config())
    del old["agent"]["error_credit"]  # a run started before the key existed
    (tmp_path / "config.json").write_text(json.dumps(old))
    (tmp_path / "checkpoints" / "2").mkdir(parents=True)
    rundir.record_config(tmp_path, _config())  # at its default: resumes
    (tmp_path / "config.json").write_text(json.dumps(old))
    c = base.get_config()
    c.agent.error_credit = "until_error"
    with pytest.raises(rundir.ConfigChangeError, match=r"agent.error_credit: None -> 'until_error'"):
        rundir.record_config(tmp_path, c.to_json())
    assert rundir.config_changes({"rl": {}}, {"rl": {"num_samples": 4}}) == [("rl.num_samples", None, 4)]


def test_operational_fields_may_change_and_accepted_changes_are_recorded(tmp_path):
    rundir.record_config(tmp_path, _config())
    (tmp_path / "checkpoints" / "3").mkdir(parents=True)
    c = base.get_config()
    c.logging.tensorboard = False
    c.reward.num_workers = 8
    c.checkpoint.every_steps = 7
    rundir.record_config(tmp_path, c.to_json())  # no error: these do not change what the run computes
    rundir.record_config(tmp_path, _config(num_steps=3200), allow_change=True)
    (entry,) = [json.loads(x) for x in (tmp_path / "config_changes.jsonl").read_text().splitlines()]
    assert entry["from_checkpoint"] == {"grpo": 3}
    assert entry["changes"] == {"rl.num_steps": {"old": 1600, "new": 3200}}
    assert len(list((tmp_path / "configs").glob("*.json"))) == 3


def test_the_sampler_fleet_size_may_change_on_resume(tmp_path):
    """Issue 46 item 8: the fleet's samples are one process's, bit for bit, whatever its size (sampler/fleet.py:
    parts cut at the engine's batch boundaries, each sample keeping its offset and seed; every member runs its
    engine on one device), so sampler.num_processes 2 -> 1 resumes as the README says worker counts do."""
    c = base.get_config()
    c.sampler.num_processes = 2
    rundir.record_config(tmp_path, c.to_json())
    (tmp_path / "checkpoints" / "4").mkdir(parents=True)
    c.sampler.num_processes = 1
    rundir.record_config(tmp_path, c.to_json())  # no ConfigChangeError
    assert json.loads((tmp_path / "config.json").read_text())["sampler"]["num_processes"] == 1
    assert not (tmp_path / "config_changes.jsonl").exists()
    assert rundir.config_changes({"sampler": {"num_processes": 2}}, {"sampler": {"num_processes": 1}}) == []


def test_where_the_roles_run_may_change_on_resume(tmp_path):
    """Issue 46 held-out item 5: launch/async_node.sh always passes sampler.cpus, sampler.devices and
    rl.trainer_cpus, so a run started with `python -m swerl_jax.train` was refused under the launcher although
    placement changes nothing computed (each sampler engine runs on its first visible device, batched by
    sampler.max_batch; cores only pin processes)."""
    c = base.get_config()
    rundir.record_config(tmp_path, c.to_json())
    (tmp_path / "checkpoints" / "4").mkdir(parents=True)
    c.sampler.cpus, c.sampler.devices, c.rl.trainer_cpus = "4-7", "6-7", "0-3"
    rundir.record_config(tmp_path, c.to_json())  # no ConfigChangeError
    saved = json.loads((tmp_path / "config.json").read_text())
    assert (saved["sampler"]["cpus"], saved["sampler"]["devices"], saved["rl"]["trainer_cpus"]) == ("4-7", "6-7", "0-3")
    assert rundir.config_changes({"sampler": {"cpus": "", "devices": ""}, "rl": {"trainer_cpus": ""}},
                                 {"sampler": {"cpus": "0", "devices": "1"}, "rl": {"trainer_cpus": "1"}}) == []


def test_a_relative_path_of_an_older_run_resumes_made_absolute():
    """Entry points now make typed paths absolute; a run that recorded 'ckpt/x' resumes with '/home/u/ckpt/x', while
    another folder is still a change."""
    old = {"model": {"hf_dir": "ckpt/x"}}
    assert rundir.config_changes(old, {"model": {"hf_dir": "/home/u/ckpt/x"}}) == []
    assert rundir.config_changes(old, {"model": {"hf_dir": "/home/u/ckpt/y"}}) == [
        ("model.hf_dir", "ckpt/x", "/home/u/ckpt/y")]
    assert rundir.config_changes({"model": {"hf_dir": "../x"}}, {"model": {"hf_dir": "/x"}}) != []


def test_an_sft_key_changed_after_the_sft_stage_finished_says_it_changes_nothing(tmp_path, caplog):
    """Issue 31.10: a researcher changes sft.learning_rate on a run whose SFT stage is done; the stage is never
    re-run, and the refusal (or, accepted, the warning) says so."""
    c = base.get_config()
    c.sft.num_steps = 100
    rundir.record_config(tmp_path, c.to_json())
    (tmp_path / "sft" / "checkpoints" / "100").mkdir(parents=True)
    changed = base.get_config()
    changed.sft.num_steps, changed.sft.learning_rate = 100, 2e-5
    with pytest.raises(rundir.ConfigChangeError, match=r"sft.learning_rate: 1e-05 -> 2e-05 \(changes nothing: the "
                                                       r"SFT stage finished at step \d+ and is not re-run\)"):
        rundir.record_config(tmp_path, changed.to_json())
    with caplog.at_level("WARNING", logger="swerl_jax.runs.rundir"):
        rundir.record_config(tmp_path, changed.to_json(), allow_change=True)
    assert "changes nothing" in caplog.text
    # before the SFT stage finished, the same change is an ordinary one
    (tmp_path / "sft" / "checkpoints" / "100").rename(tmp_path / "sft" / "checkpoints" / "1")
    with pytest.raises(rundir.ConfigChangeError) as err:
        rundir.record_config(tmp_path, c.to_json())
    assert "changes nothing" not in str(err.value)


def test_checkpoints_without_a_config_are_refused_unless_a_sweep_shared_the_sft_stage(tmp_path):
    """An SFT directory copied by hand into a fresh workdir would otherwise be resumed as this config's stage."""
    (tmp_path / "sft" / "checkpoints" / "100").mkdir(parents=True)
    with pytest.raises(rundir.ConfigChangeError, match=r"checkpoints \(\{'sft': 100\}\) but no config.json"):
        rundir.record_config(tmp_path, _config())
    assert not (tmp_path / "config.json").exists()
    (tmp_path / "sft" / "shared_from.json").write_text('{"run": "elsewhere", "sft_steps": 100}')
    assert rundir.record_config(tmp_path, _config()) == {"sft": 100}  # the sweep checked the source's config
    (tmp_path / "config.json").unlink()
    (tmp_path / "checkpoints" / "2").mkdir(parents=True)  # GRPO checkpoints: never a shared stage
    with pytest.raises(rundir.ConfigChangeError, match="no config.json"):
        rundir.record_config(tmp_path, _config())


def test_a_run_from_before_rl_imports_resumes():
    # issue 57 item 2 added rl.imports = (); config.json holds it as [], which the default () must match
    new = json.loads(_config())
    old = json.loads(_config())
    del old["rl"]["imports"]
    assert new["rl"]["imports"] == [] and rundir.config_changes(old, new) == []
    new["rl"]["imports"] = ["/home/u/my_experiment.py"]
    assert rundir.config_changes(old, new) == [("rl.imports", None, ["/home/u/my_experiment.py"])]
