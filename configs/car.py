"""TTS language model with multi-token heads: FAR (next-token) and chunk-wise CAR.

Variants (`--config configs/car.py:<variant>`):
  tiny   tests and smoke runs (seconds on CPU; 40-utterance corpus)
  demo   `make demo`: a few minutes on 2 CPU cores on the built-in corpus (pipeline check,
         not intelligible)
  small  the 2-CPU-core recipe (the shipped `pretrained/car_small`): a 20,000-utterance
         (~16 h) built-in corpus, 25 Hz k-means tokens, alignment learning (prior + CTC loss)
         on heads 0-1 of layers 1-2; results in benchmarks/RESULTS.md
  deep   `small` at 12 layers (the papers' depth ratio): a block expansion of
         `pretrained/car_small` (`python -m jaxtts.methods.lm.expand`), its new layers
         trained (stopped at step 360: the first stage of `pretrained/car_deep`)
  deep_ft  `deep` continued from its step-360 export (`runs/car_deep_360`,
         benchmarks/deep_backbone.sh) on the 32 h corpus (40,000 utterances, half of its
         sentences new to the model) at peak 1e-4: the shipped `pretrained/car_deep` and the
         backbone of DCAR, SSD and TLDR; dev CE below car_small's on every head
         (benchmarks/RESULTS.md, deep-train); 750 steps, ~50 min on 2 CPU cores
  natural  `small` on the natural-voice corpus (`python -m jaxtts.data.natural`, data/natural)
         with the learned 25 Hz tokenizer (`pretrained/codec`, FSQ 1000 codes): the start of
         the retrain on natural voices (issue 100); same steps and recipe as `small`
  natural_deep  the 12-layer natural backbone (issue 100): the block expansion of the
         `natural_xfer` model (`python -m jaxtts.methods.lm.expand runs/car_nat_xfer2
         runs/car_nat_deep_init`), every parameter trained at peak 3e-4, ~3.2 s a step. (Its
         first try, from the one-stage `natural` model that barely read its text, stopped at
         step 150: dev CE 4.129 against 4.088 at its start). `runs/car_nat_deep`: dev CE 2.84,
         Whisper WER 46.5 % on 32 natural-voice test utterances (benchmarks/RESULTS.md
         §natural-lm)
  natural_boot  the alignment bootstrap of the natural retrain: `natural` on the espeak voices
         of data/natural only (`data.speakers`) with k-means tokens refit on the corpus
         (`runs/tok_natural`, fitted on first use): reads its text by step 500 (0.58 nats a
         token), where the codec's tokens, or every voice at once, do not start within 600
         steps (benchmarks/RESULTS.md §natural-lm); run stopped at step 510
  natural_xfer  the natural retrain proper: `natural` on every voice with the codec's tokens,
         from `natural_boot` moved onto the codec's vocabulary
         (`python -m jaxtts.methods.lm.retoken runs/car_natural_boot runs/car_codec_init
         --tokenizer pretrained/codec --corpus data/natural --speakers spk00,...,spk08`),
         peak 1e-3, no alignment prior (the alignment is there from step 0)
  paper  12 layers, D=1024, FFN 4096, 8 heads, K=7 heads (DCAR paper), for accelerators

  python train.py --config configs/car.py:small --workdir runs/car
  python train.py --config configs/car.py:tiny --workdir /tmp/car --config.train.steps=10
  python infer.py --workdir runs/car --text "hello world" --strategy car:3 --out_dir out/
"""

import ml_collections as mlc

from configs import common

STEPS_SMALL = 3000  # ~2 h on 2 CPU cores
STEPS_DEEP = 450  # fine-tune of the expanded car_small's new layers (~7 s a step, 2 CPU cores)
STEPS_DEEP_FT = 750  # its continuation on the 32 h corpus (~4 s a step on Zen 4 cores)
STEPS_BOOT_SCHEDULE = 1000  # natural_boot's schedule; the run was stopped at step 510
STEPS_XFER = 2000  # natural_xfer (~1.2 s a step on 2 idle Zen 4 cores)
STEPS_NATURAL_DEEP = 1500  # the natural expansion, every layer (~3.2 s a step, 2 idle cores)

