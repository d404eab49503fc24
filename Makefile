# Everything runs from a virtual environment in .venv that `make install` creates.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test typecheck lint pytest bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: install
	$(BIN)/python -m agents.travel

lint: install
	$(BIN)/ruff check statemachine agents tests typing_tests bench
	$(BIN)/ruff format --check statemachine agents tests typing_tests bench

typecheck: install
	$(BIN)/mypy --strict statemachine agents typing_tests bench

pytest: install
	$(BIN)/pytest

test: lint typecheck pytest

bench: install
	$(BIN)/python bench/run.py
	$(BIN)/python bench/governor.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
