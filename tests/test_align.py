"""Alignment learning maths (issue 12): beta-binomial prior and the forward-sum CTC loss."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtts.errors import ConfigError
from jaxtts.train.align import (
    AlignConfig,
    beta_binomial_log_prior,
    ctc_alignment_loss,
    diagonal_mass,
    prior_bias,
    prior_weight,
)

pytestmark = pytest.mark.slow  # integration / trained models: `make test-fast` skips it


def test_beta_binomial_prior_hand_computed():
    # N = 3 text tokens (n = 2), M = 2 frames, scaling 1. Frame 1: a=1, b=2 ->
    # pmf(0) = B(1,4)/B(1,2) = 1/2, pmf(1) = 2 B(2,3)/B(1,2) = 1/3, pmf(2) = B(3,2)/B(1,2) = 1/6
    lp = beta_binomial_log_prior(jnp.array([3]), jnp.array([2]), x=4, t=3)
    p = np.exp(np.asarray(lp[0]))
    np.testing.assert_allclose(p[0, :3], [1 / 2, 1 / 3, 1 / 6], rtol=1e-5)
    np.testing.assert_allclose(p[1, :3], [1 / 6, 1 / 3, 1 / 2], rtol=1e-5)  # mirrored
    assert np.all(p[:, 3] == 0) and np.all(p[2] == 0)  # padded key and frame
    # rows sum to 1 over the valid keys for other sizes, and the mass moves monotonically
    lp = beta_binomial_log_prior(jnp.array([7, 1]), jnp.array([20, 5]), x=8, t=20, scaling=0.5)
    p = np.exp(np.asarray(lp))
    np.testing.assert_allclose(p[0, :20, :7].sum(-1), 1.0, rtol=1e-4)
    np.testing.assert_allclose(p[1, :5, 0], 1.0, rtol=1e-5)  # one text token: all its mass
    mean_pos = (p[0, :20, :7] * np.arange(7)).sum(-1)
    assert np.all(np.diff(mean_pos) > 0)


def test_prior_weight_anneals():
    w = [float(prior_weight(jnp.asarray(s), 10, 20)) for s in (0, 10, 15, 20, 30)]
    assert w == [1.0, 1.0, 0.5, 0.0, 0.0]


def _brute_force_ctc(logp, n):
    """-log sum over all CTC paths of labels 1..n through T frames of logp [T, 1+n]."""
    t = logp.shape[0]
    total = 0.0
    for path in itertools.product(range(n + 1), repeat=t):
        collapsed, prev = [], None
        for s in path:
            if s != prev and s != 0:
                collapsed.append(s)
            prev = s
        if collapsed == list(range(1, n + 1)):
            total += math.exp(sum(logp[i, s] for i, s in enumerate(path)))
    return -math.log(total)


def test_ctc_alignment_loss_equals_brute_force():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(2, 4, 3)).astype(np.float32)
    text_len, speech_len = np.array([2, 3]), np.array([4, 3])
    loss = float(
        ctc_alignment_loss(
            jnp.asarray(scores), jnp.asarray(text_len), jnp.asarray(speech_len), blank_logprob=-1.0
        )
    )
    expected = []
    for b in range(2):
        n, m = int(text_len[b]), int(speech_len[b])
        s = scores[b, :m, :n]
        s = s - np.log(np.exp(s).sum(-1, keepdims=True))  # log-softmax over valid keys
        full = np.concatenate([np.full((m, 1), -1.0), s], axis=1)
        full = full - np.log(np.exp(full).sum(-1, keepdims=True))
        expected.append(_brute_force_ctc(full, n) / n)
    np.testing.assert_allclose(loss, np.mean(expected), rtol=1e-4)
    # a sharp diagonal attention explains the text almost for free; a reversed one does not
    diag = jnp.asarray(np.where(np.eye(3, dtype=bool), 10.0, -10.0)[None])
    good = float(ctc_alignment_loss(diag, jnp.array([3]), jnp.array([3])))
    bad = float(ctc_alignment_loss(diag[:, ::-1], jnp.array([3]), jnp.array([3])))
    assert good < 0.5 < 5.0 < bad
    # one valid row of 1 frame and 1 text key, beside rows with no text or no speech: the
    # frame emits the label with probability 1 / (1 + e^blank), averaged over that row alone
    one = ctc_alignment_loss(
        jnp.asarray(rng.normal(size=(3, 3, 2)).astype(np.float32)),
        jnp.array([1, 0, 2]),
        jnp.array([1, 3, 0]),
        blank_logprob=-1.0,
    )
    np.testing.assert_allclose(float(one), np.log1p(np.exp(-1.0)), rtol=1e-5)


# ----------------------------------------------------------------------------- wiring (LMTask)


def _lm_batch():
    return {
        "text": np.array([[3, 4, 5, 6, 0], [7, 8, 0, 0, 0]], np.int32),
        "text_len": np.array([4, 2], np.int32),
        "speech": np.array([[1, 2, 3, 4, 5, 6, 7], [9, 8, 7, 0, 0, 0, 0]], np.int32),
        "speech_len": np.array([7, 3], np.int32),
        "prompt_len": np.array([2, 1], np.int32),
    }


def _task(**align):

    from lm_reference import TINY

    from jaxtts.methods.lm.task import LMTask

    return LMTask(TINY, align=AlignConfig(**align) if align else None)


def test_align_config_from_loss_config_errors():
    ok = AlignConfig.from_loss_config(
        {"alpha": 1.0, "align_layers": [1], "align_heads": [0], "align_ctc_weight": 1.0}, 2, 2
    )
    assert ok.layers == (1,) and ok.heads == (0,) and ok.enabled
    assert not AlignConfig.from_loss_config({"align_layers": []}, 2, 2).enabled
    with pytest.raises(ConfigError, match="loss.align_layer: unknown key"):
        AlignConfig.from_loss_config({"align_layer": [1]}, 2, 2)
    with pytest.raises(ConfigError, match=r"loss.align_heads=\[5\]: expected indices in \[0, 2\)"):
        AlignConfig.from_loss_config({"align_layers": [0], "align_heads": [5]}, 2, 2)
    with pytest.raises(ConfigError, match="an index is listed twice"):
        AlignConfig.from_loss_config({"align_layers": [1, 1]}, 2, 2)
    with pytest.raises(ConfigError, match="align_prior_end=1"):
        AlignConfig.from_loss_config(
            {"align_prior_scaling": 1.0, "align_prior_start": 5, "align_prior_end": 1}, 2, 2
        )


def test_lm_task_rejects_unknown_loss_key():
    import ml_collections as mlc

    from jaxtts.methods.lm.task import lm_task_from_config

    task = _task()
    with pytest.raises(ConfigError, match="loss.alpah: unknown key"):
        lm_task_from_config(mlc.ConfigDict({"loss": {"alpah": 1.0}}), task.cfg)


def test_prior_bias_only_on_speech_to_text_block_of_chosen_heads():
    heads = jnp.array([0.0, 1.0])
    bias = np.asarray(
        prior_bias(
            jnp.array([3]), jnp.array([4]), 3, 5, heads, 1.0, jnp.asarray(0.5), normalize=False
        )
    )
    assert bias.shape == (1, 2, 8, 8)
    assert np.all(bias[:, 0] == 0)  # head 0 not aligned
    assert np.all(bias[0, 1, :3] == 0) and np.all(bias[0, 1, :, 3:] == 0)  # text rows, speech keys
    lp = np.asarray(beta_binomial_log_prior(jnp.array([3]), jnp.array([4]), 3, 5))[0]
    np.testing.assert_allclose(bias[0, 1, 3:7, :3], 0.5 * lp[:4, :3], rtol=1e-6)
    assert np.all(bias[0, 1, 7] == 0)  # padded speech frame
    # normalised (the default): each frame's peak text key gets 0, the rest the same offsets
    norm = np.asarray(
        prior_bias(jnp.array([3]), jnp.array([4]), 3, 5, heads, 1.0, jnp.asarray(0.5))
    )
    np.testing.assert_allclose(norm[0, 1, 3:7, :3].max(-1), 0.0, atol=1e-6)
    np.testing.assert_allclose(
        norm[0, 1, 3:7, :3] - bias[0, 1, 3:7, :3],
        -0.5 * lp[:4, :3].max(-1, keepdims=True) + 0 * lp[:4, :3],
        rtol=1e-5,
        atol=1e-6,
    )
    assert np.all(norm[0, 1, 7] == 0) and np.all(norm[:, 0] == 0)


def test_diagonal_mass_perfect_and_uniform():
    n, m = 4, 8
    diag = np.full((1, m, n), -30.0, np.float32)
    diag[0, np.arange(m), np.arange(m) * n // m] = 0.0
    assert float(diagonal_mass(jnp.asarray(diag), jnp.array([n]), jnp.array([m]), 0.0)) > 0.99
    uniform = jnp.zeros((1, m, 40))
    got = float(diagonal_mass(uniform, jnp.array([40]), jnp.array([m]), 0.1))
    assert 0.2 < got < 0.3  # ~ (2 * (0.1 * 40 + 1) + 1) / 40 keys near the diagonal


def test_lm_task_alignment_loss_and_schedule():
    batch = _lm_batch()
    plain = _task()
    params = jax.jit(plain.init)(jax.random.key(0), batch)
    aligned = _task(
        layers=(1,), heads=(1,), ctc_weight=0.5, prior_scaling=1.0, prior_start=10, prior_end=20
    )
    ref, _ = plain.loss(params, batch, jax.random.key(1), train=False)
    f = jax.jit(lambda p, s: aligned.loss(p, batch, jax.random.key(1), train=False, step=s))
    for step, w in ((0, 1.0), (15, 0.5), (25, 0.0)):
        loss, m = f(params, jnp.asarray(step))
        assert float(m["align/prior_weight"]) == w
        np.testing.assert_allclose(
            float(loss), float(m["mtp_loss"]) + 0.5 * float(m["align/ctc"]), rtol=1e-6
        )
        assert float(m["align/ctc"]) > 0 and 0 <= float(m["align/diag_mass"]) <= 1
    # without the prior (weight 0, or evaluation: step None) the forward is the plain model's
    for step in (jnp.asarray(25), None):
        _, m = aligned.loss(params, batch, jax.random.key(1), train=False, step=step)
        np.testing.assert_allclose(float(m["mtp_loss"]), float(ref), rtol=1e-6)
    # with it, only the aligned head's logits move: the MTP loss changes
    _, m0 = f(params, jnp.asarray(0))
    assert abs(float(m0["mtp_loss"]) - float(ref)) > 1e-4
    # the CTC term has gradients on the aligned layer's attention
    g = jax.grad(
        lambda p: aligned.loss(p, batch, jax.random.key(1), train=True, step=jnp.asarray(30))[1][
            "align/ctc"
        ]
    )(params)
    gq = g["stack"]["layer_1"]["attn"]["q"]
    assert float(jnp.abs(jax.tree.leaves(gq)[0]).sum()) > 0
    assert float(jnp.abs(jax.tree.leaves(g["stack"]["layer_1"]["mlp"])[0]).sum()) == 0
