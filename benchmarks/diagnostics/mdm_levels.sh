#!/bin/bash
# MDM: Q (quantisation levels) at an equal short schedule (RESULTS 16d): one CPU core per stream,
# MDM decoder only (no Grad-TTS score decoder), everything else the `small` recipe.
# usage: [STEPS=1500] bash benchmarks/diagnostics/mdm_levels.sh <core> <Q>...
core=$1; shift
cd "$(dirname "$0")/.." && mkdir -p out
for q in "$@"; do
  XLA_FLAGS=--xla_force_host_platform_device_count=1 taskset -c $core \
    python train.py --config configs/mdm.py:small --workdir runs/mdm_q$q \
    --config.model.levels=$q --config.model.score_layers=0 \
    --config.train.steps=${STEPS:-1500} --config.train.warmup_steps=100 > out/mdm_q$q.log 2>&1
  echo "q$q done rc=$? $(date)" >> out/mdm_levels_status.log
done
