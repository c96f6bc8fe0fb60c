#!/usr/bin/env bash
# What the methods cost on a GPU, measured: one script for a machine with one GPU.
#
#   bash benchmarks/gpu_check.sh --prepare   # here, once: gpu_bundle/ + .whl/ + .whl_gpu/
#   bash benchmarks/gpu_check.sh --slim      # here, before the device call: the tree that travels
#   bash benchmarks/gpu_check.sh             # on the GPU machine (OUT=<dir> for results)
#   bash benchmarks/gpu_check.sh --unslim    # here, after it: the shipped models back
#   JAX_PLATFORMS=cpu bash benchmarks/gpu_check.sh --dry   # every part at tiny sizes, on a CPU
#
# --prepare (needs data/builtin) writes, git-ignored:
#   gpu_bundle/data/builtin   the test split's manifest + the wavs of its first 40 sentences and
#                             their prompts (3.6 MB instead of the 221 MB corpus)
#   gpu_bundle/bin/espeak-ng  benchmarks/recorded_espeak.py + espeak_table.json: the real
#                             espeak-ng's answers for the test sentences (the image has none)
#   .whl/, .whl_gpu/          wheels the GPU image lacks (pinned flax / optax / orbax / chex,
#                             ml-collections, grain, librosa, soundfile, ...); .whl_gpu/ holds the
#                             5 MB a decode / one-batch training run imports (no grain: no loader)
# --slim moves the shipped models that the run does not use (and tldr_deep_p4's copy of car_deep's
# tokenizer) to .gpu_aside/, git-ignored, so the working tree fits the device call's 64 MiB with
# gpu_bundle/data, gpu_bundle/bin, gpu_bundle/espeak_table.json and .whl_gpu carried; --unslim
# puts them back. The image's own CUDA jax runs the code (the pinned jaxlib's CUDA wheels are
# larger than the transfer); the env part prints its version.
#
# Compilation, not decoding, is what a 15-minute lease runs out of (first lease, RESULTS "GPU
# check": 43-48 s to compile one 12-layer decode row, one process at a time). So every
# measurement is its own process and they all start at once: they compile side by side on the
# host's cores, and take turns on the GPU for their timed parts (`benchmarks/timing_lock.py`: an
# exclusive flock on $WORK/timing.lock around each timed section, so no two timings overlap).
# Parts (each under its own time limit: SIGINT, then SIGKILL 5 s later. A background job starts
# with SIGINT ignored, so only a part that takes it back acts on it: `roofline.py calibrate`
# then writes what it has fitted, without DCAR's choice cost; the others are killed):
#   deep_<row>_b<batch>  methods_speed.py, one process per row and batch size (1 / 8 / 32) on
#               the 12-layer backbone: FAR, CAR 2/3, VADUSA, DCAR (pretrained/dcar_deep), SSD
#               beta 0.4 (pretrained/ssd_deep), TLDR P = 4 (pretrained/tldr_deep_p4); joined
#               after with --combine (DCAR alone compiles 150-175 s per batch size on an H200);
#               DEEP_PRECISION=bfloat16 times them with bfloat16 matmuls
#   paper       decode.py: paper-size random weights, bf16 weights and compute, batch 1 / 32
#   train       train_throughput.py: one paper-size training step in bf16, its MFU
#   calibrate   roofline.py calibrate: matmul FLOP/s by rows, bandwidth, the fixed cost of a
#               lax.while_loop iteration and of a layer, the bf16 matmul peak, and the fixed
#               costs of real decode steps (FAR, CAR c=3 and, since lease 4, DCAR forced to 3:
#               its chunk-choice cost; 237 s with 24 other processes on the third lease)
#   tests_*     the decode-equivalence and lossless-SSD tests, on the GPU (three processes)
#   where_<row> the batch-1 rows of WHERE_ROWS (FAR, CAR c=3, SSD) with the sampling fallback
#               computed by jnp.where, not lax.cond (JAXTTS_SAMPLING_FALLBACK=where), in case a
#               cond costs a host round trip per step (on an H200 it did not: RESULTS gpu-check-3)
#   cond        cond_cost.py: what one lax.cond costs per while_loop iteration
#   check       (after the others) roofline.py check: the roofline's prediction with this GPU's
#               calibration beside the measured LM-RTF of every deep row
# Results: $OUT/gpu_check.log (everything printed here, the tables last), $OUT/speed_deep.json,
# $OUT/calibration.json, $OUT/roofline_check.json and $OUT/parts.tgz (every part's log and JSON;
# a device call returns at most 8 files). PARTS="deep paper" runs a subset (prefix match); the
# default is "deep calibrate tests"; ROWS and DEEP_BATCHES ("1:8 8:16") narrow the
# deep rows.
set -uo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-run}
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
OUT=${OUT:-out/gpu_check}
BUNDLE=gpu_bundle
ASIDE=.gpu_aside
UNUSED="car_small ctc_asr mdm palle palle_par tldr_deep"  # (TLDR needs speaker_encoder)