MODELS = dict(
    tiny=dict(d_model=32, num_layers=2, num_heads=2, head_dim=16, d_ff=64, num_mtp_heads=4),
    demo=dict(d_model=128, num_layers=2, num_heads=2, head_dim=64, d_ff=512, num_mtp_heads=4),
    small=dict(d_model=256, num_layers=4, num_heads=4, head_dim=64, d_ff=1024, num_mtp_heads=4),
    deep=dict(d_model=256, num_layers=12, num_heads=4, head_dim=64, d_ff=1024, num_mtp_heads=4),
    deep_ft=dict(d_model=256, num_layers=12, num_heads=4, head_dim=64, d_ff=1024, num_mtp_heads=4),
    natural=dict(d_model=256, num_layers=4, num_heads=4, head_dim=64, d_ff=1024, num_mtp_heads=4),
    natural_deep=dict(
        d_model=256, num_layers=12, num_heads=4, head_dim=64, d_ff=1024, num_mtp_heads=4
    ),
    natural_boot=dict(
        d_model=256, num_layers=4, num_heads=4, head_dim=64, d_ff=1024, num_mtp_heads=4
    ),
    natural_xfer=dict(
        d_model=256, num_layers=4, num_heads=4, head_dim=64, d_ff=1024, num_mtp_heads=4
    ),
    paper=dict(d_model=1024, num_layers=12, num_heads=8, head_dim=128, d_ff=4096, num_mtp_heads=7),
)


