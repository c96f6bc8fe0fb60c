"""Audio front-end, vocoder and speech tokenizers: exact values and round trips."""

import os

import numpy as np
import pytest
import soundfile as sf

from jaxtts.data import tokenizers as T
from jaxtts.data.audio import (
    MelConfig,
    MelStats,
    istft,
    load_audio,
    log_mel,
    save_audio,
    stft,
    wav_to_mel,
)
from jaxtts.data.vocoder import GriffinLim, make_vocoder
from jaxtts.errors import AudioError, ConfigError, DataError

CFG = MelConfig()


def _chirp(seconds=1.0, sr=16000):
    t = np.arange(int(seconds * sr)) / sr
    return (0.3 * np.sin(2 * np.pi * (200 + 300 * t) * t)).astype(np.float32)


def test_log_mel_matches_librosa_and_frame_count():
    import librosa

    x = np.random.default_rng(0).normal(size=16000 + 123).astype(np.float32) * 0.1
    m = log_mel(x, CFG)
    assert m.shape == (1 + x.size // 320, 80) and m.dtype == np.float32
    ref = librosa.feature.melspectrogram(
        y=x, sr=16000, n_fft=1024, hop_length=320, win_length=1024, power=1.0, n_mels=80, fmax=8000
    )
    np.testing.assert_allclose(m, np.log(np.maximum(ref.T, 1e-5)), atol=2e-3)
    assert CFG.frame_rate == 50.0


def test_stft_istft_round_trip():
    x = np.random.default_rng(1).normal(size=8000).astype(np.float32)
    y = istft(stft(x, CFG), CFG, length=x.size)
    np.testing.assert_allclose(y, x, atol=1e-5)


def test_load_audio_resample_mono_and_errors(tmp_path):
    sr = 22050
    left = np.sin(np.arange(sr) / sr * 2 * np.pi * 440).astype(np.float32) * 0.5
    stereo = np.stack([left, np.zeros_like(left)], axis=1)
    path = tmp_path / "a.flac"
    sf.write(path, stereo, sr)
    wav = load_audio(path, 16000)
    assert wav.shape == (16000,) and wav.dtype == np.float32
    assert abs(np.abs(wav).max() - 0.25) < 0.01  # mono = mean of the channels
    assert load_audio(path, None).shape == (sr,)
    peak = load_audio(path, 16000, peak_normalize=0.9)
    assert np.abs(peak).max() == pytest.approx(0.9, abs=1e-6)
    with pytest.raises(AudioError, match=r"a\.flac: sample rate 22050 Hz, expected 16000 Hz"):
        load_audio(path, 16000, resample_to_rate=False)
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    with pytest.raises(AudioError, match="bad.wav: unreadable or corrupt audio"):
        load_audio(bad)
    with pytest.raises(AudioError, match="missing.wav: audio file not found"):
        load_audio(tmp_path / "missing.wav")
    empty = tmp_path / "empty.wav"
    sf.write(empty, np.zeros((0,), np.float32), 16000)
    with pytest.raises(AudioError, match="empty.wav: audio has no samples"):
        load_audio(empty)


def test_save_audio_round_trip(tmp_path):
    x = _chirp(0.5)
    p = save_audio(tmp_path / "x.wav", x)
    y = load_audio(p, 16000, resample_to_rate=False)
    np.testing.assert_allclose(y, x, atol=1.0 / 32767)
    with pytest.raises(AudioError, match="NaN"):
        save_audio(tmp_path / "n.wav", np.array([np.nan], np.float32))
    assert wav_to_mel(np.zeros((0,), np.float32), 16000).shape == (1, 80)


def test_mel_stats_exact(tmp_path):
    rng = np.random.default_rng(2)
    mels = [rng.normal(3.0, 2.0, size=(n, 80)).astype(np.float32) for n in (5, 17, 9)]
    stats = MelStats.fit(mels)
    allm = np.concatenate(mels).astype(np.float64)
    np.testing.assert_allclose(stats.mean, allm.mean(0), rtol=1e-5)
    np.testing.assert_allclose(stats.std, allm.std(0), rtol=1e-4)
    stats.save(tmp_path / "s.json")
    again = MelStats.load(tmp_path / "s.json")
    np.testing.assert_array_equal(again.mean, stats.mean)
    np.testing.assert_allclose(stats.denormalize(stats.normalize(mels[0])), mels[0], atol=1e-5)


def test_griffin_lim_length_determinism_and_fidelity():
    x = _chirp(1.0)
    m = log_mel(x, CFG)
    voc = make_vocoder("griffin_lim", CFG)
    y1, y2 = voc.mel_to_audio(m), voc.mel_to_audio(m)
    assert y1.shape == ((m.shape[0] - 1) * 320,)
    np.testing.assert_array_equal(y1, y2)
    # re-analysis of the vocoded audio stays close to the input mel (voiced region)
    m2 = log_mel(y1, CFG)[: m.shape[0]]
    loud = m.max(1) > m.max() - 6
    assert np.mean(np.abs(m2[loud] - m[loud])) < 0.35
    with pytest.raises(AudioError, match=r"mel of shape \(3, 7\), expected \[T, 80\]"):
        voc.mel_to_audio(np.zeros((3, 7)))
    with pytest.raises(ConfigError, match="vocoder 'hifigan'"):
        make_vocoder("hifigan")
    assert GriffinLim(CFG).linear_magnitude(m).shape == (m.shape[0], 513)


def test_linear_quantizer_exact_inverse(tmp_path):
    rng = np.random.default_rng(3)
    mels = [rng.normal(-4, 2, size=(50, 80)).astype(np.float32)]
    q = T.make_tokenizer("mel_quantizer", levels=100).fit(mels)
    codes = rng.integers(0, 100, size=(20, 80))
    np.testing.assert_array_equal(q.encode(q.decode(codes)), codes)
    x = mels[0]
    err = np.abs(q.decode(q.encode(x)) - np.clip(x, q.lo, q.hi))
    assert err.max() <= q.step / 2 + 1e-5
    assert q.encode(x).shape == (50, 80) and q.vocab_size == 100
    q.save(tmp_path / "q")
    q2 = T.load_tokenizer(tmp_path / "q")
    assert (q2.lo, q2.hi, q2.levels) == (q.lo, q.hi, 100)
    with pytest.raises(DataError, match=r"levels must be in \[0, 100\)"):
        q.decode(np.full((2, 80), 100))


def test_kmeans_recovers_blobs_and_round_trips(tmp_path):
    rng = np.random.default_rng(4)
    centers = rng.normal(0, 5, size=(4, 80))
    labels = rng.integers(0, 4, size=(400,))
    frames = (centers[labels] + rng.normal(0, 0.1, size=(400, 80))).astype(np.float32)
    tok = T.KMeansTokenizer(k=4, iters=20).fit([frames[:150], frames[150:]])
    ids = np.concatenate([tok.encode(frames[:150]), tok.encode(frames[150:])])
    # a perfect clustering: one token per blob, one blob per token
    pairs = set(zip(labels.tolist(), ids.tolist(), strict=True))
    assert len(pairs) == 4 and len({p[1] for p in pairs}) == 4
    dec = tok.decode(ids)
    assert np.abs(dec - frames).mean() < 0.2
    tok.save(tmp_path / "km")
    tok2 = T.load_tokenizer(tmp_path / "km")
    np.testing.assert_array_equal(tok2.encode(frames), tok.encode(frames))
    with pytest.raises(DataError, match=r"token ids must be in \[0, 4\)"):
        tok.decode(np.array([4]))
    with pytest.raises(DataError, match="before fit"):
        T.KMeansTokenizer(k=8).encode(frames)
    with pytest.raises(DataError, match="expected \\[T, 80\\]"):
        tok.encode(np.zeros((3, 5)))


def test_kmeans_25hz_clusters_frame_pairs(tmp_path):
    """frames=2: one token per pair of 50 Hz frames (25 Hz), decoded to two frames; an odd
    last frame is repeated to fill its pair."""
    rng = np.random.default_rng(5)
    pair_centers = rng.normal(0, 5, size=(3, 2, 80))  # 3 blobs of [frame a, frame b]
    labels = rng.integers(0, 3, size=(300,))
    frames = (pair_centers[labels] + rng.normal(0, 0.1, size=(300, 2, 80))).reshape(600, 80)
    frames = frames.astype(np.float32)
    tok = T.KMeansTokenizer(k=3, iters=20, frames=2).fit([frames[:200], frames[200:]])
    assert tok.name == "kmeans3x2" and tok.frame_rate == 25.0
    ids = tok.encode(frames)
    assert ids.shape == (300,)
    pairs = set(zip(labels.tolist(), ids.tolist(), strict=True))
    assert len(pairs) == 3 and len({p[1] for p in pairs}) == 3
    dec = tok.decode(ids)
    assert dec.shape == (600, 80) and np.abs(dec - frames).mean() < 0.2
    odd = tok.encode(frames[:5])  # frames 0-1, 2-3, 4+4
    assert odd.shape == (3,) and odd[2] == tok.encode(np.repeat(frames[4:5], 2, 0))[0]
    tok.save(tmp_path / "km")
    tok2 = T.load_tokenizer(tmp_path / "km")
    assert tok2.frames == 2 and tok2.frame_rate == 25.0
    np.testing.assert_array_equal(tok2.encode(frames), ids)


def test_context_decoder_fits_a_linear_context_exactly(tmp_path):
    """Frames made as blob(x_t) + A[x_{t-1}] + B[x_{t+1}] (zero outside the utterance) at
    25 Hz: the W = 1 context decoder reproduces them to float precision where the centroid
    lookup is off by the context term; a huge ridge gives the centroid lookup back; the
    fingerprint (what decides the tokens) does not change; save / load keeps it."""
    rng = np.random.default_rng(6)
    k = 5
    blobs = rng.normal(0, 5, size=(k, 2, 80))  # [K, frames, M]
    ctx_a, ctx_b = rng.normal(0, 0.3, size=(2, k, 2, 80))

    def utterance(n):
        x = rng.integers(0, k, size=(n,))
        z = blobs[x].copy()
        z[1:] += ctx_a[x[:-1]]
        z[:-1] += ctx_b[x[1:]]
        return z.reshape(2 * n, 80).astype(np.float32)

    mels = [utterance(n) for n in (40, 55, 31, 60, 47)]
    tok = T.KMeansTokenizer(k=k, iters=20, frames=2).fit(mels)
    fp = tok.fingerprint()
    lookup = [np.abs(tok.decode(tok.encode(m)) - m).max() for m in mels]
    tok.fit_context_decoder(mels, window=1, ridge=1e-6)
    assert tok.context_window == 1 and tok.context_tables.shape == (3, k + 1, 160)
    assert tok.fingerprint() == fp
    test = utterance(33)
    ctx = [np.abs(tok.decode(tok.encode(m)) - m).max() for m in mels + [test]]
    assert max(ctx) < 1e-3 < 0.1 < min(lookup)
    tok.save(tmp_path / "km")
    tok2 = T.load_tokenizer(tmp_path / "km")
    assert tok2.context_window == 1 and tok2.context_fit["utterances"] == 5
    ids = tok.encode(test)
    np.testing.assert_array_equal(tok2.decode(ids), tok.decode(ids))
    assert T.load_tokenizer(tmp_path / "km").fingerprint() == fp
    # the prior: a huge ridge pulls E_0 to the centroids and the other tables to zero
    tok.fit_context_decoder(mels, window=2, ridge=1e9)
    np.testing.assert_allclose(
        tok.decode(ids), tok.stats.denormalize(tok.centers[ids].reshape(-1, 80)), atol=1e-3
    )
    tok.fit_context_decoder(mels, window=0)
    assert tok.context_tables is None and tok.context_window == 0
    with pytest.raises(ConfigError, match="ridge=0"):
        tok.fit_context_decoder(mels, window=1, ridge=0.0)


def test_external_tokens_learn_mean_frames(tmp_path):
    mels = [np.stack([np.full(80, float(i // 2)) for i in range(8)]).astype(np.float32)]
    tokens = [np.array([0, 1, 2, 3])]  # 25 Hz tokens over 50 Hz mels: 2 frames each
    ext = T.make_tokenizer("external", name="s3", vocab_size=6, frame_rate=25.0)
    ext.fit(mels, tokens)
    dec = ext.decode(np.array([2, 0]))
    assert dec.shape == (4, 80)
    np.testing.assert_allclose(dec[:, 0], [2, 2, 0, 0])
    with pytest.raises(DataError, match="cannot encode audio"):
        ext.encode(mels[0])
    with pytest.raises(ConfigError, match="must divide the mel frame rate"):
        T.ExternalTokens("x", 10, frame_rate=30.0)
    ext.save(tmp_path / "e")
    np.testing.assert_array_equal(
        T.load_tokenizer(tmp_path / "e").decode(np.array([3])), ext.decode(np.array([3]))
    )
    with pytest.raises(DataError, match="no saved tokenizer"):
        T.load_tokenizer(tmp_path / "nothing")


def test_extract_tokens_cached(tiny_corpus):
    from jaxtts.data.manifest import read_split

    utts = read_split(tiny_corpus, "dev")
    tok = T.LinearMelQuantizer(levels=10, lo=-11.5, hi=2.0)
    folder = T.extract_tokens(tok, utts, tiny_corpus, progress=False)
    first = {u.id: os.path.getmtime(folder / f"{u.id}.npy") for u in utts}
    T.extract_tokens(tok, utts, tiny_corpus, progress=False)
    assert first == {u.id: os.path.getmtime(folder / f"{u.id}.npy") for u in utts}
    loaded = T.load_tokens(tiny_corpus, tok.name, [u.id for u in utts])
    mel = log_mel(load_audio(utts[0].path), CFG)
    np.testing.assert_array_equal(loaded[utts[0].id], tok.encode(mel))
    with pytest.raises(DataError, match="speech tokens of 'nope' not found"):
        T.load_tokens(tiny_corpus, tok.name, ["nope"])


def test_token_cache_is_tied_to_its_tokenizer(tiny_corpus, tmp_path):
    """Tokens cached by one tokenizer are never reused for another of the same name."""
    from jaxtts.data.manifest import read_split

    utts = read_split(tiny_corpus, "dev")[:3]
    a = T.LinearMelQuantizer(levels=10, lo=-11.5, hi=2.0)
    b = T.LinearMelQuantizer(levels=10, lo=-8.0, hi=0.0)  # same name, other tokens
    assert a.name == b.name and a.fingerprint() != b.fingerprint()
    assert a.fingerprint() == T.LinearMelQuantizer(levels=10, lo=-11.5, hi=2.0).fingerprint()
    T.extract_tokens(a, utts, tmp_path, progress=False)
    mel = log_mel(load_audio(utts[0].path), CFG)
    T.extract_tokens(b, utts, tmp_path, progress=False)
    got = T.load_tokens(tmp_path, b.name, [utts[0].id])[utts[0].id]
    np.testing.assert_array_equal(got, b.encode(mel))
    assert not np.array_equal(got, a.encode(mel))
    # a cache written before stamps existed is trusted and stamped, not re-extracted
    stamp = T.tokens_dir(tmp_path, b.name) / "tokenizer.sha256"
    stamp.unlink()
    path = T.tokens_dir(tmp_path, b.name) / f"{utts[0].id}.npy"
    mtime = os.path.getmtime(path)
    T.extract_tokens(b, utts, tmp_path, progress=False)
    assert os.path.getmtime(path) == mtime and stamp.read_text().strip() == b.fingerprint()


def test_fit_context_cli(tiny_corpus, tmp_path, capsys):
    """`python -m jaxtts.data.tokenizers fit-context A B --corpus C` fits once and writes both
    copies of one tokenizer; another tokenizer among the folders or a centroid-free kind is a
    one-line error."""
    from jaxtts.data.audio import utterance_mels
    from jaxtts.data.manifest import read_split

    mels = utterance_mels(read_split(tiny_corpus, "train")[:8], progress=False)
    tok = T.KMeansTokenizer(k=16, iters=5, frames=2).fit(mels)
    for name in ("a", "b"):
        tok.save(tmp_path / name)
    T.main(
        [
            "fit-context",
            str(tmp_path / "a"),
            str(tmp_path / "b"),
            "--corpus",
            str(tiny_corpus),
            "--num",
            "6",
            "--window",
            "1",
        ]
    )
    assert "fitted on 6 utterances" in capsys.readouterr().out
    a, b = T.load_tokenizer(tmp_path / "a"), T.load_tokenizer(tmp_path / "b")
    assert a.context_window == b.context_window == 1
    np.testing.assert_array_equal(a.context_tables, b.context_tables)
    T.KMeansTokenizer(k=8, iters=5, frames=2).fit(mels).save(tmp_path / "other")
    T.LinearMelQuantizer(levels=10, lo=-11.5, hi=2.0).save(tmp_path / "quant")
    for dirs, msg in (
        ([tmp_path / "a", tmp_path / "other"], "not the same tokenizer"),
        ([tmp_path / "quant"], "for k-means tokenizers"),
    ):
        with pytest.raises(SystemExit):
            T.main(["fit-context", *map(str, dirs), "--corpus", str(tiny_corpus)])
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and msg in err and "\n" not in err
