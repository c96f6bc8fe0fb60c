"""The learned speech tokenizer (jaxtts/codec/): a mel autoencoder with a finite scalar
quantiser at 25 Hz (1000 codes) and a training-only CTC phoneme head, trained on the
natural-voice corpus (all training voices).

Variants (`--config configs/codec.py:<variant>`):
  tiny   tests and smoke runs (seconds on CPU): 1 + 1 blocks of 32 channels each side
  small  the 2-CPU-core tokenizer: 12 ConvNeXt blocks of 256 channels (2 + 3 encoder,
         3 + 2 decoder, 2 in the CTC head), utterances in 3 length buckets

  python train.py --config configs/codec.py:small --workdir runs/codec
  python -m jaxtts.codec export runs/codec pretrained/codec
"""

import ml_collections as mlc

from configs import common

MODELS = dict(
    tiny=dict(dim=32, mlp_dim=64, enc_layers=(1, 1), dec_layers=(1, 1)),
    small=dict(dim=256, mlp_dim=768, enc_layers=(2, 3), dec_layers=(3, 2)),
)


def get_config(arg: str | None = None) -> mlc.ConfigDict:
    args = common.parse_arg(arg, variant="small")
    if args.variant not in MODELS:
        raise KeyError(
            f"configs/codec.py: unknown variant '{args.variant}', expected {list(MODELS)}"
        )
    v = args.variant
    config = mlc.ConfigDict()
    config.variant = v
    config.task = "codec"
    config.model = mlc.ConfigDict(
        dict(
            name=f"codec{v}",
            n_mels=80,
            levels=(8, 5, 5, 5),  # FSQ: 1000 codes
            stride=2,  # mel frames per token (50 Hz -> 25 Hz)
            kernel=7,
            # the decoder told the voice (per-bin log-mel mean and log std of a reference),
            # the encoder reading the log-mel minus its utterance mean (jaxtts/codec/model.py)
            cond=True,
            # the analysis the codec reads and writes (jaxtts.data.audio.MelConfig)
            mel=dict(
                sample_rate=16000,
                n_fft=1024,
                win_length=1024,
                hop_length=320,
                n_mels=80,
                fmin=0.0,
                fmax=8000.0,
                log_floor=1e-5,
            ),
            # filled from the training data when unset: per-bin {mean, std} of the log-mel,
            # and the CTC head's classes (the corpus's phoneme table, blank = 0)
            mel_stats=None,
            num_phones=None,
            **MODELS[v],
        )
    )
    # reconstruction (standardised log-mel) L1 + L2, and the CTC phoneme loss per phoneme
    config.loss = mlc.ConfigDict(dict(l1=1.0, l2=1.0, ctc=0.3))
    config.data = mlc.ConfigDict(
        dict(
            corpus_dir="data/natural",
            # (frames, batch) buckets: an utterance goes to the first bucket it fits; a longer
            # one is cropped to the last bucket (its CTC term skipped)
            buckets=((128, 24), (256, 12), (384, 8)),
            eval_batches=4,
            vtlp=0.0,  # > 0: training mels' axis warped by factors in [1 - vtlp, 1 + vtlp]
            spec_mask=(),  # masks of the encoder input (configs/help.py); (): off
            limit_train=0,
            limit_dev=0,
            seed=0,
        )
    )
    config.train = common.train_config()
    config.train.update(b2=0.99, weight_decay=0.0, grad_clip=1.0)
    config.mesh = common.mesh_config()
    if v == "tiny":
        config.data.update(buckets=((64, 8), (128, 8)), eval_batches=1)
        config.train.update(
            steps=4,
            learning_rate=3e-3,
            warmup_steps=1,
            log_every=1,
            eval_every=4,
            checkpoint_every=0,
            tensorboard=False,
        )
    else:
        config.train.update(
            steps=3600,  # ~75 min on 2 CPU cores (1.2 s a step)
            learning_rate=1e-3,
            warmup_steps=200,
            final_lr_fraction=0.05,
            log_every=25,
            eval_every=500,
            checkpoint_every=250,
        )
    return config
