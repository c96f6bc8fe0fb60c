#!/usr/bin/env bash
# Runs the test suite. Sharding tests need 8 devices: simulated on the host CPU.
set -uo pipefail
cd "$(dirname "$0")/.."
export XLA_FLAGS="${XLA_FLAGS:---xla_force_host_platform_device_count=8}"
export JAX_PLATFORMS="${JAX_PLATFORMS:-cpu}"
export PYTHONUNBUFFERED=1
python3 -m pytest -q --durations=15 "$@"
rc=$?
if [ $rc -eq 5 ]; then echo "pytest collected no tests"; exit 0; fi
exit $rc
