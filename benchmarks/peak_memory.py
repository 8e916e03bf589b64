"""Peak memory of a generation side, for the benchmarks that compare engines in one run: XLA's planned peak of
an engine's jitted programs (any backend) and torch's CUDA allocator peak (GPU only)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import torch


class XlaPeak:
    """Wraps an engine's jitted programs (by name, in its `programs`: a `sampler.core.Programs`) and records the
    largest peak device memory XLA plans for any of them (arguments + outputs + temporaries - donated aliases,
    `compiled.memory_analysis()`): the same figure on CPU, GPU and TPU, and what decides whether a batch fits.
    Each new shape is compiled once more for the analysis (outside the timed calls: the warm-ups reach every shape
    first)."""

    def __init__(self, engine: object, programs: Sequence[str]) -> None:
        self.bytes = 0
        for name in programs:
            engine.programs.wrap(name, self._wrap)

    def _wrap(self, jitted: Callable) -> Callable:
        seen: set[str] = set()

        def call(*args, **kwargs):
            key = repr(jax.tree.map(lambda x: (x.shape, str(x.dtype)) if hasattr(x, "shape") else x, (args, kwargs)))
            if key not in seen:
                seen.add(key)
                m = jitted.lower(*args, **kwargs).compile().memory_analysis()
                if m is not None:
                    peak = (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
                            - m.alias_size_in_bytes)
                    self.bytes = max(self.bytes, int(peak))
            return jitted(*args, **kwargs)

        return call


def torch_peak_mib(fn: Callable[[], object]) -> float | None:
    """Peak CUDA memory allocated by torch during one call of `fn` (None on CPU, where torch keeps no such count)."""
    if not torch.cuda.is_available():
        fn()
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / 2**20
