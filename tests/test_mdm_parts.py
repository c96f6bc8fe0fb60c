"""MDM building blocks: MAS against a brute-force search, the discretised logistic mixture
(sums to 1, a hand-computed value, sampling), the ELBO mask and weight, and the decoding orders
(every frame exactly once, padding untouched)."""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtts.errors import ConfigError
from jaxtts.methods.mdm import dmol, orders
from jaxtts.methods.mdm.mas import monotonic_alignment

pytestmark = pytest.mark.slow  # integration / trained models: `make test-fast` skips it


def _brute_force(lp: np.ndarray) -> tuple[float, np.ndarray]:
    """Best monotonic alignment of lp [N, T] by enumerating all durations (each >= 1)."""
    n, t = lp.shape
    best, best_path = -np.inf, None
    for cuts in itertools.combinations(range(1, t), n - 1):
        bounds = (0, *cuts, t)
        path = np.zeros((n, t), bool)
        for i in range(n):
            path[i, bounds[i] : bounds[i + 1]] = True
        score = lp[path].sum()
        if score > best:
            best, best_path = score, path
    return best, best_path


def test_mas_equals_brute_force_on_random_inputs():
    rng = np.random.default_rng(0)
    n_max, t_max = 4, 8
    rows = [(n, t) for n in range(1, 5) for t in range(n, 9)]
    lp = rng.normal(size=(len(rows), n_max, t_max)).astype(np.float32)
    path = np.asarray(
        monotonic_alignment(
            jnp.asarray(lp), jnp.array([r[0] for r in rows]), jnp.array([r[1] for r in rows])
        )
    )
    for b, (n, t) in enumerate(rows):
        score, want = _brute_force(lp[b, :n, :t])
        got = path[b]
        assert not got[n:].any() and not got[:, t:].any(), (n, t)  # padding untouched
        assert (got[:n, :t].sum(0) == 1).all()  # one token per frame
        assert np.isclose(lp[b, :n, :t][got[:n, :t]].sum(), score, atol=1e-5), (n, t)
        assert np.array_equal(got[:n, :t], want), (n, t)  # unique optimum (random floats)


def test_dmol_sums_to_one_and_matches_a_hand_value():
    rng = np.random.default_rng(1)
    params = jnp.asarray(rng.normal(size=(6, 15)).astype(np.float32))  # K = 5
    for q in (2, 10, 100):
        lp = np.asarray(dmol.level_log_probs(params, q))
        np.testing.assert_allclose(np.exp(lp).sum(-1), 1.0, atol=1e-5)
        # nll evaluates only the target's bin: the same value as the full table's entry
        tgt = jnp.asarray(rng.integers(0, q, (6,)))
        np.testing.assert_allclose(
            np.asarray(dmol.nll(params, tgt, q)),
            -lp[np.arange(6), np.asarray(tgt)],
            rtol=1e-5,
            atol=1e-6,
        )
    # one component, mean 0, scale 1, Q = 3: levels at -1, 0, 1, half-width 0.5
    one = jnp.array([0.0, 0.0, 0.0])
    lp = np.exp(np.asarray(dmol.level_log_probs(one, 3)))
    sig = lambda x: 1 / (1 + math.exp(-x))
    want = [sig(-0.5), sig(0.5) - sig(-0.5), 1 - sig(0.5)]
    np.testing.assert_allclose(lp, want, atol=1e-6)
    assert float(dmol.nll(one, jnp.array(1), 3)) == pytest.approx(-math.log(want[1]), abs=1e-6)


