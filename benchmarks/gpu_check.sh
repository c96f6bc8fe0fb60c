#!/usr/bin/env bash
# What the methods cost on a GPU, measured: one script for a machine with one GPU.
#
#   bash benchmarks/gpu_check.sh --prepare            # here, first: builds gpu_bundle/ + .whl/
#   bash benchmarks/gpu_check.sh                      # on the GPU machine (OUT=<dir> for results)
#   JAX_PLATFORMS=cpu bash benchmarks/gpu_check.sh --dry   # every stage at tiny sizes, on a CPU
#
# --prepare (needs data/builtin, runs/ssd_deep13_s0 and runs/dcar_deep, i.e. the deep-backbone
# runs of benchmarks/deep_backbone.sh) writes, git-ignored:
#   gpu_bundle/data/builtin   the test split's manifest + the wavs of its first 40 sentences and
#                             their prompts (3.6 MB instead of the 221 MB corpus)
#   gpu_bundle/ssd_deep13_s0  the SSD draft on car_deep (first 1 / last 3), float16 export; its
#                             tokenizer a link to car_deep's (5 MB less to send)
#   gpu_bundle/dcar_deep      the DCAR policy on car_deep (checkpoint 50), float16 export
#   gpu_bundle/bin/espeak-ng  benchmarks/recorded_espeak.py + espeak_table.json: the real
#                             espeak-ng's answers for the test sentences (the image has none)
#   .whl/                     wheels the GPU image lacks (pinned flax / optax / orbax / chex,
#                             ml-collections, librosa, jiwer, grain + portpicker, soundfile, ...;
#                             13 MB)
# A machine that cannot reach the internet gets the repository + these two folders (carry them;
# the working tree that travels must stay under its size limit: leave out the shipped models
# other than pretrained/car_deep). The pinned jax's CUDA wheels do not fit such a transfer
# (jaxlib alone is 85 MB): the script uses the machine's own CUDA jax and prints its version.
#
# Stages, each under its own time limit (a stage that fails or runs out leaves the others; on
# the limit Python gets SIGINT first, so the log shows where it was):
#   deep       methods_speed.py: FAR, CAR 2/3, VADUSA, DCAR, SSD beta 0.4 on the 12-layer
#              backbone (pretrained/car_deep + the bundle's SSD / DCAR), batch 1 / 8 / 32
#   paper      decode.py: paper-size random weights, bf16 weights and compute, batch 1 / 8 / 32
#   train      train_throughput.py: one paper-size training step in bf16, its MFU
#   calibrate  roofline.py calibrate: matmul FLOP/s by rows, bandwidth, the fixed cost of a
#              lax.while_loop iteration and of a layer, the bf16 matmul peak
#   tests      the decode-equivalence and lossless-SSD tests, on the GPU
#   check      roofline.py check: the roofline's prediction (this GPU's calibration) beside the
#              measured LM-RTF of every deep row
# Results: $OUT/*.json and $OUT/gpu_check.log (everything printed). Choose with STAGES="deep
# paper" and DEEP_ROWS / DEEP_ARGS; CALIBRATION=<json> reuses an earlier calibration.
#
# What the first run on an H200 showed (2026-11-26, benchmarks/RESULTS.md "GPU check"):
# compilation, not decoding, fills the lease. XLA on that image took 43-48 s to warm up one
# 12-layer decode row at batch 1, > 50 s for the paper model's init, ~30 s per decode test, so
# no stage but `calibrate` finished inside its limit and 15 minutes of device time held ~3 rows.
# A full run needs ~25 min of device time, or fewer compiled shapes (one row per method, one
# batch size per call).
set -uo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-run}
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
OUT=${OUT:-out/gpu_check}
BUNDLE=gpu_bundle

if [ "$MODE" = --prepare ]; then
  set -e
  python - <<'PY'
import json, os, shutil
from jaxtts.data.manifest import read_split
from jaxtts.synthesize import prompt_ids

src, dst, n = "data/builtin", "gpu_bundle/data/builtin", 40
pool = read_split(src, "test")
pid = prompt_ids(pool)
need = {u.id for u in pool[:n]} | {pid[u.id] for u in pool[:n]}
os.makedirs(dst, exist_ok=True)
for f in ("config.json", "speakers.json", "done", "test.jsonl"):
    shutil.copy2(f"{src}/{f}", f"{dst}/{f}")
