"""MDM's acoustic model, loss and decoding loop on a tiny random model: the mel grid, upsampling,
padding-invariant loss, every order decodes every frame exactly once, batch-N == batch-1; and
the Grad-TTS baseline decoder on the same model: the noise schedule's exact values, the
probability-flow sampler against the exact score of a point mass, the joint loss, batch-N ==
batch-1, strategy names."""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtts.engine import resolve
from jaxtts.errors import ConfigError
from jaxtts.methods.mdm import gradtts
from jaxtts.methods.mdm.decode import mdm_decode, predicted_durations
from jaxtts.methods.mdm.model import AcousticModel, MDMConfig, upsample
from jaxtts.methods.mdm.task import mdm_loss

pytestmark = pytest.mark.slow  # integration / trained models: `make test-fast` skips it

CFG = MDMConfig(
    num_text_symbols=12,
    n_mels=6,
    levels=10,
    mel_lo=-4.0,
    mel_hi=2.0,
    d_model=16,
    enc_layers=1,
    enc_heads=2,
    enc_ff=32,
    dur_channels=16,
    dec_layers=1,
    dec_width=16,
    dec_heads=2,
    dec_ff=32,
    mixtures=3,
    speaker_dim=4,
    score_layers=1,
)


@pytest.fixture(scope="module")
def model_params():
    model = AcousticModel(CFG)
    text = jnp.ones((1, 5), jnp.int32)
    mel = jnp.zeros((1, 12, CFG.n_mels))
    params = jax.jit(model.init)(
        jax.random.key(0), text, jnp.array([5]), mel, jnp.array([12]), jnp.zeros((1, 4))
    )["params"]
    params = nn.unbox(params)
    # durations around 2 frames a phone: log 2 bias on the duration head
    params["encoder"]["dur_out"]["bias"] = jnp.full((1,), float(np.log(2.0)))
    return model, params


def batch(seed=0):
    rng = np.random.default_rng(seed)
    text = rng.integers(1, 12, (3, 6)).astype(np.int32)
    text_len = np.array([6, 4, 5], np.int32)
    mel = rng.normal(-1.0, 1.5, (3, 20, CFG.n_mels)).astype(np.float32)
    mel_len = np.array([20, 13, 9], np.int32)
    spk = rng.normal(size=(3, 4)).astype(np.float32)
    return dict(text=text, text_len=text_len, mel=mel, mel_len=mel_len, speaker=spk)


def test_mel_grid_matches_the_linear_quantizer():
    from jaxtts.data.tokenizers import LinearMelQuantizer

    quant = LinearMelQuantizer(CFG.levels, lo=CFG.mel_lo, hi=CFG.mel_hi)
    mel = np.random.default_rng(1).uniform(-6, 4, (50, 80)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(CFG.quantize(jnp.asarray(mel))), quant.encode(mel))
    back = np.asarray(CFG.denormalize(CFG.level_value(CFG.quantize(jnp.asarray(mel)))))
    inside = (mel >= CFG.mel_lo) & (mel <= CFG.mel_hi)
    step = (CFG.mel_hi - CFG.mel_lo) / (CFG.levels - 1)
    assert np.abs(back - mel)[inside].max() <= step / 2 + 1e-5
    np.testing.assert_allclose(back, quant.decode(quant.encode(mel)), atol=1e-5)


def test_upsample_and_predicted_durations_exact():
    mu_x = jnp.arange(3 * 2, dtype=jnp.float32).reshape(1, 3, 2)
    out = upsample(mu_x, jnp.array([[2, 1, 3]]), 8)
    np.testing.assert_array_equal(np.asarray(out)[0, :, 0], [0, 0, 2, 4, 4, 4, 0, 0])
    d = predicted_durations(jnp.log(jnp.array([[0.2, 2.5, 1.0, 9.0]])), jnp.array([3]))
    np.testing.assert_array_equal(np.asarray(d), [[1, 3, 1, 0]])


