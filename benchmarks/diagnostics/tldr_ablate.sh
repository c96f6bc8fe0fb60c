#!/bin/bash
# TLDR ablations at an equal short schedule (RESULTS 15d): one CPU core per stream.
# usage: STEPS=500 bash benchmarks/diagnostics/tldr_ablate.sh <core> <variant>...   (variants: configs/tldr.py)
core=$1; shift
cd "$(dirname "$0")/.." && mkdir -p out
for v in "$@"; do
  XLA_FLAGS=--xla_force_host_platform_device_count=1 taskset -c $core \
    python train.py --config configs/tldr.py:$v --workdir runs/abl_$v \
    --config.train.steps=${STEPS:-500} > out/abl_$v.log 2>&1
  echo "$v done rc=$? $(date)" >> out/abl_status.log
done
