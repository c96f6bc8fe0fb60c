"""Fast CTC reward ASR (log-mel -> characters), the DCPO reward model (jaxtts/methods/ctc_asr.py).

Variants (`--config configs/ctc_asr.py:<variant>`):
  tiny   tests and smoke runs (seconds on CPU)
  small  ~10-15 min on 2 CPU cores on the built-in corpus; d=144, 4 conformer blocks
  natural  `small` on the natural-voice corpus (data/natural, every training voice), the
         DCPO reward of the natural retrain (issue 100); 3000 steps (~2 epochs)

  python -m jaxtts.methods.ctc_asr train --config configs/ctc_asr.py:small --workdir runs/ctc_asr
  python train.py --config configs/ctc_asr.py:small --workdir runs/ctc_asr   # same thing
  python -m jaxtts.methods.ctc_asr eval --workdir runs/ctc_asr --split test
"""

import ml_collections as mlc
from ml_collections import config_dict

from configs import common

MODELS = dict(
    tiny=dict(d_model=32, num_layers=1, num_heads=2, d_ff=64, conv_kernel=5, dropout=0.0),
    small=dict(d_model=144, num_layers=4, num_heads=4, d_ff=576, conv_kernel=15, dropout=0.1),
)
MODELS["natural"] = MODELS["small"]
STEPS_NATURAL = 3000


def get_config(arg: str | None = None) -> mlc.ConfigDict:
    args = common.parse_arg(arg, variant="small")
    if args.variant not in MODELS:
        raise KeyError(
            f"configs/ctc_asr.py: unknown variant '{args.variant}', expected {list(MODELS)}"
        )
    v = args.variant
    config = mlc.ConfigDict()
    config.variant = v
    config.task = "ctc_asr"
    config.model = mlc.ConfigDict(
        dict(
            n_mels=80,
            # Global scalar log-mel normalisation; None = computed from the train split.
            mel_mean=config_dict.placeholder(float),
            mel_std=config_dict.placeholder(float),
            **MODELS[v],
        )
    )
    config.specaug = mlc.ConfigDict(
        dict(
            enabled=v != "tiny",
            freq_masks=2,
            freq_width=10,
            time_masks=2,
            time_width=20,
            max_time_fraction=0.2,
        )
    )
    config.data = mlc.ConfigDict(
        dict(
            corpus_dir="",  # '' = data/builtin ($JAXTTS_DATA_DIR/builtin)
            batch_size=16,
            eval_batch_size=16,
            max_mel_len=512,  # frames (50 Hz); longer utterances are dropped
            bucket_step=64,
            max_text_len=256,  # characters
            text_bucket_step=32,
            limit_train=0,  # 0 = all utterances of the split
            limit_dev=0,
            seed=0,
        )
    )
    config.train = common.train_config()
    config.mesh = common.mesh_config()
    if v == "tiny":
        config.data.update(
            batch_size=8, eval_batch_size=8, max_mel_len=512, bucket_step=128, limit_dev=8
        )
        config.train.update(
            steps=4,
            learning_rate=3e-3,
            warmup_steps=1,
            log_every=1,
            eval_every=4,
            checkpoint_every=0,
            tensorboard=False,
        )
    else:  # small, natural
        if v == "natural":
            config.data.corpus_dir = "data/natural"
        config.train.update(
            steps=STEPS_NATURAL if v == "natural" else 1500,
            learning_rate=2e-3,
            warmup_steps=150,
            weight_decay=0.01,
            log_every=25,
            eval_every=500,
            checkpoint_every=250,
        )
    return config