def test_loss_is_finite_and_ignores_padding(model_params):
    model, params = model_params
    b = batch()
    f = jax.jit(lambda p, bb: mdm_loss(model, p, bb, jax.random.key(3)))
    loss, m = f(params, b)
    assert np.isfinite(float(loss)) and float(m["dropped_rows"]) == 0.0
    b2 = {k: v.copy() for k, v in b.items()}
    b2["mel"][1, 13:] = 7.0  # beyond row 1's frames
    b2["text"][2, 5:] = 3  # beyond row 2's phones
    loss2, _ = f(params, b2)
    np.testing.assert_allclose(float(loss), float(loss2), rtol=1e-6)
    grads = jax.grad(lambda p: f(p, b)[0])(params)
    assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grads))
    assert float(jnp.abs(grads["decoder"]["out"]["kernel"]).max()) > 0
    assert float(jnp.abs(grads["encoder"]["prior"]["kernel"]).max()) > 0


ORDERS = ["random", "l2r", "r2l", "swap:0.3", "top1", "top1*", "topk:3", "duration"]


@pytest.mark.parametrize("order", ORDERS)
def test_every_order_decodes_every_frame_once(model_params, order):
    model, params = model_params
    b = batch()
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(jnp.arange(3))
    out = jax.device_get(
        mdm_decode(
            model,
            params,
            jnp.asarray(b["text"]),
            jnp.asarray(b["text_len"]),
            jnp.asarray(b["speaker"]),
            keys,
            order=order,
            frames=24,
        )
    )
    for r in range(3):
        n = int(out.frames[r])
        assert 3 <= n <= 24
        st = out.order_step[r]
        assert (st[:n] >= 0).all() and (st[n:] == -1).all()  # decoded exactly the valid frames
        assert (out.levels[r, n:] == -1).all() and (out.levels[r, :n] >= 0).all()
        per_step = np.bincount(st[:n])
        k = 3 if order == "topk:3" else 1
        assert per_step.max() <= k  # at most k frames a step, each frame once
        if order == "l2r":
            np.testing.assert_array_equal(st[:n], np.arange(n))
        if order == "r2l":
            np.testing.assert_array_equal(st[:n], np.arange(n)[::-1])
        assert int(out.steps[r]) == -(-n // k)


@pytest.mark.parametrize("order", ["l2r", "top1"])
def test_greedy_batch_n_equals_batch_1(model_params, order):
    model, params = model_params
    b = batch()
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(jnp.arange(3))

    def run(rows):
        return jax.device_get(
            mdm_decode(
                model,
                params,
                jnp.asarray(b["text"][rows]),
                jnp.asarray(b["text_len"][rows]),
                jnp.asarray(b["speaker"][rows]),
                keys[np.asarray(rows)],
                order=order,
                frames=24,
                greedy=True,
            )
        )

    full = run([0, 1, 2])
    for r in range(3):
        one = run([r])
        np.testing.assert_array_equal(one.levels[0], full.levels[r])
        np.testing.assert_array_equal(one.order_step[0], full.order_step[r])


@pytest.mark.parametrize("order", ["r2l", "random", "top1", "topk:3"])
def test_greedy_values_are_the_mode_given_the_frames_decoded_before(model_params, order):
    """Replays a greedy decode step by step: the frames decoded at step s hold exactly the
    argmax level of the decoder given mu and the frames of steps < s (fixed orders compute it
    for the picked frame only, confidence orders for all frames: the same values)."""
    from jaxtts.methods.mdm import dmol

    model, params = model_params
    b = batch()
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(jnp.arange(3))
    args = (jnp.asarray(b["text"]), jnp.asarray(b["text_len"]), jnp.asarray(b["speaker"]))
    out = jax.device_get(
        mdm_decode(model, params, *args, keys, order=order, frames=24, greedy=True)
    )
    p = {"params": params}
    _, mu_x, logw = model.apply(p, args[0], args[1], args[2], method="encode")
    mu = upsample(mu_x, predicted_durations(logw, args[1]), 24)
    t_len = jnp.asarray(out.frames)
    checked = 0
    for s in range(int(out.order_step.max()) + 1):
        before = jnp.asarray((out.order_step >= 0) & (out.order_step < s))  # [B, T]
        q = jnp.where(before[..., None], jnp.asarray(out.levels), 0)
        o = model.apply(p, mu, CFG.level_value(q), before, t_len, args[2], method="decode_params")
        mode = np.asarray(dmol.mode(o, CFG.levels)[1])  # [B, T, M]
        now = out.order_step == s
        np.testing.assert_array_equal(out.levels[now], mode[now])
        checked += int(now.sum())
    assert checked == int(out.frames.sum())


def test_tiny_recipe_trains_and_synthesizes(tmp_path, tiny_corpus):
    """configs/mdm.py:tiny trains one step and its run folder synthesizes through the engine
    (bad orders and a zero-frame duration predictor are one-line errors)."""
    from configs import mdm as mdm_config
    from jaxtts.engine import load_engine
    from jaxtts.errors import ConfigError
    from jaxtts.methods.mdm.task import train
    from jaxtts.synthesize import Synthesizer

    config = mdm_config.get_config("tiny")
    config.data.corpus_dir = str(tiny_corpus)
    config.train.update(steps=1, eval_every=0)
    train(config, str(tmp_path / "run"), progress=False)
    eng = load_engine(tmp_path / "run")
    assert eng.family == "mdm" and resolve(eng, "top1*").name == "mdm:top1*"
    assert resolve(eng, "gradtts").name == "gradtts:100"  # tiny trains the Grad-TTS decoder
    assert resolve(eng, "gradtts:length").name == "gradtts:length"
    for bad in ("swap:2", "topk:0", "mdm:sideways", "gradtts:0", "gradtts:fast"):
        with pytest.raises(ConfigError):
            resolve(eng, bad)
    (gt,) = Synthesizer(eng).synthesize(
        ["The cat sat."], None, strategy="gradtts:3", max_seconds=1.0, progress=False
    )
    assert gt.wav.size > 0 and gt.info["steps"] == 3
    with pytest.raises(ConfigError, match="top_k / top_p do not apply"):
        Synthesizer(eng).synthesize(
            ["The cat sat."], None, strategy="top1*", top_k=5, progress=False
        )
    (res,) = Synthesizer(eng).synthesize(
        ["The cat sat."], None, strategy="l2r", max_seconds=1.0, progress=False
    )
    assert res.wav.size > 0 and res.info["steps"] == res.info["num_tokens"]
    from jaxtts.methods.mdm import decode as mdm_dec

    d = mdm_dec.predicted_durations(jnp.full((1, 3), -30.0), jnp.array([3]))
    assert int(d.min()) == 1  # every phone keeps >= 1 frame: a text never gets zero frames
    (skipped,) = Synthesizer(eng).synthesize(["..."], None, strategy="l2r", progress=False)
    assert skipped.skipped and "no pronounceable symbols" in skipped.skipped
    # the run's quantiser ships as its tokenizer folder (the quantised ground-truth row)
    from jaxtts.data.tokenizers import load_tokenizer

    quant = load_tokenizer(tmp_path / "run" / "tokenizer")
    assert (quant.levels, quant.lo, quant.hi) == (eng.cfg.levels, eng.cfg.mel_lo, eng.cfg.mel_hi)
    # Grad-TTS diffuses in the paper's log-mel units: the scale is filled from the mel range;
    # a run saved before the key resumes with its own s = 1
    assert eng.cfg.score_scale == pytest.approx((eng.cfg.mel_hi - eng.cfg.mel_lo) / 2)
    import json

    path = tmp_path / "run" / "config.json"
    saved = json.loads(path.read_text())
    del saved["model"]["score_scale"]
    path.write_text(json.dumps(saved))
    config.train.update(steps=2)
    train(config, str(tmp_path / "run"), progress=False)
    assert "score_scale" not in json.loads(path.read_text())["model"]
    assert load_engine(tmp_path / "run").cfg.score_scale == 1.0
    # the text diagnostic of the shipped-model test: untrained, right and wrong text score alike
    from jaxtts.data.manifest import read_split
    from jaxtts.methods.mdm.task import text_information

    info = text_information(eng, read_split(tiny_corpus, "train")[:8], batch_size=4)
    assert info["frames"] > 100
    assert abs(info["nll_wrong"] - info["nll_right"]) < 0.05, info
    assert abs(info["prior_wrong"] - info["prior_right"]) < 0.05, info


# -- the Grad-TTS baseline decoder (jaxtts/methods/mdm/gradtts.py) on the same tiny model


def test_schedule_exact_values():
    t = jnp.array([0.0, 0.5, 1.0])
    np.testing.assert_allclose(
        np.asarray(gradtts.cumulative_beta(CFG, t)),
        [0.0, 0.05 * 0.5 + 0.5 * 19.95 * 0.25, 0.05 + 0.5 * 19.95],
        rtol=1e-6,
    )
    np.testing.assert_allclose(np.asarray(gradtts.beta(CFG, t)), [0.05, 10.025, 20.0], rtol=1e-6)
    assert [gradtts.parse_steps(s) for s in ("gradtts", "gradtts:7", "gradtts:length")] == [
        100,
        7,
        0,
    ]
    for bad in ("gradtts:0", "gradtts:x", "grad:3"):
        with pytest.raises(ConfigError):
            gradtts.parse_steps(bad)


def test_reverse_ode_with_the_exact_score_reaches_the_data():
    """A point-mass 'data' y0: the marginal at t is N(rho_t y0 + (1 - rho_t) mu, lambda_t I), so
    its exact noise prediction is (x - mean_t) / sqrt(lambda_t). Started from X_1 ~ N(mu, I),
    the ODE's Euler steps must land on y0 (error shrinking with the step count), and a row
    with 0 steps or padded frames must not move."""
    rng = np.random.default_rng(0)
    y0 = jnp.asarray(rng.uniform(-1, 1, (2, 5, 3)), jnp.float32)
    mu = jnp.asarray(rng.uniform(-1, 1, (2, 5, 3)), jnp.float32)
    x1 = mu + jnp.asarray(rng.normal(size=(2, 5, 3)), jnp.float32)
    valid = (jnp.arange(5)[None] < jnp.array([5, 3])[:, None])[..., None]

    def eps_fn(x, t):
        cum = gradtts.cumulative_beta(CFG, t)[:, None, None]
        rho, lam = jnp.exp(-0.5 * cum), 1.0 - jnp.exp(-cum)
        return (x - rho * y0 - (1.0 - rho) * mu) / jnp.sqrt(lam)

    errs = []
    for n in (25, 100, 400):
        out = gradtts.reverse_ode(CFG, eps_fn, x1, mu, jnp.array([n, n]), valid)
        errs.append(float(jnp.max(jnp.abs(jnp.where(valid, out - y0, 0.0)))))
        np.testing.assert_array_equal(np.asarray(out[1, 3:]), np.asarray(x1[1, 3:]))
    assert errs[2] < 0.02 and errs[2] < errs[1] < errs[0], errs
    stay = gradtts.reverse_ode(CFG, eps_fn, x1, mu, jnp.array([50, 0]), valid)
    np.testing.assert_array_equal(np.asarray(stay[1]), np.asarray(x1[1]))


@pytest.mark.parametrize("scale", [1.0, 3.0])
def test_score_loss_exact_value_in_the_scaled_space(model_params, scale):
    """With model.score_scale s the diffusion runs on s * y: X_t = s (rho y + (1 - rho) mu) +
    sqrt(lambda) xi, the network sees X_t / s; a stand-in network returning its input gives
    loss = mean over valid (frame, bin) of (X_t / s - xi)^2, computed here by hand."""
    _, params = model_params
    cfg = dataclasses.replace(CFG, score_scale=scale)

    class Echo:  # the score network replaced by eps = its x input
        def __init__(self, cfg):
            self.cfg = cfg

        def apply(self, p, xt, mu, t, frame_len, speaker, method):
            assert method == "score"
            return xt

    rng = np.random.default_rng(1)
    y = jnp.asarray(rng.uniform(-1, 1, (2, 7, CFG.n_mels)), jnp.float32)
    mu = jnp.asarray(rng.uniform(-1, 1, (2, 7, CFG.n_mels)), jnp.float32)
    w = jnp.asarray([[1.0] * 7, [1.0] * 4 + [0.0] * 3])
    key = jax.random.key(5)
    got = gradtts.score_loss(Echo(cfg), params, y, mu, w, jnp.array([7, 4]), None, key)
    kt, kx = jax.random.split(key)
    t = np.asarray(jax.random.uniform(kt, (2,), minval=gradtts.T_EPS, maxval=1 - gradtts.T_EPS))
    xi = np.asarray(jax.random.normal(kx, y.shape))
    cum = (0.05 * t + 0.5 * 19.95 * t * t)[:, None, None]
    rho, lam = np.exp(-0.5 * cum), 1.0 - np.exp(-cum)
    xt = scale * (rho * np.asarray(y) + (1 - rho) * np.asarray(mu)) + np.sqrt(lam) * xi
    err = ((xt / scale - xi) ** 2).sum(-1) * np.asarray(w)
    np.testing.assert_allclose(float(got), err.sum() / (11 * CFG.n_mels), rtol=1e-5)
    with pytest.raises(ConfigError, match="score_scale"):
        dataclasses.replace(CFG, score_scale=0.0)


def test_joint_loss_trains_both_decoders_and_ignores_padding(model_params):
    model, params = model_params
    b = batch()
    f = jax.jit(lambda p, bb: mdm_loss(model, p, bb, jax.random.key(3)))
    loss, m = f(params, b)
    assert np.isfinite(float(m["score"])) and float(m["score"]) > 0
    np.testing.assert_allclose(
        float(loss), float(m["elbo"] + m["prior"] + m["duration"] + m["score"]), rtol=1e-6
    )
    b2 = {k: v.copy() for k, v in b.items()}
    b2["mel"][1, 13:] = 7.0  # beyond row 1's frames
    np.testing.assert_allclose(float(f(params, b2)[0]), float(loss), rtol=1e-6)
    grads = jax.grad(lambda p: f(p, b)[0])(params)
    assert float(jnp.abs(grads["score_decoder"]["out"]["kernel"]).max()) > 0
    assert float(jnp.abs(grads["score_decoder"]["time_in"]["kernel"]).max()) > 0
    # crops: a window as long as the buffer changes nothing; a short one still trains both
    # (jitted: op-by-op execution of the loss and its gradient took most of this test's time)
    full = jax.jit(lambda p: mdm_loss(model, p, b, jax.random.key(3), crop=20)[0])(params)
    np.testing.assert_allclose(float(full), float(loss), rtol=1e-6)
    g8 = jax.jit(jax.grad(lambda p: mdm_loss(model, p, b, jax.random.key(3), crop=8)[0]))(params)
    assert float(jnp.abs(g8["score_decoder"]["out"]["kernel"]).max()) > 0
    assert float(jnp.abs(g8["decoder"]["out"]["kernel"]).max()) > 0
    # without the score decoder the same loss has no 'score' term and no such parameters
    plain = AcousticModel(dataclasses.replace(CFG, score_layers=0))
    p0 = {k: v for k, v in params.items() if k != "score_decoder"}
    loss0, m0 = jax.jit(lambda p: mdm_loss(plain, p, b, jax.random.key(3)))(p0)
    assert "score" not in m0
    np.testing.assert_allclose(float(loss0), float(loss - m["score"]), rtol=1e-5)


@pytest.mark.parametrize("greedy", [True, False])
def test_decode_batch_n_equals_batch_1(model_params, greedy):
    model, params = model_params
    b = batch()
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(jnp.arange(3))

    def run(rows, steps):
        return jax.device_get(
            gradtts.gradtts_decode(
                model,
                params,
                jnp.asarray(b["text"][rows]),
                jnp.asarray(b["text_len"][rows]),
                jnp.asarray(b["speaker"][rows]),
                keys[np.asarray(rows)],
                steps=steps,
                frames=24,
                greedy=greedy,
            )
        )

    for steps in (4, 0):
        full = run([0, 1, 2], steps)
        for r in range(3):
            n = int(full.frames[r])
            assert int(full.steps[r]) == (steps or n)
            assert np.isfinite(full.mel[r]).all() and (full.mel[r, n:] == 0).all()
            one = run([r], steps)
            np.testing.assert_allclose(one.mel[0], full.mel[r], atol=1e-4)  # of a 6-nat range
    assert (full.mel >= CFG.mel_lo - 1e-5).all() and (full.mel <= CFG.mel_hi + 1e-5).all()
