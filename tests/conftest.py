"""Suite-wide settings: CPU only, 8 fake devices available to tests that ask, a persistent compile cache."""

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


@pytest.fixture(scope="session")
def tiny_cpu_run(tmp_path_factory) -> pathlib.Path:
    """A real `experiments/tiny_cpu.py:short` run (SFT warm start + GRPO, ~5 min on 2 cores), made once per
    session: the reward-rise test and the trained-run notebook test both read it."""
    import subprocess
    import sys

    workdir = tmp_path_factory.mktemp("tiny_cpu_short")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=1",
           "JAX_COMPILATION_CACHE_DIR": str(JAX_CACHE)}
    cmd = [sys.executable, "-m", "swerl_jax.train", f"--config={REPO_ROOT / 'experiments' / 'tiny_cpu.py'}:short",
           f"--workdir={workdir}", "--config.logging.progress_bar=False"]
    out = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-4000:]
    return workdir
