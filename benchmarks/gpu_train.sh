#!/usr/bin/env bash
# Training on one GPU what 2 CPU cores cannot: TLDR runs on the 12-layer backbone, started side by
# side in one device call and exported to $OUT, to be evaluated back on the CPU.
#
#   bash benchmarks/gpu_train.sh --prepare   # here, once: gpu_bundle/train_data.tgz (+ the
#                                            # wheels of gpu_check.sh --prepare: .whl_gpu/)
#   bash benchmarks/gpu_check.sh --slim      # here: the shipped models the runs do not use aside
#   bash benchmarks/gpu_train.sh             # on the GPU machine (OUT=<dir> for results)
#   bash benchmarks/gpu_check.sh --unslim    # here, after it
#   DRY=1 JAX_PLATFORMS=cpu bash benchmarks/gpu_train.sh   # the same flow, 2 steps, on a CPU
#
# --prepare packs what training reads of the 16 h corpus (data/builtin-n20000-s0): the train and
# dev manifests (phonemes included, so no espeak-ng is needed) and their speech tokens, 3.9 MB
# gzipped instead of the 1.9 GB of wavs. The travelling tree: the code, pretrained/car_deep,
# speaker_encoder and tldr_deep_p4 (the warm start), gpu_bundle/train_data.tgz and .whl_gpu/
# carried (about 60 MiB of the call's 64).
#
# A GPU compiles the training step once per batch shape, ~60 s each on an H200 with two runs
# compiling side by side (lease 5's first call: 40 steps in 460 s, every new length bucket a
# new compile; docs/history/speed.md §gpu-train), so the gpu_* variants pad every batch to one shape (`tldr.fixed_shapes`).
# With one shape, one run alone took 0.29 s a step at batch 64 (XLA_FLAGS=--xla_gpu_autotune_level=0
# compiles faster). TRAIN_ARGS adds train.py flags to every run (e.g. a warm start carried from out/).
#
# Each run of RUNS (configs/tldr.py variants, default "gpu_text_layers gpu_text3") is one
# train.py process; all start at once and share the GPU. At DEADLINE seconds after the start
# each still running gets SIGTERM, which writes its last checkpoint (the cosine schedule is then
# cut short: the log says at which step). Then each run's trained leaves are exported
# (float16z, `run_folder export --trained_only`) with its metrics.jsonl into $OUT/<run>.tgz.
# Results: $OUT/gpu_train.log, $OUT/<run>.log, $OUT/<run>.tgz.part00 (01, ...: a file that comes
# back from the device is at most 16 MiB). Back here:
#   cat <files_at>/<run>.tgz.part* | tar -xz -C out/   # -> out/<run>/ (a run folder to evaluate)
set -uo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-run}
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
OUT=${OUT:-out/gpu_train}
BUNDLE=gpu_bundle
CORPUS=data/builtin-n20000-s0