if [ "$MODE" = --slim ]; then
  set -e
  mkdir -p $ASIDE
  for m in $UNUSED; do [ -d pretrained/$m ] && mv pretrained/$m $ASIDE/; done
  [ -d pretrained/tldr_deep_p4/tokenizer ] && mv pretrained/tldr_deep_p4/tokenizer $ASIDE/tldr_tokenizer
  echo "moved to $ASIDE: $(ls $ASIDE | tr '\n' ' ')(bash $0 --unslim puts them back)"
  exit 0
fi
if [ "$MODE" = --unslim ]; then
  set -e
  for m in $UNUSED; do [ -d $ASIDE/$m ] && mv $ASIDE/$m pretrained/; done
  [ -L pretrained/tldr_deep_p4/tokenizer ] && rm pretrained/tldr_deep_p4/tokenizer
  [ -d $ASIDE/tldr_tokenizer ] && mv $ASIDE/tldr_tokenizer pretrained/tldr_deep_p4/tokenizer
  rmdir $ASIDE 2> /dev/null || true
  git status --short pretrained
  exit 0
fi

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
  mkdir -p .whl .whl_gpu
  python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any -d .whl \
    flax==0.12.8 optax==0.2.8 orbax-checkpoint==0.12.8 chex==0.1.92 ml-collections==1.1.0 \
    jiwer==4.0.0 rapidfuzz librosa==0.11.0 audioread pooch soxr decorator platformdirs \
    soundfile cffi pycparser grain==0.2.18 array-record dm-tree portpicker tensorboardX
  for w in flax optax orbax_checkpoint chex ml_collections soundfile cffi \
    pycparser portpicker dm_tree librosa audioread pooch decorator soxr platformdirs; do
    ln -f .whl/$w-*.whl .whl_gpu/
  done
  du -sh $BUNDLE .whl .whl_gpu
  echo "device run: bash $0 --slim; carry gpu_bundle/data gpu_bundle/bin"
  echo "gpu_bundle/espeak_table.json .whl_gpu; afterwards bash $0 --unslim"
  exit 0
fi

DRY=0
[ "$MODE" = --dry ] && DRY=1
mkdir -p "$OUT"
WORK=${WORK:-$OUT/parts}
[ $DRY = 0 ] && WORK=/tmp/gpu_check_parts
rm -rf "$WORK" && mkdir -p "$WORK"
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
# measured on earlier leases: paper and train (docs/history/speed.md §gpu-check-2), where and cond (-3)
PARTS=${PARTS:-deep calibrate tests}
want() { for p in $PARTS; do [[ $1 == "$p"* ]] && return 0; done; return 1; }
launch() {  # launch <name> <limit s> <command...>: in the background, output to $WORK/<name>.log
  local name=$1 limit=$2
  shift 2
  want "$name" || return 0
  (
    t0=$SECONDS
    timeout --signal=INT --kill-after=5 "$limit" "$@" > "$WORK/$name.log" 2>&1
    rc=$?
    echo "=== $name: rc $rc$([ $rc = 124 ] && echo ' (time limit)'), $((SECONDS - t0)) s"
  ) &
  PIDS+=($!)
}
PIDS=()

ALL_ROWS="far@pretrained/car_deep car:2@pretrained/car_deep car:3@pretrained/car_deep"
ALL_ROWS+=" vadusa:2@pretrained/car_deep dcar:sample@pretrained/dcar_deep"
ALL_ROWS+=" ssd:L=3,beta=0.4@pretrained/ssd_deep tldr@pretrained/tldr_deep_p4 tldr@pretrained/tldr_deep_p4_tl"
# the sampling fallback without lax.cond (JAXTTS_SAMPLING_FALLBACK=where), part `where`
WHERE_ROWS=${WHERE_ROWS:-far@pretrained/car_deep car:3@pretrained/car_deep ssd:L=3,beta=0.4@pretrained/ssd_deep}
TESTS="tests/test_lm.py tests/test_ssd.py"
# the deep rows' matmul precision: float32, or bfloat16 (RESULTS precision: weights cast once at
# load, float32 sums), e.g. DEEP_PRECISION=bfloat16 bash benchmarks/gpu_check.sh
DEEP_PRECISION=${DEEP_PRECISION:-float32}
if [ $DRY = 1 ]; then  # tiny sizes on the CPU: the flow and the files, not the numbers
  CAL_MB=4
  ROWS=${ROWS:-far@pretrained/car_deep dcar:sample@pretrained/dcar_deep}
  WHERE_ROWS=far@pretrained/car_deep
  DEEP_BATCHES=${DEEP_BATCHES:-1:2}  # batch:sentences, one process each
  DEEP_ARGS="--rounds 1"
  PAPER_ARGS="--config configs/car.py:tiny --batch 1,2 --tokens 8 --repeats 1"
  TRAIN_ARGS="--config configs/car.py:tiny --batch 2 --text 16 --speech 32 --steps 1"
  TEST_K=(c1_equals "greedy_ssd_equals_greedy_far and 1")
  LIMIT=${LIMIT:-400}
