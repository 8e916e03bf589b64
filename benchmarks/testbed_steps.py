"""The CPU testbed's SFT step, padded rows against packed rows (`sft.pack`), side by side on the same batches.

Both trainers are built from `experiments/testbed_cpu.py` (the same seed, so the same data order and initial
params) and take their steps alternately, so load on the machine falls on both alike. Per step: wall time, the
process's CPU time by the operating system's count (`getrusage`, user + system: the two XLA threads' work), the
share of the rows' columns that hold a real token, and each trainer's loss (the same training, the loss equal up
to float rounding).

    python benchmarks/testbed_steps.py --steps 60 --skip 10

The first `--skip` steps of each (compilations: one per row shape) are left out of the medians.
"""

from __future__ import annotations

import argparse
import pathlib
import resource
import statistics
import tempfile
import time

from experiments import testbed_cpu
from swerl_jax.resolve import resolve_config
from swerl_jax.sft.trainer import SFTTrainer, packed_rows, sft_rows


def cpu_seconds() -> float:
    """This process's user + system CPU time, as the kernel counts it."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def fill(trainer: SFTTrainer, pack: bool):
    """Wrap the trainer's data iterator to record each batch's real-token share of the row columns."""
    shares: list[float] = []
    source = trainer.data_iter

    class Recording:
        def __next__(self):
            raw = next(source)
            rows = packed_rows(raw) if pack else sft_rows(raw, trainer.max_len)[0]
            shares.append(float(rows["attention_mask"].mean()))
            return raw

        def __getattr__(self, name):
            return getattr(source, name)

    trainer.data_iter = Recording()
    return shares


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--skip", type=int, default=10)
    args = parser.parse_args()
    trainers, shares, times = {}, {}, {}
    for pack in (False, True):
        config = testbed_cpu.get_config()
        config.sft.num_steps, config.sft.pack = args.steps, pack
        trainers[pack] = SFTTrainer(resolve_config(config), pathlib.Path(tempfile.mkdtemp()) / "sft")
        shares[pack], times[pack] = fill(trainers[pack], pack), []
    losses = {False: [], True: []}
    for step in range(args.steps):
        for pack in (False, True):
            wall, cpu = time.perf_counter(), cpu_seconds()
            metrics, _ = trainers[pack].train_step(step)
            times[pack].append((time.perf_counter() - wall, cpu_seconds() - cpu))
            losses[pack].append(metrics["loss"])
    print(f"testbed_cpu SFT, batch 8, max_len 640, {args.steps} steps each, medians of the last "
          f"{args.steps - args.skip}")
    print("| rows | wall s/step | CPU s/step | steps/s | real tokens / columns | last loss |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    med = {}
    for pack in (False, True):
        kept = times[pack][args.skip:]
        wall, cpu = statistics.median(t[0] for t in kept), statistics.median(t[1] for t in kept)
        med[pack] = (wall, cpu)
        print(f"| {'packed (sft.pack=True)' if pack else 'padded (today)'} | {wall:.3f} | {cpu:.3f} | "
              f"{1 / wall:.2f} | {statistics.mean(shares[pack]):.1%} | {losses[pack][-1]:.6f} |")
    print(f"padded / packed: wall {med[False][0] / med[True][0]:.2f}x, CPU {med[False][1] / med[True][1]:.2f}x; "
          f"largest loss difference over the steps {max(abs(a - b) for a, b in zip(*losses.values())):.2e}")


if __name__ == "__main__":
    main()