for line in open(f"{src}/test.jsonl"):
    r = json.loads(line)
    if r["id"] in need:
        os.makedirs(os.path.dirname(f"{dst}/{r['audio']}"), exist_ok=True)
        shutil.copy2(f"{src}/{r['audio']}", f"{dst}/{r['audio']}")
print(f"{dst}: {len(need)} wavs")
PY
  rm -rf $BUNDLE/ssd_deep13_s0 $BUNDLE/dcar_deep  # (the link below: never export into it)
  python -m jaxtts.run_folder export runs/ssd_deep13_s0 $BUNDLE/ssd_deep13_s0 --dtype float16
  python -m jaxtts.run_folder export runs/dcar_deep $BUNDLE/dcar_deep --step 50
  # the SSD draft's tokenizer is car_deep's: a link into the checkout instead of a 5 MB copy
  rm -rf $BUNDLE/ssd_deep13_s0/tokenizer
  ln -s ../../pretrained/car_deep/tokenizer $BUNDLE/ssd_deep13_s0/tokenizer
  # the image has no espeak-ng: record the real one's answers for every test sentence
  python - <<'PY'
import json

import jaxtts.data.text as text
from jaxtts.data.manifest import read_split

table, real = {}, text._espeak_lines


def record(lines, voice):
    out = real(lines, voice)
    table.update({f"{voice}\t{a}": b for a, b in zip(lines, out, strict=True)})
    return out


text._espeak_lines = record
text.phonemize([u.text for u in read_split("data/builtin", "test")], strict=True, workers=1)
json.dump(table, open("gpu_bundle/espeak_table.json", "w"), ensure_ascii=False)
print(f"gpu_bundle/espeak_table.json: {len(table)} lines")
PY
  mkdir -p $BUNDLE/bin
  cp benchmarks/recorded_espeak.py $BUNDLE/bin/espeak-ng
  chmod +x $BUNDLE/bin/espeak-ng
  mkdir -p .whl
  python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any -d .whl \
    flax==0.12.8 optax==0.2.8 orbax-checkpoint==0.12.8 chex==0.1.92 ml-collections==1.1.0 \
    jiwer==4.0.0 rapidfuzz librosa==0.11.0 audioread pooch soxr decorator platformdirs \
    soundfile cffi pycparser grain==0.2.18 array-record dm-tree portpicker tensorboardX
  du -sh $BUNDLE .whl
  echo "device run: carry gpu_bundle and .whl; the working tree that travels must stay under its"
  echo "size limit (pretrained/car_deep is the only shipped model the run needs)"
  exit 0
fi

DRY=0
[ "$MODE" = --dry ] && DRY=1
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
STAGES=${STAGES:-env calibrate deep tests paper train check}
want() { [[ " $STAGES " == *" $1 "* ]]; }
stage() {  # stage <name> <limit s> <command...>
  local name=$1 limit=$2
  shift 2
  want "$name" || return 0
  echo
  echo "=== $name (limit ${limit} s) $(date -u +%T)"
  local t0=$SECONDS
  timeout --signal=INT --kill-after=5 "$limit" "$@"  # INT first: Python prints where it was
  local rc=$?
  echo "=== $name: rc $rc$([ $rc = 124 ] && echo ' (time limit)'), $((SECONDS - t0)) s"
}

if [ $DRY = 1 ]; then
  # tiny sizes on the CPU: the flow and the files, not the numbers
  CAL_MB=4
  DEEP_ROWS="far@pretrained/car_deep,car:3@pretrained/car_deep,dcar@$BUNDLE/dcar_deep"
  DEEP_ARGS="--num 2 --batch 1 --rounds 1"
  PAPER_ARGS="--config configs/car.py:tiny --batch 1,2 --tokens 8 --repeats 1"
  TRAIN_ARGS="--config configs/car.py:tiny --batch 2 --text 16 --speech 32 --steps 1"
  L_CAL=120 L_DEEP=400 L_TESTS=400 L_PAPER=120 L_TRAIN=120
