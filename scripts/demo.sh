#!/usr/bin/env bash
# The main job (after `make setup`): synthesize and evaluate with the SHIPPED models, no
# training. Builds the built-in corpus's test split (cached), synthesizes two sentences with
# pretrained/car_small (CAR c=3, a zero-shot prompt of speaker spk03), then evaluates every
# shipped method in ONE table on NUM test utterances (zero-shot prompts, the held-out speaker
# included): FAR and CAR c=2, 3 on the backbone, DCAR, SSD (beta 0, lossless), TLDR, PALLE and
# MDM (8 frames per step, argmax values: `topk:8+greedy`), each with its own shipped run folder
# (`model:<strategy>@<folder>` rows), next to the ground truth and the tokenizer round trip, and
# prints the WER / SIM / RTF table.
# SIM uses pretrained/speaker_encoder. ~8 min on 2 CPU cores the first time (corpus ~1 min,
# evaluation-ASR adaptation ~2 min, synthesis + scoring); later runs reuse the caches.
# Training the backbone from scratch is one command (README):
#   python train.py --config configs/car.py:small --workdir runs/car_small
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
MODEL=${MODEL:-pretrained/car_small}
NUM=${NUM:-40}
# the corpus: data/builtin, or $JAXTTS_DATA_DIR/builtin (as the corpus build and evaluate use)

python3 -m jaxtts.data.corpus
python3 infer.py --workdir "$MODEL" --speaker spk03 --strategy car:3 --out_dir out/demo/infer \
  --text "The quick brown fox jumps over the lazy dog." --text "Where did you put the keys?"
python3 -m jaxtts.evaluate --split test --num "$NUM" --workdir "$MODEL" \
  --rows "ground_truth,tokenizer:$MODEL/tokenizer" \
  --strategies "far,car:2,car:3,dcar@pretrained/dcar,ssd:L=3,beta=0@pretrained/ssd,tldr@pretrained/tldr,palle@pretrained/palle,topk:8+greedy@pretrained/mdm" \
  --speaker_encoder jax --no_spectral --asr_workers 2 --out out/demo/eval
echo "demo: wavs in out/demo/infer and out/demo/eval, table in out/demo/eval/results.md"
