#!/usr/bin/env bash
# Runs the test suite. Sharding tests need 8 devices: simulated on the host CPU.
# Without arguments the test files run in two pytest processes (two halves, alphabetical):
# one process compiling every program of the suite once crashed inside XLA's CPU compiler
# late in the run. With arguments (files, -k ...) one process runs exactly those.
set -uo pipefail
cd "$(dirname "$0")/.."
export XLA_FLAGS="${XLA_FLAGS:---xla_force_host_platform_device_count=8}"
export JAX_PLATFORMS="${JAX_PLATFORMS:-cpu}"
export PYTHONUNBUFFERED=1

run() {
  python3 -m pytest -q --durations=15 "$@"
  local rc=$?
  if [ $rc -eq 5 ]; then echo "pytest collected no tests"; return 0; fi
  return $rc
}

if [ $# -gt 0 ]; then
  run "$@"
  exit $?
fi
files=(tests/test_*.py)
half=$(( ${#files[@]} / 2 ))
run "${files[@]:0:$half}"
rc1=$?
run "${files[@]:$half}"
rc2=$?
exit $(( rc1 != 0 ? rc1 : rc2 ))
