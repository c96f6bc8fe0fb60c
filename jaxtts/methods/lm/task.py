"""Training the TTS LM (FAR / CAR backbone) on a corpus: data preparation, the Task, `train`.

    python train.py --config configs/car.py:small --workdir runs/car

Data preparation (`prepare_data`, cached at every stage so a second run starts at once):
1. the corpus: `config.data.corpus_dir` (a prepared corpus with train/dev/test manifests) or,
   when empty, the built-in espeak-ng corpus, built on first use;
2. the speech tokenizer: `config.data.tokenizer` 'kmeans' (fitted on the train split's
   log-mels, saved under `<corpus>/tokenizers/<name>`, or `data.tokenizer_dir`) or
   'external:<name>' (tokens already in `<corpus>/tokens/<name>/`, with a saved
   `ExternalTokens` description in `<corpus>/tokenizers/<name>`);
3. tokens of every utterance (`<corpus>/tokens/<name>/<id>.npy`);
4. the text front-end (symbol table of the train split's phonemes), saved in the workdir.
The run folder is then self-contained for synthesis: `config.json`, `text_frontend/`,
`tokenizer/` (a copy) and `checkpoints/`.

Batches: `LMLoader` rows (`text`, `speech` = prompt + target tokens, `prompt_len`); the task
feeds `[BOS, speech...]` to the model and scores the multi-token heads with
`jaxtts.train.losses.mtp_loss` (prompt, padding and post-EOS targets excluded).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_collections as mlc
import numpy as np

from jaxtts.data import tokenizers as tok_lib
from jaxtts.data.corpus import build_corpus, resolve_corpus_dir
from jaxtts.data.manifest import read_split
from jaxtts.data.pipeline import LMLoader, make_lm_records
from jaxtts.data.text import TextFrontend
from jaxtts.errors import ConfigError, DataError
from jaxtts.methods.lm.model import RETIRED_MODEL_KEYS, TTSLM, LMConfig, with_bos
from jaxtts.run_folder import RunFolder
from jaxtts.train import align as align_lib
from jaxtts.train import losses
from jaxtts.train.align import AlignConfig

log = logging.getLogger("jaxtts.lm")


# ----------------------------------------------------------------------------- data


@dataclasses.dataclass
class LMData:
    corpus_dir: Path
    tokenizer: tok_lib.SpeechTokenizer
    frontend: TextFrontend
    train: LMLoader
    dev: LMLoader | None
    splits: dict  # split -> list[Utterance]


def ensure_builtin_corpus(data_cfg, progress: bool = True) -> Path:
    """The configured corpus folder; the built-in one is built on first use."""
    corpus = resolve_corpus_dir(data_cfg)
    if not data_cfg.get("corpus_dir"):
        build_corpus(
            corpus,
            num_utterances=int(data_cfg.get("corpus_utterances", 2400)),
            seed=int(data_cfg.get("corpus_seed", 0)),
            progress=progress,
        )
    return corpus


def tokenizer_for(data_cfg, corpus: Path, train_utts, progress: bool = True):
    """Loads (or fits and saves) the configured speech tokenizer."""
    spec = str(data_cfg.get("tokenizer", "kmeans"))
    if spec.startswith("external:"):
        name = spec.split(":", 1)[1]
        folder = Path(data_cfg.get("tokenizer_dir") or corpus / "tokenizers" / name)
        return tok_lib.load_tokenizer(folder)
    if spec != "kmeans":
        raise ConfigError(f"data.tokenizer={spec!r}: expected 'kmeans' or 'external:<name>'")
    k = int(data_cfg.get("tokenizer_k", 1024))
    frames = int(data_cfg.get("tokenizer_frames", 1))
    name = tok_lib.KMeansTokenizer.default_name(k, frames)
    folder = Path(data_cfg.get("tokenizer_dir") or corpus / "tokenizers" / name)
    if (folder / "tokenizer.json").is_file():
        tok = tok_lib.load_tokenizer(folder)
        if tok.vocab_size != k or getattr(tok, "frames", 1) != frames:
            raise ConfigError(
                f"{folder}: holds a K={tok.vocab_size}, frames="
                f"{getattr(tok, 'frames', 1)} tokenizer but data.tokenizer_k={k}, "
                f"data.tokenizer_frames={frames}"
            )
        return tok
    from jaxtts.data.audio import utterance_mels

    t0 = time.perf_counter()
    tok = tok_lib.KMeansTokenizer(k, frames=frames)
    # k-means sees at most `max_fit_frames` token vectors: a corpus with more (the 16 h one)
    # is fitted on every n-th training utterance, ~1.25x what it needs (mels cost minutes)
    need_s = 1.25 * tok.max_fit_frames / tok.frame_rate
    total_s = sum(float(u.duration or 0.0) for u in train_utts)
    stride = max(1, int(total_s // need_s))
    mels = utterance_mels(
        list(train_utts)[::stride], tok.mel_cfg, progress=progress, desc="log-mel (fit)"
    )
    tok.fit(mels, progress=progress)
    tok.fit_context_decoder(
        mels, window=int(data_cfg.get("tokenizer_context", 1)), progress=progress
    )
    conv_steps = int(data_cfg.get("tokenizer_conv_steps", 0))
    if conv_steps > 0:
        from jaxtts.data.token_decoder import ConvDecoderConfig

        tok.fit_conv_decoder(mels, ConvDecoderConfig(steps=conv_steps), progress=progress)
    tok.save(folder)
    log.info("fitted %s on %d utterances in %.1fs", tok.name, len(mels), time.perf_counter() - t0)
    return tok


def prepare_data(config, workdir: str | Path | None = None, progress: bool = True) -> LMData:
    """Corpus -> tokenizer -> tokens -> text front-end -> loaders (see module docstring)."""
    d = config.data
    corpus = ensure_builtin_corpus(d, progress)
    splits = {
        s: read_split(corpus, s)
        for s in ("train", "dev", "test")
        if (corpus / f"{s}.jsonl").is_file()
    }
    if "train" not in splits:
        raise DataError(f"{corpus}/train.jsonl: manifest not found")
    tok = tokenizer_for(d, corpus, splits["train"], progress)
    if not isinstance(tok, tok_lib.ExternalTokens):
        for utts in splits.values():
            tok_lib.extract_tokens(tok, utts, corpus, progress=progress)

    run = RunFolder(workdir) if workdir else None
    fe_dir = run.text_frontend_dir if run else None
    if fe_dir is not None and (fe_dir / "text_frontend.json").is_file():
        frontend = TextFrontend.load(fe_dir)  # a resumed run keeps its symbol table
    else:
        frontend = TextFrontend.from_utterances(
            splits["train"], backend=d.get("text_backend", "espeak")
        )
    if run is not None:
        frontend.save(fe_dir)
        if not (run.tokenizer_dir / "tokenizer.json").is_file():
            tok.save(run.tokenizer_dir)

    def loader(split, train):
        utts = splits[split]
        tokens = tok_lib.load_tokens(corpus, tok.name, [u.id for u in utts])
        records = make_lm_records(utts, tokens, frontend)
        return LMLoader.from_config(
            records,
            d,
            frame_rate=tok.frame_rate,
            shuffle=train,
            drop_remainder=train,
            num_epochs=None if train else 1,
            sort_window=32 if train else 1_000_000,
        )

    train_loader = loader("train", True)
    dev_loader = loader("dev", False) if "dev" in splits else None
    return LMData(corpus, tok, frontend, train_loader, dev_loader, splits)


# ----------------------------------------------------------------------------- task


class LMTask:
    """`jaxtts.train.loop.Task` for the TTS LM: the multi-token loss, plus alignment learning
    (`jaxtts.train.align`) when `align.enabled`: the beta-binomial prior added to the
    speech->text attention logits of `align.layers` x `align.heads` (weight annealed by the
    train step; evaluation runs without it) and the CTC alignment loss on those logits."""

    def __init__(self, cfg: LMConfig, alpha: float = 1.0, align: AlignConfig | None = None):
        self.cfg = cfg
        self.model = TTSLM(cfg)
        self.alpha = float(alpha)
        self.align = align or AlignConfig()

    def init(self, rng, batch):
        x, x_len = with_bos(batch["speech"], batch["speech_len"], self.cfg)
        return self.model.init(
            rng, jnp.asarray(batch["text"]), jnp.asarray(batch["text_len"]), x, x_len
        )["params"]

    def forward(self, params, batch, rng=None, *, train: bool = False, step=None):
        """(logits [B, T, K, V], align metrics + 'align/ctc' loss term, speech->text logits
        [B, L'N', T, X] of the aligned heads or None)."""
        cfg, a = self.cfg, self.align
        text, text_len = jnp.asarray(batch["text"]), jnp.asarray(batch["text_len"])
        x, x_len = with_bos(batch["speech"], batch["speech_len"], cfg)
        rngs = {"dropout": rng} if rng is not None else {}
        if not a.enabled:
            logits, _ = self.model.apply(
                {"params": params}, text, text_len, x, x_len, train=train, rngs=rngs
            )
            return logits, {}, None
        nx, nt = text.shape[1], x.shape[1]
        w = a.prior_weight(step)
        bias = None  # evaluation (step None) and prior-free configs build no bias at all
        if a.prior_scaling > 0 and step is not None:
            bias = align_lib.prior_bias(
                text_len,
                x_len,
                nx,
                nt,
                a.head_mask(cfg.num_heads),
                a.prior_scaling,
                w,
                a.prior_normalize,
            )  # [B,N,X+T,X+T]
        (logits, _), inter = self.model.apply(
            {"params": params},
            text,
            text_len,
            x,
            x_len,
            train=train,
            rngs=rngs,
            attn_bias=bias,
            bias_layers=a.layers,
            mutable=["intermediates"],
        )
        stack = inter["intermediates"]["stack"]
        blocks = [
            align_lib.speech_text_logits(stack[f"layer_{i}"]["attn"]["attn_logits"][0], nx, a.heads)
            for i in a.layers
        ]
        st = jnp.concatenate(blocks, axis=1)  # [B, L'N', T, X]
        b, g = st.shape[:2]
        flat = st.reshape((b * g,) + st.shape[2:])  # [B L'N', T, X]
        n_rep, m_rep = jnp.repeat(text_len, g), jnp.repeat(x_len, g)
        m_rep = jnp.where(m_rep >= n_rep, m_rep, 0)  # CTC needs frames >= text symbols
        ctc = align_lib.ctc_alignment_loss(flat, n_rep, m_rep, a.blank_logprob)
        metrics = {
            "align/ctc": ctc,
            "align/prior_weight": w,
            "align/diag_mass": align_lib.diagonal_mass(flat, n_rep, m_rep, a.band),
        }
        return logits, metrics, st

    def loss(self, params, batch, rng, *, train: bool, step=None):
        cfg = self.cfg
        logits, align_metrics, _ = self.forward(params, batch, rng, train=train, step=step)
        targets, valid = losses.mtp_targets(
            jnp.asarray(batch["speech"]),
            jnp.asarray(batch["speech_len"]),
            jnp.asarray(batch["prompt_len"]),
            cfg.eos,
            cfg.num_mtp_heads,
        )
        valid = valid & (jnp.asarray(batch["text_len"]) > 0)[:, None, None]  # padding rows
        loss, metrics = losses.mtp_loss(logits, targets, valid, self.alpha)
        if align_metrics:
            # The CTC term is a mean over this batch's rows; the trainer weights a batch by its
            # target tokens, so with train.microbatches > 1 the accumulated CTC gradient is a
            # token-weighted mean of per-microbatch row means (exact with one microbatch).
            metrics["mtp_loss"] = loss
            loss = loss + self.align.ctc_weight * align_metrics["align/ctc"]
            metrics.update(align_metrics)
        return loss, metrics


def lm_task_from_config(config, cfg: LMConfig) -> LMTask:
    """The task of a (filled) LM config: `loss.alpha` and the `loss.align_*` keys; an unknown
    `loss.*` key is a ConfigError naming it."""
    loss_cfg = dict(config.get("loss", {}) or {})
    unknown = sorted(k for k in loss_cfg if k != "alpha" and not k.startswith("align_"))
    if unknown:
        raise ConfigError(f"loss.{unknown[0]}: unknown key, expected 'alpha' or 'align_*'")
    align = AlignConfig.from_loss_config(loss_cfg, cfg.num_layers, cfg.num_heads)
    return LMTask(cfg, float(loss_cfg.get("alpha", 1.0)), align)


# ----------------------------------------------------------------------------- train


def fill_model_sizes(config, data: LMData) -> mlc.ConfigDict:
    """A private unlocked copy of `config` with the data-dependent sizes filled in."""
    config = mlc.ConfigDict(config.to_dict())
    m = config.model
    for key, size in (
        ("num_text_symbols", data.frontend.vocab_size),
        ("num_speech_tokens", data.tokenizer.vocab_size),
    ):
        if int(m.get(key, -1)) == -1:
            m[key] = int(size)
        elif int(m[key]) != int(size):
            raise ConfigError(f"model.{key}={m[key]} but the data has {size}; leave it -1")
    return config


def _drop_retired_keys(run: RunFolder) -> None:
    """A run started before `model.max_len` / `model.param_dtype` were retired resumes: its
    config.json is rewritten without them (they were never read)."""
    if not run.config_path.is_file():
        return
    saved = run.read_config().to_dict()
    retired = sorted(RETIRED_MODEL_KEYS & set(saved.get("model", {})))
    if retired:
        for key in retired:
            del saved["model"][key]
        run.write_config(mlc.ConfigDict(saved))
        log.info("%s: dropped retired keys %s", run.config_path, retired)


def train(
    config,
    workdir: str,
    *,
    progress: bool = True,
    mesh=None,
    task_name: str = "lm",
    data_info: dict | None = None,
):
    """Train the LM; returns the trainer's `TrainResult` (see `jaxtts.train.loop`).
    `task_name`: the family whose run this is ('ssd' trains a draft LM this way);
    `data_info`: more entries for data.json (SSD: its target and the target's fingerprint)."""
    from jaxtts.train import loop

    if config.get("task") != task_name:
        raise ConfigError(f"config.task={config.get('task')!r}: expected {task_name!r}")
    Path(workdir).mkdir(parents=True, exist_ok=True)
    _drop_retired_keys(RunFolder(workdir))
    data = prepare_data(config, workdir, progress)
    config = fill_model_sizes(config, data)
    cfg = LMConfig.from_config(config.model)
    task = lm_task_from_config(config, cfg)
    clash = sorted(
        set(data_info or {})
        & {"corpus_dir", "tokenizer", "frame_rate", "train_records", "dropped", "max_target_text"}
    )
    if clash:
        raise ValueError(f"data_info may not replace data.json's {clash[0]!r}")
    RunFolder(workdir).write_data_info(
        {
            "corpus_dir": str(data.corpus_dir),
            "tokenizer": data.tokenizer.name,
            "frame_rate": data.tokenizer.frame_rate,
            "train_records": len(data.train.records),
            "dropped": data.train.num_dropped,
            "max_target_text": int(max(r.text_ids.size for r in data.train.records)),
            **(data_info or {}),
        }
    )

    dev = data.dev

    def eval_batches():
        return (dev.get_batch(s) for s in range(len(dev)))

    hooks = []
    n_samples = int(config.get("eval", {}).get("num_samples", 0))
    if n_samples > 0 and dev is not None:
        hooks.append(_sample_eval(config, workdir, data, n_samples, progress))
    if task.align.enabled and dev is not None:
        hooks.append(_attention_image(task, workdir, dev.get_batch(0)))

    def on_eval(step, state) -> dict[str, float]:
        out: dict[str, float] = {}
        for hook in hooks:
            out.update(hook(step, state) or {})
        return out

    return loop.train_and_evaluate(
        config,
        workdir,
        task,
        data.train,
        eval_batches if dev is not None else None,
        mesh=mesh,
        progress=progress,
        on_eval=on_eval if hooks else None,
    )


def _attention_image(task: LMTask, workdir: str, batch):
    """on_eval hook: `samples/step_<k>/attention.png`, the aligned heads' mean speech->text
    attention (renormalised over the text) of the first dev row, without the prior."""
    forward = jax.jit(lambda p, b: task.forward(p, b)[2])
    row = {k: np.asarray(v)[:1] for k, v in batch.items()}

    def on_eval(step, state) -> dict[str, float]:
        st = forward(state.full_params, row)  # every process joins the sharded forward
        if jax.process_index() != 0:
            return {}
        st = np.asarray(jax.device_get(st))[0]  # [G, T, X]
        n, m = int(row["text_len"][0]), int(row["speech_len"][0]) + 1
        z = st[:, :m, :n]
        p = np.exp(z - z.max(-1, keepdims=True))
        p = (p / p.sum(-1, keepdims=True)).mean(0)  # [M, N]
        save_attention_png(
            p,
            RunFolder(workdir).samples_dir(step) / "attention.png",
            f"step {step}: aligned heads, speech -> text (prompt text + target; "
            f"prompt speech {int(row['prompt_len'][0])} tokens)",
        )
        return {}

    return on_eval


def save_attention_png(p: np.ndarray, path: Path, title: str) -> None:
    """p [M speech, N text] -> an image (text on the y axis, speech on the x axis)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.imshow(p.T, origin="lower", aspect="auto", interpolation="nearest", cmap="viridis")
    ax.set_xlabel("speech position (BOS, prompt, target)")
    ax.set_ylabel("text position")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _sample_eval(config, workdir: str, data: LMData, n: int, progress: bool, make_engine=None):
    """on_eval hook: synthesize `n` dev sentences with the current params, write the wavs to
    `samples/step_<k>/` and score them with the evaluation ASR (domain LM) when available.
    make_engine(params) -> Engine (default: an LMEngine of `config`; TLDR passes its own)."""
    from jaxtts.methods.lm.engine import LMEngine
    from jaxtts.synthesize import Synthesizer, prompts_from_utterances

    utts = data.splits["dev"][:n]
    prompts = prompts_from_utterances(data.splits["dev"], utts)
    asr = None
    if config.eval.get("asr", "domain") != "none":
        try:
            from jaxtts.eval.asr import PocketSphinxASR

            asr = PocketSphinxASR.from_corpus(data.corpus_dir, "domain", progress=False)
        except Exception as e:  # noqa: BLE001 - an optional metric must not stop training
            log.warning("sample WER disabled: %s", e)

    def on_eval(step, state) -> dict[str, float]:
        engine = (
            make_engine(state.full_params)
            if make_engine is not None
            else LMEngine(config, state.full_params, data.frontend, data.tokenizer)
        )
        synth = Synthesizer(engine, vocoder=config.eval.get("vocoder", "griffin_lim"))
        out_dir = RunFolder(workdir).samples_dir(step)
        results = synth.synthesize(
            [u.text for u in utts],
            prompts,
            strategy=config.decode.strategy,
            batch_size=len(utts),
            progress=False,
        )
        out: dict[str, float] = {}
        if jax.process_index() == 0:
            synth.write(results, out_dir)
        lengths = [r.info["num_tokens"] for r in results]
        out["samples/mean_tokens"] = float(np.mean(lengths))
        out["samples/hit_max"] = float(np.mean([r.info["hit_max"] for r in results]))
        if asr is not None:
            from jaxtts.eval.metrics import wer

            hyps = asr.transcribe([r.wav for r in results], synth.sample_rate)
            out["samples/wer_domain"] = wer([u.text for u in utts], hyps)
        return out

    return on_eval
