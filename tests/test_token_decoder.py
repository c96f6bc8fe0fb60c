"""The conv token decoder (`jaxtts.data.token_decoder`): batch-N == batch-1, it starts at the
linear decoder, it learns a non-linear context the linear decoder cannot, and it is saved,
loaded and checked with its tokenizer."""

import numpy as np
import pytest

from jaxtts.data import token_decoder as TD
from jaxtts.data import tokenizers as T
from jaxtts.errors import ConfigError, DataError

TINY = TD.ConvDecoderConfig(
    width=16,
    layers=2,
    kernel=3,
    steps=300,
    batch=16,
    crop=12,
    learning_rate=1e-2,
    warmup=20,
    token_dropout=0.0,
)


def _random_params(k=6, out=4, cfg=TINY, seed=1):
    p = TD.init_params(k, out, cfg)
    rng = np.random.default_rng(seed)  # a non-zero head: the residual is not identically zero
    return {**p, "head": rng.normal(size=p["head"].shape).astype(np.float32)}


def test_padded_batch_rows_decode_as_rows_alone():
    """Rows of different lengths padded with K (outside) give exactly what each row gives alone:
    every layer is zero outside the utterance, like the 'same' convolution's edges."""
    p = _random_params()
    rng = np.random.default_rng(0)
    rows = [rng.integers(0, 6, n) for n in (9, 4, 1, 7)]
    batch = np.full((4, 9), 6)
    for b, r in enumerate(rows):
        batch[b, : len(r)] = r
    out = TD.apply(p, batch)  # [B, T, F]
    for b, r in enumerate(rows):
        np.testing.assert_allclose(out[b, : len(r)], TD.apply(p, r[None])[0], atol=1e-5)
    # jax.numpy gives the numpy values (training and decoding are one function)
    import jax.numpy as jnp

    np.testing.assert_allclose(np.asarray(TD.apply(p, jnp.asarray(batch), jnp)), out, atol=1e-4)


def test_init_is_the_linear_decoder_and_training_learns_a_nonlinear_context():
    """Targets = XOR-like product of the neighbours' signs (no additive function of the tokens
    fits it): the untrained decoder outputs exactly 0 (the linear decode is kept), the trained
    one explains most of it on new utterances."""
    k, out = 6, 4
    sign = np.array([1, -1, 1, -1, 1, -1], np.float32)
    vec = np.random.default_rng(3).normal(size=(out,)).astype(np.float32)
    rng = np.random.default_rng(4)

    def data(n):
        ids, res = [], []
        for _ in range(n):
            x = rng.integers(0, k, int(rng.integers(10, 30)))
            left = np.concatenate([[0.0], sign[x[:-1]]])
            right = np.concatenate([sign[x[1:]], [0.0]])
            ids.append(x.astype(np.int32))
            res.append((left * right)[:, None] * vec[None])
        return ids, res

    ids, res = data(60)
    assert np.abs(TD.apply(TD.init_params(k, out, TINY), ids[0][None])).max() == 0.0
    params, curve = TD.fit(ids, res, k, TINY)
    assert len(curve) == 3 and curve[-1] < 0.3 * curve[0]
    d_ids, d_res = data(20)
    base = np.mean([(r**2).mean() for r in d_res])
    err = np.mean(
        [
            ((r - TD.apply(params, i[None])[0]) ** 2).mean()
            for i, r in zip(d_ids, d_res, strict=True)
        ]
    )
    assert err < 0.15 * base


