"""Pieces shared by the experiment configs: the arg parser, data/train/mesh/decode defaults."""

import ml_collections as mlc

from jaxtts.nn import axes


def parse_arg(arg: str | None, **defaults) -> mlc.ConfigDict:
    """'tiny' or 'small,steps=100' -> ConfigDict(variant='tiny', steps=100, ...).

    The first bare word is the variant; `k=v` pairs override `defaults` (types preserved).
    """
    out = mlc.ConfigDict(dict(variant=defaults.pop("variant", "small"), **defaults))
    for i, part in enumerate(p for p in (arg or "").split(",") if p):
        if "=" not in part:
            if i:
                raise ValueError(f"config arg '{arg}': only the first item may be a bare variant")
            out.variant = part
            continue
        k, v = part.split("=", 1)
        if k not in out:
            raise KeyError(f"config arg '{arg}': unknown key '{k}', expected one of {list(out)}")
        out[k] = type(out[k])(v) if out[k] is not None else v
    return out


def mesh_config(shape=None) -> mlc.ConfigDict:
    """Mesh axes sizes (-1 = fill with the remaining devices) and logical-axis rules."""
    return mlc.ConfigDict(
        dict(
            shape=shape or dict(data=-1, fsdp=1, tensor=1),
            # [logical axis, mesh axis or axes]: jaxtts/nn/axes.py DEFAULT_RULES, the one
            # definition (override here per experiment).
            rules=[
                [name, list(m) if isinstance(m, tuple) else m] for name, m in axes.DEFAULT_RULES
            ],
        )
    )


def train_config(**overrides) -> mlc.ConfigDict:
    cfg = mlc.ConfigDict(
        dict(
            steps=10_000,
            learning_rate=1e-3,
            warmup_steps=500,
            final_lr_fraction=0.1,
            optimizer="adamw",
            b1=0.9,
            b2=0.98,
            eps=1e-8,
            weight_decay=0.01,
            grad_clip=1.0,
            microbatches=1,
            # what trains: 'all', 'lora', 'prefix:<path>,...' (jaxtts/train/state.py)
            trainable="all",
            init_from="",  # a run folder whose parameters initialise matching paths
            init_skip="",  # comma list of path prefixes init_from leaves at their fresh init
            seed=0,
            log_every=10,
            eval_every=500,
            checkpoint_every=500,
            keep_checkpoints=3,
            async_checkpoint=True,
            tensorboard=True,
        )
    )
    cfg.update(overrides)
    return cfg


# the 2-CPU-core LM recipe's data (configs/car.py:small and :deep, configs/palle.py:small): the
# 16 h built-in corpus, 25 Hz tokens, 2 s prompts, speech buckets of 32 up to 320 tokens
SMALL_LM_DATA = dict(
    corpus_utterances=20_000,
    tokenizer_frames=2,
    batch_size=16,
    prompt_seconds=2.0,
    max_speech_len=320,
    bucket_step=32,
    text_bucket_step=64,
    max_text_len=256,
)


def data_config(**overrides) -> mlc.ConfigDict:
    cfg = mlc.ConfigDict(
        dict(
            # Built-in espeak-ng corpus (built on first use) or a prepared corpus folder.
            corpus_dir="",  # '' = data/builtin under the repo ($JAXTTS_DATA_DIR/builtin)
            corpus_utterances=2400,
            corpus_seed=0,
            # Speech tokens: 'kmeans' (fitted on the train split), 'codec:<dir>' (a learned
            # tokenizer: jaxtts.codec), 'external:<name>'.
            tokenizer="kmeans",
            tokenizer_k=1024,
            tokenizer_frames=1,  # mel frames a token: 1 = 50 Hz, 2 = 25 Hz
            tokenizer_dir="",  # '' = <corpus_dir>/tokenizers/kmeans<k>[x<frames>]
            # context decoder fitted with a NEW k-means tokenizer: W tokens each side (0: none,
            # centroid lookup); add one to an existing tokenizer with
            # `python -m jaxtts.data.tokenizers fit-context <dir> --corpus <corpus>`
            tokenizer_context=1,
            tokenizer_conv_steps=0,  # > 0: also train a conv decoder (minutes; see help)
            # a slice of the corpus, comma lists ('' = all): its speakers, its text parts
            # ('grammar', 'open': the natural corpus's two kinds of sentence)
            speakers="",
            text_parts="",
            text_backend="espeak",  # phonemes from espeak-ng; 'char' for characters
            prompt_seconds=3.0,
            batch_size=16,
            max_text_len=256,
            max_speech_len=1024,
            bucket_step=64,  # speech buckets: step, 2*step, ... max_speech_len
            text_bucket_step=0,  # 0 = bucket_step
            seed=0,
        )
    )
    cfg.update(overrides)
    return cfg
