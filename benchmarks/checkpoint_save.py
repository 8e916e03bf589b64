"""Checkpoint cost on the training critical path: our Orbax `Checkpointer` (async) vs `torch.save`/`torch.load`.

    .venv/bin/python benchmarks/checkpoint_save.py [--layers 6] [--repeats 2]

Input: a train state of the SmolLM2-135M architecture cut to `--layers` layers (fp32 params + AdamW moments,
the optimizer from `swerl_jax.optim`), saved to a temporary directory on local disk. Ours: `Checkpointer.save`
with async_save (blocking = the time the training loop waits; total = until the step is finalized on disk), and
`restore_latest` onto the same shapes (total and restore include the integrity manifest: CRC-32 of every file,
written after the step finalizes, verified before the restore; its write and verify are also timed alone).
Peer: the same arrays as a dict of torch tensors, `torch.save` (always blocking) and `torch.load`.
Restored values are compared to the originals for both.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # experiments/ is not an installed package

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from experiments.base import get_config  # noqa: E402
from swerl_jax.model.config import get_model_config  # noqa: E402
from swerl_jax.model.llama import init_params  # noqa: E402
from swerl_jax.optim import make_optimizer  # noqa: E402
from swerl_jax.runs.checkpoint import Checkpointer, abstract_like  # noqa: E402
from swerl_jax.runs.integrity import verify_manifest, write_manifest  # noqa: E402
from swerl_jax.train_step import TrainState  # noqa: E402


def make_state(layers: int) -> TrainState:
    model = get_model_config("smollm2-135m", num_layers=layers)
    params = jax.jit(init_params, static_argnums=0)(model, jax.random.key(0))
    opt = make_optimizer(get_config().optim, num_steps=10)
    return TrainState(jnp.int32(0), params, jax.jit(opt.init)(params))


def ours(state: TrainState, root: str, repeats: int) -> tuple[float, float, float, float, float]:
    """(blocking s, total s, restore s, manifest write s, manifest verify s), best of `repeats`."""
    blocking, total, restore, seal, verify = [], [], [], [], []
    with Checkpointer(root, max_to_keep=1, every_steps=1, async_save=True) as ck:
        for i in range(repeats):
            t0 = time.perf_counter()
            ck.save(i + 1, state)
            t1 = time.perf_counter()
            ck.wait_until_finished()
            t2 = time.perf_counter()
            blocking.append(t1 - t0)
            total.append(t2 - t0)
        target = abstract_like(state)
        for _ in range(repeats):
            t0 = time.perf_counter()
            got = ck.restore_latest(target)
            jax.block_until_ready(got.state)
            restore.append(time.perf_counter() - t0)
        for _ in range(repeats):  # the manifest alone (files in the page cache, as right after a save)
            t0 = time.perf_counter()
            write_manifest(ck.step_dir(repeats))
            t1 = time.perf_counter()
            verify_manifest(ck.step_dir(repeats))
            seal.append(t1 - t0)
            verify.append(time.perf_counter() - t1)
    for a, b in zip(jax.tree.leaves(got.state), jax.tree.leaves(state)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    return min(blocking), min(total), min(restore), min(seal), min(verify)


def peer(state: TrainState, root: str, repeats: int) -> tuple[float, float]:
    """(save s, load s) of torch.save / torch.load of the same arrays (host copy included in save)."""
    save, load = [], []
    path = os.path.join(root, "state.pt")
    leaves = jax.tree_util.tree_leaves_with_path(state)
    for _ in range(repeats):
        t0 = time.perf_counter()
        tensors = {jax.tree_util.keystr(k): torch.from_numpy(np.array(v)) for k, v in leaves}
        torch.save(tensors, path)
        save.append(time.perf_counter() - t0)
    for _ in range(repeats):
        t0 = time.perf_counter()
        got = torch.load(path)
        load.append(time.perf_counter() - t0)
    for k, v in leaves:
        np.testing.assert_array_equal(got[jax.tree_util.keystr(k)].numpy(), np.asarray(v))
    return min(save), min(load)


def main() -> None:
    """Run both and print a table with the ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    state = make_state(args.layers)
    jax.block_until_ready(state)
    nbytes = sum(x.nbytes for x in jax.tree.leaves(state))
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        block, total, rest, seal, verify = ours(state, a, args.repeats)
        psave, pload = peer(state, b, args.repeats)
    print(f"state: {nbytes / 2**20:.0f} MiB ({len(jax.tree.leaves(state))} arrays), best of {args.repeats}")
    print(f"{'':34s}{'ours (s)':>10s}{'torch (s)':>11s}{'torch/ours':>12s}")
    print(f"{'save: training loop blocked':34s}{block:10.3f}{psave:11.3f}{psave / block:11.1f}x")
    print(f"{'save: until on disk':34s}{total:10.3f}{psave:11.3f}{psave / total:11.1f}x")
    print(f"{'restore':34s}{rest:10.3f}{pload:11.3f}{pload / rest:11.1f}x")
    gib = nbytes / 2**30
    print(f"integrity manifest (in total/restore above): write {seal:.3f} s ({gib / seal:.2f} GiB/s, background "
          f"thread), verify {verify:.3f} s ({gib / verify:.2f} GiB/s)")


if __name__ == "__main__":
    main()
