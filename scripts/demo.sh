#!/usr/bin/env bash
# The main job on the built-in corpus (after `make setup`): build the corpus (cached), train a
# small model for a few minutes, synthesize the test split with FAR and CAR c=2..4, and print
# the WER / RTF table next to the ground-truth and tokenizer round-trip rows.
# ~15 min on 2 CPU cores the first time (corpus 1 min, tokenizer fit 2-3 min, training ~5 min,
# evaluation ~5 min); later runs reuse the corpus, tokenizer, ASR language model and checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
WORKDIR=${WORKDIR:-runs/demo}
NUM=${NUM:-20}

python3 -m jaxtts.data.corpus
python3 train.py --config configs/car.py:demo --workdir "$WORKDIR"
python3 infer.py --workdir "$WORKDIR" --speaker spk03 --strategy car:3 --out_dir out/demo/infer \
  --text "The quick brown fox jumps over the lazy dog." --text "Where did you put the keys?"
python3 -m jaxtts.evaluate --corpus data/builtin --split test --num "$NUM" --workdir "$WORKDIR" \
  --rows ground_truth,tokenizer:data/builtin/tokenizers/kmeans1024 \
  --strategies far,car:2,car:3,car:4 --speaker_encoder none --no_spectral --out out/demo/eval
echo "demo: wavs in out/demo/infer, table in out/demo/eval/results.md"
