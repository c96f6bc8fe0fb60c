"""Sampling without a full sort of the vocabulary: the same filtered distribution as a full
sort (exactly), draws that follow it, and rows that do not depend on each other."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtts.decode import sampling
from jaxtts.decode.sampling import SamplingConfig, filter_logits, row_keys, sample_tokens

SETTINGS = [
    SamplingConfig(top_p=0.6),
    SamplingConfig(top_p=0.95),
    SamplingConfig(top_p=0.999),
    SamplingConfig(top_k=5),
    SamplingConfig(top_k=200),  # more than CANDIDATES: the full-sort fallback
    SamplingConfig(top_k=64),  # exactly CANDIDATES
    SamplingConfig(top_k=2000),  # more than the vocabulary: everything kept
    SamplingConfig(top_k=20, top_p=0.8),
    SamplingConfig(temperature=0.7, top_p=0.9),
]


def _logits(seed, b=48, c=3, v=1025):
    """Rows from flat (the top-p set is hundreds of ids: the full-sort fallback) to peaked
    (a handful of ids), and rows with integer logits (ties)."""
    rng = np.random.default_rng(seed)
    scale = np.geomspace(0.05, 8.0, b)[:, None, None]
    x = rng.standard_normal((b, c, v)) * scale
    x[::7] = np.round(x[::7])  # ties, also at the cutoff
    return jnp.asarray(x, jnp.float32)


@pytest.mark.parametrize("s", SETTINGS, ids=str)
def test_filter_equals_the_full_sort(s):
    x = _logits(0)
    got = np.asarray(filter_logits(x, s))
    want = np.asarray(sampling._filter_sorted(x / s.temperature, s))
    np.testing.assert_array_equal(got, want)
    _, _, _, covered = sampling._candidates(x / s.temperature, s)
    assert covered.shape == x.shape[:-1] and covered.dtype == jnp.bool_  # one flag per slot
    if s.top_k == 0:  # the data really exercises both paths
        assert 0 < np.asarray(covered).mean() < 1
    elif s.top_k < sampling.CANDIDATES and s.top_p == 1.0:  # the candidates hold the k-th id
        assert np.asarray(covered).mean() > 0.8


def test_filter_hand_computed():
    probs = np.array([0.5, 0.3, 0.15, 0.05])
    x = jnp.log(jnp.asarray(probs))[None]
    keep = lambda s: np.isfinite(np.asarray(filter_logits(x, s)))[0]  # noqa: E731
    np.testing.assert_array_equal(keep(SamplingConfig(top_p=0.7)), [1, 1, 0, 0])  # 0.5 < 0.7
    np.testing.assert_array_equal(keep(SamplingConfig(top_p=0.8)), [1, 1, 0, 0])  # 0.8 reached
    np.testing.assert_array_equal(keep(SamplingConfig(top_p=0.81)), [1, 1, 1, 0])
    np.testing.assert_array_equal(keep(SamplingConfig(top_k=3, top_p=0.99)), [1, 1, 1, 0])


@pytest.mark.parametrize(
    "s",
    [
        SamplingConfig(),
        SamplingConfig(top_p=0.6),
        SamplingConfig(top_k=3),
        SamplingConfig(top_p=0.9999),
        SamplingConfig(temperature=0.5),  # the unfiltered draw divides by the temperature too
        SamplingConfig(temperature=2.0, top_p=0.9),
    ],
    ids=str,
)
def test_draws_follow_the_filtered_distribution(s):
    """20,000 draws of one slot against softmax(filter_logits): every frequency within 5
    standard errors, and no removed id ever drawn. top_p 0.9999 over a near-flat 100-id row
    keeps more ids than the candidates: the fallback path."""
    n, v = 20_000, 100
    lg = jnp.linspace(0.0, 3.0, v)  # softmax from 0.3 % to 6 % per id
    logits = jnp.broadcast_to(lg, (n, 1, v))
    toks = np.asarray(sample_tokens(row_keys(3, range(n)), logits, s))[:, 0]
    p = np.asarray(jax.nn.softmax(filter_logits(lg[None], s)[0]))
    freq = np.bincount(toks, minlength=v) / n
    assert np.all(freq[p == 0] == 0)
    se = np.sqrt(p * (1 - p) / n) + 1e-12
    assert np.max(np.abs(freq - p) / np.maximum(se, 1 / n)) < 5


def test_rows_do_not_depend_on_each_other():
    """A row decided on the candidates and a row that needs the full sort, sampled together
    and apart: the same tokens (the fallback is chosen per row)."""
    s = SamplingConfig(top_p=0.9)
    x = _logits(2, b=6)
    _, _, _, covered = sampling._candidates(x / s.temperature, s)
    assert not np.asarray(covered).all() and np.asarray(covered).any()
    keys = row_keys(0, range(6))
    together = np.asarray(sample_tokens(keys, x, s))
    for i in range(6):
        alone = np.asarray(sample_tokens(keys[i : i + 1], x[i : i + 1], s))
        np.testing.assert_array_equal(alone[0], together[i])


def test_fallback_by_where_equals_fallback_by_cond(monkeypatch):
    """JAXTTS_SAMPLING_FALLBACK=where (the fallback computed always, no `lax.cond`: no host
    round trip on a GPU) filters and draws exactly as the default `cond`; an unknown mode is a
    one-line error naming the variable."""
    s = SamplingConfig(top_p=0.9)
    x = _logits(2, b=6)
    keys = row_keys(0, range(6))
    got = {}
    for mode in ("cond", "where"):  # (fresh functions: jit's trace cache ignores the variable)
        monkeypatch.setenv("JAXTTS_SAMPLING_FALLBACK", mode)
        draw = lambda keys, x: sample_tokens(keys, x, s)  # noqa: E731
        assert ("cond[" in str(jax.make_jaxpr(draw)(keys, x))) == (mode == "cond")
        got[mode] = (
            np.asarray(jax.jit(lambda x: filter_logits(x, s))(x)),
            np.asarray(jax.jit(draw)(keys, x)),
        )
    for a, b in zip(got["cond"], got["where"], strict=True):
        np.testing.assert_array_equal(a, b)
    monkeypatch.setenv("JAXTTS_SAMPLING_FALLBACK", "never")
    with pytest.raises(sampling.ConfigError, match="JAXTTS_SAMPLING_FALLBACK: 'never'"):
        filter_logits(x, s)


def test_new_temperature_top_k_or_top_p_reuses_the_compiled_loop():
    """temperature, top_k and top_p are traced: a sweep compiles the decode loop once;
    turning top-k or top-p on (or greedy) compiles anew."""

    from lm_reference import batch_of, init_params, random_rows, run

    from jaxtts.decode import driver, registry

    params, rows = init_params(eos_bias=0.9), random_rows(2, seed=1)
    keys = row_keys(0, range(2))

    def go(**kw):
        run(registry.get("car:2"), params, batch_of(rows), keys, max_new_tokens=8,
            sampling=SamplingConfig(**kw))  # fmt: skip
        return driver._decode._cache_size()

    n = go(top_p=0.9)
    assert go(top_p=0.7) == n and go(top_p=0.5, temperature=0.8) == n and go(top_p=0.95) == n
    assert go(top_p=0.5, top_k=5) == n + 1
    assert go(top_p=0.8, top_k=20) == n + 1 and go(top_p=0.7, top_k=100) == n + 1


def test_config_checks_and_defaults():
    """Temperature must be > 0 unless greedy; a decode config without sampling keys is the
    default config (top_k 0 = off, top_p 1 = off)."""
    from jaxtts.errors import ConfigError

    for t in (0.0, -0.5):
        with pytest.raises(ConfigError, match=f"decode.temperature={t}: expected > 0"):
            SamplingConfig(temperature=t)
    assert SamplingConfig(greedy=True, temperature=0.0).greedy
    for bad in (dict(top_k=-1), dict(top_p=0.0), dict(top_p=1.01), dict(min_tokens=-1)):
        with pytest.raises(ConfigError, match="expected"):
            SamplingConfig(**bad)
    assert SamplingConfig.from_config({}) == SamplingConfig()
    cfg = {"temperature": 0.7, "top_k": 5, "top_p": 0.9, "greedy": False, "min_tokens": 3}
    assert SamplingConfig.from_config(cfg) == SamplingConfig(False, 0.7, 5, 0.9, 3)


def test_suppress_early_eos_by_position():
    """EOS is removed from slot c of a row with `length` tokens exactly where length + c <
    min_tokens; other ids and later slots are untouched."""
    logits = jnp.zeros((3, 2, 5))
    length = jnp.array([0, 2, 5])
    out = np.asarray(sampling.suppress_early_eos(logits, length, SamplingConfig(min_tokens=3), 4))
    removed = np.isneginf(out[..., 4])
    np.testing.assert_array_equal(removed, [[True, True], [True, False], [False, False]])
    assert np.all(out[..., :4] == 0)
    same = sampling.suppress_early_eos(logits, length, SamplingConfig(), 4)
    assert same is logits


def test_vocabulary_smaller_than_the_candidates():
    """A vocabulary of fewer ids than CANDIDATES: every id is a candidate, one flag per slot,
    and the filter equals the full sort."""
    x = _logits(5, b=4, c=2, v=10)
    for s in (SamplingConfig(top_k=3), SamplingConfig(top_p=0.7)):
        _, _, _, covered = sampling._candidates(x, s)
        assert covered.shape == (4, 2) and bool(np.asarray(covered).all())
        want = np.asarray(sampling._filter_sorted(x, s))
        np.testing.assert_array_equal(np.asarray(filter_logits(x, s)), want)


def test_inverse_cdf_at_the_top_of_the_range_takes_the_last_kept_id():
    """u = 1 (or a cumulative sum rounded below u * total): the last id of positive weight,
    never a removed one."""
    x = jnp.array([[[0.0, 1.0, -jnp.inf, -jnp.inf]]])  # [B, C, V]
    got = sampling._inverse_cdf(x, jnp.array([[1.0]]))
    np.testing.assert_array_equal(np.asarray(got), [[1]])
    np.testing.assert_array_equal(np.asarray(sampling._inverse_cdf(x, jnp.array([[0.0]]))), [[0]])
