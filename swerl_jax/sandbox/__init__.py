"""The project's security boundary: where model-written code runs and how the host touches what it wrote.

SECURITY.md is this package's contract (what the policy controls, what the host guarantees, the limits and what
the model sees of each). Evaluation (the SWE-bench harness, Agentless Mini, test-time scaling, the testbed's hidden
tests) and agentic RL all run model-written code through it:

- `bwrap`: the bubblewrap sandbox (`Sandbox`, `SandboxLimits`): namespaces, a read-only view of the system, the
  work dir writable, rlimits, the disk quota, output caps, read-only inputs at `/run/swerl`.
- `workdirs`: walking and removing trees the model could touch without following its links (`tree_usage`,
  `remove_tree`).
- `seccomp`, `cgroup`, `uids`: the sandbox's seccomp filter (libseccomp), its cgroup v2 memory bound where the host
  delegates one (`memory_mode()`), and host-wide reservation of its unprivileged uids.
- `confined`: the host's own file access inside a work dir, one `O_NOFOLLOW` component at a time (the editor).
- `checkouts`: the one way a repository reaches a sandbox, a checkout of a base commit holding its reachable set
  alone (no later commit: they hold the fix), verified (`history_free_checkout`, `verify_history_free`).

The executors and environment cache (`tasks/executors.py`, `tasks/environments.py`) live in `swerl_jax.tasks`:
they grade SWE-bench instances through this package and import SWE-bench's specs and log parsers, which this
package must not (it sits below the tasks, evaluation and the agent).
"""
