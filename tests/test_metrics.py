"""WER / MCD / logF0 metrics, speed helpers and the speaker-similarity plumbing."""

import math
import shutil
import subprocess
import time

import numpy as np
import pytest
import soundfile as sf

from jaxtts.errors import AudioError, MissingDependencyError
from jaxtts.eval import metrics as M
from jaxtts.eval import speaker, speed

SR = 16000


# ------------------------------------------------------------------------------------ WER


def test_wer_hand_made_pairs():
    assert M.wer(["the cat sat"], ["the cat sat down"]) == pytest.approx(1 / 3)
    assert M.wer(["the cat sat"], [""]) == 1.0
    assert M.wer(["the cat sat"], ["the cat sat"]) == 0.0
    assert M.wer(["the cat sat"], ["a cat sat"]) == pytest.approx(1 / 3)
    # corpus WER = total edits / total reference words: (1 + 2) / (3 + 2)
    assert M.wer(["the cat sat", "a dog"], ["the cat sat down", ""]) == pytest.approx(3 / 5)


def test_wer_details_and_empty_reference():
    d = M.wer_details(["the cat sat", "", ""], ["the cat sat down", "", "uh"])
    assert [(x.hits, x.substitutions, x.deletions, x.insertions) for x in d] == [
        (3, 0, 0, 1),
        (0, 0, 0, 0),
        (0, 0, 0, 1),
    ]
    assert [x.wer for x in d] == [pytest.approx(1 / 3), 0.0, 1.0]
    assert M.corpus_wer(d) == pytest.approx(2 / 3)  # 2 insertions / 3 reference words
    with pytest.raises(ValueError):
        M.wer(["a"], [])


def test_paired_wer_exact_values():
    # A: seeds [1, 0, 2] and [3, 0, 0] -> mean edits [2, 0, 1] over 10 words = 0.3; B: 0.2
    ea, eb, w = [[1, 0, 2], [3, 0, 0]], [[0, 1, 1]], [4, 2, 4]
    r = M.paired_wer(ea, eb, w, num_resamples=2000)
    assert (r.wer_a, r.wer_b) == (pytest.approx(0.3), pytest.approx(0.2))
    assert r.diff == pytest.approx(0.1) and r.lo <= r.diff <= r.hi
    assert r == M.paired_wer(ea, eb, w, num_resamples=2000)  # deterministic (seed 0)
    # each resample's difference lies between the per-utterance extremes: 2/4 and -1/2
    assert -0.5 <= r.lo and r.hi <= 0.5
    # the same system on both sides: a zero-width interval, never above a margin
    same = M.paired_wer(ea, ea, w, num_resamples=500)
    assert (same.diff, same.lo, same.hi, same.prob_diff_above) == (0.0, 0.0, 0.0, 0.0)
    # one utterance: every resample is the whole set
    one = M.paired_wer([[2]], [[1]], [4], margin=0.2, num_resamples=100)
    assert one.lo == one.hi == one.diff == pytest.approx(0.25) and one.prob_diff_above == 1.0
    with pytest.raises(ValueError, match="utterances"):
        M.paired_wer([[1, 2]], [[1]], [3, 3])


def test_wer_paired_cli(tmp_path, capsys):
    import json

    from benchmarks import wer_paired

    def row(name, errs):
        utts = [{"id": f"u{i}", "errors_domain": e, "words_domain": 4} for i, e in enumerate(errs)]
        return {"name": name, "wer_domain": sum(errs) / (4 * len(errs)), "utterances": utts}

    f = tmp_path / "results.json"
    f.write_text(
        json.dumps({"rows": [row("far", [1, 0]), row("tldr", [1, 1]), row("tldr seed=1", [2, 1])]})
    )
    assert wer_paired.main([str(f), "--a", "tldr", "--b", "far", "--resamples", "200"]) == 0
    out = capsys.readouterr().out
    assert "seeds A 2 / B 1" in out and "A 31.25 %   B 12.50 %" in out and "A - B +18.75 pp" in out
    with pytest.raises(SystemExit):
        wer_paired.main([str(f), "--a", "ssd", "--b", "far"])
    assert "--a 'ssd': no row's name contains it" in capsys.readouterr().err


def test_sentence_cer_hand_made_pairs():
    # "the cat" (7 characters, the space counts) vs "the bat": 1 substitution
    cer = M.sentence_cer(["The cat!", "a dog", "", "", "ab"], ["the bat", "", "", "uh", "abcd"])
    np.testing.assert_allclose(cer, [1 / 7, 1.0, 0.0, 1.0, 2 / 2])
    with pytest.raises(ValueError, match="2 references but 1 hypotheses"):
        M.sentence_cer(["a", "b"], ["a"])


def test_normalisation_matches_both_sides():
    assert M.normalize_for_wer("Dr. Smith, 5 cats!") == "doctor smith five cats"
    assert M.wer(["Dr. Smith, 5 cats!"], ["doctor smith five cats"]) == 0.0
    assert M.normalize_for_wer("Café  NAÏVE -- it's") == "cafe naive it's"
    assert M.normalize_for_wer("...") == ""