else
  CAL_MB=64
  # compile time, not run time, is what a short lease runs out of: no GEMM autotuning (cuBLAS's
  # own heuristics pick the kernels); each process takes under half the GPU memory
  export XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_autotune_level=0"
  export XLA_PYTHON_CLIENT_MEM_FRACTION=0.45
  ROWS="far@pretrained/car_deep,car:2@pretrained/car_deep,car:3@pretrained/car_deep"
  ROWS+=",vadusa:2@pretrained/car_deep,dcar@$BUNDLE/dcar_deep"
  ROWS+=",ssd:L=3,beta=0.4@$BUNDLE/ssd_deep13_s0"
  DEEP_ROWS=${DEEP_ROWS:-$ROWS}
  DEEP_ARGS=${DEEP_ARGS:-"--num 8,16,32 --batch 1,8,32 --rounds 2"}
  PAPER_ARGS="--config configs/car.py:paper --batch 1,8,32 --tokens 200 --repeats 2"
  PAPER_ARGS+=" --strategies far,car:3,vadusa:3 --param_dtype bfloat16"
  TRAIN_ARGS="--config configs/car.py:paper --batch 32 --dtype bfloat16 --steps 3 --mesh data=1"
  L_CAL=40 L_DEEP=170 L_TESTS=60 L_PAPER=50 L_TRAIN=50
fi

env_stage() {
  if [ $DRY = 0 ] && [ -d .whl ] && ls .whl/*.whl > /dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl || return 1
  fi
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>/dev/null
  $PY - <<'PY'
import jax, flax, optax, numpy
print(f"jax {jax.__version__} (pinned 0.10.2) backend {jax.default_backend()} devices "
      f"{jax.devices()}; flax {flax.__version__} optax {optax.__version__} numpy {numpy.__version__}")
PY
}
if want env; then
  echo "=== env $(date -u +%T)"
  [ $DRY = 0 ] && export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
  env_stage || echo "=== env: the wheels did not install"
fi
[ $DRY = 0 ] && export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ! command -v espeak-ng > /dev/null && [ -x $BUNDLE/bin/espeak-ng ]; then
  export PATH="$PWD/$BUNDLE/bin:$PATH"  # no espeak-ng here: the recorded one (see --prepare)
  echo "espeak-ng: the recording in $BUNDLE/espeak_table.json"
fi
if ! want calibrate && [ -f "${CALIBRATION:-}" ]; then
  cp "$CALIBRATION" "$OUT/calibration.json"  # an earlier run's calibration of this GPU kind
fi

stage deep $L_DEEP $PY benchmarks/methods_speed.py --corpus $BUNDLE/data/builtin \
  --rows "$DEEP_ROWS" $DEEP_ARGS --out "$OUT/speed_deep.json"
stage paper $L_PAPER $PY benchmarks/decode.py $PAPER_ARGS --out "$OUT/decode_paper.json"
stage train $L_TRAIN $PY benchmarks/train_throughput.py $TRAIN_ARGS --out "$OUT/train_paper.json"
stage calibrate $L_CAL $PY benchmarks/roofline.py calibrate --weights_mb $CAL_MB \
  --out "$OUT/calibration.json"
# float32 matmuls at full precision: the tests compare decodes token for token (on the GPU:
# JAX_PLATFORMS empty, so tests/conftest.py does not pin the CPU)
stage tests $L_TESTS env JAX_DEFAULT_MATMUL_PRECISION=highest JAX_PLATFORMS="${JAX_PLATFORMS:-}" \
  $PY -m pytest -q -x -p no:cacheprovider --junitxml="$OUT/tests.xml" \
  tests/test_lm.py tests/test_ssd.py \
  -k "prefill or rollback or while_loop or batch_n or c1_equals or greedy_ssd or lossless"
if want check && [ -f "$OUT/speed_deep.json" ] && [ -f "$OUT/calibration.json" ]; then
  stage check 30 $PY benchmarks/roofline.py check --speed "$OUT/speed_deep.json" \
    --calibration "$OUT/calibration.json" --out "$OUT/roofline_check.json"
fi
echo
echo "=== done $(date -u +%T); files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
