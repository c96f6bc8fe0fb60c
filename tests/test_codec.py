"""The learned speech tokenizer: FSQ's exact codes, the decoder's reach (the streaming lookahead),
batch-N == batch-1, a tiny model that learns, train -> export -> load, one-line errors."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import codec as codec_cfg
from jaxtts.codec import CodecTokenizer, export, load_tokenizer
from jaxtts.codec.model import MelCodec, decoder_reach, fsq_latent, fsq_quantize, voice
from jaxtts.data.tokenizers import KMeansTokenizer
from jaxtts.errors import ConfigError, DataError
from jaxtts.methods.codec import CodecTask, ctc_phones

pytestmark = pytest.mark.slow  # integration / trained models: `make test-fast` skips it

LEVELS = (8, 5, 5, 5)


def test_fsq_codes_exact_values_and_bijection():
    q, codes = fsq_quantize(jnp.zeros((1, 4)), LEVELS)
    # zero -> the middle digit of each scalar: 4 + 2*8 + 2*40 + 2*200
    assert int(codes[0]) == 500 and np.abs(np.asarray(q)).max() == 0.0
    _, hi = fsq_quantize(jnp.full((1, 4), 50.0), LEVELS)
    _, lo = fsq_quantize(jnp.full((1, 4), -50.0), LEVELS)
    assert int(hi[0]) == 999 and int(lo[0]) == 0
    # every code's latent quantises back to the code
    all_codes = jnp.arange(1000)
    lat = np.asarray(fsq_latent(all_codes, LEVELS))  # [1000, 4]
    assert lat.min() == -1.0 and lat.max() == 1.0 and len({tuple(r) for r in lat}) == 1000
    lv = np.array(LEVELS, np.float64)
    half, width = (lv - 1) * (1 - 1e-3) / 2, np.floor(lv / 2)
    offset = np.where(lv % 2 == 0, 0.5, 0.0)
    target = lat * width - 0.3 * np.sign(lat)  # inside the tanh's range, rounding to the digit
    z = np.arctanh((target + offset) / half) - np.arctanh(offset / half)
    q2, back = fsq_quantize(jnp.asarray(z, jnp.float32), LEVELS)
    np.testing.assert_array_equal(np.asarray(back), np.arange(1000))
    np.testing.assert_allclose(np.asarray(q2), lat, atol=1e-5)


def test_fsq_straight_through_gradient():
    z = jnp.array([[0.3, -0.2, 0.1, 0.7]])
    g = jax.grad(lambda v: fsq_quantize(v, LEVELS)[0].sum())(z)
    lv = np.array(LEVELS, np.float64)
    half, width = (lv - 1) * (1 - 1e-3) / 2, np.floor(lv / 2)
    shift = np.arctanh(np.where(lv % 2 == 0, 0.5, 0.0) / half)
    expect = (1 - np.tanh(np.asarray(z[0]) + shift) ** 2) * half / width
    np.testing.assert_allclose(np.asarray(g[0]), expect, rtol=1e-5)


def _codec(**kw):
    m = MelCodec(dim=16, mlp_dim=32, enc_layers=(1, 1), dec_layers=(1, 1), **kw)
    p = m.init(jax.random.PRNGKey(0), jnp.zeros((1, 8, 80)), jnp.ones((1, 8)))
    return m, p


def test_decoder_reach_is_exact():
    m, p = _codec()
    r = decoder_reach(7, (1, 1), 2)
    assert r == 3 + 2
    codes = np.random.default_rng(0).integers(0, 1000, (1, 40))
    mask = jnp.ones((1, 40))

    def dec(c):
        return np.asarray(m.apply(p, jnp.asarray(c), mask, method=MelCodec.decode_codes))[0]

    base = dec(codes)
    j = 10  # frames 20, 21
    far, near = codes.copy(), codes.copy()
    far[0, j + r + 1] = (far[0, j + r + 1] + 1) % 1000
    near[0, j + r] = (near[0, j + r] + 1) % 1000
    assert np.abs(dec(far)[2 * j : 2 * j + 2] - base[2 * j : 2 * j + 2]).max() == 0.0
    assert np.abs(dec(near)[2 * j : 2 * j + 2] - base[2 * j : 2 * j + 2]).max() > 1e-6


@pytest.mark.parametrize("cond", [False, True])
def test_padded_rows_equal_the_rows_alone(cond):
    m, p = _codec(cond=cond)
    rng = np.random.default_rng(1)
    lens = (24, 40, 8)
    x = np.zeros((3, 40, 80), np.float32)
    mask = np.zeros((3, 40), np.float32)
    for i, n in enumerate(lens):
        x[i, :n], mask[i, :n] = rng.standard_normal((n, 80)), 1.0
    codes = np.asarray(m.apply(p, x, mask, method=MelCodec.encode_codes))
    cv = voice(jnp.asarray(x), jnp.asarray(mask)) if cond else None  # [B, 2M]
    y = np.asarray(m.apply(p, codes, mask[:, ::2], cv, method=MelCodec.decode_codes))
    for i, n in enumerate(lens):
        c1 = np.asarray(
            m.apply(p, x[i : i + 1, :n], mask[i : i + 1, :n], method=MelCodec.encode_codes)
        )
        np.testing.assert_array_equal(codes[i, : n // 2], c1[0])
        c1v = voice(jnp.asarray(x[i : i + 1, :n]), jnp.ones((1, n))) if cond else None
        y1 = np.asarray(m.apply(p, c1, mask[i : i + 1, :n:2], c1v, method=MelCodec.decode_codes))
        np.testing.assert_allclose(y[i, :n], y1[0], atol=1e-5, rtol=0)


def test_voice_vector_exact_and_conditioning():
    x = np.zeros((1, 4, 80), np.float32)
    x[0, :, 0] = [1.0, 3.0, 5.0, 100.0]  # the last frame is padding
    v = np.asarray(voice(jnp.asarray(x), jnp.array([[1.0, 1.0, 1.0, 0.0]])))
    assert v.shape == (1, 160)
    np.testing.assert_allclose(v[0, 0], 3.0, rtol=1e-6)  # mean of 1, 3, 5
    np.testing.assert_allclose(v[0, 80], 0.5 * np.log(8 / 3), rtol=1e-5)  # log std
    np.testing.assert_allclose(v[0, 81], 0.5 * np.log(1e-4), rtol=1e-5)  # floored variance
    m, p = _codec(cond=True)
    codes = jnp.asarray(np.random.default_rng(0).integers(0, 1000, (1, 12)))
    tm = jnp.ones((1, 12))
    base = m.apply(p, codes, tm, method=MelCodec.decode_codes)
    zero = m.apply(p, codes, tm, jnp.zeros((1, 160)), method=MelCodec.decode_codes)
    other = m.apply(p, codes, tm, jnp.ones((1, 160)), method=MelCodec.decode_codes)
    assert np.abs(np.asarray(base - zero)).max() == 0.0  # None = the corpus average voice
    assert np.abs(np.asarray(other - zero)).max() > 1e-3


def test_warp_mel_axis_exact_values():
    from jaxtts.methods.codec import warp_mel_axis

    mel = np.tile(np.arange(80, dtype=np.float32) * 2.0, (3, 1))  # [T, M]: bin j holds 2 j
    np.testing.assert_array_equal(warp_mel_axis(mel, 1.0), mel)
    half = warp_mel_axis(mel, 0.5)  # bin j reads bin j / 2: 2 * j / 2 = j
    np.testing.assert_allclose(half[0], np.arange(80), atol=1e-5)
    up = warp_mel_axis(mel, 1.25)  # bin j reads min(1.25 j, 79)
    np.testing.assert_allclose(up[0], 2 * np.minimum(1.25 * np.arange(80), 79), atol=1e-4)


def test_ctc_phones_drop_stress_and_word_gaps():
    assert ctc_phones(["ɐ", "b", "ˌ", "aʊ", "t", " ", "ˈ", "ɪ"]) == ["ɐ", "b", "aʊ", "t", "ɪ"]


def test_tiny_codec_learns_one_batch():
    import optax

    cfg = codec_cfg.get_config("tiny")
    cfg.model.num_phones = 6
    task = CodecTask(cfg)
    rng = np.random.default_rng(0)
    t = np.linspace(0, 1, 32)[:, None]
    mel = np.sin(2 * np.pi * (t * np.arange(1, 81) / 20 + rng.random((8, 1, 80)))).astype(
        np.float32
    )
    batch = {
        "mel": mel,  # [8, 32, 80]
        "mask": np.ones((8, 32), np.float32),
        "phones": np.tile(np.array([[2, 3, 4, 5, 0, 0]], np.int32), (8, 1)),
        "phones_len": np.full((8,), 4, np.int32),
    }
    params = task.init(jax.random.PRNGKey(0), batch)
    opt = optax.adam(3e-3)
    st = opt.init(params)

    @jax.jit
    def step(params, st):
        (loss, m), g = jax.value_and_grad(
            lambda p: task.loss(p, batch, jax.random.PRNGKey(1), train=True), has_aux=True
        )(params)
        up, st = opt.update(g, st)
        return optax.apply_updates(params, up), st, m

    first = None
    for _ in range(150):
        params, st, m = step(params, st)
        first = first or {k: float(v) for k, v in m.items()}
    assert float(m["l1"]) < 0.5 * first["l1"]
    assert float(m["ctc"]) < 0.5 * first["ctc"]


@pytest.fixture(scope="module")
def tiny_run(tiny_corpus, tmp_path_factory):
    from jaxtts.methods.codec import train

    cfg = codec_cfg.get_config("tiny")
    cfg.data.corpus_dir = str(tiny_corpus)
    work = tmp_path_factory.mktemp("codec") / "run"
    res = train(cfg, str(work), progress=False)
    return work, res


def test_train_export_load_round_trip(tiny_run, tmp_path, tiny_corpus):
    from jaxtts.data.audio import load_audio, log_mel
    from jaxtts.data.manifest import read_split

    work, res = tiny_run
    saved = json.loads((work / "config.json").read_text())
    assert saved["model"]["num_phones"] > 20 and len(saved["model"]["mel_stats"]["mean"]) == 80
    tok = load_tokenizer(work)
    assert isinstance(tok, CodecTokenizer)
    assert (tok.vocab_size, tok.frame_rate, tok.lookahead_tokens) == (1000, 25.0, 5)
    utts = read_split(tiny_corpus, "test")[:3]
    mels = [log_mel(load_audio(u.path, 16000), tok.mel_cfg) for u in utts]
    codes = tok.encode_many(mels)
    for m, c in zip(mels, codes, strict=True):
        assert c.dtype == np.int32 and len(c) == -(-len(m) // 2)
        np.testing.assert_array_equal(tok.encode(m), c)
    dec = tok.decode_many(codes)
    for c, d in zip(codes, dec, strict=True):
        assert d.shape == (2 * len(c), 80)
        np.testing.assert_allclose(tok.decode(c), d, atol=1e-5, rtol=0)
    assert tok.conditioned  # tiny: cond=True; decoded in each row's own voice, batch == alone
    own = tok.decode_many(codes, refs=mels)
    np.testing.assert_allclose(tok.decode(codes[1], ref=mels[1]), own[1], atol=1e-5, rtol=0)
    assert np.abs(own[1] - dec[1]).max() > 1e-4
    n = export(work, tmp_path / "x")
    assert (
        0 < n < 200_000
        and json.loads((tmp_path / "x" / "tokenizer.json").read_text())["kind"] == "codec"
    )
    shipped = load_tokenizer(tmp_path / "x")
    assert "ctc_in" not in shipped.params
    scale = np.abs(dec[0]).mean()
    assert np.abs(shipped.decode(codes[0]) - dec[0]).mean() < 1e-2 * scale


def test_load_tokenizer_defers_to_the_classic_kinds_and_errors_in_one_line(tmp_path):
    from jaxtts.data.audio import MelConfig

    km = KMeansTokenizer(k=4, mel_cfg=MelConfig())
    km.fit([np.random.default_rng(0).standard_normal((50, 80)).astype(np.float32)])
    km.save(tmp_path / "km")
    assert isinstance(load_tokenizer(tmp_path / "km"), KMeansTokenizer)
    with pytest.raises(DataError, match="tokenizer.json"):
        load_tokenizer(tmp_path / "nothing")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "tokenizer.json").write_text("{oops")
    with pytest.raises(DataError, match="malformed"):
        load_tokenizer(tmp_path / "bad")


def test_bad_input_is_one_line(tiny_run):
    tok = load_tokenizer(tiny_run[0])
    with pytest.raises(DataError, match=r"token ids must be in \[0, 1000\)"):
        tok.decode(np.array([3, 1000]))
    with pytest.raises(DataError, match="expected"):
        tok.encode(np.zeros((10, 79), np.float32))
    with pytest.raises(ConfigError, match="trained, not fitted"):
        tok.fit([])
    with pytest.raises(KeyError, match="unknown variant 'huge'"):
        codec_cfg.get_config("huge")


def test_lm_trains_on_codec_tokens_and_synthesizes(tiny_run, tiny_corpus, tmp_path):
    """data.tokenizer='codec:<dir>': the LM's tokens come from the codec, its run folder ships
    the exported codec, and synthesis decodes through it (batch-N == batch-1 per row)."""
    from configs import car
    from jaxtts.data.manifest import read_split
    from jaxtts.methods.lm.task import train
    from jaxtts.synthesize import Prompt, Synthesizer

    cfg = car.get_config("tiny")
    cfg.data.update(corpus_dir=str(tiny_corpus), tokenizer=f"codec:{tiny_run[0]}")
    cfg.train.update(steps=2, eval_every=0, checkpoint_every=2)
    cfg.eval.num_samples = 0
    train(cfg, str(tmp_path / "lm"), progress=False)
    saved = json.loads((tmp_path / "lm" / "config.json").read_text())
    assert saved["model"]["num_speech_tokens"] == 1000
    assert isinstance(load_tokenizer(tmp_path / "lm" / "tokenizer"), CodecTokenizer)
    codec_name = json.loads((tiny_run[0] / "config.json").read_text())["model"]["name"]
    assert (tiny_corpus / "tokens" / codec_name).is_dir()
    synth = Synthesizer.from_workdir(tmp_path / "lm")
    prompt = Prompt.from_utterance(read_split(tiny_corpus, "dev")[0])
    texts = ["Hello there.", "The old farmer sold three cows."]
    kw = dict(strategy="car:2", max_seconds=0.4, progress=False, temperature=1.0, seed=3)
    batched = synth.synthesize(texts, prompt, batch_size=2, **kw)
    single = synth.synthesize(texts, prompt, batch_size=1, **kw)
    for a, b in zip(batched, single, strict=True):
        assert len(a.wav) > 0
        np.testing.assert_allclose(a.wav, b.wav, atol=1e-4)
    # the conditioned codec decodes in the prompt's voice: exactly its decode with the prompt's
    # whole log-mel as the reference, which differs from the corpus-average voice
    eng = synth.engine
    assert eng.uses_voice_ref
    ref = eng.prompt_mel(prompt)
    tokens = batched[1].tokens
    mel = eng.units_to_mel(tokens, ref=ref)
    np.testing.assert_allclose(mel, eng.tokenizer.decode(tokens, ref=ref), atol=1e-6)
    assert np.abs(mel - eng.units_to_mel(tokens)).mean() > 1e-3
    wav = synth.vocoder.mel_to_audio(mel)
    np.testing.assert_allclose(batched[1].wav, wav, atol=1e-4)
    # streamed: the same voice (the whole-prefix decode with the same reference)
    chunks = list(
        synth.stream(texts[1], prompt, line=1, **{k: kw[k] for k in kw if k != "progress"})
    )
    assert np.concatenate([c.token_ids for c in chunks if c.done]).tolist() == tokens.tolist()


def test_bucket_source_is_a_function_of_the_step_and_vtlp_warps(tiny_corpus):
    from jaxtts.data.audio import MelConfig, MelStats
    from jaxtts.data.manifest import read_split
    from jaxtts.data.text import SymbolTable
    from jaxtts.methods.codec import BucketSource

    utts = read_split(tiny_corpus, "train")
    table = SymbolTable.build(ctc_phones(u.phonemes) for u in utts)
    stats = MelStats(np.zeros(80, np.float32), np.ones(80, np.float32))

    def source(vtlp):
        return BucketSource(utts, ((128, 8), (256, 8)), MelConfig(), stats, table, 2, 0, vtlp)

    a, b, w = source(0.0).get_batch(3), source(0.0).get_batch(3), source(0.1).get_batch(3)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])  # (seed, step) decide the batch
    np.testing.assert_array_equal(a["mask"], w["mask"])  # the same utterances, warped
    np.testing.assert_array_equal(a["phones"], w["phones"])
    assert np.abs(a["mel"] - w["mel"]).max() > 0.1
    assert a["phones_len"].min() > 0 and set(np.unique(a["mask"])) == {0.0, 1.0}


def test_mask_spans_exact_and_only_the_encoder_input_is_masked(tiny_corpus):
    """`mask_spans` zeroes whole bands and stretches, as drawn; a spec-masked batch keeps the
    whole mel as the target and adds the masked copy the encoder reads (`mel_in`), which the
    model's encoder then reads instead of the target."""
    from jaxtts.data.audio import MelConfig, MelStats
    from jaxtts.data.manifest import read_split
    from jaxtts.data.text import SymbolTable
    from jaxtts.methods.codec import BucketSource, mask_spans

    x = np.arange(1, 201, dtype=np.float32).reshape(20, 10)  # no zeros of its own
    y = mask_spans(x, np.random.default_rng(0), (1, 3, 1, 4))
    rng = np.random.default_rng(0)  # the same draws, by hand: width, start; width, start
    wf = int(rng.integers(0, 4))
    f0 = int(rng.integers(0, 10 - wf + 1))
    wt = int(rng.integers(0, 5))
    t0 = int(rng.integers(0, 20 - wt + 1))
    want = x.copy()
    want[:, f0 : f0 + wf] = 0
    want[t0 : t0 + wt] = 0
    np.testing.assert_array_equal(y, want)
    assert mask_spans(x, np.random.default_rng(1), (0, 5, 0, 5)) is not x  # a copy, unmasked
    np.testing.assert_array_equal(mask_spans(x, np.random.default_rng(1), (0, 5, 0, 5)), x)

    utts = read_split(tiny_corpus, "train")
    table = SymbolTable.build(ctc_phones(u.phonemes) for u in utts)
    stats = MelStats(np.zeros(80, np.float32), np.ones(80, np.float32))
    args = (utts, ((128, 8), (256, 8)), MelConfig(), stats, table, 2, 0)
    plain, masked = BucketSource(*args).get_batch(5), BucketSource(*args, spec_mask=(2, 8, 2, 5))
    masked = masked.get_batch(5)
    assert "mel_in" not in plain
    np.testing.assert_array_equal(plain["mel"], masked["mel"])  # the target: whole
    zeroed = (masked["mel_in"] == 0) & (masked["mel"] != 0) & (masked["mask"][..., None] > 0)
    assert zeroed.any() and np.all(masked["mel_in"][~zeroed] == masked["mel"][~zeroed])
    with pytest.raises(ConfigError, match=r"data.spec_mask=\(1, 2\)"):
        BucketSource(*args, spec_mask=(1, 2))
    m, p = _codec(cond=True)
    mel, mask = jnp.asarray(masked["mel"][:2, :64]), jnp.asarray(masked["mask"][:2, :64])
    y_in, codes_in, _ = m.apply(p, mel, mask, jnp.zeros_like(mel))
    codes_zero = m.apply(p, jnp.zeros_like(mel), mask, method="encode_codes")
    np.testing.assert_array_equal(codes_in, codes_zero)  # the encoder read `mel_in`
