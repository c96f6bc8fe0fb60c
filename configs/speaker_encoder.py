"""JAX speaker encoder (TDNN + attentive statistics pooling, AAM softmax over speaker ids):
fallback SIM evaluator and TLDR's speaker conditioning (jaxtts/methods/speaker_encoder.py).

Variants (`--config configs/speaker_encoder.py:<variant>`):
  tiny   tests and smoke runs (seconds on CPU)
  small  a few minutes on 2 CPU cores on the built-in corpus; 192 channels, 192-d embedding
  natural  `small` on the natural-voice corpus (data/natural, its training voices): TLDR's
         speaker conditioning and the SIM fallback of the natural retrain (issue 100)

  python -m jaxtts.methods.speaker_encoder train --config configs/speaker_encoder.py:small \
      --workdir runs/speaker_encoder
  python train.py --config configs/speaker_encoder.py:small --workdir runs/speaker_encoder
  python -m benchmarks.diagnostics.sim_separation --jax-workdir runs/speaker_encoder
"""

import ml_collections as mlc
from ml_collections import config_dict

from configs import common

MODELS = dict(
    tiny=dict(channels=16, num_blocks=1, embed_dim=16, attention_dim=8),
    small=dict(channels=192, num_blocks=3, embed_dim=192, attention_dim=64),
)
MODELS["natural"] = MODELS["small"]


def get_config(arg: str | None = None) -> mlc.ConfigDict:
    args = common.parse_arg(arg, variant="small")
    if args.variant not in MODELS:
        raise KeyError(
            f"configs/speaker_encoder.py: unknown variant '{args.variant}', expected {list(MODELS)}"
        )
    v = args.variant
    config = mlc.ConfigDict()
    config.variant = v
    config.task = "speaker_encoder"
    config.model = mlc.ConfigDict(
        dict(
            n_mels=80,
            # Filled from the train split when unset: global log-mel mean/std, speaker count
            # and names (class order of the AAM head).
            mel_mean=config_dict.placeholder(float),
            mel_std=config_dict.placeholder(float),
            num_speakers=0,
            speakers=config_dict.placeholder(list),
            **MODELS[v],
        )
    )
    # AAM softmax: logits s * cos(theta), target angle + m (ArcFace).
    config.loss = mlc.ConfigDict(dict(scale=30.0, margin=0.2))
    config.data = mlc.ConfigDict(
        dict(
            corpus_dir="",  # '' = data/builtin ($JAXTTS_DATA_DIR/builtin)
            batch_size=32,
            min_crop_frames=50,  # random crops of 1-3 s (50 frames/s)
            max_crop_frames=150,
            eval_batches=4,
            limit_train=0,
            limit_dev=0,
            seed=0,
        )
    )
    config.train = common.train_config()
    config.mesh = common.mesh_config()
    if v == "tiny":
        config.data.update(batch_size=8, min_crop_frames=16, max_crop_frames=48, eval_batches=1)
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
            steps=1000,
            learning_rate=2e-3,
            warmup_steps=100,
            log_every=25,
            eval_every=250,
            checkpoint_every=250,
        )
    return config
