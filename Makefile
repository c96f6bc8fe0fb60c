# The two commands a newcomer runs on a fresh machine:
#   make demo   # set up, synthesize + evaluate with the shipped models (pretrained/), print the table
#   make test   # set up, run the test suite (8 simulated CPU devices for the sharding tests)
PY ?= python3
export XLA_FLAGS ?= --xla_force_host_platform_device_count=8

.PHONY: setup demo test lint

setup:
	bash scripts/setup.sh

demo: setup
	bash scripts/demo.sh

test: setup
	bash scripts/test.sh

lint:
	ruff check jaxtts tests configs train.py infer.py benchmarks
