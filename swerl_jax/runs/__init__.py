"""A run's infrastructure, apart from the math and the entry points: the resume/step/log/checkpoint loop both
trainers share (`loop`), the run directory and its config on resume (`rundir`), metrics.jsonl / TensorBoard /
rollouts (`metrics`), the closing summary (`summary`), Orbax checkpoints (`checkpoint`) with per-file CRC-32
manifests (`integrity`), the machine a number was made on (`machine`), a stage-named progress bar (`progress`)."""
