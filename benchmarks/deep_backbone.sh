#!/usr/bin/env bash
# The deep backbone, end to end on 2 CPU cores: expand pretrained/car_small to 12 layers, train
# the new layers (configs/car.py:deep, 360 steps on the 16 h corpus, exported as
# runs/car_deep_360), continue them on the 32 h corpus (configs/car.py:deep_ft, 750 steps),
# export pretrained/car_deep, measure it (full test split
# WER of FAR and CAR c=3, teacher-forced dev CE) and time every strategy against FAR on both
# backbones; then the methods on it (SSD drafts of both splits with their acceptance grid, the
# DCAR policy with guidance {2,3,4}) and their evaluation. Stages: expand train export eval
# ssd ssd_grid dcar eval_methods speed (and train_ft between train and export, which
# export360 feeds); STAGE=<name> runs one stage.
#   bash benchmarks/deep_backbone.sh              # ~5 h on 2 CPU cores
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
STAGE=${STAGE:-all}
run() { [ "$STAGE" = all ] || [ "$STAGE" = "$1" ]; }

if run expand && [ ! -f runs/car_deep_init/params.msgpack ]; then
  python -m jaxtts.methods.lm.expand pretrained/car_small runs/car_deep_init --num_layers 12
fi
if run train; then
  python train.py --config configs/car.py:deep --workdir runs/car_deep \
    --config.train.init_from=runs/car_deep_init \
    --config.data.tokenizer_dir=runs/car_deep_init/tokenizer
fi
if run export360; then
  # the first stage at the step it was stopped (the learning rate at 4 % of its peak)
  python -m jaxtts.run_folder export runs/car_deep runs/car_deep_360 --step 360 --dtype float16z
fi
if run train_ft; then
  python -m jaxtts.data.corpus --out data/builtin-n40000-s0 --num_utterances 40000
  python train.py --config configs/car.py:deep_ft --workdir runs/car_deep_ft
fi
if run export; then
  python -m jaxtts.run_folder export runs/car_deep_ft pretrained/car_deep --dtype float16z
  # the backbone's dev-picked decoding (car_small: top_p 0.6)
  python - <<'PY'
import json, pathlib
p = pathlib.Path("pretrained/car_deep/config.json")
c = json.loads(p.read_text()); c["decode"]["top_p"] = 0.6; p.write_text(json.dumps(c, indent=2))
PY
fi
if run eval; then
  python -m jaxtts.evaluate --corpus data/builtin --split test --workdir pretrained/car_deep \
    --rows "" --strategies far,car:3 --speaker_encoder jax --no_spectral --no_plots \
    --asr_workers 2 --out out/eval_deep
fi
if run ssd; then
  # the paper's split scaled down (first 1 / last 3: car_small's own layers at step 0) and 2 / 2
  python train.py --config configs/ssd.py:deep --workdir runs/ssd_deep13
  python train.py --config configs/ssd.py:deep --workdir runs/ssd_deep22 \
    --config.ssd.first=2 --config.ssd.last=2
fi
if run ssd_grid; then
  for s in 13 22; do
    python -m benchmarks.diagnostics.ssd_acceptance --workdir runs/ssd_deep$s --num 40 --L 1,2,3,4,5 \
      --beta 0,0.2,0.4,0.6 --out out/ssd_acceptance_deep$s.json
  done
fi
if run dcar; then
  python train.py --config configs/dcar.py:deep --workdir runs/dcar_deep
  python -m benchmarks.diagnostics.dcar_report --runs runs/dcar_deep --policy runs/dcar_deep --num 60 \
    --out out/dcar_deep
  python -m benchmarks.diagnostics.dcar_report --runs "" --policy runs/dcar_deep --num 60 --sample \
    --out out/dcar_deep_sample
fi
if run eval_methods; then
  python -m jaxtts.evaluate --corpus data/builtin --split test --workdir pretrained/car_deep \
    --rows "" --speaker_encoder jax --no_spectral --no_plots --asr_workers 2 \
    --strategies "dcar@runs/dcar_deep,dcar:sample@runs/dcar_deep,ssd:L=3,beta=0@runs/ssd_deep13,ssd:L=3,beta=0.4@runs/ssd_deep13" \
    --out out/eval_deep_methods
fi
if run speed; then
  python -m benchmarks.methods_speed --num 40 --rounds 3 --batch 1,8 \
    --rows far@pretrained/car_deep,car:2@pretrained/car_deep,car:3@pretrained/car_deep,far@pretrained/car_small,car:2@pretrained/car_small,car:3@pretrained/car_small \
    --eval out/eval_deep/results.json --out out/methods_speed_deep.json
fi