else
  CAL_MB=64
  ROWS=${ROWS:-$ALL_ROWS}
  DEEP_BATCHES=${DEEP_BATCHES:-1:8 8:16 32:32}  # batch:sentences, one process each
  DEEP_ARGS="--rounds 2"
  PAPER_ARGS="--config configs/car.py:paper --batch 1,32 --tokens 200 --repeats 3"
  PAPER_ARGS+=" --strategies far,car:3 --param_dtype bfloat16"
  TRAIN_ARGS="--config configs/car.py:paper --batch 32 --dtype bfloat16 --steps 5 --mesh data=1"
  TEST_K=("prefill or rollback or c1_equals or lossless" "while_loop or batch_n_equals"
    "greedy_ssd or ssd_batch_n")
  LIMIT=${LIMIT:-420}  # each part; the device call's own limit is 600 s with start-up around it
  # cuBLAS GEMMs (no Triton GEMM autotuning). Decode parts autotune among cuBLAS's algorithms:
  # without it (--xla_gpu_autotune_level=0, the third lease's call 1) FAR's 12-layer step took
  # 1.11 ms at batch 8 against 0.62 ms tuned, slower than at batch 32 (RESULTS gpu-check-3)
  export XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_enable_triton_gemm=false"
  export XLA_PYTHON_CLIENT_PREALLOCATE=false  # a dozen processes share the GPU's memory
fi
export JAXTTS_TIMING_LOCK=$WORK/timing.lock
export JAXTTS_TIMING_PAUSE=$WORK/pids  # the lock holder pauses the other parts (timing_lock.py)
FAST=${DECODE_XLA_FLAGS-}  # decode parts' extra XLA flags (=--xla_gpu_autotune_level=0: compile faster)
# the decode parts' XLA_FLAGS, without stray spaces: XLA reads a value that does not start with
# "--" (a lone " " when both are empty) as a file name and aborts
DECODE_FLAGS=$(echo ${XLA_FLAGS-} $FAST)