if [ "$MODE" = --prepare ]; then
  set -e
  [ -f $CORPUS/done ] || {
    echo "$CORPUS: not built; make it with PYTHONPATH=. python -m jaxtts.data.corpus --out $CORPUS --num_utterances 20000"
    exit 2
  }
  mkdir -p $BUNDLE
  list=$(mktemp)
  (
    cd $CORPUS
    for f in config.json speakers.json done train.jsonl dev.jsonl; do echo "$f"; done
    for t in tokens/*/; do
      [ -f "$t/tokenizer.sha256" ] && echo "${t}tokenizer.sha256"
      cat train.jsonl dev.jsonl | $PY -c "import json, sys; [print('${t}' + json.loads(l)['id'] + '.npy') for l in sys.stdin if l.strip()]"
    done
  ) > "$list"
  tar -czf $BUNDLE/train_data.tgz -C $CORPUS --transform "s,^,$(basename $CORPUS)/," -T "$list"
  rm -f "$list"
  ls .whl_gpu/*.whl > /dev/null 2>&1 || bash benchmarks/gpu_check.sh --prepare
  du -sh $BUNDLE/train_data.tgz .whl_gpu
  echo "device run: bash benchmarks/gpu_check.sh --slim; carry gpu_bundle/train_data.tgz .whl_gpu"
  exit 0
fi

DRY=${DRY:-0}
RUNS=${RUNS:-gpu_text_layers gpu_text3}
DEADLINE=${DEADLINE:-460}
WORK=${WORK:-/tmp/gpu_train}
read -r -a EXTRA <<< "${TRAIN_ARGS:-}"  # more train.py flags for every run, e.g. --config.train.steps=1500
if [ "$DRY" = 1 ]; then
  WORK=$OUT/work
  DEADLINE=${DEADLINE_DRY:-900}
  EXTRA+=(--config.train.steps=2 --config.train.warmup_steps=1 --config.train.eval_every=2
    --config.train.log_every=1 --config.tldr.batch_size=2)
fi
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/gpu_train.log") 2>&1
T0=$SECONDS
echo "=== env $(date -u +%T)"
if [ "$DRY" != 1 ] && ls .whl_gpu/*.whl > /dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl_gpu/*.whl || echo "=== env: the wheels did not install"
  export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ ! -f $CORPUS/done ]; then
  tar -xzf $BUNDLE/train_data.tgz -C data 2> /dev/null || {
    mkdir -p data && tar -xzf $BUNDLE/train_data.tgz -C data
  }
  echo "$CORPUS: $(ls $CORPUS/tokens/*/ | wc -l) token files"
fi
[ ! -d pretrained/tldr_deep_p4 ] || [ -e pretrained/tldr_deep_p4/tokenizer ] || ln -s ../car_deep/tokenizer pretrained/tldr_deep_p4/tokenizer
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2> /dev/null
$PY -c "import jax, flax, optax; print(f'jax {jax.__version__} backend {jax.default_backend()} \
{jax.devices()}; flax {flax.__version__} optax {optax.__version__}')"
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # the runs share the GPU's memory

echo "=== start $(date -u +%T): $RUNS (SIGTERM at ${DEADLINE} s)"
PIDS=()
for r in $RUNS; do
  rm -rf "${WORK:?}/$r"
  (
    left=$((DEADLINE - (SECONDS - T0)))
    timeout --signal=TERM --kill-after=60 $left $PY train.py --config configs/tldr.py:$r \
      --workdir "$WORK/$r" "${EXTRA[@]}" > "$OUT/$r.log" 2>&1
    echo "=== $r: rc $?, $((SECONDS - T0)) s"
  ) &
  PIDS+=($!)
done
while [ -n "$(jobs -r)" ]; do
  sleep 30
  for r in $RUNS; do
    m=$WORK/$r/metrics.jsonl
    [ -f "$m" ] && echo "  $(date -u +%T) $r: $(tail -n 1 "$m" | cut -c1-100)"
  done
done
wait "${PIDS[@]}"

echo "=== export $(date -u +%T)"
for r in $RUNS; do
  d=$WORK/$r
  [ -d "$d/checkpoints" ] || {
    echo "$r: no checkpoint"
    continue
  }
  rm -rf "${WORK:?}/export/$r"
  $PY -m jaxtts.run_folder export "$d" "$WORK/export/$r" --trained_only --dtype float16z &&
    cp "$d/metrics.jsonl" "$WORK/export/$r/" &&
    tar -czf "$WORK/$r.tgz" -C "$WORK/export" "$r" &&
    split -b 15M -d "$WORK/$r.tgz" "$OUT/$r.tgz.part" &&  # a file that comes back: < 16 MiB
    echo "$r: $(du -h "$WORK/$r.tgz" | cut -f1), last step $(ls "$d/checkpoints" | sort -n | tail -n 1)"
done
echo "=== done $(date -u +%T), $((SECONDS - T0)) s; files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