def test_tokenizer_saves_loads_and_checks_its_conv_decoder(tmp_path, caplog):
    rng = np.random.default_rng(5)
    mels = [rng.normal(size=(2 * n, 80)).astype(np.float32) for n in (30, 41, 25, 37)]
    tok = T.KMeansTokenizer(k=8, iters=5, frames=2).fit(mels)
    tok.fit_context_decoder(mels, window=1)
    fp = tok.fingerprint()
    ids = tok.encode(mels[0])
    linear = tok.decode(ids)
    cfg = TD.ConvDecoderConfig(width=8, layers=1, kernel=3, steps=100, batch=4, crop=8)
    tok.fit_conv_decoder(mels, cfg, dev_mels=mels[:1])
    assert tok.fingerprint() == fp  # decode-only: token caches stay valid
    assert (
        tok.conv_fit["utterances"] == 4
        and tok.conv_fit["dev"]["mse_conv"] < tok.conv_fit["dev"]["mse_linear"]
    )
    assert not np.allclose(tok.decode(ids), linear)
    tok.save(tmp_path / "km")
    tok2 = T.load_tokenizer(tmp_path / "km")
    np.testing.assert_allclose(tok2.decode(ids), tok.decode(ids), atol=0.05)  # float16 file
    assert tok2.fingerprint() == fp and tok2.conv_fit["config"]["width"] == 8
    # refitting the linear decoder makes the conv decoder stale: dropped, said, file removed
    tok2.fit_context_decoder(mels, window=1)
    assert tok2.conv_decoder is None and "drops its conv decoder" in caplog.text
    tok2.save(tmp_path / "km")
    assert not (tmp_path / "km" / "conv_decoder.npz").exists()
    np.testing.assert_allclose(T.load_tokenizer(tmp_path / "km").decode(ids), linear, atol=1e-5)
    # a missing or foreign file: one-line errors naming it
    tok.save(tmp_path / "km")
    (tmp_path / "km" / "conv_decoder.npz").unlink()
    with pytest.raises(DataError, match="conv_decoder.npz: arrays of tokenizer"):
        T.load_tokenizer(tmp_path / "km")
    tok.save(tmp_path / "km")  # truncated files (an interrupted copy): named, not a traceback
    for name in ("conv_decoder.npz", "centers.npy"):
        f = tmp_path / "km" / name
        f.write_bytes(f.read_bytes()[:200])
        with pytest.raises(DataError, match=f"{name}: unreadable"):
            T.load_tokenizer(tmp_path / "km")
        tok.save(tmp_path / "km")
    other = T.KMeansTokenizer(k=8, iters=5, frames=2).fit(mels)
    other.conv_decoder = TD.init_params(16, 160, cfg)
    other.save(tmp_path / "o")
    with pytest.raises(DataError, match="conv decoder for 16 tokens"):
        T.load_tokenizer(tmp_path / "o")
    with pytest.raises(ConfigError, match="kernel=4"):
        TD.ConvDecoderConfig(kernel=4)


def test_fit_conv_cli(tiny_corpus, tmp_path, capsys):
    """`python -m jaxtts.data.tokenizers fit-conv A B --corpus C` trains once, reports the dev
    error and writes both copies; a wrong folder is a one-line error."""
    from jaxtts.data.audio import utterance_mels
    from jaxtts.data.manifest import read_split

    mels = utterance_mels(read_split(tiny_corpus, "train")[:8], progress=False)
    tok = T.KMeansTokenizer(k=16, iters=5, frames=2).fit(mels)
    for name in ("a", "b"):
        tok.save(tmp_path / name)
    T.main(
        [
            "fit-conv",
            str(tmp_path / "a"),
            str(tmp_path / "b"),
            "--corpus",
            str(tiny_corpus),
            "--num",
            "6",
            "--steps",
            "20",
            "--width",
            "8",
            "--layers",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert "trained on 6 utterances" in out and "dev (" in out
    a, b = T.load_tokenizer(tmp_path / "a"), T.load_tokenizer(tmp_path / "b")
    np.testing.assert_array_equal(a.conv_decoder["emb"], b.conv_decoder["emb"])
    with pytest.raises(SystemExit):
        T.main(["fit-conv", str(tmp_path / "nothing"), "--corpus", str(tiny_corpus)])
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "no saved tokenizer" in err and "\n" not in err


def test_gv_postfilter_scales_deviations_from_the_utterance_mean(tmp_path, capsys):
    """gv_scale S: standardised decoded frames = mean + S (z - mean), exactly; the CLI sets it in
    every folder, it is decode-only, and S <= 0 is a one-line error."""
    rng = np.random.default_rng(7)
    mels = [rng.normal(size=(2 * n, 80)).astype(np.float32) for n in (30, 41)]
    tok = T.KMeansTokenizer(k=8, iters=5, frames=2).fit(mels)
    tok.save(tmp_path / "a")
    tok.save(tmp_path / "b")
    ids = tok.encode(mels[0])
    z = tok.stats.normalize(tok.decode(ids))  # [T f, M]
    T.main(["postfilter", str(tmp_path / "a"), str(tmp_path / "b"), "--gv_scale", "1.5"])
    assert "gv_scale 1.5 set in" in capsys.readouterr().out
    for name in ("a", "b"):
        t2 = T.load_tokenizer(tmp_path / name)
        assert t2.gv_scale == 1.5 and t2.fingerprint() == tok.fingerprint()
        z2 = t2.stats.normalize(t2.decode(ids))
        np.testing.assert_allclose(z2, z.mean(0) + 1.5 * (z - z.mean(0)), atol=1e-4)
    with pytest.raises(SystemExit):
        T.main(["postfilter", str(tmp_path / "a"), "--gv_scale", "0"])
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "--gv_scale 0.0: expected > 0" in err
