# Two commands on a fresh machine: `make demo` (the whole pipeline on a simulated fleet)
# and `make test`. Each installs what it needs (uv, then the locked environment).
UV := ./scripts/uv.sh
DATA ?= data

.PHONY: setup demo test test-fast lint format bench clean

# --compile-bytecode: the installed packages' .pyc written once here (seconds when already
# there); without them every foreshock process compiles Prefect, MLflow, LightGBM, scikit-learn
# and SciPy again wherever Python may not write bytecode (PYTHONDONTWRITEBYTECODE, read-only
# installs): 15-30 CPU-seconds a process on 2 cores, paid again by each worker process.
setup:
	$(UV) sync --frozen --all-extras --compile-bytecode

demo: setup
	$(UV) run --frozen foreshock --data-dir $(DATA) demo

# The whole suite, on two pytest-xdist workers (a file's tests on one worker; how the workers
# share the Prefect, MLflow, Dask and demo services: tests/conftest.py); the slowest tests are
# listed at the end (the suite should stay well under 10 minutes).
test: setup
	$(UV) run --frozen pytest -q -n 2 --dist loadfile --durations=15

# The suite without the slow end-to-end runs (seconds to a minute or two).
test-fast: setup
	$(UV) run --frozen pytest -q -m "not slow"

lint: setup
	$(UV) run --frozen ruff check .
	$(UV) run --frozen ruff format --check .

format: setup
	$(UV) run --frozen ruff check --fix .
	$(UV) run --frozen ruff format .

bench: setup
	$(UV) run --frozen python benchmarks/bench_ingest.py
	$(UV) run --frozen python benchmarks/bench_features.py

clean: setup
	$(UV) run --frozen python -m foreshock.config generated-dirs $(DATA) | xargs rm -rf
