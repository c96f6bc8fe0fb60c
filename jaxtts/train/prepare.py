"""Data preparation for every token-LM family (the TTS LM, DCAR, SSD, TLDR, PALLE; MDM uses the
corpus step): corpus -> speech tokenizer -> tokens -> text front-end -> loaders.

    data = prepare_data(config, workdir)          # LMData: corpus, tokenizer, frontend, loaders
    config = fill_model_sizes(config, data)        # model.num_text_symbols / num_speech_tokens
    corpus = ensure_builtin_corpus(config.data)    # just the corpus (built on first use)

Every stage is cached, so a second run starts at once:
1. the corpus: `config.data.corpus_dir` (a prepared corpus with train/dev/test manifests) or,
   when empty, the built-in espeak-ng corpus, built on first use;
2. the speech tokenizer: `config.data.tokenizer` 'kmeans' (fitted on the train split's
   log-mels, saved under `<corpus>/tokenizers/<name>`, or `data.tokenizer_dir`) or
   'external:<name>' (tokens already in `<corpus>/tokens/<name>/`, with a saved
   `ExternalTokens` description in `<corpus>/tokenizers/<name>`);
3. tokens of every utterance (`<corpus>/tokens/<name>/<id>.npy`);
4. the text front-end (symbol table of the train split's phonemes), saved in the workdir
   with a copy of the tokenizer, so the run folder is self-contained for synthesis.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import ml_collections as mlc

from jaxtts.data import tokenizers as tok_lib
from jaxtts.data.corpus import build_corpus, resolve_corpus_dir
from jaxtts.data.manifest import read_split
from jaxtts.data.pipeline import LMLoader, make_lm_records
from jaxtts.data.text import TextFrontend
from jaxtts.errors import ConfigError, DataError
from jaxtts.run_folder import RunFolder

log = logging.getLogger("jaxtts.data")

__all__ = ["LMData", "ensure_builtin_corpus", "fill_model_sizes", "prepare_data", "tokenizer_for"]


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
    if spec.startswith("codec:"):  # a learned tokenizer: a codec run folder or its export
        from jaxtts.codec import load_tokenizer

        return load_tokenizer(spec.split(":", 1)[1])
    if spec != "kmeans":
        raise ConfigError(
            f"data.tokenizer={spec!r}: expected 'kmeans', 'codec:<dir>' or 'external:<name>'"
        )
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
    t0 = time.perf_counter()
    tok = tok_lib.fit_kmeans_tokenizer(
        train_utts,
        k,
        frames,
        context=int(data_cfg.get("tokenizer_context", 1)),
        conv_steps=int(data_cfg.get("tokenizer_conv_steps", 0)),
        progress=progress,
    )
    tok.save(folder)
    log.info("fitted %s in %.1fs", tok.name, time.perf_counter() - t0)
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
        raise DataError(
            f"{corpus}/train.jsonl: manifest not found (the natural-voice corpus: "
            "python -m jaxtts.data.natural; the built-in one: leave data.corpus_dir empty)"
        )
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

    # the symbol table above comes from the whole train split, so a run on a slice and a run
    # on the whole corpus (`train.init_from` one another) have the same text embedding
    kept = select_utterances(splits, d, corpus)

    def loader(split, train):
        utts = kept[split]
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
    dev_loader = loader("dev", False) if kept.get("dev") else None
    return LMData(corpus, tok, frontend, train_loader, dev_loader, kept)


def _names(value) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    return [v.strip() for v in str(value or "").split(",") if v.strip()]


def slice_utterances(
    utts: list, speakers, parts, source: str, prefix: str = "data.", strict: bool = True
) -> list:
    """The utterances of `speakers` and text `parts` (comma strings or lists; empty: all). A text
    part is 'grammar' or 'open' (`jaxtts.data.natural.utterance_part`: the natural corpus's
    ids; every utterance of another corpus is 'grammar'). A one-line ConfigError naming the
    option (`prefix` + speakers / text_parts) and `source` (the manifest) for an unknown part,
    and (`strict`) for a speaker that is not there or nothing left."""
    from jaxtts.data.natural import utterance_part

    speakers, parts = _names(speakers), _names(parts)
    if not speakers and not parts:
        return list(utts)
    known = sorted({u.speaker for u in utts})
    for s in speakers:
        if strict and s not in known:
            raise ConfigError(
                f"{prefix}speakers: {s!r} is not a speaker of {source}; expected names from {known}"
            )
    for p in parts:
        if p not in ("grammar", "open"):
            raise ConfigError(f"{prefix}text_parts: {p!r}, expected 'grammar' and/or 'open'")
    out = [
        u
        for u in utts
        if (not speakers or u.speaker in speakers) and (not parts or utterance_part(u.id) in parts)
    ]
    if strict and not out:
        raise ConfigError(
            f"{prefix}speakers={speakers}, {prefix}text_parts={parts}: "
            f"no utterance of {source} left"
        )
    return out


def select_utterances(splits: dict, data_cfg, corpus: Path) -> dict:
    """Each split's utterances of `data.speakers` and `data.text_parts` (`slice_utterances`):
    training on a slice (an ablation, or the first stage of a curriculum) without a copy of
    the corpus. The train split must keep some; a dev split may end up empty (no dev loader)."""
    speakers, parts = data_cfg.get("speakers", ""), data_cfg.get("text_parts", "")
    if not _names(speakers) and not _names(parts):
        return splits
    out = {"train": slice_utterances(splits["train"], speakers, parts, f"{corpus}/train.jsonl")}
    for split, utts in splits.items():
        if split != "train":  # dev / test: what they hold of the slice, maybe nothing
            out[split] = slice_utterances(utts, speakers, parts, "", strict=False)
    log.info("data slice: %d of %d train utterances", len(out["train"]), len(splits["train"]))
    return out


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
