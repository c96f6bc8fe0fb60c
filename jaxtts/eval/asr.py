"""Independent evaluation ASR (the papers' Whisper role): CMU PocketSphinx, en-us.

Two language models, two WER columns:

* ``lm="domain"``: an interpolated Kneser-Ney trigram (`jaxtts.eval.ngram.KneserNeyLM`) of the
  corpus's TRAINING sentences (optionally plus fresh sentences of the built-in corpus's
  generator, dev/test removed), with a dictionary restricted to that vocabulary. Test sentences
  must never be passed as `train_sentences`. Measured floor on the built-in test split
  (benchmarks/RESULTS.md section 3): 12.9% WER with the stock acoustic model, 1.6% with the
  model MAP-adapted to the training audio (`hmm=corpus_adapted_hmm(corpus)`, what
  `jaxtts.evaluate` uses). The stock model's floor is set by the generator's perplexity (~58
  per word: any of ~100 nouns may follow "the") together with the acoustic model hearing
  espeak-ng's "the" as "a"/"that"; adaptation fixes the second.
* ``lm="default"``: the bundled generic en-us LM + full CMUdict. Sensitive to small quality
  changes (floor 50% WER on espeak-ng speech with the stock model, 6.5% adapted), so report it
  also as a delta to ground truth.

Audio handling: float audio is resampled to 16 kHz, padded with `pad_s` of silence on both
sides, converted to int16 and given `dither` LSB (std) of seeded Gaussian noise: espeak-ng
writes exact digital silence, which breaks pocketsphinx's noise/CMN estimates (measured domain
WER 34 / 15 / 13 / 14 / 18 % at 0 / 10 / 40 / 80 / 160 LSB). The noise is seeded per utterance,
so transcripts do not depend on batch order or worker count.

Words of the training text missing from CMUdict get a pronunciation from espeak-ng
(IPA mapped to CMU phones, `ipa_to_cmu`); words neither source can pronounce are listed in
`PocketSphinxASR.missing_words`. Built LMs are cached under `cache_dir` keyed by a hash of
the sentences, and so are the generated sentences.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from jaxtts.data import text as text_mod
from jaxtts.data import words as words_mod
from jaxtts.data.manifest import read_manifest
from jaxtts.errors import ConfigError
from jaxtts.eval import metrics  # normalize_for_wer: its code is part of the cache key
from jaxtts.eval.am_adapt import adapt_to_corpus
from jaxtts.eval.metrics import normalize_for_wer
from jaxtts.eval.ngram import KneserNeyLM
from jaxtts.eval.sphinx import (  # also importable from here (tests use prepare_pcm)
    ASR_SAMPLE_RATE,
    default_cache_dir,
    import_pocketsphinx,
    prepare_pcm,
)

_LM_VERSION = "kneser-ney-v2"  # bump when the LM/dictionary recipe changes (invalidates cache)


# ------------------------------------------------------------------------------------------
# Pronunciations
# ------------------------------------------------------------------------------------------

# IPA (espeak-ng --ipa, en-us) -> CMU/ARPAbet phones of the pocketsphinx en-us model.
# Longest match first; stress/length marks and ties are stripped beforehand.
_IPA_TO_CMU = {
    "aɪɚ": "AY ER",
    "aʊɚ": "AW ER",
    "ɜːɹ": "ER",
    "ɚɹ": "ER",
    "ɝɹ": "ER",
    "ɑːɹ": "AA R",
    "ɔːɹ": "AO R",
    "oːɹ": "AO R",
    "ɛɹ": "EH R",
    "ɪɹ": "IH R",
    "ʊɹ": "UH R",
    "iə": "IY AH",
    "tʃ": "CH",
    "dʒ": "JH",
    "aɪ": "AY",
    "aʊ": "AW",
    "eɪ": "EY",
    "oʊ": "OW",
    "ɔɪ": "OY",
    "ɜː": "ER",
    "ɑː": "AA",
    "ɔː": "AO",
    "iː": "IY",
    "uː": "UW",
    "n̩": "AH N",
    "l̩": "AH L",
    "m̩": "AH M",
    "ɝ": "ER",
    "ɚ": "ER",
    "ɜ": "ER",
    "ə": "AH",
    "ʌ": "AH",
    "ɐ": "AH",
    "æ": "AE",
    "ɑ": "AA",
    "ɒ": "AA",
    "ɔ": "AO",
    "ɛ": "EH",
    "e": "EH",
    "ɪ": "IH",
    "ᵻ": "IH",
    "i": "IY",
    "ʊ": "UH",
    "u": "UW",
    "a": "AA",
    "o": "OW",
    "p": "P",
    "b": "B",
    "t": "T",
    "d": "D",
    "k": "K",
    "ɡ": "G",
    "g": "G",
    "f": "F",
    "v": "V",
    "θ": "TH",
    "ð": "DH",
    "s": "S",
    "z": "Z",
    "ʃ": "SH",
    "ʒ": "ZH",
    "h": "HH",
    "x": "HH",
    "m": "M",
    "n": "N",
    "ŋ": "NG",
    "l": "L",
    "ɫ": "L",
    "ɹ": "R",
    "r": "R",
    "w": "W",
    "j": "Y",
    "ɾ": "T",
    "ʔ": "",
}
_IPA_STRIP = "ˈˌː\u0303\u0361\u200d\u0329-‿ "
_MAX_KEY = max(len(k) for k in _IPA_TO_CMU)


def ipa_to_cmu(ipa: str) -> str | None:
    """Map an espeak-ng IPA string to space-separated CMU phones; None if a symbol is unknown."""
    s = ipa.strip()
    # keep the syllabic mark only where it forms a key ("n̩"), drop the other marks
    for ch in "ˈˌ\u0361\u200d-‿ ":
        s = s.replace(ch, "")
    phones: list[str] = []
    i = 0
    while i < len(s):
        for n in range(min(_MAX_KEY, len(s) - i), 0, -1):
            key = s[i : i + n]
            if key in _IPA_TO_CMU:
                if _IPA_TO_CMU[key]:
                    phones.append(_IPA_TO_CMU[key])
                i += n
                break
        else:
            if s[i] in _IPA_STRIP:
                i += 1
                continue
            return None
    return " ".join(phones) or None


def espeak_pronunciations(words: list[str], voice: str = "en-us") -> dict[str, str]:
    """CMU-phone pronunciations of `words` from espeak-ng (words it cannot map are left out)."""
    if not words:
        return {}
    exe = shutil.which("espeak-ng")
    if exe is None:
        return {}
    proc = subprocess.run(
        [exe, "-q", "--ipa", "-v", voice],
        input="\n".join(words) + "\n",
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if proc.returncode != 0 or len(lines) != len(words):  # fall back to one call per word
        lines = []
        for w in words:
            p = subprocess.run(
                [exe, "-q", "--ipa", "-v", voice, w], capture_output=True, text=True, check=False
            )
            lines.append(p.stdout.strip())
    out = {}
    for w, ipa in zip(words, lines, strict=False):
        phones = ipa_to_cmu(ipa)
        if phones:
            out[w] = phones
    return out


def read_cmudict(path: str | os.PathLike) -> dict[str, list[str]]:
    """CMUdict file -> {word: [phones, alternate phones, ...]} (word in lower case)."""
    out: dict[str, list[str]] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.split(None, 1)
            if len(parts) != 2:
                continue
            word = parts[0].split("(", 1)[0].lower()
            out.setdefault(word, []).append(parts[1].split("#", 1)[0].strip())
    return out


# ------------------------------------------------------------------------------------------
# Domain LM
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DomainLM:
    """A built (or cached) domain LM + matching dictionary."""

    lm_path: Path
    dict_path: Path
    key: str
    num_sentences: int
    vocab_size: int
    espeak_words: tuple[str, ...]  # pronunciations taken from espeak-ng (not in CMUdict)
    missing_words: tuple[str, ...]  # no pronunciation at all: these can never be recognised


def _normalize_sentences(sentences: list[str]) -> list[str]:
    out = [normalize_for_wer(s) for s in sentences]
    return [s for s in out if s]


def build_domain_lm(
    train_sentences: list[str],
    cache_dir: str | os.PathLike | None = None,
    extra_words: list[str] | None = None,
    order: int = 3,
) -> DomainLM:
    """Build (or load from cache) an n-gram LM + dictionary from TRAINING sentences only.

    Interpolated Kneser-Ney of `order` (3 measured best: a 4-gram of the same 600k sentences
    scored 13.1% vs 11.4% WER). `extra_words` (e.g. the generator's word list) are added as
    unigrams with count 1. Pass extra in-domain text (never test/dev sentences) as part of
    `train_sentences`. The cache key hashes the sentences as given, so a cache hit costs no
    normalisation.
    """
    ps = import_pocketsphinx()
    if order < 1:
        raise ConfigError(f"build_domain_lm: order={order}, expected >= 1")
    train_sentences = list(train_sentences)

    h = hashlib.sha256()
    h.update(f"{_LM_VERSION}|order={order}\n".encode())
    h.update(Path(metrics.__file__).read_bytes())
    for s in train_sentences:
        h.update(s.encode())
        h.update(b"\n")
    h.update(("\n#extra\n" + " ".join(sorted(extra_words or []))).encode())
    key = h.hexdigest()[:20]
    folder = Path(cache_dir or default_cache_dir()) / f"domain-{key}"
    info_path = folder / "info.json"
    if info_path.exists():
        info = json.loads(info_path.read_text())
        return DomainLM(
            folder / "domain.arpa",
            folder / "domain.dict",
            key,
            info["num_sentences"],
            info["vocab_size"],
            tuple(info["espeak_words"]),
            tuple(info["missing_words"]),
        )

    sents = _normalize_sentences(train_sentences)
    if not sents:
        raise ConfigError("train_sentences: no non-empty sentence, expected training text")
    extra = sorted({w for s in _normalize_sentences(list(extra_words or [])) for w in s.split()})
    vocab = sorted({w for s in sents for w in s.split()} | set(extra))
    cmu = read_cmudict(ps.get_model_path("en-us/cmudict-en-us.dict"))
    oov = [w for w in vocab if w not in cmu]
    espeak = espeak_pronunciations(oov)
    missing = [w for w in oov if w not in espeak]
    known = [w for w in vocab if w not in missing]

    lm = KneserNeyLM(sents, order, extra_words=[w for w in extra if w not in missing])
    if missing:  # an LM word without pronunciation would make pocketsphinx warn/skip it
        lm.drop_words(set(missing))

    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder.parent))
    with open(tmp / "domain.arpa", "w", encoding="utf-8") as f:
        lm.write_arpa(f)
    with open(tmp / "domain.dict", "w", encoding="utf-8") as f:
        for w in known:
            prons = cmu.get(w) or [espeak[w]]
            for i, p in enumerate(prons):
                f.write(f"{w} {p}\n" if i == 0 else f"{w}({i + 1}) {p}\n")
    info = {
        "num_sentences": len(sents),
        "vocab_size": len(known),
        "espeak_words": sorted(espeak),
        "missing_words": missing,
        "key": key,
        "version": _LM_VERSION,
        "order": order,
        "ngrams": [lm.num_ngrams(n) for n in range(1, order + 1)],
        "discounts": lm.discounts[1:],
    }
    (tmp / "info.json").write_text(json.dumps(info, indent=1))
    try:
        os.replace(tmp, folder)  # atomic publish; a concurrent builder may have won the race
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return DomainLM(
        folder / "domain.arpa",
        folder / "domain.dict",
        key,
        len(sents),
        len(known),
        tuple(sorted(espeak)),
        tuple(missing),
    )


GENERATED_LM_SEED = 1_000_003  # differs from any corpus seed: a fresh sample of the grammar


def held_in_generated_sentences(
    corpus_dir: str | os.PathLike, n: int, cache_dir: str | os.PathLike | None = None
) -> list[str]:
    """`n` generator sentences (normalised) minus every dev/test sentence of the corpus.

    Cached as `<cache_dir>/generated-<key>.txt`, the key hashing `n`, the seed, the dev/test
    texts and the source of the generator and normaliser (600k sentences take ~2.5 min to
    generate, ~1 s to read back).
    """
    held_out = set()
    for split in ("dev", "test"):
        path = Path(corpus_dir) / f"{split}.jsonl"
        if path.exists():
            held_out |= {u.normalized_text for u in read_manifest(path, check_files=False)}
    h = hashlib.sha256(f"{_LM_VERSION}|{n}|{GENERATED_LM_SEED}\n".encode())
    for mod in (words_mod, text_mod):
        h.update(Path(mod.__file__).read_bytes())
    h.update("\n".join(sorted(held_out)).encode())
    path = Path(cache_dir or default_cache_dir()) / f"generated-{h.hexdigest()[:20]}.txt"
    if path.exists():
        return path.read_text(encoding="utf-8").splitlines()
    gen = words_mod.generate_sentences(n, seed=GENERATED_LM_SEED, normalized=True)
    out = [s for s in gen if s not in held_out]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text("\n".join(out), encoding="utf-8")
    os.replace(tmp, path)
    return out


def _train_sentences(corpus_dir: str | os.PathLike) -> list[str]:
    utts = read_manifest(Path(corpus_dir) / "train.jsonl", check_files=False)
    return [u.normalized_text or u.text for u in utts]


def corpus_adapted_hmm(
    corpus_dir: str | os.PathLike,
    cache_dir: str | os.PathLike | None = None,
    dither: float = 40.0,
    seed: int = 0,
    pad_s: float = 0.25,
    max_utterances: int = 3000,
    num_workers: int = 1,
    progress: bool = True,
) -> Path:
    """The en-us acoustic model MAP-adapted to `<corpus_dir>/train.jsonl` audio (cached).

    The dictionary is the domain dictionary of the training text (CMUdict + espeak-ng for
    the rest). Audio is prepared with the same `dither`/`seed`/`pad_s` as recognition.
    Raises MissingDependencyError without SphinxTrain (see `jaxtts.eval.am_adapt`).
    """
    lexicon = build_domain_lm(_train_sentences(corpus_dir), cache_dir)
    return adapt_to_corpus(
        corpus_dir,
        lexicon.dict_path,
        dither,
        seed,
        pad_s,
        cache_dir,
        max_utterances,
        num_workers,
        progress,
    ).path


# ------------------------------------------------------------------------------------------
# Recogniser
# ------------------------------------------------------------------------------------------


def _make_decoder(decoder_kwargs: dict):
    ps = import_pocketsphinx()
    return ps.Decoder(**decoder_kwargs)


def _decode(decoder, pcm: np.ndarray) -> str:
    decoder.start_utt()
    decoder.process_raw(pcm.tobytes(), False, True)
    decoder.end_utt()
    hyp = decoder.hyp()
    words = hyp.hypstr.split() if hyp is not None else []
    # drop fillers / noise words like <sil>, [NOISE], ++GARBAGE++
    return " ".join(w for w in words if not w.startswith(("<", "[", "+")))


_WORKER_DECODER = None


def _worker_init(decoder_kwargs: dict) -> None:
    global _WORKER_DECODER
    _WORKER_DECODER = _make_decoder(decoder_kwargs)


def _worker_decode(pcm: np.ndarray) -> str:
    return _decode(_WORKER_DECODER, pcm)


class PocketSphinxASR:
    """PocketSphinx recogniser: `transcribe(wavs, sample_rate) -> list[str]` (lower case).

    Args:
      lm: "domain" (needs `train_sentences`), "default" (bundled en-us LM) or a path to an
        ARPA / .lm.bin file (then `dict_path` may name its dictionary).
      train_sentences: training-split texts for the domain LM (never test texts).
      dither: std of the Gaussian dither in int16 LSB (0 disables; 40 measured best).
      num_workers: >1 decodes in that many spawned processes (pocketsphinx holds the GIL).
      extra_words: words added to the domain LM as unigrams (e.g. the generator vocabulary).
      lw: language-model weight (pocketsphinx default 6.5).
      hmm: acoustic-model folder (default: the bundled en-us model), e.g. the MAP-adapted
        model of `jaxtts.eval.am_adapt.adapt_to_corpus`.
    Raises MissingDependencyError when pocketsphinx is not installed.
    """

    def __init__(
        self,
        lm: str = "domain",
        train_sentences: list[str] | None = None,
        dither: float = 40.0,
        seed: int = 0,
        pad_s: float = 0.25,
        cache_dir: str | os.PathLike | None = None,
        num_workers: int = 1,
        progress: bool = True,
        extra_words: list[str] | None = None,
        dict_path: str | os.PathLike | None = None,
        lw: float | None = None,
        hmm: str | os.PathLike | None = None,
    ):
        ps = import_pocketsphinx()
        self.dither, self.seed, self.pad_s = float(dither), int(seed), float(pad_s)
        self.num_workers, self.progress = max(1, int(num_workers)), progress
        self.domain: DomainLM | None = None
        kwargs: dict = {"loglevel": "FATAL", "samprate": ASR_SAMPLE_RATE}
        if lm == "domain":
            if not train_sentences:
                raise ConfigError("PocketSphinxASR: lm='domain' needs train_sentences")
            self.domain = build_domain_lm(train_sentences, cache_dir, extra_words)
            kwargs.update(lm=str(self.domain.lm_path), dict=str(self.domain.dict_path))
        elif lm == "default":
            kwargs.update(
                lm=ps.get_model_path("en-us/en-us.lm.bin"),
                dict=ps.get_model_path("en-us/cmudict-en-us.dict"),
            )
        elif os.path.exists(lm):
            kwargs.update(
                lm=str(lm), dict=str(dict_path or ps.get_model_path("en-us/cmudict-en-us.dict"))
            )
        else:
            raise ConfigError(
                f"PocketSphinxASR: lm={lm!r}, expected 'domain', 'default' or a "
                "path to an ARPA/.lm.bin file"
            )
        if lw is not None:
            kwargs["lw"] = float(lw)
        if hmm is not None and not (Path(hmm) / "mdef").is_file():
            raise ConfigError(
                f"PocketSphinxASR: hmm={hmm}: no mdef file there, expected an acoustic-model folder"
            )
        kwargs["hmm"] = str(hmm) if hmm is not None else ps.get_model_path("en-us/en-us")
        self.adapted = hmm is not None
        self.hmm_path = Path(kwargs["hmm"])
        self.lm_name = lm if lm in ("domain", "default") else Path(lm).name
        self._decoder_kwargs = kwargs
        self._decoder = _make_decoder(kwargs)

    @property
    def name(self) -> str:
        am = "+MAP" if self.adapted else ""
        if self.domain is not None:
            return f"pocketsphinx{am}-domain({self.domain.num_sentences} sentences)"
        return f"pocketsphinx{am}-{self.lm_name}"

    @property
    def missing_words(self) -> tuple[str, ...]:
        return self.domain.missing_words if self.domain else ()

    @classmethod
    def from_corpus(
        cls,
        corpus_dir: str | os.PathLike,
        lm: str = "domain",
        generated_sentences: int = 0,
        adapt: bool = False,
        adapt_max_utterances: int = 3000,
        **kw,
    ):
        """Domain LM from `<corpus_dir>/train.jsonl` (normalized_text, else text).

        `generated_sentences` > 0 (built-in corpus only) adds that many sentences from the
        corpus generator (`jaxtts.data.words.generate_sentences`, seed GENERATED_LM_SEED, not
        the corpus seed) after removing every dev/test sentence: a lower domain-LM floor
        without test leakage (benchmarks/RESULTS.md section 3).
        `adapt=True` MAP-adapts the acoustic model to the training audio first
        (`jaxtts.eval.am_adapt`; cached), using the domain dictionary of the training text.
        """
        if lm == "domain" and "train_sentences" not in kw:
            sents = _train_sentences(corpus_dir)
            if generated_sentences > 0:
                sents += held_in_generated_sentences(
                    corpus_dir, generated_sentences, kw.get("cache_dir")
                )
            kw["train_sentences"] = sents
        if adapt and kw.get("hmm") is None:
            kw["hmm"] = corpus_adapted_hmm(
                corpus_dir,
                cache_dir=kw.get("cache_dir"),
                dither=kw.get("dither", 40.0),
                seed=kw.get("seed", 0),
                pad_s=kw.get("pad_s", 0.25),
                max_utterances=adapt_max_utterances,
                num_workers=kw.get("num_workers", 1),
                progress=kw.get("progress", True),
            )
        return cls(lm=lm, **kw)

    def transcribe(self, wavs: list[np.ndarray], sample_rate: int) -> list[str]:
        """Transcribe float audio clips (any rate; resampled to 16 kHz). -> lower-case text.

        Raises AudioError (naming the clip index) for multi-channel or non-finite audio.
        Empty or silent clips give "" (which scores WER 1.0).
        """
        pcms = [
            prepare_pcm(w, sample_rate, self.dither, self.seed, self.pad_s, f"wavs[{i}]")
            for i, w in enumerate(wavs)
        ]
        bar = tqdm(total=len(pcms), desc=self.name, disable=not self.progress, leave=False)
        try:
            if self.num_workers > 1 and len(pcms) > self.num_workers:
                with ProcessPoolExecutor(
                    self.num_workers,
                    mp_context=mp.get_context("spawn"),
                    initializer=_worker_init,
                    initargs=(self._decoder_kwargs,),
                ) as ex:
                    out = []
                    for text in ex.map(_worker_decode, pcms, chunksize=4):
                        out.append(text)
                        bar.update(1)
                return out
            out = []
            for pcm in pcms:
                out.append(_decode(self._decoder, pcm))
                bar.update(1)
            return out
        finally:
            bar.close()
