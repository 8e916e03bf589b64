"""Which of XLA:CPU's settings change the demo model's numbers on this machine (issue 57 item 8), bit for bit.

    python benchmarks/cpu_numerics.py

The demo's table depends on the CPU (an Intel Xeon host: reward -0.334 -> +0.519; the AMD EPYC hosts of earlier
sessions: -0.292 -> +0.228). This runs one fixed computation, the demo model's (demo-7m, seed 0) loss and gradient
on a fixed batch of 8 x 256 tokens, in a fresh process per variant (XLA flags and the CPU affinity are read at
start-up), and prints the loss, the gradient norm and a digest of the gradient's bytes, beside this machine's
description. Variants whose digest equals `default` do not change the numbers here; run it on two machines and
compare digests to see whether a setting makes them agree. No persistent compilation cache is used.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

VARIANTS = (
    ("default", "", None),
    ("1 core", "", "0"),
    ("eigen single-thread", "--xla_cpu_multi_thread_eigen=false", None),
    ("xnnpack off", "--xla_cpu_use_xnnpack=false", None),
    ("platform math off", "--xla_cpu_enable_platform_dependent_math=false", None),
    ("platform math off, 1 core", "--xla_cpu_enable_platform_dependent_math=false", "0"),
)


def measure() -> str:
    """`loss gnorm digest` of the fixed computation in this process."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from swerl_jax.model.config import get_model_config
    from swerl_jax.model.llama import forward, init_params

    cfg = get_model_config("demo-7m")
    params = init_params(cfg, jax.random.PRNGKey(0))
    tokens = jax.random.randint(jax.random.PRNGKey(1), (8, 256), 0, cfg.vocab_size)

    def loss(p):
        logp = jax.nn.log_softmax(forward(cfg, p, tokens[:, :-1]).astype(jnp.float32), -1)
        return -jnp.take_along_axis(logp, tokens[:, 1:, None], -1).mean()

    value, grads = jax.jit(jax.value_and_grad(loss))(params)
    leaves = [np.asarray(x) for x in jax.tree.leaves(grads)]
    norm = float(np.sqrt(sum((x.astype(np.float64) ** 2).sum() for x in leaves)))
    digest = hashlib.sha256(b"".join(x.tobytes() for x in leaves)).hexdigest()[:16]
    return f"{float(value)!r} {norm!r} {digest}"


def main() -> None:
    """Each variant in its own process; one line each."""
    from swerl_jax.runs.machine import describe, machine_info

    print(f"machine: {describe(machine_info())}")
    print(f"{'variant':28s} {'loss':>20s} {'grad norm':>20s}  grad digest")
    for name, flags, cpus in VARIANTS:
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": flags, "JAX_COMPILATION_CACHE_DIR": ""}
        cmd = [sys.executable, __file__, "--measure"]
        if cpus is not None:
            cmd = ["taskset", "-c", cpus, *cmd]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout.split()
        print(f"{name:28s} {out[0]:>20s} {out[1]:>20s}  {out[2]}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--measure"]:
        print(measure())
    else:
        main()
