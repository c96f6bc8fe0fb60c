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
from jaxtts.train import losses

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
        build_corpus(corpus, num_utterances=int(data_cfg.get("corpus_utterances", 2400)),
                     seed=int(data_cfg.get("corpus_seed", 0)), progress=progress)  # fmt: skip
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
    folder = Path(data_cfg.get("tokenizer_dir") or corpus / "tokenizers" / f"kmeans{k}")
    if (folder / "tokenizer.json").is_file():
        tok = tok_lib.load_tokenizer(folder)
        if tok.vocab_size != k:
            raise ConfigError(f"{folder}: holds a K={tok.vocab_size} tokenizer but "
                              f"data.tokenizer_k={k}")  # fmt: skip
        return tok
    from jaxtts.data.audio import utterance_mels

    t0 = time.perf_counter()
    tok = tok_lib.KMeansTokenizer(k)
    mels = utterance_mels(train_utts, tok.mel_cfg, progress=progress, desc="log-mel (fit)")
    tok.fit(mels, progress=progress)
    tok.save(folder)
    log.info("fitted %s on %d utterances in %.1fs", tok.name, len(mels), time.perf_counter() - t0)
    return tok


def prepare_data(config, workdir: str | Path | None = None, progress: bool = True) -> LMData:
    """Corpus -> tokenizer -> tokens -> text front-end -> loaders (see module docstring)."""
    d = config.data
    corpus = ensure_builtin_corpus(d, progress)
    splits = {s: read_split(corpus, s) for s in ("train", "dev", "test")
              if (corpus / f"{s}.jsonl").is_file()}  # fmt: skip
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
        frontend = TextFrontend.from_utterances(splits["train"], backend=d.get("text_backend",
                                                                               "espeak"))
    if run is not None:
        frontend.save(fe_dir)
        if not (run.tokenizer_dir / "tokenizer.json").is_file():
            tok.save(run.tokenizer_dir)

    def loader(split, train):
        utts = splits[split]
        tokens = tok_lib.load_tokens(corpus, tok.name, [u.id for u in utts])
        records = make_lm_records(utts, tokens, frontend)
        return LMLoader.from_config(records, d, frame_rate=tok.frame_rate, shuffle=train,
                                    drop_remainder=train, num_epochs=None if train else 1,
                                    sort_window=32 if train else 1_000_000)  # fmt: skip

    train_loader = loader("train", True)
    dev_loader = loader("dev", False) if "dev" in splits else None
    return LMData(corpus, tok, frontend, train_loader, dev_loader, splits)


# ----------------------------------------------------------------------------- task


class LMTask:
    """`jaxtts.train.loop.Task` for the TTS LM."""

    def __init__(self, cfg: LMConfig, alpha: float = 1.0):
        self.cfg = cfg
        self.model = TTSLM(cfg)
        self.alpha = float(alpha)

    def init(self, rng, batch):
        x, x_len = with_bos(batch["speech"], batch["speech_len"], self.cfg)
        return self.model.init(rng, jnp.asarray(batch["text"]), jnp.asarray(batch["text_len"]),
                               x, x_len)["params"]  # fmt: skip

    def loss(self, params, batch, rng, *, train: bool):
        cfg = self.cfg
        x, x_len = with_bos(batch["speech"], batch["speech_len"], cfg)
        logits, _ = self.model.apply({"params": params}, jnp.asarray(batch["text"]),
                                     jnp.asarray(batch["text_len"]), x, x_len, train=train,
                                     rngs={"dropout": rng})  # fmt: skip
        targets, valid = losses.mtp_targets(jnp.asarray(batch["speech"]),
                                            jnp.asarray(batch["speech_len"]),
                                            jnp.asarray(batch["prompt_len"]), cfg.eos,
                                            cfg.num_mtp_heads)  # fmt: skip
        valid = valid & (jnp.asarray(batch["text_len"]) > 0)[:, None, None]  # padding rows
        return losses.mtp_loss(logits, targets, valid, self.alpha)


# ----------------------------------------------------------------------------- train


def fill_model_sizes(config, data: LMData) -> mlc.ConfigDict:
    """A private unlocked copy of `config` with the data-dependent sizes filled in."""
    config = mlc.ConfigDict(config.to_dict())
    m = config.model
    for key, size in (("num_text_symbols", data.frontend.vocab_size),
                      ("num_speech_tokens", data.tokenizer.vocab_size)):  # fmt: skip
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


def train(config, workdir: str, *, progress: bool = True, mesh=None):
    """Train the LM; returns the trainer's `TrainResult` (see `jaxtts.train.loop`)."""
    from jaxtts.train import loop

    if config.get("task") != "lm":
        raise ConfigError(f"config.task={config.get('task')!r}: expected 'lm'")
    Path(workdir).mkdir(parents=True, exist_ok=True)
    _drop_retired_keys(RunFolder(workdir))
    data = prepare_data(config, workdir, progress)
    config = fill_model_sizes(config, data)
    cfg = LMConfig.from_config(config.model)
    task = LMTask(cfg, float(config.get("loss", {}).get("alpha", 1.0)))
    RunFolder(workdir).write_data_info(
        {"corpus_dir": str(data.corpus_dir), "tokenizer": data.tokenizer.name,
         "frame_rate": data.tokenizer.frame_rate, "train_records": len(data.train.records),
         "dropped": data.train.num_dropped,
         "max_target_text": int(max(r.text_ids.size for r in data.train.records))})  # fmt: skip

    dev = data.dev

    def eval_batches():
        return (dev.get_batch(s) for s in range(len(dev)))

    on_eval = None
    n_samples = int(config.get("eval", {}).get("num_samples", 0))
    if n_samples > 0 and dev is not None:
        on_eval = _sample_eval(config, workdir, data, n_samples, progress)
    return loop.train_and_evaluate(config, workdir, task, data.train,
                                   eval_batches if dev is not None else None, mesh=mesh,
                                   progress=progress, on_eval=on_eval)  # fmt: skip


def _sample_eval(config, workdir: str, data: LMData, n: int, progress: bool):
    """on_eval hook: synthesize `n` dev sentences with the current params, write the wavs to
    `samples/step_<k>/` and score them with the evaluation ASR (domain LM) when available."""
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
        engine = LMEngine(config, state.full_params, data.frontend, data.tokenizer)
        synth = Synthesizer(engine, vocoder=config.eval.get("vocoder", "griffin_lim"))
        out_dir = RunFolder(workdir).samples_dir(step)
        results = synth.synthesize([u.text for u in utts], prompts,
                                   strategy=config.decode.strategy, batch_size=len(utts),
                                   progress=False)  # fmt: skip
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