# ------------------------------------------------------------------------- MCD / logF0


def _tone(f0, seconds=1.0, amp=0.5):
    t = np.arange(int(seconds * SR)) / SR
    return (amp * np.sin(2 * np.pi * f0 * t)).astype(np.float32)


def test_yin_f0_of_tone():
    f0, voiced = M.yin_f0(_tone(150.0), SR)
    assert voiced.mean() > 0.9
    assert np.median(f0[voiced]) == pytest.approx(150.0, abs=0.5)
    f0, voiced = M.yin_f0(np.random.default_rng(0).normal(0, 0.1, SR), SR)
    assert voiced.mean() < 0.1  # white noise is unvoiced


def test_logf0_rmse_of_shifted_tone():
    ratio = 1.2
    r = M.logf0_rmse(_tone(200.0), _tone(200.0 * ratio), SR)
    assert r == pytest.approx(abs(math.log(ratio)), abs=0.005)
    assert M.logf0_rmse(_tone(200.0), _tone(200.0), SR) == pytest.approx(0.0, abs=1e-9)


def test_mcd_identity_zero_and_silence_rejected():
    x = _tone(220.0) + 0.01 * np.random.default_rng(1).normal(size=SR).astype(np.float32)
    assert M.mel_cepstral_distortion(x, x, SR) == 0.0
    with pytest.raises(AudioError, match="syn_wav.*silent"):
        M.mel_cepstral_distortion(x, np.zeros(SR, np.float32), SR)
    with pytest.raises(AudioError, match="ref_wav.*empty"):
        M.mel_cepstral_distortion(np.zeros(0, np.float32), x, SR)


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="no espeak-ng")
def test_mcd_between_voices(tmp_path):
    from scipy.signal import resample_poly

    text = "the quick brown fox jumps over the lazy dog"
    wavs = {}
    for v in ("klatt", "f3"):
        subprocess.run(
            ["espeak-ng", "-v", f"en-us+{v}", "-w", str(tmp_path / f"{v}.wav"), text], check=True
        )
        w, sr = sf.read(tmp_path / f"{v}.wav", dtype="float32")
        wavs[v] = resample_poly(w, 320, 441).astype(np.float32)
    ab = M.spectral_distortion(wavs["klatt"], wavs["f3"], SR)
    ba = M.spectral_distortion(wavs["f3"], wavs["klatt"], SR)
    assert ab["mcd"] > 3.0  # measured 6.09 dB (male Klatt vs female f3)
    assert ab["mcd"] == pytest.approx(ba["mcd"], rel=0.02)
    assert ab["logf0_rmse"] > 0.4  # f3 is ~an octave higher: measured 0.74
    assert M.mel_cepstral_distortion(wavs["klatt"], wavs["klatt"], SR) == 0.0


# ---------------------------------------------------------------------------- speed


def test_measure_rtf_separates_compile():
    calls = []

    def fn():
        calls.append(1)
        time.sleep(0.05 if len(calls) == 1 else 0.01)  # first call "compiles"
        return np.zeros(8000)

    res = speed.measure_rtf(fn, n_warmup=2, n_runs=3, audio_seconds=lambda out: len(out) / SR)
    assert len(calls) == 5 and len(res.run_s) == 3
    assert res.compile_s >= 0.05 and res.audio_s == 0.5
    assert 0.01 <= res.median_run_s < 0.05
    assert res.rtf == pytest.approx(res.median_run_s / 0.5)


def test_speed_stats_exact():
    s = speed.speed_stats(
        wall_s=2.0, audio_s=4.0, lm_s=1.0, num_tokens=200, num_forwards=100, kv_cache_bytes=8e6
    )
    assert s == {
        "rtf": 0.5,
        "lm_rtf": 0.25,
        "tokens_per_s": 200.0,
        "forwards_per_audio_s": 25.0,
        "kv_bytes_per_audio_s": 2e6,
    }
    assert speed.speed_stats(1.0, 0.0)["rtf"] is None
    assert speed.peak_host_rss_bytes() > 10 * 2**20
    mem = speed.device_memory_stats()
    assert mem is None or mem.get("bytes_in_use", 0) >= 0


# --------------------------------------------------------------------------- speaker


class _MeanEncoder:
    """Toy encoder: [mean, std] of the clip."""

    def embed(self, wavs, sr):
        return np.stack([[np.mean(w), np.std(w)] for w in wavs]).astype(np.float32)


def test_speaker_similarity():
    cos = speaker.cosine_similarity(
        np.array([[1.0, 0.0], [1.0, 1.0]]), np.array([[0.0, 2.0], [2.0, 2.0]])
    )
    np.testing.assert_allclose(cos, [0.0, 1.0], atol=1e-6)
    enc = _MeanEncoder()
    assert isinstance(enc, speaker.SpeakerEncoder)
    a = np.ones(100, np.float32)
    sims = speaker.speaker_similarity(enc, [a, a], [2 * a, -a], SR)
    np.testing.assert_allclose(sims, [1.0, -1.0], atol=1e-6)
    with pytest.raises(MissingDependencyError):
        speaker.load_speaker_encoder("jaxtts_no_such_module:Encoder")
