# The two commands of the README: `make demo` and `make test`. Both install what they need first.
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup startup demo test lint unit bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $@

# What makes a job start fast, each quick when it is up to date: our modules' bytecode (every
# process a job starts imports them, and Python reads bytecode even where PYTHONDONTWRITEBYTECODE
# keeps it from writing any), and Spark's class archive for this Java, pyspark and training run
# (jobs/runtime/jvm_archive.py; written again when any of them changed).
startup: setup
	$(BIN)/python -m compileall -q cli dashboard jobs sketches tidegauge
	$(BIN)/python -m jobs.runtime.jvm_archive_writer

demo: startup
	$(BIN)/tidegauge demo

lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

# Two workers, a test file each at a time (its module fixtures run once): the suite's waits
# (outages, live time, cluster workers) overlap the other worker's CPU work. Files are handed
# out in collection order, the longest first (tests/conftest.py), not xdist's most-tests-first.
test: lint startup
	$(BIN)/pytest -n 2 --dist loadfile --no-loadscope-reorder

unit: setup
	$(BIN)/pytest -m unit

# The quick benchmarks, a few minutes in all: each starts the Redis or broker it needs. They print
# figures and the machine and assert nothing; the long ones are run by hand (BENCHMARKS.md).
bench: setup
	$(BIN)/python benchmarks/bench_tdigest.py
	$(BIN)/python benchmarks/bench_hll.py
	$(BIN)/python benchmarks/bench_sliding.py
	$(BIN)/python benchmarks/bench_read_task.py
	$(BIN)/python benchmarks/bench_source.py
	$(BIN)/python benchmarks/bench_batch_steps.py
	$(BIN)/python benchmarks/bench_dashboard.py

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache
