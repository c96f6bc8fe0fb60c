"""PocketSphinx evaluation ASR: domain LM on espeak-ng clips, default LM, silence, caching."""

import shutil
import subprocess
import time

import numpy as np
import pytest
import soundfile as sf

pytest.importorskip("pocketsphinx")
from jaxtts.errors import AudioError, ConfigError  # noqa: E402
from jaxtts.eval.asr import PocketSphinxASR, build_domain_lm, ipa_to_cmu  # noqa: E402
from jaxtts.eval.metrics import wer  # noqa: E402

TRAIN = [
    "the quick brown fox jumps over the lazy dog",
    "she sells sea shells by the sea shore",
    "a cat sat on the warm mat in the kitchen",
    "we will meet at the station after lunch",
    "please bring three apples and a loaf of bread",
    "the old man walked to the station in the rain",
    "my sister reads a book in the kitchen every morning",
    "they found a small dog near the river",
]
# unseen sentences over the training vocabulary (never in the LM)
TEST = [
    "the lazy cat walked to the river",
    "my sister will bring bread after lunch",
    "the old dog sat in the warm kitchen",
]
needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="no espeak-ng")


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("clips")
    wavs = []
    for i, s in enumerate(TEST):
        subprocess.run(["espeak-ng", "-v", "en-us+klatt", "-w", str(d / f"{i}.wav"), s],
                       check=True)
        w, sr = sf.read(d / f"{i}.wav", dtype="float32")
        assert sr == 22050
        wavs.append(w)
    return wavs  # 22050 Hz: transcribe() must resample


@pytest.fixture(scope="module")
def domain_asr(tmp_path_factory):
    return PocketSphinxASR("domain", train_sentences=TRAIN, progress=False,
                           cache_dir=tmp_path_factory.mktemp("lmcache"))


def test_ipa_to_cmu():
    assert ipa_to_cmu("tʃˈɜːtʃ") == "CH ER CH"
    assert ipa_to_cmu("həlˈoʊ") == "HH AH L OW"
    assert ipa_to_cmu("ðˈɪs θˈɪŋ") == "DH IH S TH IH NG"
    assert ipa_to_cmu("☃") is None


@needs_espeak
def test_domain_lm_wer_on_unseen_sentences(domain_asr, clips):
    hyps = domain_asr.transcribe(clips, 22050)
    assert len(hyps) == 3
    # measured 2/22 = 0.091 (8 training sentences only); margin for other builds
    assert wer(TEST, hyps) <= 0.2
    assert domain_asr.transcribe(clips, 22050) == hyps  # seeded dither: deterministic


@needs_espeak
def test_default_lm_is_worse_but_works(domain_asr, clips):
    asr = PocketSphinxASR("default", progress=False)
    w = wer(TEST, asr.transcribe(clips, 22050))
    assert 0.2 <= w <= 0.8  # measured 9/22 = 0.41 ("lunch" -> "launch", ...)
    assert w > wer(TEST, domain_asr.transcribe(clips, 22050))


def test_silence_and_short_audio_give_empty_transcripts(domain_asr):
    silent = [np.zeros(0, np.float32), np.zeros(10, np.float32), np.zeros(16000, np.float32)]
    hyps = domain_asr.transcribe(silent, 16000)
    assert hyps == ["", "", ""]
    assert wer(["a cat"] * 3, hyps) == 1.0


def test_bad_audio_is_rejected_with_index(domain_asr):
    bad = np.full(1600, np.nan, np.float32)
    with pytest.raises(AudioError, match=r"wavs\[1\].*NaN"):
        domain_asr.transcribe([np.zeros(1600, np.float32), bad], 16000)
    with pytest.raises(AudioError, match=r"wavs\[0\].*mono"):
        domain_asr.transcribe([np.zeros((2, 1600), np.float32)], 16000)
    with pytest.raises(ConfigError):
        PocketSphinxASR("domain", train_sentences=None)


def test_lm_cache_and_oov_pronunciations(tmp_path):
    t0 = time.perf_counter()
    lm = build_domain_lm(TRAIN + ["the zorblax sat"], cache_dir=tmp_path)
    assert lm.num_sentences == 9
    assert "zorblax" in lm.espeak_words and lm.missing_words == ()
    assert lm.vocab_size == len({w for s in TRAIN + ["the zorblax sat"] for w in s.split()})
    assert "zorblax" in lm.dict_path.read_text()
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = build_domain_lm(TRAIN + ["the zorblax sat"], cache_dir=tmp_path)
    assert again.key == lm.key and again.lm_path == lm.lm_path
    assert time.perf_counter() - t0 < max(build_s, 0.05)
    other = build_domain_lm(TRAIN[:4], cache_dir=tmp_path)
    assert other.key != lm.key
    assert len(list(tmp_path.glob("domain-*"))) == 2
