"""`python -m swerl_jax.train --config=experiments/NAME.py[:arg] --workdir=DIR [--config.X=...]`

Runs an experiment: the SFT stage when sft.num_steps > 0 (into DIR/sft), then GRPO when rl.num_steps > 0 (into
DIR). Both resume from their checkpoints, so re-running the same command after a crash or a kill continues
where the run stopped: an SFT stage that finished is not repeated (GRPO starts from its final checkpoint).
The workdir gets config.json (the resolved config), metrics.jsonl, tensorboard/, rollouts/, checkpoints/,
policy/ (weights published to the sampler) and sampler/ (its log).
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import sys
import time
from typing import Any


def enable_compile_cache() -> str:
    """JAX's persistent compilation cache for this process and the sampler it starts (inherits the environment):
    $JAX_COMPILATION_CACHE_DIR, default ~/.cache/swerl_jax/jax. A re-run or a resume skips XLA compilation."""
    path = os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                                 str(pathlib.Path.home() / ".cache" / "swerl_jax" / "jax"))
    if "jax" in sys.modules:  # already imported: the environment variable was read at import time
        import jax

        jax.config.update("jax_compilation_cache_dir", path)
    return path


def run_experiment(config: Any, workdir: str | os.PathLike) -> dict:
    """SFT (if configured) then GRPO (if configured) into `workdir`; returns a summary dict."""
    enable_compile_cache()
    from swerl_jax import sharding

    sharding.initialize_distributed(config)
    workdir = pathlib.Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if sharding.is_main_process():
        (workdir / "config.json").write_text(config.to_json(indent=1))
    summary: dict[str, Any] = {"workdir": str(workdir)}
    params = None
    t0 = time.time()
    if int(config.sft.num_steps) > 0:
        from swerl_jax.sft.trainer import SFTTrainer

        sft = SFTTrainer(config, workdir / "sft")
        params = sft.run()
        summary["sft"] = {"steps": int(config.sft.num_steps), "metrics": str(workdir / "sft" / "metrics.jsonl"),
                          "checkpoints": sft.checkpointer.directory, "seconds": round(time.time() - t0, 1)}
    if int(config.rl.num_steps) > 0:
        from swerl_jax.rl.trainer import GRPOTrainer

        t1 = time.time()
        grpo = GRPOTrainer(config, workdir, initial_params=params)
        del params  # GRPO placed its own copy
        summary["rl"] = {**grpo.run(), "seconds": round(time.time() - t1, 1)}
    return summary


def main(argv: list[str]) -> None:
    """absl entry point."""
    from absl import flags

    del argv
    f = flags.FLAGS
    config = f.config
    workdir = f.workdir or os.path.join("workdirs", pathlib.Path(f["config"].config_filename).stem)
    summary = run_experiment(config, workdir)
    from swerl_jax import sharding

    if sharding.is_main_process():
        print(json.dumps(summary, indent=1), flush=True)


def _define_flags() -> None:
    from absl import flags
    from ml_collections import config_flags

    config_flags.DEFINE_config_file("config", None, "experiment config file (experiments/NAME.py[:arg])")
    flags.DEFINE_string("workdir", "", "run directory (default: workdirs/<config name>)")
    flags.mark_flag_as_required("config")


if __name__ == "__main__":
    from absl import app

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    _define_flags()
    app.run(main)
