"""Text front-end: normalisation, phonemisation (espeak-ng IPA), symbol table, `TextFrontend`.

Normalisation (`normalize_text`) is the ONE text normalisation of the project: the corpus stores
`normalized_text = normalize_text(text)`, the phonemizer normalises before phonemising, and the
WER evaluator must apply `normalize_text` to both the reference and the ASR hypothesis. It
lower-cases, expands abbreviations (Mr./Dr./...), currency, percentages, times, ordinals, years,
decimals and integers to words (American style, no "and": 123 -> "one hundred twenty three"),
turns all punctuation except word-internal apostrophes into spaces and collapses whitespace.
It is idempotent: `normalize_text(normalize_text(s)) == normalize_text(s)`.

`expand_text` does the same expansions but keeps case and punctuation: it is what the corpus
builder feeds to espeak-ng, so the audio says exactly the words of `normalized_text` while
commas and question marks still shape the prosody.

Phoneme segmentation (`phonemize`, backend 'espeak'): espeak-ng is asked for IPA with its own
phoneme boundaries (`--ipa --sep=_`), so a symbol is one espeak-ng phoneme: affricates and
diphthongs stay whole (`tʃ`, `dʒ`, `aɪ`, `oʊ`), the length mark stays with its vowel (`ɑː`, `iː`),
diacritics stay with their base (`n̩`), r-coloured vowels are one symbol (`ɚ`, `ɜː`). The
stress marks `ˈ` and `ˌ` are split off as symbols of their own placed before the stressed
vowel (a smaller, denser vocabulary than stressed-vowel symbols). Words are separated by the
symbol `' '`; note that espeak-ng joins some unstressed function words to the next word
("on the" -> `ɔnðə`), which we keep. Backend 'char' uses the characters of the normalised text
(letters, apostrophe and `' '`).

Unknown symbols at inference (`SymbolTable.encode`, `TextFrontend.encode`): by default mapped to
UNK (id 1) with a warning naming them; `unknown='drop'` drops them silently, `unknown='error'`
raises `TextError`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import unicodedata
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from jaxtts.errors import DataError, MissingDependencyError, TextError

__all__ = [
    "ESPEAK_INSTALL_HINT",
    "PAD",
    "UNK",
    "SymbolTable",
    "TextFrontend",
    "espeak_available",
    "expand_text",
    "normalize_text",
    "number_to_words",
    "ordinal_to_words",
    "phonemize",
    "require_espeak",
    "speech_warnings",
    "unspeakable",
    "year_to_words",
]

ESPEAK_INSTALL_HINT = "install it with `sudo apt-get install espeak-ng` or `make setup`"
PAD = "<pad>"
UNK = "<unk>"
WORD_BOUNDARY = " "
STRESS_MARKS = ("ˈ", "ˌ")

# ----------------------------------------------------------------------------- numbers -> words

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (10**3, "thousand"))
_ORDINAL_IRREGULAR = {
    "one": "first",
    "two": "second",
    "three": "third",
    "five": "fifth",
    "eight": "eighth",
    "nine": "ninth",
    "twelve": "twelfth",
}


def number_to_words(n: int) -> str:
    """Cardinal in American English without "and": 2021 -> 'two thousand twenty one'.

    Negative numbers get "minus"; numbers >= 10**15 are read digit by digit.
    """
    if n < 0:
        return "minus " + number_to_words(-n)
    if n >= 10**15:
        return " ".join(_ONES[int(d)] for d in str(n))
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + (" " + _ONES[ones] if ones else "")
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return _ONES[hundreds] + " hundred" + (" " + number_to_words(rest) if rest else "")
    for scale, name in _SCALES:
        if n >= scale:
            high, rest = divmod(n, scale)
            tail = " " + number_to_words(rest) if rest else ""
            return number_to_words(high) + " " + name + tail
    raise AssertionError(n)  # unreachable


def ordinal_to_words(n: int) -> str:
    """Ordinal: 5 -> 'fifth', 22 -> 'twenty second', 100 -> 'one hundredth'."""
    words = number_to_words(n).split()
    last = words[-1]
    if last in _ORDINAL_IRREGULAR:
        words[-1] = _ORDINAL_IRREGULAR[last]
    elif last.endswith("y"):
        words[-1] = last[:-1] + "ieth"
    else:
        words[-1] = last + "th"
    return " ".join(words)


def year_to_words(n: int) -> str:
    """Year reading: 1984 -> 'nineteen eighty four', 1905 -> 'nineteen oh five',
    1900 -> 'nineteen hundred', 2000..2009 -> 'two thousand (n)', 2021 -> 'twenty twenty one'."""
    if 2000 <= n < 2010 or not 1000 <= n < 10000:
        return number_to_words(n)
    high, low = divmod(n, 100)
    if low == 0:
        return number_to_words(high) + " hundred"
    if low < 10:
        return number_to_words(high) + " oh " + _ONES[low]
    return number_to_words(high) + " " + number_to_words(low)


def _plural_words(words: str) -> str:
    """'nineteen ninety' -> 'nineteen nineties' (decades: 1990s, 90s)."""
    head, _, last = words.rpartition(" ")
    last = last[:-1] + "ies" if last.endswith("y") else last + "s"
    return (head + " " + last).strip()


def _digits_to_words(digits: str) -> str:
    return " ".join(_ONES[int(d)] for d in digits)


def _int_words(digits: str) -> str:
    """Integer string (no commas) -> words; leading zeros ('007') are read digit by digit."""
    if len(digits) > 1 and digits.startswith("0"):
        return _digits_to_words(digits)
    return number_to_words(int(digits))


# ----------------------------------------------------------------------------- normalisation

_CURRENCY = {
    "$": ("dollar", "dollars", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
    "€": ("euro", "euros", "cent", "cents"),
}
_ABBREV_OPTIONAL_DOT = {"mr": "mister", "mrs": "missus", "dr": "doctor"}
_ABBREV_DOT = {
    "ms": "miss",
    "prof": "professor",
    "st": "saint",
    "jr": "junior",
    "sr": "senior",
    "vs": "versus",
    "mt": "mount",
    "etc": "et cetera",
    "approx": "approximately",
}
_SYMBOL_WORDS = {"&": " and ", "+": " plus ", "@": " at ", "=": " equals "}

_RE_EG = re.compile(r"\b(e\.g|i\.e)\.", re.IGNORECASE)
_RE_ABBREV_OPT = re.compile(r"\b(" + "|".join(_ABBREV_OPTIONAL_DOT) + r")\b\.?", re.IGNORECASE)
_RE_ABBREV_DOT = re.compile(r"\b(" + "|".join(_ABBREV_DOT) + r")\.", re.IGNORECASE)
_RE_NUMBER_ABBREV = re.compile(r"\bno\.\s*(?=\d)", re.IGNORECASE)
_RE_THOUSANDS = re.compile(r"\b\d{1,3}(?:,\d{3})+\b")
_RE_CURRENCY = re.compile(
    r"([$£€])\s?(\d+)(?:\.(\d+))?(?:\s?(thousand|million|billion|trillion)\b)?", re.IGNORECASE
)
_RE_PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s?%")
_RE_TIME = re.compile(r"\b(\d{1,2}):(\d{2})\b")
_RE_ORDINAL = re.compile(r"\b(\d+)(st|nd|rd|th)\b", re.IGNORECASE)
_RE_DECADE = re.compile(r"'?\b(\d{2}|\d{4})'?s\b")
_RE_DECIMAL = re.compile(r"(\d*)\.(\d+)")
_RE_NEGATIVE = re.compile(r"(?<![\w.])-(?=\d)")
_RE_INT = re.compile(r"\d+")
_RE_APOSTROPHES = re.compile(r"[\u2018\u2019\u02bc`´]")
_RE_NON_WORD = re.compile(r"[^\w\s']|_")
_RE_LOOSE_APOSTROPHE = re.compile(r"(?<!\w)'+|'+(?!\w)")
_RE_SPACES = re.compile(r"\s+")


def _currency(m: re.Match) -> str:
    one, many, sub_one, sub_many = _CURRENCY[m.group(1)]
    whole, frac, scale = int(m.group(2)), m.group(3), m.group(4)
    if scale:  # "$3.5 million" -> "three point five million dollars"
        amount = _int_words(m.group(2)) + (" point " + _digits_to_words(frac) if frac else "")
        return f" {amount} {scale.lower()} {many} "
    cents = int((frac + "0")[:2]) if frac else 0
    parts = []
    if whole or not cents:
        parts.append(f"{number_to_words(whole)} {one if whole == 1 else many}")
    if cents:
        parts.append(f"{number_to_words(cents)} {sub_one if cents == 1 else sub_many}")
    return " " + " ".join(parts) + " "


def _time(m: re.Match) -> str:
    hours, minutes = int(m.group(1)), int(m.group(2))
    if minutes == 0:
        return f" {number_to_words(hours)} o'clock "
    if minutes < 10:
        return f" {number_to_words(hours)} oh {_ONES[minutes]} "
    return f" {number_to_words(hours)} {number_to_words(minutes)} "


def _decimal(m: re.Match) -> str:
    whole = _int_words(m.group(1)) + " " if m.group(1) else ""
    return f" {whole}point {_digits_to_words(m.group(2))} "


def _integer(m: re.Match) -> str:
    return f" {_integer_words(m.group(0))} "


def _integer_words(digits: str) -> str:
    """Integers; 4-digit numbers in [1100, 2099] are read as years."""
    if len(digits) == 4 and not digits.startswith("0") and 1100 <= int(digits) < 2100:
        return year_to_words(int(digits))
    return _int_words(digits)


def _same_case(abbrev: str, table: dict[str, str]) -> str:
    word = table[abbrev.lower()]
    return word.capitalize() if abbrev[:1].isupper() else word


def expand_text(text: str) -> str:
    """Expand abbreviations, symbols and numbers to words; keeps case and punctuation.

    'Dr. Smith paid $3.50 on May 5th, 2021!' -> 'Doctor Smith paid three dollars fifty cents on
    May fifth, twenty twenty one!' (modulo whitespace). Feed this to a synthesiser.
    """
    s = unicodedata.normalize("NFKC", text)
    s = _RE_APOSTROPHES.sub("'", s)
    s = _RE_EG.sub(lambda m: " for example, " if m.group(1).lower() == "e.g" else " that is, ", s)
    s = _RE_ABBREV_OPT.sub(lambda m: _same_case(m.group(1), _ABBREV_OPTIONAL_DOT), s)
    s = _RE_ABBREV_DOT.sub(lambda m: _same_case(m.group(1), _ABBREV_DOT), s)
    s = _RE_NUMBER_ABBREV.sub("number ", s)
    s = _RE_THOUSANDS.sub(lambda m: m.group(0).replace(",", ""), s)
    s = _RE_CURRENCY.sub(_currency, s)
    s = _RE_PERCENT.sub(lambda m: f" {m.group(1)} percent ", s)
    s = _RE_TIME.sub(_time, s)
    s = _RE_ORDINAL.sub(lambda m: f" {ordinal_to_words(int(m.group(1)))} ", s)
    s = _RE_DECADE.sub(lambda m: f" {_plural_words(_integer_words(m.group(1)))} ", s)
    s = _RE_DECIMAL.sub(_decimal, s)
    s = _RE_NEGATIVE.sub(" minus ", s)
    s = _RE_INT.sub(_integer, s)
    for symbol, word in _SYMBOL_WORDS.items():
        s = s.replace(symbol, word)
    s = _RE_SPACES.sub(" ", s).strip()
    return re.sub(r"\s+([,.!?;:])", r"\1", s)


def normalize_text(text: str) -> str:
    """The project's text normalisation (corpus, phonemizer and WER all use it).

    Lower-case words separated by single spaces; no digits, no punctuation except apostrophes
    inside words. 'Dr. Smith paid $3.50 on May 5th, 2021!' ->
    'doctor smith paid three dollars fifty cents on may fifth twenty twenty one'. Idempotent.
    """
    s = expand_text(text).lower()
    s = _RE_NON_WORD.sub(" ", s)
    s = _RE_LOOSE_APOSTROPHE.sub(" ", s)
    # Stripping punctuation can expose a bare 'dr'/'mr'/'mrs' ("dr_x"): expand it here too.
    s = _RE_ABBREV_OPT.sub(lambda m: _ABBREV_OPTIONAL_DOT[m.group(1)], s)
    return _RE_SPACES.sub(" ", s).strip()


# ----------------------------------------------------------------------------- phonemizer

_MAX_WORDS_PER_LINE = 40  # espeak-ng splits longer clauses over several output lines
_RE_LANG_SWITCH = re.compile(r"\([a-z-]+\)")
_DROP_CHARS = str.maketrans("", "", "\u200d\u200c\u0361\u035c")  # ZWJ, ZWNJ, tie bars


def espeak_available() -> bool:
    """True when the `espeak-ng` executable is on PATH."""
    return shutil.which("espeak-ng") is not None


def require_espeak() -> str:
    """Path of espeak-ng, or MissingDependencyError with a one-line install hint."""
    path = shutil.which("espeak-ng")
    if path is None:
        raise MissingDependencyError(
            f"espeak-ng: executable not found on PATH; {ESPEAK_INSTALL_HINT}"
        )
    return path


def _segment_ipa(line: str) -> list[str]:
    """'h_ə_l_ˈoʊ w_ˈɜː_l_d' -> ['h','ə','l','ˈ','oʊ',' ','w','ˈ','ɜː','l','d']."""
    symbols: list[str] = []
    line = _RE_LANG_SWITCH.sub("", line).translate(_DROP_CHARS)
    for word in line.split():
        word_symbols: list[str] = []
        for phone in word.split("_"):
            rest = phone
            while rest and rest[0] in STRESS_MARKS:
                word_symbols.append(rest[0])
                rest = rest[1:]
            stress = [c for c in rest if c in STRESS_MARKS]  # (never seen) stress mid-phone
            rest = "".join(c for c in rest if c not in STRESS_MARKS)
            word_symbols.extend(stress)
            if rest:
                word_symbols.append(rest)
        if word_symbols:
            if symbols:
                symbols.append(WORD_BOUNDARY)
            symbols.extend(word_symbols)
    return symbols


def _espeak_lines(lines: list[str], voice: str) -> list[str]:
    """One espeak-ng process for many lines; returns one IPA line per input line."""
    exe = require_espeak()
    cmd = [exe, "-q", "--ipa", "--sep=_", "-l", "1000000", "-v", voice, "--stdin"]
    proc = subprocess.run(
        cmd, input="\n".join(lines) + "\n", capture_output=True, text=True, encoding="utf-8"
    )
    if proc.returncode != 0:
        err = (proc.stderr.strip().splitlines() or ["no message"])[0]
        raise MissingDependencyError(f"espeak-ng -v {voice}: exited with {proc.returncode} ({err})")
    out = proc.stdout.rstrip("\n").split("\n") if proc.stdout.strip() else []
    if len(out) == len(lines):
        return out
    if len(lines) == 1:  # one input split over several clauses: join them
        return [" ".join(out)]
    # Alignment lost (should not happen with <= 40 words per line): fall back to one call each.
    return [_espeak_lines([line], voice)[0] for line in lines]


def phonemize(
    texts: str | Sequence[str],
    voice: str = "en-us",
    backend: str = "espeak",
    strict: bool = False,
    workers: int | None = None,
) -> list[list[str]]:
    """Texts -> symbol sequences (one list of symbols per text; see the module docstring).

    Texts are normalised first (`normalize_text`), so raw and normalised text give the same
    result. backend 'espeak': batched espeak-ng IPA (one process per chunk of lines, chunks run
    in `workers` threads); if espeak-ng is missing it warns and falls back to 'char' unless
    `strict`, which raises MissingDependencyError. backend 'char': characters of the normalised
    text. Texts that normalise to nothing give [].
    """
    if isinstance(texts, str):
        texts = [texts]
    if backend not in ("espeak", "char"):
        raise TextError(f"phonemize backend={backend!r}: expected 'espeak' or 'char'")
    norm = [normalize_text(t) for t in texts]
    if backend == "espeak" and not espeak_available():
        if strict:
            require_espeak()
        warnings.warn(
            f"espeak-ng not found ({ESPEAK_INSTALL_HINT}); falling back to character symbols",
            stacklevel=2,
        )
        backend = "char"
    if backend == "char":
        return [list(t) for t in norm]

    # Chunk every text into lines of <= _MAX_WORDS_PER_LINE words; remember the owner text.
    lines: list[str] = []
    owner: list[int] = []
    for i, t in enumerate(norm):
        words = t.split()
        for start in range(0, len(words), _MAX_WORDS_PER_LINE):
            lines.append(" ".join(words[start : start + _MAX_WORDS_PER_LINE]))
            owner.append(i)
    if not lines:
        return [[] for _ in norm]
    workers = max(1, min(workers or os.cpu_count() or 1, (len(lines) + 199) // 200))
    bounds = np.linspace(0, len(lines), workers + 1).astype(int)
    chunks = [lines[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    if workers == 1:
        ipa = _espeak_lines(chunks[0], voice)
    else:
        with ThreadPoolExecutor(workers) as pool:
            outs = pool.map(lambda c: _espeak_lines(c, voice), chunks)
            ipa = [line for out in outs for line in out]
    result: list[list[str]] = [[] for _ in norm]
    for i, line in zip(owner, ipa, strict=True):
        symbols = _segment_ipa(line)
        if result[i] and symbols:
            result[i].append(WORD_BOUNDARY)
        result[i].extend(symbols)
    return result


# ----------------------------------------------------------------------------- symbol table


class SymbolTable:
    """Symbol <-> id map. id 0 = PAD ('<pad>'), id 1 = UNK ('<unk>'), then sorted symbols."""

    def __init__(self, symbols: Sequence[str]):
        symbols = list(symbols)
        if symbols[:2] != [PAD, UNK]:
            raise DataError(
                f"SymbolTable: symbols must start with {PAD!r}, {UNK!r}, got {symbols[:2]}"
            )
        if len(set(symbols)) != len(symbols):
            dup = sorted(s for s, c in Counter(symbols).items() if c > 1)
            raise DataError(f"SymbolTable: duplicate symbols {dup}")
        self.symbols: list[str] = symbols
        self._ids = {s: i for i, s in enumerate(symbols)}

    pad_id = 0
    unk_id = 1

    @classmethod
    def build(cls, sequences: Iterable[Sequence[str]], min_count: int = 1) -> SymbolTable:
        """Table of every symbol seen at least `min_count` times, in sorted (stable) order."""
        counts = Counter(s for seq in sequences for s in seq)
        kept = sorted(s for s, c in counts.items() if c >= min_count and s not in (PAD, UNK))
        return cls([PAD, UNK, *kept])

    def __len__(self) -> int:
        return len(self.symbols)

    @property
    def vocab_size(self) -> int:
        return len(self.symbols)

    def __contains__(self, symbol: str) -> bool:
        return symbol in self._ids

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SymbolTable) and self.symbols == other.symbols

    def __repr__(self) -> str:
        return f"SymbolTable({len(self)} symbols)"

    def encode(self, symbols: Sequence[str], unknown: str = "unk") -> np.ndarray:
        """Symbols -> int32 [L]. Unknown symbols: 'unk' (id 1, warns), 'drop', or 'error'."""
        ids = [self._ids.get(s, -1) for s in symbols]
        if -1 in ids:
            missing = sorted({s for s, i in zip(symbols, ids, strict=True) if i < 0})
            if unknown == "error":
                raise TextError(f"SymbolTable.encode: unknown symbols {missing}")
            if unknown == "unk":
                warnings.warn(
                    f"SymbolTable.encode: unknown symbols {missing} mapped to {UNK}", stacklevel=2
                )
                ids = [self.unk_id if i < 0 else i for i in ids]
            elif unknown == "drop":
                ids = [i for i in ids if i >= 0]
            else:
                raise TextError(f"SymbolTable.encode unknown={unknown!r}: expected unk|drop|error")
        return np.asarray(ids, dtype=np.int32)  # [L]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """int ids -> symbols; PAD ids are skipped, out-of-range ids raise TextError."""
        out = []
        for i in np.asarray(list(ids) if not isinstance(ids, np.ndarray) else ids).reshape(-1):
            i = int(i)
            if not 0 <= i < len(self.symbols):
                raise TextError(f"SymbolTable.decode: id {i} out of range [0, {len(self.symbols)})")
            if i != self.pad_id:
                out.append(self.symbols[i])
        return out

    def save(self, path: str | os.PathLike) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(
            json.dumps({"symbols": self.symbols}, ensure_ascii=False, indent=1) + "\n",
            encoding="utf-8",
        )
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> SymbolTable:
        path = Path(path)
        if not path.is_file():
            raise DataError(f"{path}: symbol table file not found")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            symbols = data["symbols"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise DataError(f"{path}: expected JSON {{'symbols': [...]}} ({e})") from None
        return cls(symbols)


# ----------------------------------------------------------------------------- front-end

_FRONTEND_FILE = "text_frontend.json"
_SYMBOLS_FILE = "symbols.json"


class TextFrontend:
    """normalize_text + phonemize + SymbolTable. `encode(text) -> int32 [L]`.

    `backend` is the phonemizer the table was built with ('espeak' or 'char'); an 'espeak'
    front-end raises MissingDependencyError at encode time when espeak-ng is absent (silently
    switching to characters would map everything to UNK).
    """

    def __init__(
        self,
        symbols: SymbolTable,
        backend: str = "espeak",
        voice: str = "en-us",
        unknown: str = "unk",
    ):
        if backend not in ("espeak", "char"):
            raise TextError(f"TextFrontend backend={backend!r}: expected 'espeak' or 'char'")
        self.symbols = symbols
        self.backend = backend
        self.voice = voice
        self.unknown = unknown

    @classmethod
    def build(
        cls,
        sequences: Iterable[Sequence[str]],
        backend: str = "espeak",
        voice: str = "en-us",
        min_count: int = 1,
    ) -> TextFrontend:
        """Front-end whose table holds every symbol of `sequences` (e.g. manifest phonemes)."""
        return cls(SymbolTable.build(sequences, min_count), backend=backend, voice=voice)

    @classmethod
    def from_utterances(cls, utts: Iterable, backend: str = "espeak") -> TextFrontend:
        """Build from `Utterance`s: their `phonemes` ('espeak') or normalised text ('char')."""
        if backend == "char":
            seqs = [list(normalize_text(u.text)) for u in utts]
        else:
            seqs = [u.phonemes for u in utts]
        return cls.build(seqs, backend=backend)

    @property
    def vocab_size(self) -> int:
        return self.symbols.vocab_size

    def phonemize(self, texts: str | Sequence[str]) -> list[list[str]]:
        return phonemize(texts, voice=self.voice, backend=self.backend, strict=True)

    def encode(self, text: str) -> np.ndarray:
        """text -> int32 [L]; TextError when nothing pronounceable remains."""
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Like `encode` for many texts with one batched phonemizer call."""
        out = []
        boundary = self.symbols._ids.get(WORD_BOUNDARY, -1)
        for text, symbols in zip(texts, self.phonemize(list(texts)), strict=True):
            ids = self.symbols.encode(symbols, unknown=self.unknown)  # [L]
            if not np.any(ids != boundary):
                raise TextError(f"{text!r}: no pronounceable symbols after normalisation")
            out.append(ids)
        return out

    def decode(self, ids: Iterable[int]) -> list[str]:
        return self.symbols.decode(ids)

    def save(self, directory: str | os.PathLike) -> None:
        """Writes `text_frontend.json` + `symbols.json` into `directory` (e.g. a checkpoint dir)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.symbols.save(directory / _SYMBOLS_FILE)
        cfg = {
            "backend": self.backend,
            "voice": self.voice,
            "unknown": self.unknown,
            "symbols": _SYMBOLS_FILE,
        }
        tmp = directory / (_FRONTEND_FILE + ".tmp")
        tmp.write_text(json.dumps(cfg, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, directory / _FRONTEND_FILE)

    @classmethod
    def load(cls, directory: str | os.PathLike) -> TextFrontend:
        path = Path(directory) / _FRONTEND_FILE
        if not path.is_file():
            raise DataError(f"{path}: text front-end config not found (saved by TextFrontend.save)")
        try:
            cfg = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: invalid JSON ({e})") from None
        table = SymbolTable.load(Path(directory) / cfg.get("symbols", _SYMBOLS_FILE))
        return cls(
            table,
            backend=cfg.get("backend", "espeak"),
            voice=cfg.get("voice", "en-us"),
            unknown=cfg.get("unknown", "unk"),
        )


# ----------------------------------------------------------------------------- input checks

_MARKUP = re.compile(r"</?[A-Za-z][^<>]*>")


def speech_warnings(text: str) -> list[str]:
    """What an English model will not say as written, one phrase each: letters of another
    script (espeak-ng's English voice spells them as letter names: 'Привет' -> 'P E R I V E
    T', '你好' -> 'Chinese letter' twice), markup tags (read out: '<b>' -> 'b'), and a line
    of bare digits (read as one number). Empty when the text is plain English."""
    out = []
    foreign = Counter(
        c for c in text if c.isalpha() and not unicodedata.name(c, "").startswith("LATIN")
    )
    if foreign:
        names = {unicodedata.name(c, "?").split()[0] for c in foreign}
        scripts = sorted(n.upper() if len(n) <= 3 else n.capitalize() for n in names)
        shown = "".join(list(foreign)[:8])
        out.append(
            f"{sum(foreign.values())} letters of another script ({'/'.join(scripts)}: "
            f"{shown!r}); espeak-ng's English voice reads them as letter names"
        )
    tags = _MARKUP.findall(text)
    if tags:
        out.append(f"markup {tags[:3]} is read out as text (e.g. '<b>' as 'b')")
    if re.fullmatch(r"[\d\s.,]*\d[\d\s.,]*", text.strip()):
        out.append(f"{text.strip()!r} is bare digits: read as one number")
    return out


def unspeakable(text: str) -> str | None:
    """None when `text` has something an English voice can say (a Latin letter or a digit
    outside markup tags); else one line naming what it holds instead: another script's letters,
    control characters, markup only. The server refuses such text with a 400; `infer.py` warns
    (`speech_warnings`)."""
    bare = _MARKUP.sub(" ", unicodedata.normalize("NFKC", text))
    if any(
        (c.isalpha() and unicodedata.name(c, "").startswith("LATIN")) or c.isdigit() for c in bare
    ):
        return None
    foreign = [c for c in bare if c.isalpha()]
    control = [c for c in text if unicodedata.category(c) in ("Cc", "Cf") and c not in "\n\t "]
    tags = _MARKUP.findall(text)
    parts = []
    if foreign:
        names = sorted({unicodedata.name(c, "?").split()[0] for c in foreign})
        parts.append(
            f"{len(foreign)} letters of another script ({'/'.join(names)}: "
            f"{''.join(foreign[:8])!r})"
        )
    if control:
        parts.append(f"control characters {[f'U+{ord(c):04X}' for c in control[:4]]}")
    if tags:
        parts.append(f"markup {tags[:3]}")
    what = "; ".join(parts) or f"only punctuation or symbols ({text.strip()[:20]!r})"
    return f"nothing an English voice can say: {what}; expected English words or digits"
