"""Data curation on Apache Beam: git clones (+ GH Archive events, + issues) -> filtered PR records.

Run ``python -m swerl_jax.curate --clones DIR [--events FILES] [--issues FILES] --out DIR``.
"""

from swerl_jax.curate.config import CurateConfig
from swerl_jax.curate.funnel import build_funnel, format_table
from swerl_jax.curate.relevant import HeuristicPredictor, LLMPredictor

__all__ = ["CurateConfig", "HeuristicPredictor", "LLMPredictor", "build_funnel", "format_table", "run_curation"]


def run_curation(*args, **kwargs):
    """See ``swerl_jax.curate.runner.run_curation`` (imported lazily: it imports apache_beam)."""
    from swerl_jax.curate.runner import run_curation as run

    return run(*args, **kwargs)
