"""Streaming synthesis (jaxtts/stream.py): the streamed tokens are the offline ones, the mel
stage is exact at the tokenizer's lookahead, and the vocoder stage covers every sample once."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from jaxtts.errors import ConfigError
from jaxtts.stream import MelStream, VocoderStream, push_many, push_mels

ROOT = Path(__file__).resolve().parents[1]
TEXT = "Where did you put the keys?"


@pytest.fixture(scope="module")
def synth():
    from jaxtts.synthesize import Synthesizer

    return Synthesizer.from_workdir(ROOT / "pretrained" / "car_small")


def _tokens(seed=0, n=40, k=1024):
    return np.random.default_rng(seed).integers(0, k, n).astype(np.int32)


@pytest.mark.parametrize("segment_steps", [1, 8])
def test_streamed_tokens_and_length_equal_the_offline_synthesis(synth, segment_steps):
    off = synth.synthesize([TEXT], None, strategy="car:3", batch_size=1, progress=False)[0]
    chunks = list(synth.stream(TEXT, None, strategy="car:3", segment_steps=segment_steps))
    assert chunks[-1].done and not any(c.done for c in chunks[:-1])
    assert chunks[-1].tokens == off.tokens.size
    np.testing.assert_array_equal(chunks[-1].token_ids, off.tokens)
    wav = np.concatenate([c.audio for c in chunks])
    assert wav.size == off.wav.size  # every sample once
    if segment_steps == 1:  # one step of 3 tokens per segment: audio starts before the end
        assert len(chunks) > 3 and chunks[0].elapsed_s < chunks[-1].elapsed_s


def test_stream_of_line_k_has_the_offline_key_of_line_k(synth, tiny_corpus):
    from jaxtts.data.manifest import read_split
    from jaxtts.synthesize import prompts_from_utterances

    pool = read_split(tiny_corpus, "test")
    utts = pool[:3]
    prompts = prompts_from_utterances(pool, utts)
    texts = [u.text for u in utts]
    off = synth.synthesize(texts, prompts, strategy="far", batch_size=2, progress=False)
    for k in (0, 2):
        chunks = list(synth.stream(texts[k], prompts[k], strategy="far", line=k))
        np.testing.assert_array_equal(chunks[-1].token_ids, off[k].tokens)
    other = list(synth.stream(texts[2], prompts[2], strategy="far", line=0))
    assert not np.array_equal(other[-1].token_ids, off[2].tokens)  # another key


def test_mel_stream_is_exact_at_the_tokenizers_lookahead(synth):
    eng = synth.engine
    tok = eng.tokenizer
    gv, tok.gv_scale = tok.gv_scale, 1.0  # the postfilter's mean is the prefix's: left out here
    try:
        tokens = _tokens()
        ms = MelStream(eng)
        assert ms.lookahead == tok.lookahead_tokens == 5  # W 1 + 4 conv layers x (3 // 2)
        parts = [ms.push(tokens[:n], final=False) for n in (3, 7, 8, 20, 33)]
        parts.append(ms.push(tokens, final=True))
        assert [p.shape[0] for p in parts] == [0, 4, 2, 24, 26, 24]  # 2 frames per token
        np.testing.assert_allclose(np.concatenate(parts), eng.units_to_mel(tokens), atol=1e-5)
        # lookahead 0: the last frames were decoded from a cut context, so they differ
        ms0 = MelStream(eng, lookahead=0)
        early = ms0.push(tokens[:20], final=False)
        assert early.shape[0] == 40
        assert np.abs(early[-2:] - eng.units_to_mel(tokens)[38:40]).max() > 1e-3
    finally:
        tok.gv_scale = gv


def test_vocoder_stream_covers_every_sample_once(synth):
    mel = synth.engine.units_to_mel(_tokens(1, 30))  # [60, M]
    vs = VocoderStream(synth.vocoder)
    sizes, out = [], []
    for a, b in [(0, 1), (1, 9), (9, 30), (30, 44), (44, 60)]:
        out.append(vs.push(mel[a:b], final=b == 60))
        sizes.append(out[-1].size)
    hop = synth.vocoder.mel_cfg.hop_length
    # held back: the last 2 frames' samples wait for the next window
    assert sizes == [0, (9 - 1 - 2) * hop, 21 * hop, 14 * hop, (59 - 41) * hop]
    wav = np.concatenate(out)
    assert wav.size == (60 - 1) * hop == synth.vocoder.mel_to_audio(mel).size
    assert np.all(np.abs(wav) <= 1.0) and np.abs(wav).max() > 0.01
    again = VocoderStream(synth.vocoder)
    same = [
        again.push(mel[a:b], final=b == 60)
        for a, b in [(0, 1), (1, 9), (9, 30), (30, 44), (44, 60)]
    ]
    np.testing.assert_array_equal(np.concatenate(same), wav)  # deterministic


def test_bad_stream_settings_are_one_line_errors(synth):
    with pytest.raises(ConfigError, match="lookahead=-1: expected >= 0"):
        MelStream(synth.engine, lookahead=-1)
    with pytest.raises(ConfigError, match="context=2, hold=2"):
        VocoderStream(synth.vocoder, context=2)
    with pytest.raises(ConfigError, match="min_frames=0, expected >= 1"):
        VocoderStream(synth.vocoder, min_frames=0)
    with pytest.raises(ConfigError, match="segment_steps=0"):
        next(synth.stream(TEXT, None, segment_steps=0))
    wrong = dataclasses.make_dataclass("W", [])()
    with pytest.raises(ConfigError, match="Griffin-Lim"):
        VocoderStream(wrong)


@pytest.mark.parametrize("lookahead", [None, 2, 9])
def test_windowed_mel_stream_equals_decoding_the_whole_prefix(synth, lookahead):
    """The window (the tokens a call emits or finalises, plus R of left context) gives the
    frames of decoding the whole prefix each call, the postfilter's prefix mean included
    (the shipped tokenizer has gv_scale != 1)."""
    eng = synth.engine
    assert eng.tokenizer.gv_scale != 1.0
    tokens = _tokens(3, 90)
    ms, whole = MelStream(eng, lookahead), MelStream(eng, lookahead)
    whole.tok = None  # the whole-prefix path
    cuts = [2, 7, 8, 20, 33, 34, 60, 61, 75]
    a = [ms.push(tokens[:n], False) for n in cuts] + [ms.push(tokens, True)]
    b = [whole.push(tokens[:n], False) for n in cuts] + [whole.push(tokens, True)]
    assert [x.shape for x in a] == [x.shape for x in b]
    np.testing.assert_allclose(np.concatenate(a), np.concatenate(b), atol=1e-5)
    assert np.concatenate(a).shape[0] == 2 * tokens.size


def test_push_many_equals_pushing_each_stream(synth):
    """Windows of equal shape are phase-retrieved as one batch: every stream gets exactly the
    samples it gets alone (rows of different lengths, finals and first windows mixed)."""
    mels = [synth.engine.units_to_mel(_tokens(s, n)) for s, n in [(1, 30), (2, 30), (3, 22)]]
    cuts = [[(0, 9), (9, 20), (20, 60)], [(0, 9), (9, 20), (20, 60)], [(0, 5), (5, 20), (20, 44)]]
    alone = [VocoderStream(synth.vocoder) for _ in mels]
    many = [VocoderStream(synth.vocoder) for _ in mels]
    for k in range(3):
        parts = [m[c[k][0] : c[k][1]] for m, c in zip(mels, cuts, strict=True)]
        finals = [c[k][1] == m.shape[0] for m, c in zip(mels, cuts, strict=True)]
        want = [s.push(p, f) for s, p, f in zip(alone, parts, finals, strict=True)]
        got = push_many(many, parts, finals)
        for w, g in zip(want, got, strict=True):
            np.testing.assert_array_equal(g, w)
    assert all(s.emitted == (m.shape[0] - 1) * 320 for s, m in zip(many, mels, strict=True))


def test_push_mels_equals_pushing_each_stream(synth):
    """The rows' token decoder windows run as one batch padded with the outside id: every
    stream gets the frames it gets alone (rows of different lengths and finals, a row with
    nothing new, an empty row)."""
    eng = synth.engine
    toks = [_tokens(4, 50), _tokens(5, 31), _tokens(6, 12), _tokens(7, 0)]
    cuts = [[9, 21, 50], [3, 21, 31], [12, 12, 12], [0, 0, 0]]
    alone = [MelStream(eng) for _ in toks]
    many = [MelStream(eng) for _ in toks]
    for k in range(3):
        parts = [t[: c[k]] for t, c in zip(toks, cuts, strict=True)]
        finals = [k == 2] * len(toks)
        want = [s.push(p, f) for s, p, f in zip(alone, parts, finals, strict=True)]
        got = push_mels(many, parts, finals)
        assert [g.shape for g in got] == [w.shape for w in want]
        for w, g in zip(want, got, strict=True):
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)
    assert [s.emitted for s in many] == [2 * t.size for t in toks]
    # the batch decoder itself: rows padded with K give each row's own vectors
    rows = [t[:c] for t, c in [(toks[0], 17), (toks[1], 5), (toks[3], 0)]]
    for r, z in zip(rows, eng.tokenizer.decode_standardised_many(rows), strict=True):
        np.testing.assert_allclose(z, eng.tokenizer.decode_standardised(r), rtol=0, atol=1e-5)


def test_min_frames_waits_after_the_first_audio(synth):
    """`min_frames`: the first audio goes out at once, later windows wait for that many new
    frames (or the end); every sample still comes out once."""
    mel = synth.engine.units_to_mel(_tokens(1, 30))  # [60, M]
    vs = VocoderStream(synth.vocoder, min_frames=16)
    hop = synth.vocoder.mel_cfg.hop_length
    cuts = [(0, 8), (8, 16), (16, 24), (24, 32), (32, 40), (40, 60)]
    sizes = [vs.push(mel[a:b], final=b == 60).size // hop for a, b in cuts]
    # frames ready (all but the last 1 + 2 held): 5 go at once; 13 - 5 = 8 < 16 wait;
    # 21 - 5 = 16 go; 29 - 21 waits; 37 - 21 = 16 go; the end: the last 59 - 37
    assert sizes == [5, 0, 16, 0, 16, 59 - 37]
