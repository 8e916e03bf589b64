"""The paper's and DeepSWE's ablations as sweeps (`python -m swerl_jax.sweep --config=experiments/ablations/X.py`):
each file's `get_config(arg)` is the shared base and `get_sweep(arg)` its variants; `:cpu` sizes it for this
machine (tiny_cpu), no argument is the paper's scale."""
