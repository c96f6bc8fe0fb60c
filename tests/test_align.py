"""Alignment learning maths (issue 12): beta-binomial prior and the forward-sum CTC loss."""

import itertools
import math

import jax.numpy as jnp
import numpy as np

from jaxtts.train.align import beta_binomial_log_prior, ctc_alignment_loss, prior_weight


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
    loss = float(ctc_alignment_loss(jnp.asarray(scores), jnp.asarray(text_len),
                                    jnp.asarray(speech_len), blank_logprob=-1.0))  # fmt: skip
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
