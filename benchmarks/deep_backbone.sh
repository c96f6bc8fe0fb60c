#!/usr/bin/env bash
# The deep backbone, end to end on 2 CPU cores: expand pretrained/car_small to 12 layers, train
# the new layers (configs/car.py:deep), export pretrained/car_deep, measure it (full test split
# WER of FAR and CAR c=3, teacher-forced dev CE) and time every strategy against FAR on both
# backbones. Each stage is skipped when its output exists; STAGE=<name> runs one stage.
#   bash benchmarks/deep_backbone.sh              # ~2 h (training ~60-75 min)
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
if run export; then
  python -m jaxtts.run_folder export runs/car_deep pretrained/car_deep --dtype float16z
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
if run speed; then
  python benchmarks/methods_speed.py --num 40 --rounds 3 --batch 1,8 \
    --rows far@pretrained/car_deep,car:2@pretrained/car_deep,car:3@pretrained/car_deep,far@pretrained/car_small,car:2@pretrained/car_small,car:3@pretrained/car_small \
    --eval out/eval_deep/results.json --out out/methods_speed_deep.json
fi
