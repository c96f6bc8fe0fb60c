#!/usr/bin/env bash
# The main job (after `make setup`): synthesize and evaluate with the SHIPPED models, no
# training. Builds the built-in corpus's test split (cached), synthesizes two sentences with
# the 12-layer pretrained/car_deep (CAR c=3, a zero-shot prompt of speaker spk03), then
# evaluates every shipped method in ONE table on NUM test utterances (zero-shot prompts, the
# held-out speaker included): FAR and CAR c=3 on the deep backbone, and on the same
# backbone DCAR (its policy's argmax, `dcar`), SSD (beta 0, lossless) and TLDR (P = 4);
# then PALLE and MDM (8 frames per step, argmax values: `topk:8+greedy`), which are models of
# their own; each row runs its own shipped run folder (`<strategy>@<folder>` rows), next to the
# ground truth and the tokenizer round trip, and prints the WER / SIM / RTF table.
# NUM is 24 (the 4-layer backbone's demo took 40): the 12-layer rows take ~2x as long per
# sentence. Each row compiles one decode (evaluate warms up with its longest text and reuses
# that width). Two judges: Whisper tiny.en (the headline WER and CER, as the papers' field
# reports it) and PocketSphinx with the domain LM (`--asr_lms whisper,domain`; the default-LM
# column takes as long again). The shipped models were trained on the espeak-ng corpus, so the
# demo runs on its test split (data/builtin) until they are retrained on data/natural. The full test split's numbers are in README's
# Methods table.
# SIM uses pretrained/speaker_encoder. ~10 min on 2 CPU cores the first time (corpus ~1 min,
# evaluation-ASR adaptation ~2 min, synthesis + scoring); later runs reuse the caches.
# Training the backbone from scratch is one command (README):
#   python train.py --config configs/car.py:small --workdir runs/car_small
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
# numpy's BLAS on one thread in every process (kernels and subprocesses included): XLA has its
# own pool, and spinning OpenBLAS workers on busy cores made small host products 20x slower
# (jaxtts.cli.limit_host_blas)
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
# compiled programs are kept between runs (the 12-layer rows compile one decode per text-length
# bucket: minutes on 2 cores the first time); git-ignored, delete it freely
export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-$PWD/.cache/jax}"
mkdir -p "$JAX_COMPILATION_CACHE_DIR"
MODEL=${MODEL:-pretrained/car_deep}
NUM=${NUM:-24}
# the corpus: data/builtin, or $JAXTTS_DATA_DIR/builtin (as the corpus build and evaluate use)

python3 -m jaxtts.data.corpus
python3 infer.py --workdir "$MODEL" --speaker spk03 --strategy car:3 --out_dir out/demo/infer \
  --text "The quick brown fox jumps over the lazy dog." --text "Where did you put the keys?"
python3 -m jaxtts.evaluate --split test --num "$NUM" --workdir "$MODEL" \
  --rows "ground_truth,tokenizer:$MODEL/tokenizer" \
  --strategies "far,car:3,dcar@pretrained/dcar_deep,ssd:L=3,beta=0@pretrained/ssd_deep,tldr@pretrained/tldr_deep_p4,tldr@pretrained/tldr_deep_p4_tl,palle@pretrained/palle,topk:8+greedy@pretrained/mdm" \
  --speaker_encoder jax --no_spectral --asr_workers 2 --asr_lms whisper,domain --out out/demo/eval
echo "demo: wavs in out/demo/infer and out/demo/eval, table in out/demo/eval/results.md"
