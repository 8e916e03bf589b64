"""User-supplied rewards (`reward.kind=python:tests.rl.reward_hooks.NAME`) for trainer tests.

A randomly initialised policy never writes a well-formed SWE-RL answer, so the real reward is -1 for every
rollout, every advantage is 0 and nothing trains. This reward varies with the text, so the tests exercise
non-zero advantages, gradients and updates.
"""


def vowel_reward(code_context: dict, oracle_new_content: dict, output: str) -> tuple[float, dict]:
    """The fraction of the output's characters that are vowels."""
    del code_context, oracle_new_content
    return sum(ch in "aeiouAEIOU" for ch in output) / max(1, len(output)), {}


def gated_vowel_reward(code_context: dict, oracle_new_content: dict, output: str) -> tuple[float, dict]:
    """`vowel_reward`, but with $SWERL_TEST_GATE set to a folder and $SWERL_TEST_GATE_AFTER to n, the call after
    the first n blocks: it writes `blocked` there and waits until the test kills the run (hang guard: 300 s).

    Each call (in any reward worker) claims a numbered file with O_EXCL, so the count is exact across workers;
    a test stops a run inside a chosen step (n = steps x prompts x samples) without racing its progress."""
    import os
    import pathlib
    import time

    gate = os.environ.get("SWERL_TEST_GATE")
    if gate:
        after = int(os.environ["SWERL_TEST_GATE_AFTER"])
        n = 0
        while True:
            try:
                os.close(os.open(os.path.join(gate, f"call_{n}"), os.O_CREAT | os.O_EXCL))
                break
            except FileExistsError:
                n += 1
        if n >= after:
            pathlib.Path(gate, "blocked").touch()
            parent, end = os.getppid(), time.monotonic() + 300
            while os.getppid() == parent and time.monotonic() < end:  # the killed trainer's worker exits too
                time.sleep(0.2)
    return vowel_reward(code_context, oracle_new_content, output)
