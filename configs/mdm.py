"""MDM: a Grad-TTS-style acoustic model (text encoder, per-phone prior, durations by MAS) with a
masked-diffusion decoder over quantised log-mels and eight decoding orders (random, l2r, r2l,
swap:<lam>, top1, top1*, topk:<k>, duration; jaxtts/methods/mdm/; docs/methods/mdm.md).

Variants (`--config configs/mdm.py:<variant>`):
  tiny   tests: 2 steps on the 40-utterance corpus, a 1-layer model
  small  the CPU recipe (~1.6 s/step on 2 cores, 3000 steps): the built-in 20,000-utterance
         corpus (16 h), all nine voices, each utterance conditioned on the shipped JAX speaker
         encoder's embedding of its audio; 4-layer decoders trained on random 256-frame
         (5.1 s) windows, batch 8, as Grad-TTS trains its decoder on 2 s segments
  full   the accelerator recipe: 6-layer decoders on whole utterances, batch 16, 20k steps
         (13 s/step on 2 CPU cores)

  python train.py --config configs/mdm.py:small --workdir runs/mdm
  python infer.py --workdir runs/mdm --strategy mdm:top1* --text "..." --speaker spk03
  python -m jaxtts.evaluate --workdir runs/mdm \
      --strategies random,l2r,r2l,swap:0.01,top1,top1*,topk:4,duration,gradtts:100,gradtts:length

The Grad-TTS baseline (`jaxtts/methods/mdm/gradtts.py`) is a second decoder on the same encoder,
trained in the same run (`model.score_layers`; 0 = MDM only).

The paper trains on LJSpeech (one voice); here every voice of the built-in corpus trains, with a
speaker embedding (say `--config.mdm.speaker_encoder=''` for none). Q (`model.levels`) is 100 by
default; the quantiser's range is fitted on the training mels (0.05 / 99.95 percentiles).
"""

import ml_collections as mlc

from configs import common

VARIANTS = ("tiny", "small", "full")


def get_config(arg: str | None = None) -> mlc.ConfigDict:
    args = common.parse_arg(arg, variant="small")
    if args.variant not in VARIANTS:
        raise KeyError(
            f"configs/mdm.py: unknown variant '{args.variant}', expected {list(VARIANTS)}"
        )
    v = args.variant
    config = mlc.ConfigDict()
    config.variant = v
    config.task = "mdm"
    config.model = mlc.ConfigDict(
        dict(
            num_text_symbols=-1,  # filled from the data
            n_mels=80,
            levels=100,
            mel_lo=None,
            mel_hi=None,  # the quantiser's range, fitted on the training mels
            d_model=192,
            enc_layers=4,
            enc_heads=2,
            enc_ff=768,
            dur_channels=256,
            dec_layers=6,
            dec_width=256,
            dec_heads=4,
            dec_ff=1024,
            mixtures=5,
            speaker_dim=-1,  # filled from the speaker encoder (0 without one)
            rope_theta=10_000.0,
            score_layers=6,  # the Grad-TTS baseline's score decoder, trained in the same run
            beta_min=0.05,
            beta_max=20.0,
            score_scale=-1.0,  # filled: (mel_hi - mel_lo) / 2, Grad-TTS's log-mel units
        )
    )
    config.mdm = mlc.ConfigDict(
        dict(
            speaker_encoder="pretrained/speaker_encoder",  # '' = no speaker input
            tau1=1.0,  # mixture-component temperature (tau_2, the value's, is decode.temperature)
            length_scale=1.0,  # durations x this at synthesis
            gradtts_tau=1.5,  # Grad-TTS baseline: X_1 = mu + z / tau (the paper's 1.5)
            train_crop=0,  # > 0: the decoders train on random windows of this many frames
        )
    )
    config.data = mlc.ConfigDict(
        dict(
            corpus_dir="",
            corpus_utterances=2400,
            corpus_seed=0,
            text_backend="espeak",
            batch_size=16,
            max_mel_len=1024,
            max_text_len=256,
            bucket_step=128,
            text_bucket_step=64,
            prompt_seconds=3.0,
            seed=0,
        )
    )
    config.train = common.train_config(
        steps=20_000, learning_rate=5e-4, warmup_steps=500, eval_every=1000, checkpoint_every=500
    )
    config.mesh = common.mesh_config()
    config.decode = mlc.ConfigDict(
        dict(strategy="mdm:top1*", temperature=1.0, greedy=False, max_seconds=12.0)
    )
    if v == "tiny":
        config.data.update(
            corpus_utterances=40, batch_size=8, bucket_step=256, text_bucket_step=128
        )
        config.model.update(
            d_model=32,
            enc_layers=1,
            enc_heads=2,
            enc_ff=64,
            dur_channels=32,
            dec_layers=1,
            dec_width=32,
            dec_heads=2,
            dec_ff=64,
            mixtures=2,
            score_layers=1,
        )
        config.train.update(
            steps=2,
            warmup_steps=1,
            log_every=1,
            eval_every=2,
            checkpoint_every=0,
            tensorboard=False,
        )
    elif v == "small":
        config.data.update(corpus_utterances=20_000, batch_size=8)
        config.model.update(dec_layers=4, score_layers=4)
        config.mdm.train_crop = 256
        config.train.update(steps=3000, warmup_steps=300, eval_every=500, checkpoint_every=250)
    return config
