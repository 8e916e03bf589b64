"""The testbed: procedurally generated Python bug-fix tasks for training and evaluating a tiny policy.

Each task is a PR record in the project's schema (a tiny package with one bug, unrelated helpers and distractor
modules, a paraphrased issue) plus hidden stdlib-unittest tests, so an answer can be scored by the similarity
reward, the discrete reward and an execution reward (the hidden tests pass in the sandbox).

    from swerl_jax.testbed.tasks import generate_tasks, split_families, task_key    # the generator, the splits
    from swerl_jax.testbed.hidden_tests import run_hidden_tests, execution_reward    # grading in the sandbox
"""
