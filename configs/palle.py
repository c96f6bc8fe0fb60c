"""PALLE: pseudo-autoregressive span generation (stage one), then NAR confidence refinement
(stage two); docs/methods/palle.md, jaxtts/methods/palle/.

Variants (`--config configs/palle.py:<variant>`):
  tiny          tests: 40-utterance corpus, 2-layer model, a few steps (stage one)
  tiny_refine   tests: stage two of `tiny` (set train.init_from to the tiny stage-one run)
  small         2-CPU-core stage one on the backbone's data (20,000 utterances, 25 Hz k-means
                tokens, 2 s prompts): the same corpus and tokens as pretrained/car_small;
                RoPE and the stretched text layout (two deviations that make it learn)
  small_refine  stage two of `small`, initialised from runs/palle
  small_nar     the MaskGCT-style NAR baseline (same model, random-ratio masks)
  paper         12 layers, D 1024, 16 heads, FFN 4096 (accelerators)

  python train.py --config configs/palle.py:small --workdir runs/palle
  python train.py --config configs/palle.py:small_refine --workdir runs/palle_refine
  python -m jaxtts.evaluate --workdir runs/palle_refine --strategies par,palle
"""

import ml_collections as mlc

from configs import common

MODELS = dict(
    tiny=dict(
        d_model=32,
        num_layers=2,
        num_heads=2,
        head_dim=16,
        d_ff=64,
        convnext_ff=64,
        conv_pos_groups=4,
    ),
    small=dict(
        d_model=256,
        num_layers=4,
        num_heads=4,
        head_dim=64,
        d_ff=1024,
        convnext_ff=512,
        conv_pos_groups=16,
    ),
    paper=dict(
        d_model=1024,
        num_layers=12,
        num_heads=16,
        head_dim=64,
        d_ff=4096,
        convnext_ff=2048,
        conv_pos_groups=16,
    ),
)
VARIANTS = ("tiny", "tiny_refine", "small", "small_refine", "small_nar", "paper")


def get_config(arg: str | None = None) -> mlc.ConfigDict:
    args = common.parse_arg(arg, variant="small")
    if args.variant not in VARIANTS:
        raise KeyError(
            f"configs/palle.py: unknown variant '{args.variant}', expected {list(VARIANTS)}"
        )
    v = args.variant
    size = v.split("_")[0]
    stage = {"refine": "refine", "nar": "nar"}.get(v.split("_")[-1], "par")
    config = mlc.ConfigDict()
    config.variant = v
    config.task = "palle"
    config.model = mlc.ConfigDict(
        dict(
            num_text_symbols=-1,
            num_speech_tokens=-1,  # filled from the data
            mlp="swiglu",
            dropout=0.1 if size == "paper" else 0.0,
            dtype="float32",
            conv_pos_kernel=7,
            rope_theta=0.0,
            text_layout="pad",  # the paper's [PAD]-filled text; 'stretch': a diagonal first guess
            **MODELS[size],
        )
    )
    config.palle = mlc.ConfigDict(
        dict(
            stage=stage,  # 'par' (stage one), 'refine' (stage two), 'nar' (MaskGCT baseline)
            refine_p=0.1,  # stage-two masking probability beyond the visible 30 %
            par_run="",  # refine runs: the stage-one run folder the 'palle' strategy starts from
        )
    )
    config.data = common.data_config()
    config.train = common.train_config()
    config.mesh = common.mesh_config()
    # decoding: strategy specs `par`, `palle`, `nar`, `refine` with their step counts, e.g.
    # 'palle:steps=100,ratio=0.01,refine=7,gamma=0.05,scale=1.0' (jaxtts/methods/palle/engine.py)
    config.decode = mlc.ConfigDict(
        dict(
            strategy="palle" if stage == "refine" else ("nar" if stage == "nar" else "par"),
            temperature=1.0,
            top_k=0,
            top_p=0.3,
            greedy=False,
            max_seconds=12.0,
        )
    )

    if size == "tiny":
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
            steps=4,
            learning_rate=3e-3,
            warmup_steps=1,
            log_every=1,
            eval_every=4,
            checkpoint_every=4,
            tensorboard=False,
        )
        config.decode.max_seconds = 2.0
    elif size == "small":
        # the backbone's data (configs/car.py:small): same corpus, tokenizer and prompts
        config.data.update(common.SMALL_LM_DATA)
        config.train.update(
            steps=4000,
            learning_rate=2e-3,
            warmup_steps=100,
            log_every=20,
            eval_every=500,
            checkpoint_every=250,
        )
        # RoPE in the transformer (the paper's model has absolute sinusoidal + conv positions
        # only): on a synthetic span task (each token = previous + 1) a 2-layer model learns to
        # continue from the mask boundary in ~150 steps with RoPE, not within 300 without
        config.model.rope_theta = 10_000.0
        # the text stretched over the speech positions (the paper pads it): with the padded
        # layout this model took 0.005 nats/token from its text after 2160 steps, stretched
        # 3.9 after 2540 (WER 119 -> 55.5 %; benchmarks/RESULTS.md section 14b)
        config.model.text_layout = "stretch"
    else:  # paper
        config.data.update(batch_size=64, tokenizer_frames=2)
        config.train.update(steps=200_000, learning_rate=3e-4, warmup_steps=4000)
        config.model.dtype = "bfloat16"
    if stage == "refine":
        config.palle.par_run = {"tiny": "", "small": "runs/palle"}.get(size, "")
        config.train.update(
            init_from=config.palle.par_run,
            learning_rate=config.train.learning_rate / 3,
            steps=max(2, config.train.steps // 4),
        )
    return config