def get_config(arg: str | None = None) -> mlc.ConfigDict:
    args = common.parse_arg(arg, variant="small")
    if args.variant not in MODELS:
        raise KeyError(f"configs/car.py: unknown variant '{args.variant}', expected {list(MODELS)}")
    v = args.variant
    config = mlc.ConfigDict()
    config.variant = v
    config.task = "lm"

    config.model = mlc.ConfigDict(
        dict(
            # Filled from the data when -1: text symbol table size, speech tokenizer vocabulary.
            num_text_symbols=-1,
            num_speech_tokens=-1,
            mlp="swiglu",
            mtp_blocks=4,  # residual SiLU blocks per additional head
            dropout=0.1 if v == "paper" else 0.0,  # short CPU runs learn faster without
            dtype="float32",  # compute dtype; 'bfloat16' keeps fp32 master weights
            rope_theta=10_000.0,
            lora_rank=0,
            lora_alpha=0.0,
            **MODELS[v],
        )
    )
    # head k weighted alpha^(k-1); align_*: alignment learning (jaxtts/train/align.py), off
    # unless a variant (or an override) names layers
    config.loss = mlc.ConfigDict(
        dict(
            alpha=1.0,
            input_noise=0.0,  # share of target input tokens replaced by random ones (training)
            align_layers=(),
            align_heads=(),
            align_ctc_weight=0.0,
            align_prior_scaling=0.0,
            align_prior_start=0,
            align_prior_end=0,
            align_prior_normalize=True,
            align_blank_logprob=-1.0,
            align_band=0.1,
        )
    )
    if v != "paper":
        config.loss.update(
            align_layers=(1,), align_heads=(0,), align_ctc_weight=1.0, align_prior_scaling=1.0
        )

    config.data = common.data_config()
    config.train = common.train_config()
    config.mesh = common.mesh_config()
    config.decode = mlc.ConfigDict(
        dict(strategy="car:3", temperature=1.0, top_k=0, top_p=1.0, greedy=False, max_seconds=12.0)
    )
    # Synthesis samples + ASR WER during training (0 = off).
    config.eval = mlc.ConfigDict(dict(num_samples=8, vocoder="griffin_lim"))

    if v == "tiny":
        config.data.update(
            corpus_utterances=40,
            tokenizer_k=64,
            batch_size=8,
            prompt_seconds=1.0,
            max_text_len=128,
            max_speech_len=512,
            bucket_step=256,
            text_bucket_step=128,
        )
        config.train.update(
            steps=20,
            learning_rate=3e-3,
            warmup_steps=2,
            log_every=1,
            eval_every=10,
            checkpoint_every=10,
        )
        config.loss.update(align_prior_start=5, align_prior_end=15)
        config.eval.num_samples = 2
        config.decode.max_seconds = 2.0
    elif v == "demo":
        config.data.update(
            batch_size=16,
            prompt_seconds=2.0,
            max_speech_len=512,
            bucket_step=128,
            text_bucket_step=128,
            max_text_len=256,
        )
        config.train.update(
            steps=150,
            learning_rate=3e-3,
            warmup_steps=20,
            log_every=10,
            eval_every=150,
            checkpoint_every=50,
        )
        config.loss.update(align_prior_start=50, align_prior_end=120)
        config.eval.num_samples = 0
        config.decode.max_seconds = 6.0
    elif v in ("small", "natural", "natural_boot", "natural_xfer"):
        config.data.update(common.SMALL_LM_DATA)
        if v != "small":
            config.data.update(corpus_dir="data/natural", tokenizer="codec:pretrained/codec")
        if v == "natural_boot":
            config.data.update(
                tokenizer="kmeans",
                tokenizer_dir="runs/tok_natural",
                speakers=",".join(f"spk{i:02d}" for i in range(9)),
            )
        config.train.update(
            steps=STEPS_SMALL,
            learning_rate=2e-3,
            warmup_steps=100,
            log_every=10,
            eval_every=500,
            checkpoint_every=250,
        )
        config.loss.update(
            align_layers=(1, 2),
            align_heads=(0, 1),
            align_prior_start=STEPS_SMALL // 5,
            align_prior_end=STEPS_SMALL // 2,
        )
        if v == "natural_boot":
            config.train.update(steps=STEPS_BOOT_SCHEDULE)
        if v == "natural_xfer":
            config.train.update(
                steps=STEPS_XFER, learning_rate=1e-3, init_from="runs/car_codec_init"
            )
            config.loss.update(align_prior_scaling=0.0)
    elif v in ("deep", "deep_ft"):
        # the `small` data; a fine-tune of the expanded `car_small` that trains only the new
        # layers (LLaMA-Pro style: the old layers, embeddings, norm and heads stay frozen, so the
        # fine-tune cannot damage what the 4-layer model knew; a full fine-tune at peak 5e-4
        # raised dev CE from 0.828 to 0.949 nats in 150 steps). The old layers 1, 2 are
        # layers 9, 10 of the default layer map: the CTC alignment loss stays on them; the
        # prior, which only bootstraps alignment from scratch, is off (car_small's fine-tunes)
        config.data.update(common.SMALL_LM_DATA)
        config.train.update(
            steps=STEPS_DEEP,
            learning_rate=3e-4,
            warmup_steps=30,
            final_lr_fraction=0.05,
            log_every=10,
            eval_every=150,
            checkpoint_every=50,
            trainable="prefix:" + ",".join(f"stack/layer_{i}" for i in range(1, 9)),
        )
        config.loss.update(
            align_layers=(9, 10),
            align_heads=(0, 1),
            align_prior_scaling=0.0,
            align_prior_normalize=False,
        )
        if v == "deep_ft":
            # the same new layers, from the first stage (360 steps), on twice the utterances
            # (the old layers had seen the 16 h corpus for ~8 epochs: train CE 0.73 against dev
            # 0.83), at a third of the peak (a fresh Adam at 3e-4-5e-4 first raises dev CE)
            config.data.update(
                corpus_utterances=40_000, tokenizer_dir="runs/car_deep_360/tokenizer"
            )
            config.train.update(
                steps=STEPS_DEEP_FT,
                learning_rate=1e-4,
                warmup_steps=50,
                eval_every=250,
                init_from="runs/car_deep_360",
            )
    elif v == "natural_deep":
        # the old layers 1, 2 are layers 9, 10 of the default layer map: the CTC alignment
        # loss stays on them, the prior (a from-scratch bootstrap) is off
        config.data.update(common.SMALL_LM_DATA)
        config.data.update(corpus_dir="data/natural", tokenizer="codec:pretrained/codec")
        config.train.update(
            steps=STEPS_NATURAL_DEEP,
            learning_rate=3e-4,
            warmup_steps=100,
            final_lr_fraction=0.1,
            log_every=10,
            eval_every=150,
            checkpoint_every=50,
            init_from="runs/car_nat_deep_init",
        )
        config.loss.update(
            align_layers=(9, 10),
            align_heads=(0, 1),
            align_prior_scaling=0.0,
            align_prior_normalize=False,
        )
    else:  # paper
        config.data.update(batch_size=64)
        config.train.update(steps=200_000, learning_rate=3e-4, warmup_steps=4000)
        config.model.dtype = "bfloat16"
    return config
