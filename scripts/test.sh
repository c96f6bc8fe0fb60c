#!/usr/bin/env bash
# Runs the test suite. Sharding tests need 8 devices: simulated on the host CPU.
# Without arguments: two pytest-xdist worker processes (one per core of a 2-core machine; most
# of a test's time is single-threaded tracing and compiling), test files kept whole per worker,
# sharing JAX's persistent compilation cache so a program compiled by one test (or a train.py /
# infer.py subprocess) is not compiled again by another. Two processes also keep each one
# smaller: one process compiling every program of the suite once crashed inside XLA's CPU
# compiler late in the run. With arguments (files, -k ...) one process runs exactly those.
# JAXTTS_TEST_WORKERS=N changes the number of workers (1: no xdist).
set -uo pipefail
cd "$(dirname "$0")/.."
export XLA_FLAGS="${XLA_FLAGS:---xla_force_host_platform_device_count=8}"
# Most of a test's time is XLA compiling on the CPU, not running: LLVM without its expensive
# passes compiles ~35 % faster (a car:3 decode: 16-22 s vs 27-31 s cold) and runs the tests'
# tiny programs as fast (0.33 vs 0.35 s warm). The numbers tests compare are computed under the
# same flags on both sides. XLA's older CPU fusion code generator compiles faster again
# (--xla_cpu_use_fusion_emitters=false: the DCAR engine / segment / batch-N tests 66 -> 54 s
# cold, XLA compile 42 -> 30 s; benchmarks/RESULTS.md#test-time). JAXTTS_TEST_XLA_OPT=""
# keeps XLA's defaults.
XLA_OPT="${JAXTTS_TEST_XLA_OPT---xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true --xla_cpu_use_fusion_emitters=false}"
export XLA_FLAGS="$XLA_FLAGS $XLA_OPT"
export JAX_PLATFORMS="${JAX_PLATFORMS:-cpu}"
export PYTHONUNBUFFERED=1
# numpy's BLAS on one thread in every process (kernels and subprocesses included): XLA has its
# own pool, and spinning OpenBLAS workers on busy cores made small host products 20x slower
# (jaxtts.cli.limit_host_blas)
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
# git-ignored; kept between local runs (delete it freely); a fresh clone starts empty
export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-$PWD/.cache/jax}"
export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="${JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS:-0.3}"
mkdir -p "$JAX_COMPILATION_CACHE_DIR"

run() {
  python3 -m pytest -q --durations=25 "$@"
  local rc=$?
  if [ $rc -eq 5 ]; then echo "pytest collected no tests"; return 0; fi
  return $rc
}

if [ $# -gt 0 ]; then
  run "$@"
  exit $?
fi
workers="${JAXTTS_TEST_WORKERS:-2}"
if [ "$workers" -gt 1 ]; then
  run -n "$workers" --dist loadfile tests
else
  run tests
fi
