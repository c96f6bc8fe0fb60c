"""Text front-end and sentence generator: exact normalisations, phonemes, symbol tables."""

import os
import random
import warnings

import numpy as np
import pocketsphinx
import pytest

from jaxtts.data import text as text_mod
from jaxtts.data.text import (
    PAD,
    UNK,
    SymbolTable,
    TextFrontend,
    expand_text,
    normalize_text,
    number_to_words,
    ordinal_to_words,
    phonemize,
    year_to_words,
)
from jaxtts.data.words import MAX_WORDS, MIN_WORDS, VOCABULARY, generate_sentences
from jaxtts.errors import MissingDependencyError, TextError

needs_espeak = pytest.mark.skipif(not text_mod.espeak_available(), reason="espeak-ng missing")


def _cmudict_words() -> set[str]:
    base = pocketsphinx.get_model_path()
    for path in (
        os.path.join(base, "en-us", "cmudict-en-us.dict"),
        os.path.join(base, "model", "cmudict-en-us.dict"),
    ):
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                return {line.split()[0].split("(")[0] for line in f if line.strip()}
    raise AssertionError("pocketsphinx cmudict-en-us.dict not found")


# ----------------------------------------------------------------------------- generator


def test_vocabulary_size_and_all_in_cmudict():
    cmu = _cmudict_words()
    assert len(cmu) > 100_000
    assert len(VOCABULARY) >= 800
    assert sorted(VOCABULARY - cmu) == []


def test_generated_sentences_use_vocabulary_and_lengths():
    sents = generate_sentences(3000, seed=0)
    norm = [normalize_text(s) for s in sents]
    assert len(set(norm)) == 3000  # unique
    words = {w for n in norm for w in n.split()}
    assert sorted(words - VOCABULARY) == []
    assert len(words) >= 800  # the generator really uses the vocabulary
    lengths = np.array([len(n.split()) for n in norm])
    assert lengths.min() >= MIN_WORDS == 3 and lengths.max() <= MAX_WORDS == 20
    assert 6.0 < lengths.mean() < 11.0


def test_generator_determinism():
    a = generate_sentences(200, seed=7)
    assert a == generate_sentences(200, seed=7)
    b = generate_sentences(200, seed=8)
    assert len(set(a) & set(b)) < 10
    assert generate_sentences(50, seed=7) == a[:50]  # prefix-stable


def test_generator_syntax_variety():
    sents = generate_sentences(2000, seed=1)
    frac = lambda pred: sum(map(pred, sents)) / len(sents)
    assert 0.10 < frac(lambda s: s.endswith("?")) < 0.30  # questions
    assert 0.01 < frac(lambda s: s.endswith("!")) < 0.10  # exclamations, imperatives
    assert frac(lambda s: "," in s) > 0.10  # subordinate clauses / coordination
    assert frac(lambda s: any(c.isdigit() for c in s)) > 0.02  # numbers for the normaliser
    starts = {s.split()[0].lower().strip(",") for s in sents}
    for w in ("when", "why", "where", "please", "don't", "there", "if", "because", "did"):
        assert w in starts, w


# ----------------------------------------------------------------------------- normaliser


@pytest.mark.parametrize(
    "raw, expected",
    [
        (
            "Dr. Smith paid $3.50 on May 5th, 2021!",
            "doctor smith paid three dollars fifty cents on may fifth twenty twenty one",
        ),
        (
            "Mr Brown's 3 cats cost £1,250.",
            "mister brown's three cats cost one thousand two hundred fifty pounds",
        ),
        ("It's 7:05, not 10:00.", "it's seven oh five not ten o'clock"),
        (
            "In the 1990s, 50% of 1,000,000 people...",
            "in the nineteen nineties fifty percent of one million people",
        ),
        ("Pi is 3.14; -5 is negative.", "pi is three point one four minus five is negative"),
        ("rock 'n' roll, the students' x-ray", "rock n roll the students x ray"),
        ("The 21st and 103rd; No. 7", "the twenty first and one hundred third number seven"),
        (
            "$0.01 + $1 = $2.5 million",
            "one cent plus one dollar equals two point five million dollars",
        ),
        (
            "1905 1900 2000 2005 0042",
            "nineteen oh five nineteen hundred two thousand two thousand five zero zero four two",
        ),
        ("  HELLO,\tWorld!!  ", "hello world"),
        ("Don’t stop — e.g. now", "don't stop for example now"),
    ],
)
def test_normalize_exact(raw, expected):
    assert normalize_text(raw) == expected
    assert normalize_text(expected) == expected  # idempotent