def test_dmol_mode_equals_the_full_table():
    """`dmol.mode` (probability space, what decoding uses) = max / argmax of
    `level_log_probs` (log space, every level), including sharp and tail-heavy mixtures."""
    rng = np.random.default_rng(2)
    params = rng.normal(size=(64, 15)).astype(np.float32)  # K = 5
    params[:16, 10:] = -6.0  # sharp components: mass in one level
    params[16:32, 5:10] = rng.choice([-1.4, 1.4], size=(16, 5))  # means past the grid: tails
    params = jnp.asarray(params)
    for q in (2, 10, 100):
        lp = np.asarray(dmol.level_log_probs(params, q))
        top, arg = (np.asarray(x) for x in dmol.mode(params, q))
        np.testing.assert_allclose(top, lp.max(-1), atol=2e-5)
        np.testing.assert_array_equal(arg, lp.argmax(-1))


def test_dmol_sampling_follows_the_distribution():
    params = jnp.array([0.0, 1.5, 0.3, -0.5, -0.2, -1.0])  # K = 2
    q = 5
    keys = jax.random.split(jax.random.key(0), 20000)
    draws = np.asarray(jax.vmap(lambda k: dmol.sample(k, params, q))(keys))
    freq = np.bincount(draws, minlength=q) / draws.size
    want = np.exp(np.asarray(dmol.level_log_probs(params, q)))
    np.testing.assert_allclose(freq, want, atol=0.015)
    assert int(dmol.argmax_level(params, q)) == int(np.argmax(want))


def test_dmol_split_clip_and_temperatures():
    """`split` clips log-scales at MIN_LOG_SCALE (only those); tau2 = 0 puts every draw at its
    component's mean (rounded to a level); tau1 = 0 always picks the largest mixture logit."""
    logits, means, log_s = dmol.split(jnp.array([[0.5, -2.0, 0.1, 0.7, -20.0, -6.9]]))
    np.testing.assert_allclose(np.asarray(logits), [[0.5, -2.0]], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(means), [[0.1, 0.7]], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(log_s), [[-7.0, -6.9]], rtol=1e-6)  # clip at -7
    # K = 2: component 0 (logit 2.0, mean -0.5), component 1 (logit 0.0, mean 0.6), scale e^-2
    params = jnp.array([2.0, 0.0, -0.5, 0.6, -2.0, -2.0])
    keys = jax.random.split(jax.random.key(1), 400)
    q = 11  # levels at -1, -0.8, ..., 1: mean -0.5 -> level 2.5 -> 2 (round half to even)
    draw = jax.vmap(lambda k, t1, t2: dmol.sample(k, params, q, tau1=t1, tau2=t2))
    both = np.asarray(draw(keys, jnp.ones(400), jnp.zeros(400)))
    assert set(np.unique(both)) == {2, 8}  # mean 0.6 -> level 8
    assert 0.75 < np.mean(both == 2) < 0.95  # softmax(2, 0)[0] = 0.881
    np.testing.assert_array_equal(np.asarray(draw(keys, jnp.zeros(400), jnp.zeros(400))), 2)
    # tau2 scales the logistic noise: a wider spread of levels with tau2 = 2 than 0.5
    narrow = np.asarray(draw(keys, jnp.zeros(400), jnp.full(400, 0.5)))
    wide = np.asarray(draw(keys, jnp.zeros(400), jnp.full(400, 2.0)))
    assert np.std(wide) > 2 * np.std(narrow) > 0


def test_elbo_mask_and_weight():
    lengths = jnp.array([10, 1, 0, 7])
    for s in range(20):
        masked, w = orders.elbo_masks(jax.random.key(s), lengths, 12)
        m, w = np.asarray(masked), np.asarray(w)
        for b, t in enumerate([10, 1, 0, 7]):
            assert not m[b, t:].any()
            if t == 0:
                assert w[b] == 0 and not m[b].any()
                continue
            k = int(m[b].sum())  # T - t + 1 masked frames, 1 <= k <= T
            assert 1 <= k <= t and w[b] == pytest.approx(t / k)
    # t ~ U{1..T}: the masked count is uniform on 1..T
    masked, _ = orders.elbo_masks(jax.random.key(99), jnp.full((4000,), 5), 5)
    counts = np.bincount(np.asarray(masked).sum(1), minlength=6)[1:] / 4000
    np.testing.assert_allclose(counts, 0.2, atol=0.03)


