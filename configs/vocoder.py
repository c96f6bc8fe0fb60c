"""The Vocos-style neural vocoder (jaxtts/vocoders/): log-mel -> audio, trained with
reconstruction + adversarial losses on the natural-voice corpus (all voices).

Variants (`--config configs/vocoder.py:<variant>`):
  tiny   tests and smoke runs (seconds on CPU): 2 blocks of 32 channels, no discriminator steps
  small  the shipped `pretrained/vocoder`: 8 ConvNeXt blocks of 256 channels (3.7 M parameters),
         n_fft 1280 at the mel hop 320; 16 crops of 0.8 s a step

  python train.py --config configs/vocoder.py:small --workdir runs/vocoder
"""

import ml_collections as mlc
from ml_collections import config_dict

from configs import common

MODELS = dict(
    tiny=dict(dim=32, mlp_dim=64, layers=2),
    small=dict(dim=256, mlp_dim=768, layers=8),
)


def get_config(arg: str | None = None) -> mlc.ConfigDict:
    args = common.parse_arg(arg, variant="small")
    if args.variant not in MODELS:
        raise KeyError(
            f"configs/vocoder.py: unknown variant '{args.variant}', expected {list(MODELS)}"
        )
    v = args.variant
    config = mlc.ConfigDict()
    config.variant = v
    config.task = "vocoder"
    config.model = mlc.ConfigDict(
        dict(
            n_mels=80,
            n_fft=1280,  # 4 hops: the inverse STFT's overlap
            hop=320,  # the mel hop (50 frames/s)
            # the analysis the vocoder inverts (jaxtts.data.audio.MelConfig); a model whose
            # mels differ is refused in one line naming both sides
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
            # filled from the training audio when unset
            mel_mean=config_dict.placeholder(float),
            mel_std=config_dict.placeholder(float),
            **MODELS[v],
        )
    )
    # weights of the losses (jaxtts/vocoders/task.py); adversarial terms from step gan_start
    config.loss = mlc.ConfigDict(dict(mel=45.0, stft=1.0, adv=1.0, fm=2.0, gan_start=0))
    config.data = mlc.ConfigDict(
        dict(
            corpus_dir="data/natural",
            batch_size=16,
            crop_frames=41,  # 0.8 s of audio a crop
            eval_batches=4,
            limit_train=0,
            limit_dev=0,
            seed=0,
        )
    )
    config.train = common.train_config()
    config.train.update(b1=0.8, b2=0.99, weight_decay=0.0, grad_clip=10.0)
    config.mesh = common.mesh_config()
    if v == "tiny":
        config.data.update(batch_size=8, crop_frames=9, eval_batches=1)
        config.loss.update(adv=0.0, fm=0.0)
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
            steps=4000,
            learning_rate=5e-4,
            warmup_steps=100,
            final_lr_fraction=0.1,
            log_every=25,
            eval_every=500,
            checkpoint_every=250,
        )
    return config