def test_expand_keeps_case_and_punctuation():
    assert expand_text("Dr. Smith paid $3.50 on May 5th, 2021!") == (
        "Doctor Smith paid three dollars fifty cents on May fifth, twenty twenty one!"
    )


def test_numbers():
    assert number_to_words(0) == "zero"
    assert number_to_words(115) == "one hundred fifteen"
    assert number_to_words(2_000_021) == "two million twenty one"
    assert number_to_words(-40) == "minus forty"
    assert ordinal_to_words(1) == "first"
    assert ordinal_to_words(12) == "twelfth"
    assert ordinal_to_words(40) == "fortieth"
    assert ordinal_to_words(1000) == "one thousandth"
    assert year_to_words(1984) == "nineteen eighty four"
    assert year_to_words(2008) == "two thousand eight"
    assert year_to_words(2019) == "twenty nineteen"


def test_normalize_idempotent_fuzz():
    rng = random.Random(0)
    alphabet = "abcXYZ019 $£%:.,'’-!?&@_\t\né" + "Dr. Mr Mrs. St. 3rd 1990s "
    for _ in range(2000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        once = normalize_text(s)
        assert normalize_text(once) == once, (s, once)
        assert not any(c.isdigit() for c in once)
        assert "  " not in once and once == once.strip()


def test_normalized_corpus_sentences_have_no_punctuation():
    for s in generate_sentences(500, seed=3):
        n = normalize_text(s)
        assert all(c.isalpha() or c in " '" for c in n), n


# ----------------------------------------------------------------------------- phonemizer

HELLO_WORLD = ["h", "ə", "l", "ˈ", "oʊ", " ", "w", "ˈ", "ɜː", "l", "d"]


@needs_espeak
def test_phonemize_known_words():
    out = phonemize(["Hello, world!", "", "!!!", "church judge"])
    assert out[0] == HELLO_WORLD
    assert out[1] == [] and out[2] == []
    assert out[3] == ["tʃ", "ˈ", "ɜː", "tʃ", " ", "dʒ", "ˈ", "ʌ", "dʒ"]  # affricates kept whole
    assert phonemize("buy a kite")[0][:3] == ["b", "ˈ", "aɪ"]  # diphthong kept whole


@needs_espeak
def test_phonemize_batch_equals_single_and_long_text():
    sents = generate_sentences(25, seed=5)
    batched = phonemize(sents)
    singles = [phonemize(s)[0] for s in sents]
    assert batched == singles
    assert all(len(p) > 5 for p in batched)
    long_text = " ".join(["the quick brown fox jumps over the lazy dog"] * 12)  # 108 words
    (ph,) = phonemize(long_text)
    assert ph.count(" ") >= 80  # nothing lost at the 40-word chunk boundaries
    assert ph[-4:] == ["d", "ˈ", "ɑː", "ɡ"]
    assert phonemize(long_text, workers=2) == [ph]


def test_char_backend_and_missing_espeak_fallback(monkeypatch):
    assert phonemize("Hi, Dr. Who!", backend="char") == [list("hi doctor who")]
    monkeypatch.setattr(text_mod.shutil, "which", lambda name: None)
    with pytest.warns(UserWarning, match="espeak-ng not found"):
        out = phonemize(["Hello there"])
    assert out == [list("hello there")]
    with pytest.raises(MissingDependencyError, match="apt-get install espeak-ng"):
        phonemize(["Hello there"], strict=True)


# ----------------------------------------------------------------------------- symbol table


def test_symbol_table_roundtrip(tmp_path):
    seqs = [["h", "ə", " ", "oʊ"], ["ə", "tʃ", "oʊ"]]
    table = SymbolTable.build(seqs)
    assert table.symbols == [PAD, UNK, " ", "h", "oʊ", "tʃ", "ə"]
    assert len(table) == table.vocab_size == 7
    ids = table.encode(["h", "ə", " ", "tʃ"])
    assert ids.dtype == np.int32 and ids.tolist() == [3, 6, 2, 5]
    assert table.decode(np.array([3, 6, 2, 5, 0, 0])) == ["h", "ə", " ", "tʃ"]  # PAD skipped
    table.save(tmp_path / "symbols.json")
    assert SymbolTable.load(tmp_path / "symbols.json") == table
    with pytest.warns(UserWarning, match="unknown symbols"):
        assert table.encode(["h", "Z"]).tolist() == [3, 1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert table.encode(["h", "Z"], unknown="drop").tolist() == [3]
    with pytest.raises(TextError, match="unknown symbols"):
        table.encode(["Z"], unknown="error")
    with pytest.raises(TextError, match="out of range"):
        table.decode([7])


@needs_espeak
def test_text_frontend_encode_save_load(tmp_path):
    sents = generate_sentences(100, seed=0)
    fe = TextFrontend.build(phonemize(sents))
    ids = fe.encode("Hello world")
    assert ids.dtype == np.int32 and ids.ndim == 1 and ids.shape[0] == len(HELLO_WORLD)
    assert fe.decode(ids) == HELLO_WORLD
    assert ids.min() >= 2  # all symbols known: no PAD/UNK
    fe.save(tmp_path / "ckpt")
    fe2 = TextFrontend.load(tmp_path / "ckpt")
    assert fe2.symbols == fe.symbols and fe2.backend == "espeak"
    np.testing.assert_array_equal(fe2.encode("Hello world"), ids)
    for bad in ("", "!!!", " ... "):
        with pytest.raises(TextError, match="no pronounceable symbols after normalisation"):
            fe.encode(bad)


def test_text_frontend_char_backend(tmp_path):
    fe = TextFrontend.build([list("abc d")], backend="char")
    assert fe.encode("A b!").tolist() == [fe.symbols.symbols.index(c) for c in "a b"]
    with pytest.raises(TextError, match="'!!!': no pronounceable"):
        fe.encode("!!!")
    fe.save(tmp_path)
    assert TextFrontend.load(tmp_path).backend == "char"


def test_speech_warnings_name_what_an_english_voice_will_not_say():
    from jaxtts.data.text import speech_warnings

    assert speech_warnings("I have 3 cats, and 2.5 dogs.") == []
    (w,) = speech_warnings("Привет мир")
    assert w.startswith("9 letters of another script (Cyrillic: 'Приветм')")
    assert "letter names" in w
    assert speech_warnings("你好 world")[0].startswith("2 letters of another script (CJK")
    assert speech_warnings("say <b>this</b>") == [
        "markup ['<b>', '</b>'] is read out as text (e.g. '<b>' as 'b')"
    ]
    assert speech_warnings(" 12 345 ") == ["'12 345' is bare digits: read as one number"]
    assert len(speech_warnings("<i>Привет</i>")) == 2


def test_infer_warns_once_per_line_and_records_it(tmp_path):
    """A warned line is still synthesized; its warning is one log line and results.jsonl
    records it (--strict: tests/bad_inputs.py)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "out"
    argv = ["infer.py", "--workdir", "pretrained/car_small", "--text", "12345", "--text"]
    argv += ["Hello there.", "--out_dir", str(out), "--max_seconds", "2"]
    p = subprocess.run(
        [sys.executable, *argv], cwd=root, capture_output=True, text=True, timeout=600
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stderr.count("bare digits") == 1 and "line 1: '12345' is bare digits" in p.stderr
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert rows[0]["text_warnings"] == ["'12345' is bare digits: read as one number"]
    assert "text_warnings" not in rows[1] and rows[0]["wav"] and rows[1]["wav"]