@pytest.mark.parametrize("spec", ["random", "l2r", "r2l", "swap:0.01", "swap:0.35", "swap:1"])
def test_static_orders_decode_every_frame_exactly_once(spec):
    name, arg = orders.parse_order(spec)
    lengths = jnp.array([9, 1, 16, 0])
    r = np.asarray(orders.static_ranks(name, arg, jax.random.key(3), lengths, 16))
    for b, t in enumerate([9, 1, 16, 0]):
        assert sorted(r[b, :t].tolist()) == list(range(t))  # a permutation of the steps
        assert (r[b, t:] == 16).all()  # padding never decoded
    if name == "l2r":
        assert r[0, :9].tolist() == list(range(9))
    if name == "r2l":
        assert r[0, :9].tolist() == list(range(8, -1, -1))


def test_swap_count_and_order_errors():
    assert orders.swap_count(100, 1.0) == round(50 * math.log(100))
    assert orders.swap_count(100, 0.001) == 0
    for bad in ("spiral", "swap:2", "swap:x", "topk:0", "l2r:3"):
        with pytest.raises(ConfigError):
            orders.parse_order(bad)
    assert orders.parse_order("topk:4") == ("topk", 4.0)


def test_swap_transposes_each_row_by_its_own_count_and_reaches_every_frame():
    """swap:<lam>: a row of T_b frames gets round(lam * round(T_b / 2 ln T_b)) transpositions,
    not the batch's longest row's count, and any of its frames can move (the first too). A
    2-frame row (1 transposition at lam = 1) is swapped under some keys; a 1-frame row and a row
    whose count rounds to 0 never."""
    lengths = jnp.array([2, 1, 3, 16])
    assert [orders.swap_count(n, 1.0) for n in (2, 1, 3)] == [1, 0, 2]
    assert orders.swap_count(16, 0.05) == 1 and orders.swap_count(3, 0.05) == 0
    moved2, first3, short_fixed, many16 = 0, 0, True, 0
    for s in range(40):
        r = np.asarray(orders.static_ranks("swap", 1.0, jax.random.key(s), lengths, 16))
        moved2 += r[0, :2].tolist() == [1, 0]
        first3 += r[2, 0] != 0
        many16 += (r[3] != np.arange(16)).sum() > 4  # 22 transpositions, not 1
        r5 = np.asarray(orders.static_ranks("swap", 0.05, jax.random.key(s), lengths, 16))
        short_fixed &= r5[2, :3].tolist() == [0, 1, 2]
    assert moved2 > 0 and first3 > 0 and short_fixed and many16 > 30


def test_order_errors_and_mask_types():
    assert orders.parse_order("swap:0") == ("swap", 0.0)  # lambda 0: l2r
    assert orders.parse_order("swap:1") == ("swap", 1.0)
    with pytest.raises(ConfigError, match=r"expected mdm:<order>, order one of \['random'"):
        orders.strategy("mdm", None)
    with pytest.raises(ConfigError, match="'duration' is not a static order"):
        orders.static_ranks("duration", 0.0, jax.random.key(0), jnp.array([4]), 4)
    masked, w = orders.elbo_masks(jax.random.key(0), jnp.array([5, 0]), 6)
    assert masked.dtype == jnp.bool_ and w.dtype == jnp.float32


def test_confident_selection_and_duration_segments():
    conf = jnp.array([[0.1, 0.9, 0.5, 0.9], [0.3, 0.2, 0.1, 0.0]])
    undecoded = jnp.array([[True, True, True, False], [True, True, True, True]])
    sel = np.asarray(orders.select_confident(conf, undecoded, jnp.array([2, 1])))
    assert sel.tolist() == [[False, True, True, False], [True, False, False, False]]
    seg = np.asarray(orders.duration_segments(jnp.array([[2, 1, 3]]), 8))
    assert seg.tolist() == [[0, 0, 1, 2, 2, 2, 3, 3]]