echo "=== env $(date -u +%T)"
if [ $DRY = 0 ] && ls .whl_gpu/*.whl > /dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl_gpu/*.whl || echo "=== env: the wheels did not install"
  export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
[ -e pretrained/tldr_deep_p4/tokenizer ] || ln -s ../car_deep/tokenizer pretrained/tldr_deep_p4/tokenizer
if ! command -v espeak-ng > /dev/null && [ -x $BUNDLE/bin/espeak-ng ]; then
  export PATH="$PWD/$BUNDLE/bin:$PATH"  # no espeak-ng here: the recorded one (see --prepare)
  echo "espeak-ng: the recording in $BUNDLE/espeak_table.json"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2> /dev/null
$PY - <<'PY'
import os, jax, flax, optax, numpy
print(f"jax {jax.__version__} (pinned 0.10.2) backend {jax.default_backend()} devices "
      f"{jax.devices()}; flax {flax.__version__} optax {optax.__version__} numpy "
      f"{numpy.__version__}; {os.cpu_count()} host cores")
PY

echo "=== start $(date -u +%T): every part at once, timed parts one at a time"
DEEP_JSONS=""
for spec in $ROWS; do
  for bn in $DEEP_BATCHES; do  # one process per row and batch size: they compile side by side
    name=deep_$(echo "${spec%@*}" | tr -c 'a-zA-Z0-9.\n' _)_b${bn%:*}
    DEEP_JSONS+="${DEEP_JSONS:+,}$WORK/$name.json"
    XLA_FLAGS="$DECODE_FLAGS" launch "$name" "$LIMIT" $PY -m benchmarks.methods_speed \
      --corpus $BUNDLE/data/builtin --rows "$spec" --batch "${bn%:*}" --num "${bn#*:}" \
      $DEEP_ARGS --precision "$DEEP_PRECISION" --out "$WORK/$name.json"
  done
done
WHERE_JSONS=""
for spec in $WHERE_ROWS; do  # batch 1 (the host round trips show at batch 1)
  bn=${DEEP_BATCHES%% *}
  name=where_$(echo "${spec%@*}" | tr -c 'a-zA-Z0-9.\n' _)_b${bn%:*}
  WHERE_JSONS+="${WHERE_JSONS:+,}$WORK/$name.json"
  XLA_FLAGS="$DECODE_FLAGS" JAXTTS_SAMPLING_FALLBACK=where launch "$name" "$LIMIT" \
    $PY -m benchmarks.methods_speed --corpus $BUNDLE/data/builtin --rows "$spec" \
    --batch "${bn%:*}" --num "${bn#*:}" $DEEP_ARGS --out "$WORK/$name.json"
done
launch cond "$LIMIT" $PY -m benchmarks.diagnostics.cond_cost --out "$WORK/cond.json"
XLA_FLAGS="$DECODE_FLAGS" launch paper "$LIMIT" $PY -m benchmarks.decode $PAPER_ARGS \
  --out "$WORK/paper.json"
launch train "$LIMIT" $PY -m benchmarks.diagnostics.train_throughput $TRAIN_ARGS --out "$WORK/train.json"
launch calibrate "$LIMIT" $PY -m benchmarks.roofline calibrate --depths "${CAL_DEPTHS:-1,4}" \
  --weights_mb $CAL_MB --out "$WORK/calibration.json"
# float32 matmuls at full precision: the tests compare decodes token for token (on the GPU:
# JAX_PLATFORMS empty, so tests/conftest.py does not pin the CPU); registered with timing_lock,
# so a timed part pauses them too
i=0
for k in "${TEST_K[@]}"; do
  i=$((i + 1))
  XLA_FLAGS="$DECODE_FLAGS" launch tests_$i "$LIMIT" env \
    JAX_DEFAULT_MATMUL_PRECISION=highest JAX_PLATFORMS="${JAX_PLATFORMS:-}" \
    $PY -c "import sys, pytest, benchmarks.timing_lock; sys.exit(pytest.main(sys.argv[1:]))" \
    -q -p no:cacheprovider --junitxml="$WORK/tests_$i.xml" $TESTS -k "$k"
done
while [ -n "$(jobs -r)" ]; do
  sleep 20
  echo "  $(date -u +%T): $(jobs -r | wc -l) parts running; done: $(grep -l '' "$WORK"/*.json \
    2> /dev/null | xargs -r -n1 basename | tr '\n' ' ')"
done
wait "${PIDS[@]}"  # (a bare `wait` would also wait for the log's tee)

echo
echo "=== results $(date -u +%T)"
for f in "$WORK"/tests_*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(tail -n 1 "$f")"; done
if want deep; then
  $PY -m benchmarks.methods_speed --combine "$DEEP_JSONS" --out "$OUT/speed_deep.json"
  grep -h "warm-up\|timing lock" "$WORK"/deep_*.log | head -40
fi
if want where; then
  echo "sampling fallback by jnp.where instead of lax.cond (JAXTTS_SAMPLING_FALLBACK=where):"
  $PY -m benchmarks.methods_speed --combine "$WHERE_JSONS" --out "$OUT/speed_where.json"
fi
[ -f "$WORK/cond.log" ] && tail -n 1 "$WORK/cond.log"
[ -f "$WORK/paper.json" ] && sed -n '/^| strategy/,$p' "$WORK/paper.log"
[ -f "$WORK/train.json" ] && $PY -c "import json; r = json.load(open('$WORK/train.json')); \
print({k: r[k] for k in ('config', 'device', 'params', 'batch', 'step_s', 'compile_s', \
'tokens_per_s', 'achieved_flops', 'matmul_peak_flops', 'mfu', 'mfu_datasheet') if k in r})"
if [ -f "$WORK/calibration.json" ]; then
  cp "$WORK/calibration.json" "$OUT/calibration.json"
  $PY -c "import json; c = json.load(open('$OUT/calibration.json')); \
print({k: c[k] for k in ('device', 'bw', 'bw_stream', 'o_f', 'o_l', 'peak_bf16')}); \
print('matmul FLOP/s by rows:', [(m, f'{f:.3g}') for m, f in c['curve']])"
  if [ -f "$OUT/speed_deep.json" ]; then
    timeout 60 $PY -m benchmarks.roofline check --speed "$OUT/speed_deep.json" \
      --calibration "$OUT/calibration.json" --out "$OUT/roofline_check.json"
  fi
fi
tar -C "$WORK" -czf "$OUT/parts.tgz" . 2> /dev/null
echo "=== done $(date -u +%T); files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
