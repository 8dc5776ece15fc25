# The two commands of the README: `make demo` and `make test`. Both install what they need first.
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test lint unit clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $@

demo: setup
	$(BIN)/tidegauge demo

lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

unit: setup
	$(BIN)/pytest -m unit

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache
