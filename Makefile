# The two commands a newcomer runs on a fresh machine:
#   make demo   # set up, synthesize + evaluate with the shipped models (pretrained/), print the table
#   make test   # set up, run the test suite (8 simulated CPU devices for the sharding tests)
PY ?= python3
export XLA_FLAGS ?= --xla_force_host_platform_device_count=8

.PHONY: setup demo test test-fast lint fmt

setup:
	bash scripts/setup.sh

demo: setup
	bash scripts/demo.sh

test: setup
	bash scripts/test.sh

# the unit tests alone (no module marked slow): ~2 min on 2 cores
test-fast: setup
	bash scripts/test.sh -n 2 --dist loadfile -m "not slow" tests

# lint and layout (ruff, configured in pyproject.toml; tests/test_style.py runs the same checks)
lint:
	ruff check .
	ruff format --check .

fmt:
	ruff check --fix .
	ruff format .
