"""PocketSphinx evaluation ASR: domain LM on espeak-ng clips, default LM, silence, caching."""

import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

pytest.importorskip("pocketsphinx")
from jaxtts.errors import AudioError, ConfigError  # noqa: E402
from jaxtts.eval.am_adapt import sphinxtrain_available  # noqa: E402
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
        subprocess.run(["espeak-ng", "-v", "en-us+klatt", "-w", str(d / f"{i}.wav"), s], check=True)
        w, sr = sf.read(d / f"{i}.wav", dtype="float32")
        assert sr == 22050
        wavs.append(w)
    return wavs  # 22050 Hz: transcribe() must resample


@pytest.fixture(scope="module")
def domain_asr(tmp_path_factory):
    return PocketSphinxASR(
        "domain",
        train_sentences=TRAIN,
        progress=False,
        cache_dir=tmp_path_factory.mktemp("lmcache"),
    )


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


def test_held_in_generated_sentences_exclude_dev_test_and_are_cached(tmp_path):
    from jaxtts.data.manifest import Utterance, write_manifest
    from jaxtts.data.text import normalize_text
    from jaxtts.data.words import generate_sentences
    from jaxtts.eval.asr import GENERATED_LM_SEED, held_in_generated_sentences

    raw = generate_sentences(40, seed=GENERATED_LM_SEED)
    norm = generate_sentences(40, seed=GENERATED_LM_SEED, normalized=True)
    assert norm == [normalize_text(s) for s in raw]
    held = {3: "dev", 17: "test"}
    for i, split in held.items():
        write_manifest(
            tmp_path / f"{split}.jsonl",
            [Utterance(f"u{i}", "x.wav", raw[i], normalized_text=norm[i])],
        )
    cache = tmp_path / "cache"
    out = held_in_generated_sentences(tmp_path, 40, cache)
    assert out == [s for i, s in enumerate(norm) if i not in held]
    (cached,) = cache.glob("generated-*.txt")
    cached.write_text("marker sentence")  # a second call must read the cache, not regenerate
    assert held_in_generated_sentences(tmp_path, 40, cache) == ["marker sentence"]
    assert len(held_in_generated_sentences(tmp_path, 41, cache)) == 39  # other n: other key


# --- acoustic-model adaptation (SphinxTrain; scripts/setup.sh installs it) --------------------

needs_sphinxtrain = pytest.mark.skipif(not sphinxtrain_available(), reason="no SphinxTrain")


def test_read_sendump_gives_normalised_weights():
    import pocketsphinx as ps

    from jaxtts.eval.am_adapt import read_sendump

    w = read_sendump(ps.get_model_path("en-us/en-us/sendump"))
    assert w.shape == (5126, 3, 128)  # senones x feature streams x codebook densities
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-12)
    assert w.min() > 0


@needs_sphinxtrain
@needs_espeak
def test_reconstructed_weights_decode_like_stock_model(domain_asr, clips, tmp_path):
    import pocketsphinx as ps

    from jaxtts.eval.am_adapt import _base_model_dir

    _base_model_dir(tmp_path / "hmm", Path(ps.get_model_path("en-us/en-us")))
    assert not (tmp_path / "hmm" / "sendump").exists()  # float mixture_weights are used
    rebuilt = PocketSphinxASR(
        "domain",
        train_sentences=TRAIN,
        progress=False,
        cache_dir=domain_asr.domain.lm_path.parent.parent,
        hmm=tmp_path / "hmm",
    )
    assert rebuilt.transcribe(clips, 22050) == domain_asr.transcribe(clips, 22050)


@needs_sphinxtrain
@needs_espeak
def test_map_adaptation_builds_caches_and_decodes(domain_asr, clips, tmp_path, monkeypatch):
    from jaxtts.eval import am_adapt
    from jaxtts.eval.am_adapt import adapt_acoustic_model
    from jaxtts.eval.asr import prepare_pcm

    train_wavs = []
    for i, s in enumerate(TRAIN):
        subprocess.run(
            ["espeak-ng", "-v", "en-us+klatt", "-w", str(tmp_path / f"{i}.wav"), s], check=True
        )
        w, sr = sf.read(tmp_path / f"{i}.wav", dtype="float32")
        train_wavs.append(prepare_pcm(w, sr, 40.0, 0, 0.25))
    dict_path = domain_asr.domain.dict_path
    model = adapt_acoustic_model(
        train_wavs, TRAIN, dict_path, cache_dir=tmp_path / "c", num_workers=2, progress=False
    )
    assert model.num_utterances == 8 and model.info["bw_parts"] == 2
    for name in ("means", "variances", "mixture_weights", "transition_matrices", "mdef"):
        assert (model.path / name).stat().st_size > 0
    import pocketsphinx as ps

    stock = Path(ps.get_model_path("en-us/en-us"))
    assert (model.path / "means").read_bytes() != (stock / "means").read_bytes()  # MAP moved
    assert not list((tmp_path / "c").glob(".adapt-*"))  # work folder removed
    with monkeypatch.context() as m:  # a second call must come from the cache
        m.setattr(am_adapt, "_build", lambda *a, **k: pytest.fail("rebuilt a cached model"))
        again = adapt_acoustic_model(train_wavs, TRAIN, dict_path, cache_dir=tmp_path / "c")
    assert again.path == model.path
    with pytest.raises(ConfigError, match=r"pcms\[0\].*int16"):
        adapt_acoustic_model(
            [np.zeros(1600, np.float32)], TRAIN[:1], dict_path, cache_dir=tmp_path / "c"
        )
    adapted = PocketSphinxASR(
        "domain",
        train_sentences=TRAIN,
        progress=False,
        hmm=model.path,
        cache_dir=domain_asr.domain.lm_path.parent.parent,
    )
    assert "+MAP" in adapted.name
    w_adapted = wer(TEST, adapted.transcribe(clips, 22050))
    assert w_adapted <= wer(TEST, domain_asr.transcribe(clips, 22050))
    with pytest.raises(ConfigError, match=r"transcripts\[1\].*zorblax"):
        adapt_acoustic_model(
            train_wavs[:2], [TRAIN[0], "the zorblax"], dict_path, cache_dir=tmp_path / "c"
        )
    with pytest.raises(ConfigError, match="hmm="):
        PocketSphinxASR("default", hmm=tmp_path, progress=False)
