"""The paper's data path end to end: curation (Beam) writes record shards, `data.train_files` names them with a
glob exactly as a paper config does, and `python -m swerl_jax.train` runs GRPO on them."""

import glob
import os
import subprocess
import sys

from swerl_jax.curate.config import CurateConfig
from swerl_jax.curate.runner import run_curation
from swerl_jax.runs.metrics import read_metrics
from tests.curate.builders import build_world

from .conftest import REPO_ROOT


def test_curation_output_trains_through_a_glob(tmp_path):
    build_world(tmp_path)
    out = tmp_path / "out"
    run_curation(str(tmp_path / "clones"), str(out), CurateConfig(num_shards=2, drop_benchmark_instances=False),
                 [str(tmp_path / "events.jsonl")],
                 [str(tmp_path / "issues.jsonl")], ["--direct_running_mode=in_memory", "--direct_num_workers=1"],
                 verbose=False)
    shards = sorted(glob.glob(str(out / "records" / "*.array_record")))
    assert len(shards) == 2  # as curation writes them: records-0000i-of-00002.array_record
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device, as a researcher's shell
    cmd = [sys.executable, "-m", "swerl_jax.train", "--config=experiments/tiny_cpu.py", f"--workdir={tmp_path / 'run'}",
           f"--config.data.train_files={out}/records/*.array_record", "--config.data.rl_num_records=0",
           "--config.sft.num_steps=0", "--config.rl.num_steps=1", "--config.rl.prompts_per_step=2",
           "--config.rl.num_samples=2", "--config.sampler.mode=inline", "--config.sampler.max_new_tokens=8",
           "--config.data.max_prompt_len=1024", "--config.logging.progress_bar=False"]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (row,) = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert row["step"] == 1 and row["data/kept"] >= 2  # the prompts came from the curated shards
    curated = {line.split('"instance_id": "')[1].split('"')[0]
               for path in glob.glob(str(out / "records" / "*.jsonl")) for line in open(path)}
    rollouts = (tmp_path / "run" / "rollouts" / "step_000001.jsonl").read_text()
    assert any(iid in rollouts for iid in curated)
