"""The paper's SFT baseline (Llama-3.3-70B-Instruct fine-tuned on the oracle edits), for the 36.2% comparison."""

from experiments import base, swerl_llama3_70b


def get_config(arg: str | None = None):
    """SFT on the same records, same mesh; no GRPO steps."""
    base.check_variant(arg, (), "sft_llama3_70b.py")
    c = swerl_llama3_70b.get_config()
    c.rl.num_steps = 0
    c.sft.num_steps = 2000  # not published
    c.sft.batch_size = 512  # not published; one 16k sequence per device (128 did not split over 512 shards)
    c.sft.learning_rate = 1e-5  # not published
    c.sft.max_len = 16384  # not published (the RL run's 16k context)
    return c
