"""Curation settings: every threshold that changes which PRs survive lives here (and on the command line)."""

from __future__ import annotations

import dataclasses

from swerl_jax.curate.benchmarks import DEFAULT_BENCHMARKS
from swerl_jax.sampler.client import parse_address


@dataclasses.dataclass(frozen=True)
class CurateConfig:
    """Thresholds and switches of the curation pipeline.

    The paper removes "empty or very large changes" without publishing numbers; the defaults below keep
    PRs whose oracle fits a 16k-token SWE-RL prompt (about 4 chars per token) with room for context.
    """

    # Very large changes: any one of these exceeded drops the PR.
    max_changed_files: int = 20
    max_changed_lines: int = 1000
    max_file_bytes: int = 200_000  # one modified file's size at base or head
    max_context_bytes: int = 400_000  # code_context + oracle_new_content together
    # Relevant (unmodified) files added to code_context.
    relevant_predictor: str = "heuristic"  # "heuristic", "llm" or "none"
    max_relevant_files: int = 3
    relevant_bytes_budget: int = 60_000
    sampler_address: str = ""  # the sampler server, host:port, for relevant_predictor="llm"
    # The server model's tokenizer (Hugging Face directory); empty: SmolLM2's, the server's default. The shared
    # secret, when the server has one, comes from $SWERL_SAMPLER_SECRET as for the server.
    sampler_tokenizer: str = ""
    # Evaluation instances left out (swerl_jax/curate/benchmarks.py): PRs that are SWE-bench Lite / Verified
    # instances, matched by repository and PR number, are dropped (funnel stage benchmark_instance). The lists:
    # instance files or Hugging Face dataset names (these need `datasets` and the network; offline, give the files).
    drop_benchmark_instances: bool = True
    benchmark_instances: tuple[str, ...] = DEFAULT_BENCHMARKS
    # Outputs.
    num_shards: int = 4
    formats: tuple[str, ...] = ("jsonl", "array_record")

    def __post_init__(self) -> None:
        for name in ("max_changed_files", "max_changed_lines", "max_file_bytes", "max_context_bytes", "num_shards"):
            if getattr(self, name) <= 0:
                raise ValueError(f"CurateConfig.{name} must be positive, got {getattr(self, name)}")
        if self.relevant_predictor not in ("heuristic", "llm", "none"):
            raise ValueError(
                f"CurateConfig.relevant_predictor must be heuristic, llm or none, got {self.relevant_predictor!r}"
            )
        if self.relevant_predictor == "llm" and not self.sampler_address:
            raise ValueError("CurateConfig.sampler_address is required when relevant_predictor='llm'")
        if self.sampler_address:
            # a bad address fails here, not on every Beam worker
            parse_address(self.sampler_address, "CurateConfig.sampler_address")
        if self.drop_benchmark_instances and not self.benchmark_instances:
            raise ValueError("CurateConfig.benchmark_instances is empty while drop_benchmark_instances is on: name "
                             "the SWE-bench Lite/Verified instance files, or set drop_benchmark_instances=false")
        bad = [f for f in self.formats if f not in ("jsonl", "array_record")]
        if bad or not self.formats:
            raise ValueError(f"CurateConfig.formats must be a non-empty subset of jsonl, array_record: {self.formats}")
