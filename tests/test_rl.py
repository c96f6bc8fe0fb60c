"""GRPO objective (jaxtts.train.rl): exact hand-computed values, gradients, a bandit run."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxtts.errors import ConfigError
from jaxtts.train.rl import group_advantages, grpo_loss, grpo_update_fn, process_advantages

# Hand-worked example: 2 rollouts x 3 actions, clip_eps = 0.2, the last action of row 1 padded.
RATIOS = [[1.1, 1.5, 0.6], [0.7, 1.0, 0.9]]
ADV = [1.0, -2.0]
MASK = [[1, 1, 1], [1, 1, 0]]
LOGP_OLD = np.log(np.full((2, 3), 0.5, np.float32))  # [N, T]
LOGP = LOGP_OLD + np.log(np.asarray(RATIOS, np.float32))  # [N, T]


def _clip(x, eps=0.2):
    return max(1 - eps, min(1 + eps, x))


def test_group_advantages_values():
    adv = np.asarray(group_advantages(jnp.array([[1.0, 2.0, 3.0], [5.0, 5.0, 5.0]])))
    # std([1,2,3]) = sqrt(2/3) = 0.816497 -> (-1, 0, 1) / 0.816497
    np.testing.assert_allclose(adv, [[-1.2247434, 0.0, 1.2247434], [0.0, 0.0, 0.0]], atol=1e-5)
    assert adv.dtype == np.float32
    raw = np.asarray(
        group_advantages(jnp.array([[1.0, 2.0, 3.0], [5.0, 5.0, 5.0]]), std_normalize=False)
    )
    np.testing.assert_array_equal(raw, [[-1.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    # [0, 0, 4, 4]: mean 2, std 2 -> (-1, -1, 1, 1) (eps shifts the 7th digit)
    np.testing.assert_allclose(
        np.asarray(group_advantages(jnp.array([[0.0, 0.0, 4.0, 4.0]]))),
        [[-1.0, -1.0, 1.0, 1.0]],
        atol=1e-6,
    )


def test_group_advantages_flat_group_is_exactly_zero():
    r = jnp.array([[0.1, 0.1, 0.1], [1e6, 1e6, 1e6]])  # mean of 0.1s is inexact in float32
    for eps in (1e-6, 0.0):
        adv = np.asarray(group_advantages(r, eps=eps))
        assert np.all(adv == 0.0), adv


def test_grpo_loss_hand_worked_token_level():
    loss, m = grpo_loss(LOGP, LOGP_OLD, jnp.array(ADV), jnp.array(MASK, bool), clip_eps=0.2)
    terms = [
        min(r * a, _clip(r) * a)
        for row, a, mrow in zip(RATIOS, ADV, MASK, strict=True)
        for r, v in zip(row, mrow, strict=True)
        if v
    ]
    # row 0 (A=+1): 1.1, min(1.5, 1.2)=1.2 [clipped], min(0.6, 0.8)=0.6
    # row 1 (A=-2): min(-1.4, -1.6)=-1.6 [clipped], -2.0; third action padded
    assert terms == pytest.approx([1.1, 1.2, 0.6, -1.6, -2.0])
    expected = -(1.1 + 1.2 + 0.6 - 1.6 - 2.0) / 5  # = 0.14
    assert float(loss) == pytest.approx(expected, abs=1e-6)
    assert float(loss) == pytest.approx(0.14, abs=1e-6)
    assert float(m["clip_frac"]) == pytest.approx(2 / 5)
    assert float(m["ratio_mean"]) == pytest.approx((1.1 + 1.5 + 0.6 + 0.7 + 1.0) / 5, abs=1e-6)
    assert float(m["adv_mean"]) == pytest.approx((3 * 1.0 + 2 * -2.0) / 5, abs=1e-6)
    assert float(m["kl"]) == 0.0


def test_token_level_vs_sequence_level_on_unequal_masks():
    kw = dict(clip_eps=0.2)
    tok, _ = grpo_loss(LOGP, LOGP_OLD, jnp.array(ADV), jnp.array(MASK), token_level=True, **kw)
    seq, _ = grpo_loss(LOGP, LOGP_OLD, jnp.array(ADV), jnp.array(MASK), token_level=False, **kw)
    row0 = (1.1 + 1.2 + 0.6) / 3  # 0.966667
    row1 = (-1.6 - 2.0) / 2  # -1.8
    assert float(tok) == pytest.approx(0.14, abs=1e-6)
    assert float(seq) == pytest.approx(-(row0 + row1) / 2, abs=1e-6)
    assert float(seq) == pytest.approx(0.4166667, abs=1e-6)
    # a fully padded row is ignored by the sequence-level mean
    logp3 = np.concatenate([LOGP, LOGP[:1]])
    old3 = np.concatenate([LOGP_OLD, LOGP_OLD[:1]])
    mask3 = jnp.array(MASK + [[0, 0, 0]])
    seq3, _ = grpo_loss(logp3, old3, jnp.array(ADV + [5.0]), mask3, token_level=False, **kw)
    assert float(seq3) == pytest.approx(float(seq), abs=1e-6)


def test_kl_k3_term():
    logp = jnp.log(jnp.array([[0.5, 0.2, 0.9]]))  # [1, 3]
    d = [0.5, -0.3, 1.0]  # logp_ref - logp
    ref = logp + jnp.array([d])
    k3 = [math.exp(x) - x - 1 for x in d]  # 0.148721, 0.040818, 0.718282
    assert k3 == pytest.approx([0.1487213, 0.0408182, 0.7182818], abs=1e-6)
    # ratio = 1 and A = 0: the surrogate is 0, so loss = kl_beta * mean(k3)
    loss, m = grpo_loss(logp, logp, jnp.zeros(1), jnp.ones((1, 3)), kl_beta=0.1, logp_ref=ref)
    assert float(m["kl"]) == pytest.approx(sum(k3) / 3, abs=1e-6)
    assert float(loss) == pytest.approx(0.1 * sum(k3) / 3, abs=1e-6)
    # with a nonzero advantage the KL is subtracted from the surrogate (loss = -A + beta*kl)
    loss2, _ = grpo_loss(logp, logp, jnp.array([2.0]), jnp.ones((1, 3)), kl_beta=0.1, logp_ref=ref)
    assert float(loss2) == pytest.approx(-2.0 + 0.1 * sum(k3) / 3, abs=1e-6)
    # dKL/dlogp = 1 - exp(d): gradient of the loss is beta * (1 - exp(d)) / 3
    g = jax.grad(
        lambda lp: grpo_loss(lp, logp, jnp.zeros(1), jnp.ones((1, 3)), kl_beta=0.1, logp_ref=ref)[0]
    )(logp)
    np.testing.assert_allclose(
        np.asarray(g)[0], [0.1 * (1 - math.exp(x)) / 3 for x in d], atol=1e-6
    )


def test_kl_needs_ref():
    with pytest.raises(ValueError, match="logp_ref"):
        grpo_loss(LOGP, LOGP_OLD, jnp.array(ADV), jnp.array(MASK), kl_beta=0.1)


def test_gradient_matches_policy_gradient_unclipped():
    ratios = np.array([[1.1, 0.9, 1.05], [0.85, 1.15, 1.0]], np.float32)  # all inside [0.8, 1.2]
    adv = np.array([1.5, -0.5], np.float32)
    mask = np.array([[1, 1, 1], [1, 1, 0]], np.float32)
    old = np.log(np.full(6, 0.3, np.float32))  # [6]
    theta = old + np.log(ratios.reshape(-1))  # params = logp vector, dlogp/dtheta = I

    def f(th):
        return grpo_loss(th.reshape(2, 3), old.reshape(2, 3), adv, mask)[0]

    g = np.asarray(jax.grad(f)(jnp.asarray(theta))).reshape(2, 3)
    expected = -adv[:, None] * ratios * mask / mask.sum()  # -A * ratio * dlogp / M
    np.testing.assert_allclose(g, expected, atol=1e-6)
    assert g[1, 2] == 0.0  # padded action
    # sequence level: -A * ratio / (|o_i| * N)
    gs = jax.grad(
        lambda th: grpo_loss(th.reshape(2, 3), old.reshape(2, 3), adv, mask, token_level=False)[0]
    )(jnp.asarray(theta))
    exp_s = -adv[:, None] * ratios * mask / (mask.sum(1, keepdims=True) * 2)
    np.testing.assert_allclose(np.asarray(gs).reshape(2, 3), exp_s, atol=1e-6)


def test_gradient_zero_for_clipped_actions():
    # (A>0, r=1.5) and (A<0, r=0.6) are clipped; (A>0, r=0.6) and (A<0, r=1.5) are not
    ratios = np.array([[1.5, 0.6], [0.6, 1.5]], np.float32)
    adv = np.array([1.0, -1.0], np.float32)
    old = np.zeros((2, 2), np.float32)
    lp = jnp.asarray(np.log(ratios))
    loss, m = grpo_loss(lp, old, adv, jnp.ones((2, 2)))
    # objective terms: 1.2, 0.6, -0.8, -1.5 -> loss = -(0.5) / 4
    assert float(loss) == pytest.approx(-(1.2 + 0.6 - 0.8 - 1.5) / 4, abs=1e-6)
    assert float(m["clip_frac"]) == pytest.approx(0.5)
    g = np.asarray(jax.grad(lambda x: grpo_loss(x, old, adv, jnp.ones((2, 2)))[0])(lp))
    assert g[0, 0] == 0.0 and g[1, 0] == 0.0
    np.testing.assert_allclose([g[0, 1], g[1, 1]], [-1.0 * 0.6 / 4, 1.0 * 1.5 / 4], atol=1e-6)


def test_empty_mask_gives_zero_and_finite_grads():
    lp = jnp.asarray(LOGP)
    old = jnp.full((2, 3), -jnp.inf)  # padding may hold -inf
    ref = jnp.full((2, 3), -jnp.inf)
    mask = jnp.zeros((2, 3), bool)
    for token_level in (True, False):

        def f(x, token_level=token_level):
            return grpo_loss(
                x, old, jnp.array(ADV), mask, kl_beta=0.1, logp_ref=ref, token_level=token_level
            )

        (loss, m), g = jax.value_and_grad(f, has_aux=True)(lp)
        assert float(loss) == 0.0
        assert np.all(np.asarray(g) == 0.0)
        assert all(float(v) == 0.0 for v in m.values()), m


def test_bandit_with_adam_learns_best_arm():
    """3-armed bandit, reward = arm index, G = 8 on-policy samples per step, 30 adam steps."""

    def logp_fn(params, batch):
        return jax.nn.log_softmax(params)[batch["actions"]]  # [N, 1]

    opt = optax.adam(0.1)
    step = jax.jit(grpo_update_fn(opt, logp_fn))
    params = jnp.zeros(3, jnp.float32)  # logits, uniform start
    opt_state = opt.init(params)
    key = jax.random.PRNGKey(0)
    for _ in range(30):
        key, sub = jax.random.split(key)
        actions = jax.random.categorical(sub, params, shape=(8, 1))  # [G, 1]
        rewards = actions[:, 0].astype(jnp.float32)[None]  # [1, G]
        batch = {
            "actions": actions,
            "logp_old": logp_fn(params, {"actions": actions}),  # [G, 1]
            "advantages": group_advantages(rewards)[0],  # [G]
            "mask": jnp.ones((8, 1), bool),
        }
        params, opt_state, loss, metrics = step(params, opt_state, batch)
        assert float(metrics["ratio_mean"]) == pytest.approx(1.0)  # on-policy
        assert np.isfinite(float(loss))
    probs = np.asarray(jax.nn.softmax(params))
    assert probs[2] > 0.8
    assert probs[2] == pytest.approx(0.97337747, abs=1e-3)


def test_clip_fraction_of_negative_advantages_alone():
    """One row with A < 0: only its ratio below 1 - eps is clipped (1 of 3); a rule that
    checks the lower bound for A > 0 instead counts none (a mutant the other examples missed:
    their rows made both rules count the same number)."""
    lp = jnp.log(jnp.array([[0.6, 1.5, 1.0]], jnp.float32))
    _, m = grpo_loss(lp, jnp.zeros((1, 3)), jnp.array([-1.0]), jnp.ones((1, 3)))
    assert float(m["clip_frac"]) == pytest.approx(1 / 3)
    # 0.85 is inside [1 - eps, 1 + eps] (eps 0.2), and a row with A = 0 is never clipped
    lp = jnp.log(jnp.array([[0.6, 1.5, 1.0, 0.85]] * 2, jnp.float32))
    _, m = grpo_loss(lp, jnp.zeros((2, 4)), jnp.array([-1.0, 0.0]), jnp.ones((2, 4)), clip_eps=0.2)
    assert float(m["clip_frac"]) == pytest.approx(1 / 8)


@pytest.mark.parametrize("which", ["valid", "logp_old", "logp_ref"])
def test_shape_mismatch_is_a_one_line_error(which):
    """A smaller mask, old log-prob or reference than logp [N, T] is an error naming it, not
    a silent broadcast."""
    lp = jnp.zeros((2, 3))
    for shape in ((2, 2), (2, 4)):  # smaller and larger
        args = dict(logp_old=jnp.zeros((2, 3)), valid=jnp.ones((2, 3)), logp_ref=jnp.zeros((2, 3)))
        args[which] = jnp.zeros(shape)
        with pytest.raises(ConfigError, match="grpo_loss"):
            grpo_loss(
                lp,
                args["logp_old"],
                jnp.ones((2,)),
                args["valid"],
                kl_beta=0.1,
                logp_ref=args["logp_ref"],
            )
    with pytest.raises(ConfigError, match="group_advantages: rewards shape"):
        group_advantages(jnp.ones((4,)))


def test_process_advantages_values():
    # group 0: valid rewards 1, 3 (row 0) and 5 (row 1): mean 3, std sqrt(8/3) = 1.632993
    r = jnp.array([[[1.0, 3.0, 9.0], [5.0, 7.0, 7.0]], [[2.0, 2.0, 2.0], [2.0, 2.0, 0.0]]])
    m = jnp.array([[[1, 1, 0], [1, 0, 0]], [[1, 1, 1], [1, 1, 0]]], bool)
    adv = np.asarray(process_advantages(r, m))
    s = math.sqrt(8 / 3)
    np.testing.assert_allclose(adv[0], [[-2 / s, 0.0, 0.0], [2 / s, 0.0, 0.0]], atol=1e-5)
    assert np.all(adv[1] == 0.0)  # all valid rewards equal (the masked 0 does not count)
    assert adv.dtype == np.float32
    none = np.asarray(process_advantages(r, jnp.zeros_like(m)))
    assert np.all(none == 0.0)  # no valid action: 0, not NaN
    with pytest.raises(ConfigError, match=r"process_advantages: rewards \(2, 3\)"):
        process_advantages(jnp.ones((2, 3)), jnp.ones((2, 3), bool))


def test_grpo_loss_per_action_advantages():
    """[N, T] advantages that are constant over T give the [N] loss and gradients exactly;
    masked entries of a per-action advantage (even inf) change nothing."""
    mask = jnp.array(MASK, bool)
    want, wm = grpo_loss(LOGP, LOGP_OLD, jnp.array(ADV), mask, clip_eps=0.2)
    per = jnp.broadcast_to(jnp.array(ADV)[:, None], (2, 3)).at[1, 2].set(jnp.inf)
    got, gm = grpo_loss(LOGP, LOGP_OLD, per, mask, clip_eps=0.2)
    assert float(got) == pytest.approx(float(want), abs=1e-7)
    assert float(gm["adv_mean"]) == pytest.approx(float(wm["adv_mean"]), abs=1e-7)
    g1 = jax.grad(lambda lp: grpo_loss(lp, LOGP_OLD, jnp.array(ADV), mask)[0])(jnp.asarray(LOGP))
    g2 = jax.grad(lambda lp: grpo_loss(lp, LOGP_OLD, per, mask)[0])(jnp.asarray(LOGP))
    np.testing.assert_allclose(g2, g1, atol=1e-7)
    # one action's own advantage: row 1's first action (ratio 0.7) with A = +1 instead of -2
    one = per.at[1, 0].set(1.0)
    loss, _ = grpo_loss(LOGP, LOGP_OLD, one, mask, clip_eps=0.2)
    # its term goes from min(-1.4, -1.6) = -1.6 to min(0.7, 0.8) = 0.7; 5 valid actions
    assert float(loss) == pytest.approx(float(want) - (0.7 + 1.6) / 5, abs=1e-6)
    with pytest.raises(ConfigError, match=r"advantages \(3,\), expected \[N\]=\(2,\) or"):
        grpo_loss(LOGP, LOGP_OLD, jnp.ones(3), mask)
