"""TTS LM: cache equivalence, decoding vs a Python reference, batch invariance, MTP loss values."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from lm_reference import (
    TINY,
    batch_of,
    init_params,
    random_rows,
    reference_decode,
    run,
    run_in_segments,
)

from jaxtts.decode import registry
from jaxtts.decode.sampling import SamplingConfig, filter_logits, row_keys
from jaxtts.errors import ConfigError
from jaxtts.methods.lm.model import TTSLM, with_bos
from jaxtts.train import losses

pytestmark = pytest.mark.slow  # integration / trained models: `make test-fast` skips it

GREEDY = SamplingConfig(greedy=True)


@pytest.fixture(scope="module")
def params():
    # An EOS bias that makes random rows stop after a few to ~20 tokens.
    return init_params(eos_bias=0.9)


def _text_and_speech(seed: int, b: int, x: int, t: int):
    """Random text ids [B, X] (lengths 8 / 5 / 3 ... clipped to X), their lengths [B], and
    speech inputs [B, T] starting with BOS, for the TINY model."""
    rng = np.random.default_rng(seed)
    text = rng.integers(2, TINY.num_text_symbols, (b, x)).astype(np.int32)
    text_len = np.minimum(np.array([8, 5, 3] * b, np.int32)[:b], x)
    speech = rng.integers(0, TINY.num_speech_tokens, (b, t)).astype(np.int32)
    speech[:, 0] = TINY.bos
    return text, text_len, speech


def test_prefill_and_cached_steps_equal_full_forward(params):
    m = TTSLM(TINY)
    b, x, t = 3, 8, 12
    text, text_len, speech = _text_and_speech(0, b, x, t)
    full_logits, full_h = m.apply(
        {"params": params}, text, text_len, speech, np.full((b,), t, np.int32)
    )
    cache = m.apply({"params": params}, b, x, t + 4, method="init_cache")
    p_len = np.array([4, 2, 1], np.int32)  # per-row prompt lengths (BOS included)
    h, cache = m.apply(
        {"params": params}, text, text_len, speech[:, :4], p_len, cache, method="prefill"
    )
    for i in range(b):
        np.testing.assert_allclose(h[i, : p_len[i]], full_h[i, : p_len[i]], atol=1e-5)
    # then one token at a time, each row from its own offset
    got = [[np.asarray(h[i, j]) for j in range(p_len[i])] for i in range(b)]
    for _ in range(t - 1):
        pos = np.asarray(cache.speech_len)
        nxt = np.stack([speech[i, min(pos[i], t - 1)] for i in range(b)])[:, None]
        h, cache = m.apply({"params": params}, jnp.asarray(nxt), cache, method="extend")
        for i in range(b):
            if pos[i] < t:
                got[i].append(np.asarray(h[i, 0]))
    for i in range(b):
        np.testing.assert_allclose(np.stack(got[i][:t]), full_h[i], atol=2e-5)
    logits = m.apply({"params": params}, full_h, method="heads")
    np.testing.assert_allclose(logits, full_logits, atol=1e-5)
    assert full_logits.shape == (b, t, TINY.num_mtp_heads, TINY.out_vocab)


@pytest.mark.parametrize("text_layers", [(), (0,)])
def test_prefill_at_chosen_rows_equals_those_rows_of_the_full_prefill(params, text_layers):
    """`prefill(rows=...)` runs the last layer at the chosen rows only: the hidden states
    of those rows and the whole cache are those of the full prefill (mixed rows, batch 3;
    also with a layer that caches no text, `text_layers`)."""
    m = TTSLM(dataclasses.replace(TINY, text_layers=text_layers))
    b, x, t = 3, 8, 6
    text, text_len, speech = _text_and_speech(1, b, x, t)
    p_len = np.array([6, 2, 4], np.int32)
    rows = np.array([[5, 0], [1, 1], [3, 2]], np.int32)  # [B, R]: the last slot, and another

    def prefill(r):
        cache = m.apply({"params": params}, b, x, t + 4, method="init_cache")
        return m.apply(
            {"params": params}, text, text_len, speech, p_len, cache, rows=r, method="prefill"
        )

    full_h, full_cache = prefill(None)
    h, cache = prefill(rows)
    assert h.shape == (b, 2, TINY.d_model)
    np.testing.assert_allclose(h, np.take_along_axis(full_h, rows[:, :, None], 1), atol=1e-6)
    for a, c in zip(jax.tree.leaves(full_cache), jax.tree.leaves(cache), strict=True):
        np.testing.assert_array_equal(a, c)


def test_cache_rollback_then_extend_equals_direct(params):
    m = TTSLM(TINY)
    text = np.array([[3, 4, 5, 6]], np.int32)
    toks = np.array([[TINY.bos, 1, 2, 3, 4, 5]], np.int32)
    cache = m.apply({"params": params}, 1, 4, 10, method="init_cache")
    _, cache = m.apply(
        {"params": params}, text, np.array([4]), toks[:, :2], np.array([2]), cache, method="prefill"
    )
    _, c1 = m.apply({"params": params}, jnp.array([[7, 8, 9]]), cache, method="extend")
    c1 = c1.rollback(jnp.array([2]))  # reject all three drafted tokens
    h_a, _ = m.apply({"params": params}, toks[:, 2:5], c1, method="extend")
    h_b, _ = m.apply({"params": params}, toks[:, 2:5], cache, method="extend")
    np.testing.assert_allclose(h_a, h_b, atol=1e-6)


def _prefilled(params, seed: int, speech_slots: int, keys_t: bool = False):
    """The TINY model's cache after the prefill of 3 random rows (text 6 / 4 / 2 symbols of a
    6-slot width, prompt 5 / 3 / 1 tokens with BOS), and 3 random next tokens per row ->
    (prefill hidden states, cache, tokens int32 [3, 3])."""
    m = TTSLM(TINY)
    rng = np.random.default_rng(seed)
    b, x = 3, 6
    text = rng.integers(2, TINY.num_text_symbols, (b, x)).astype(np.int32)
    prompt = rng.integers(0, TINY.num_speech_tokens, (b, 5)).astype(np.int32)
    prompt[:, 0] = TINY.bos
    toks = jnp.asarray(rng.integers(0, TINY.num_speech_tokens, (b, 3)), jnp.int32)
    cache = m.apply({"params": params}, b, x, speech_slots, keys_t=keys_t, method="init_cache")
    h, cache = m.apply(
        {"params": params},
        text,
        np.array([6, 4, 2]),
        prompt,
        np.array([5, 3, 1]),
        cache,
        method="prefill",
    )
    return h, cache, toks


def test_deferred_extend_then_append_equals_extend(params):
    """`extend_deferred` attends the buffer (its own slots masked) plus the block's keys, then
    `KVCache.append` writes the block and keeps count[b] of it: the hidden states agree with
    `extend` to float rounding, the written slots and lengths exactly as extend + rollback."""
    m = TTSLM(TINY)
    p = {"params": params}
    b = 3
    _, cache, toks = _prefilled(params, seed=3, speech_slots=16)
    h_ref, c_ref = m.apply(p, toks, cache, method="extend")
    emb = m.apply(p, toks, method="embed_speech")
    h, blocks = m.apply(p, emb, cache, method="extend_deferred")
    np.testing.assert_allclose(h, h_ref, atol=2e-6)
    assert blocks[0].k.shape == (b, TINY.num_heads, 3, TINY.head_dim)
    count = jnp.array([3, 1, 2], jnp.int32)
    got = cache.append(blocks, count)
    want = c_ref.rollback(cache.speech_len + count)
    np.testing.assert_array_equal(got.speech_len, want.speech_len)
    for g, w in zip(got.layers, want.layers, strict=True):
        np.testing.assert_allclose(g.k, w.k, atol=2e-6)
        np.testing.assert_allclose(g.v, w.v, atol=2e-6)
    np.testing.assert_array_equal(cache.append(blocks).speech_len, c_ref.speech_len)


def test_transposed_keys_cache_equals_the_plain_one(params):
    """A cache holding its keys transposed ([B, N, H, S], `multi_row_keys`) through prefill,
    a 3-token extend, a deferred extend + append and a resize: the same hidden states (the
    logits sum in another order) and the same buffers, transposed."""
    m = TTSLM(TINY)
    p = {"params": params}
    x = 6
    outs = {}
    for keys_t in (False, True):
        h0, cache, toks = _prefilled(params, seed=5, speech_slots=8, keys_t=keys_t)
        h1, cache = m.apply(p, toks, cache, method="extend")
        cache = cache.resize(16)
        emb = m.apply(p, toks, method="embed_speech")
        h2, blocks = m.apply(p, emb, cache, method="extend_deferred")
        cache = cache.append(blocks, jnp.array([3, 1, 2], jnp.int32))
        h3, cache = m.apply(p, toks[:, :1], cache, method="extend")
        outs[keys_t] = (h0, h1, h2, h3, cache)
    *h_plain, plain = outs[False]
    *h_t, trans = outs[True]
    for a, b_ in zip(h_plain, h_t, strict=True):
        np.testing.assert_allclose(a, b_, atol=2e-6)
    assert trans.num_slots == plain.num_slots == x + 16
    np.testing.assert_array_equal(trans.speech_len, plain.speech_len)
    for lp, lt in zip(plain.layers, trans.layers, strict=True):
        assert lt.keys_t and lt.k.shape == lp.k.shape[:2] + lp.k.shape[:1:-1]
        np.testing.assert_allclose(lt.k, np.swapaxes(np.asarray(lp.k), 2, 3), atol=2e-6)
        np.testing.assert_allclose(lt.v, lp.v, atol=2e-6)
    np.testing.assert_array_equal(
        trans.layers[0].k[..., :x], np.swapaxes(plain.layers[0].k, 2, 3)[..., :x]
    )


def test_prefill_against_transposed_keys_equals_the_plain_contraction(params, monkeypatch):
    """A prefill's 11 queries contract against k^T (`attention._KEYS_T_QUERIES`): the same
    hidden states and cache as the plain [S, H] contraction, to float rounding."""
    from jaxtts.nn import attention

    h_t, cache_t, _ = _prefilled(params, seed=5, speech_slots=8)
    monkeypatch.setattr(attention, "_KEYS_T_QUERIES", 10**9)
    h, cache, _ = _prefilled(params, seed=5, speech_slots=8)
    np.testing.assert_allclose(h_t, h, atol=2e-6)
    for a, c in zip(jax.tree.leaves(cache_t), jax.tree.leaves(cache), strict=True):
        np.testing.assert_allclose(a, c, atol=2e-6)


def test_fused_projections_layout_is_the_same_function(params):
    """Decoding's layout (`fuse_projections`: q/k/v as one [D, 3, N, H] kernel, gate/up as one
    [D, 2, F]) is the tree the fused model inits, and computes what the plain model does: the
    full forward to float rounding, and greedy decodes (prefill with its rows path, cached
    steps of 1 and 3 rows) token for token, at float32 and bfloat16."""
    from jaxtts.decode.driver import decode
    from jaxtts.decode.precision import at_precision, cast_kernels
    from jaxtts.nn.layers import fuse_projections

    fused_cfg = dataclasses.replace(TINY, fused_projections=True)
    fused = fuse_projections(params)
    like = jax.eval_shape(lambda: init_params(fused_cfg))
    assert jax.tree.structure(like) == jax.tree.structure(fused)
    layer = fused["stack"]["layer_0"]
    assert layer["attn"]["qkv"]["kernel"].shape == (TINY.d_model, 3, TINY.num_heads, TINY.head_dim)
    assert layer["mlp"]["wi_fused"]["kernel"].shape == (TINY.d_model, 2, TINY.d_ff)
    np.testing.assert_array_equal(
        layer["attn"]["qkv"]["kernel"][:, 1], params["stack"]["layer_0"]["attn"]["k"]["kernel"]
    )
    text, text_len, speech = _text_and_speech(4, 3, 8, 10)
    s_len = np.array([10, 7, 4], np.int32)
    want = TTSLM(TINY).apply({"params": params}, text, text_len, speech, s_len)[0]
    got = TTSLM(fused_cfg).apply({"params": fused}, text, text_len, speech, s_len)[0]
    np.testing.assert_allclose(got, want, atol=1e-5)
    gelu = dataclasses.replace(TINY, mlp="gelu")  # one MLP input kernel: only q/k/v fused
    g_params = init_params(gelu)
    g_fused = fuse_projections(g_params)
    assert (
        "wi" in g_fused["stack"]["layer_0"]["mlp"] and "qkv" in g_fused["stack"]["layer_0"]["attn"]
    )
    want = TTSLM(gelu).apply({"params": g_params}, text, text_len, speech, s_len)[0]
    got = TTSLM(dataclasses.replace(gelu, fused_projections=True)).apply(
        {"params": g_fused}, text, text_len, speech, s_len
    )[0]
    np.testing.assert_allclose(got, want, atol=1e-5)
    batch = batch_of(random_rows(4, seed=2))
    keys = row_keys(0, range(4))
    for precision in ("float32", "bfloat16"):
        models, p = at_precision({"target": TTSLM(TINY)}, {"target": params}, precision)
        assert models["target"].cfg.fused_projections
        plain_models = {"target": TTSLM(dataclasses.replace(TINY, dtype=precision))}
        plain = {"target": cast_kernels(params, precision)}
        for spec in ("far", "car:3"):
            strat = registry.get(spec)
            kw = dict(max_new_tokens=24, sampling=GREEDY)
            a = decode(strat, models, p, batch, keys, **kw)
            b = decode(strat, plain_models, plain, batch, keys, **kw)
            np.testing.assert_array_equal(a.tokens, b.tokens, err_msg=f"{spec} {precision}")
            np.testing.assert_array_equal(a.length, b.length)


@pytest.mark.parametrize("spec", ["far", "car:2", "car:4"])
def test_while_loop_equals_python_reference(params, spec):
    strat = registry.get(spec)
    rows = random_rows(5, seed=1)
    out = run(
        strat, params, batch_of(rows), row_keys(0, range(5)), max_new_tokens=24, sampling=GREEDY
    )
    lengths = []
    for i, (t, p) in enumerate(rows):
        ref = reference_decode(params, t, p, strat.chunk, 24)
        got = np.asarray(out.tokens[i, : out.length[i]]).tolist()
        assert got == ref, (spec, i)
        assert np.all(np.asarray(out.tokens[i, out.length[i] :]) == -1)
        assert int(out.steps[i]) == (
            len(ref) // strat.chunk + 1 if len(ref) < 24 else -(-24 // strat.chunk)
        )
        lengths.append(len(ref))
    assert len(set(lengths)) > 2, lengths  # the rows really stop at different times
    assert int(out.num_forwards) == int(np.max(out.steps))


@pytest.mark.parametrize("spec", ["far", "car:3", "vadusa:2"])
def test_segments_equal_one_call(params, spec):
    """Resumable decoding (`driver.start/advance/output`): segments of 1, 3, 7, ... steps give
    the tokens, lengths, step counts and flags of one `decode` call, sampled (per-row keys per
    step), and every segment length runs the same compiled segment."""
    from jaxtts.decode import driver

    rows = random_rows(5, seed=4)
    keys = row_keys(3, range(5))
    s = SamplingConfig(temperature=1.0, top_k=8)
    strat = registry.get(spec)
    want = run(strat, params, batch_of(rows), keys, max_new_tokens=24, sampling=s)
    before = driver._advance._cache_size()
    got, n_seg = run_in_segments(
        strat,
        {"target": TTSLM(TINY)},
        {"target": params},
        batch_of(rows),
        keys,
        max_new_tokens=24,
        sampling=s,
        seg=[1, 3, 7],
    )
    assert n_seg >= 3
    for name in ("tokens", "length", "steps", "hit_max", "num_forwards"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    assert driver._advance._cache_size() - before <= 1  # one segment program for 1, 3 and 7
    assert int(np.max(want.length)) > 5


@pytest.mark.parametrize(
    "spec,sampling,seed",
    [
        ("car:3", GREEDY, 2),
        ("car:2", SamplingConfig(temperature=1.0, top_k=8), 3),
    ],
    ids=["greedy", "sampling"],
)
def test_batch_n_equals_batch_1(params, spec, sampling, seed):
    """Mixed text/prompt lengths, the batch padded wider than any row; per-row keys."""
    rows = random_rows(5, seed=seed)
    strat = registry.get(spec)
    big = run(
        strat,
        params,
        batch_of(rows, 16, 8),
        row_keys(5, range(5)),
        max_new_tokens=20,
        sampling=sampling,
    )
    for i, row in enumerate(rows):
        one = run(
            strat, params, batch_of([row]), row_keys(5, [i]), max_new_tokens=20, sampling=sampling
        )
        n = int(one.length[0])
        assert int(big.length[i]) == n
        np.testing.assert_array_equal(big.tokens[i, :n], one.tokens[0, :n])


def test_car_c1_equals_far(params):
    rows = random_rows(4, seed=4)
    a = run(
        registry.get("far"),
        params,
        batch_of(rows),
        row_keys(0, range(4)),
        max_new_tokens=20,
        sampling=GREEDY,
    )
    b = run(
        registry.get("car:1"),
        params,
        batch_of(rows),
        row_keys(0, range(4)),
        max_new_tokens=20,
        sampling=GREEDY,
    )
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.steps, b.steps)


def test_eos_in_chunk_stops_row_at_first_eos():
    """Scripted logits: with chunk 3 and head 2 certain of EOS, each row accepts exactly one
    token and stops; the token head 3 proposed after the EOS is discarded."""
    params = init_params(seed=4)
    eos = TINY.eos
    w = params["head_2"]["out"]["kernel"]
    # a bias of 50 in head 2's first residual block shifts every feature by ~50, and an output
    # kernel that only reads them into EOS makes EOS win by ~50 * D
    params["head_2"]["res_0"]["bias"] = params["head_2"]["res_0"]["bias"].at[:].set(50.0)
    params["head_2"]["out"]["kernel"] = jnp.zeros_like(w).at[:, eos].set(1.0)
    params["base_head"]["bias"] = params["base_head"]["bias"].at[eos].set(-100.0)
    rows = random_rows(3, seed=6)
    batch = batch_of(rows)
    out = run(
        registry.get("car:3"),
        params,
        batch,
        row_keys(0, range(3)),
        max_new_tokens=10,
        sampling=GREEDY,
    )
    np.testing.assert_array_equal(out.length, [1, 1, 1])
    np.testing.assert_array_equal(out.steps, [1, 1, 1])
    assert not np.any(np.asarray(out.hit_max))
    assert np.all(np.asarray(out.tokens[:, 1:]) == -1)
    for i, (t, p) in enumerate(rows):
        assert reference_decode(params, t, p, 3, 10) == [int(out.tokens[i, 0])]
    far = run(
        registry.get("far"),
        params,
        batch,
        row_keys(0, range(3)),
        max_new_tokens=10,
        sampling=GREEDY,
    )  # the base head never stops
    np.testing.assert_array_equal(far.length, [10, 10, 10])
    assert np.all(np.asarray(far.hit_max)) and int(far.num_forwards) == 10


def test_strategy_registry_errors():
    with pytest.raises(ConfigError, match="unknown strategy 'xyz'"):
        registry.get("xyz")
    with pytest.raises(ConfigError, match="expected car:<chunk size>"):
        registry.get("car:abc")
    with pytest.raises(ConfigError, match="needs 7 prediction heads, the model has 4"):
        registry.get("car:7").check({"target": TTSLM(TINY)})


def test_filter_logits_top_k_top_p():
    logits = jnp.log(jnp.array([0.5, 0.3, 0.15, 0.05]))
    k2 = filter_logits(logits, SamplingConfig(top_k=2))
    assert np.isfinite(np.asarray(k2)).tolist() == [True, True, False, False]
    p = filter_logits(logits, SamplingConfig(top_p=0.7))  # 0.5 + 0.3 >= 0.7
    assert np.isfinite(np.asarray(p)).tolist() == [True, True, False, False]
    p1 = filter_logits(logits, SamplingConfig(top_p=0.4))
    assert np.isfinite(np.asarray(p1)).tolist() == [True, False, False, False]
    t = filter_logits(logits, SamplingConfig(temperature=2.0))
    np.testing.assert_allclose(t, logits / 2.0, rtol=1e-6)


def test_mtp_targets_and_loss_hand_computed():
    # one row: prompt of 1 token, 2 target tokens, EOS; K = 2 heads; vocab 4 (EOS = 3)
    speech = jnp.array([[2, 0, 1, 0]])  # last entry is padding
    tgt, valid = losses.mtp_targets(speech, jnp.array([3]), jnp.array([1]), eos=3, num_heads=2)
    # input positions t = 0..4 of [BOS, 2, 0, 1, PAD]; head1 targets y_t, head2 y_{t+1}
    np.testing.assert_array_equal(tgt[0, :, 0], [2, 0, 1, 3, 0])
    np.testing.assert_array_equal(valid[0, :, 0], [False, True, True, True, False])
    np.testing.assert_array_equal(tgt[0, :4, 1], [0, 1, 3, 0])
    np.testing.assert_array_equal(valid[0, :, 1], [True, True, True, False, False])
    logits = jnp.log(jnp.full((1, 5, 2, 4), 0.25)).at[0, 1, 0, 0].set(jnp.log(3.0))
    loss, metrics = losses.mtp_loss(logits, tgt, valid, alpha=0.5)
    ce_uniform = np.log(4.0)
    ce_boost = -np.log(3.0 / (3.0 + 0.75))  # the boosted, correct logit at (t=1, head 1)
    head1 = ce_boost + 2 * ce_uniform  # 3 valid targets
    head2 = 3 * ce_uniform  # 3 valid targets
    np.testing.assert_allclose(float(loss), (head1 + 0.5 * head2) / 3, rtol=1e-6)
    assert float(metrics["weight"]) == 3.0
    np.testing.assert_allclose(float(metrics["ce_1"]), head1 / 3, rtol=1e-6)
    np.testing.assert_allclose(float(metrics["acc_1"]), 1 / 3, rtol=1e-6)


def test_lm_task_loss_ignores_padding_rows_and_prompt():
    from jaxtts.methods.lm.task import LMTask

    task = LMTask(TINY)
    batch = {
        "text": np.array([[3, 4, 5, 0], [0, 0, 0, 0]], np.int32),
        "text_len": np.array([3, 0], np.int32),
        "speech": np.array([[1, 2, 3, 4, 0], [0, 0, 0, 0, 0]], np.int32),
        "speech_len": np.array([4, 0], np.int32),
        "prompt_len": np.array([2, 0], np.int32),
    }
    params = jax.jit(task.init)(jax.random.key(0), batch)
    loss_fn = jax.jit(lambda p, b: task.loss(p, b, jax.random.key(1), train=False))
    loss, metrics = loss_fn(params, batch)
    assert float(metrics["weight"]) == 3.0  # tokens 3, 4 and EOS of row 0; prompt excluded
    one = {k: v[:1] for k, v in batch.items()}
    loss1, _ = loss_fn(params, one)
    np.testing.assert_allclose(float(loss), float(loss1), rtol=1e-6)
    other = dict(batch, speech=batch["speech"].copy())
    other["speech"][0, :2] = [7, 8]  # change only the prompt tokens' targets
    _, m2 = loss_fn(params, other)
    assert float(m2["weight"]) == 3.0


def test_min_tokens_suppresses_early_eos(params):
    rows = random_rows(4, seed=7)
    strat = registry.get("car:2")
    free = run(
        strat, params, batch_of(rows), row_keys(0, range(4)), max_new_tokens=30, sampling=GREEDY
    )
    assert int(np.min(free.length)) < 6  # some rows stop early without the constraint
    out = run(
        strat,
        params,
        batch_of(rows),
        row_keys(0, range(4)),
        max_new_tokens=30,
        sampling=SamplingConfig(greedy=True, min_tokens=6),
    )
    assert int(np.min(out.length)) >= 6
    with pytest.raises(ConfigError, match="min_tokens=-1"):
        SamplingConfig(min_tokens=-1)


def test_split_text_exact():
    from jaxtts.synthesize import split_text

    fits = lambda s: len(s) <= 25  # noqa: E731
    text = "The cat sat on the mat. The dog ran to the park, and the bird sang all day long."
    assert split_text(text, fits) == [
        "The cat sat on the mat.",
        "The dog ran to the park,",
        "and the bird",
        "sang all day long.",
    ]
    assert split_text("  short  text ", fits) == ["short text"]
    assert split_text("", fits) == []
    assert split_text("x" * 40, fits) == ["x" * 40]  # one word: never cut inside it
    pieces = split_text(text, lambda s: len(s) <= 60)
    assert " ".join(pieces) == text and all(len(p) <= 60 for p in pieces)


def test_lora_starts_at_base_model_and_only_adapters_train(params):
    import dataclasses

    import ml_collections as mlc
    import optax

    from jaxtts.nn.layers import lora_only
    from jaxtts.train.optim import make_optimizer

    cfg = dataclasses.replace(TINY, lora_rank=4, lora_alpha=8.0)
    m = TTSLM(cfg)
    text, speech = np.array([[3, 4, 5]], np.int32), np.array([[TINY.bos, 1, 2]], np.int32)
    lens = (np.array([3]), np.array([3]))
    lp = jax.jit(m.init)(jax.random.key(1), text, lens[0], speech, lens[1])["params"]
    lp = jax.tree.map(lambda x: getattr(x, "value", x), lp, is_leaf=lambda x: hasattr(x, "value"))
    # copy the base weights in: with B = 0 the adapted model equals the base model
    merged = jax.tree_util.tree_map_with_path(
        lambda p, x: x if "lora" in jax.tree_util.keystr(p) else _get(params, p), lp
    )
    base_out = TTSLM(TINY).apply({"params": params}, text, lens[0], speech, lens[1])[0]
    lora_out = m.apply({"params": merged}, text, lens[0], speech, lens[1])[0]
    np.testing.assert_allclose(lora_out, base_out, atol=1e-6)
    mask = lora_only(merged)
    n_lora = sum(jax.tree.leaves(mask))
    assert n_lora == 2 * 7 * TINY.num_layers  # q k v o wi_gate wi_up wo, A and B each
    tx = make_optimizer(
        mlc.ConfigDict(dict(learning_rate=1e-2, steps=10, warmup_steps=0)), trainable=lora_only
    )
    grads = jax.tree.map(jnp.ones_like, merged)
    updates, _ = tx.update(grads, tx.init(merged), merged)
    new = optax.apply_updates(merged, updates)
    changed = jax.tree.map(lambda a, b: bool(np.any(np.asarray(a) != np.asarray(b))), merged, new)
    assert jax.tree.leaves(changed) == jax.tree.leaves(mask)


def test_merge_lora_folds_the_adapters_into_the_kernels(params):
    """W' = W + (alpha / r) A B, exactly on a hand example; an adapted TTS LM with non-zero
    adapters equals the plain model (lora_rank 0) on the merged parameters."""
    import dataclasses

    from jaxtts.nn.layers import merge_lora

    tree = {
        "q": {
            "kernel": np.array([[1.0, 0.0], [0.0, 1.0]], np.float32),
            "lora_a": np.array([[1.0], [2.0]], np.float32),  # [D, R=1]
            "lora_b": np.array([[3.0, -1.0]], np.float32),  # [R, F]
        },
        "norm": {"scale": np.ones(2, np.float32)},
    }
    out = merge_lora(tree, lora_rank=1, lora_alpha=2.0)  # scale 2
    np.testing.assert_array_equal(out["q"]["kernel"], [[7.0, -2.0], [12.0, -3.0]])
    assert set(out["q"]) == {"kernel"} and out["norm"] is not tree["norm"]
    assert merge_lora(tree, lora_rank=0) is tree

    cfg = dataclasses.replace(TINY, lora_rank=4, lora_alpha=8.0)
    text, speech = np.array([[3, 4, 5]], np.int32), np.array([[TINY.bos, 1, 2]], np.int32)
    lens = (np.array([3]), np.array([3]))
    lp = jax.jit(TTSLM(cfg).init)(jax.random.key(1), text, lens[0], speech, lens[1])["params"]
    lp = jax.tree.map(lambda x: getattr(x, "value", x), lp, is_leaf=lambda x: hasattr(x, "value"))
    rng = np.random.default_rng(0)
    lp = jax.tree_util.tree_map_with_path(  # every adapter non-zero
        lambda p, x: (
            rng.normal(0, 0.1, x.shape).astype(np.float32)
            if "lora_b" in jax.tree_util.keystr(p)
            else x
        ),
        lp,
    )
    adapted = TTSLM(cfg).apply({"params": lp}, text, lens[0], speech, lens[1])[0]
    plain = TTSLM(TINY).apply({"params": merge_lora(lp, 4, 8.0)}, text, lens[0], speech, lens[1])
    base = TTSLM(TINY).apply({"params": params}, text, lens[0], speech, lens[1])[0]
    assert np.abs(np.asarray(adapted) - np.asarray(base)).max() > 1e-2  # the adapters act
    np.testing.assert_allclose(plain[0], adapted, atol=1e-5)


def test_block_with_last_queries_equals_the_last_rows():
    """`Block(..., queries=n)` (TLDR's compressor in decoding) computes the last n rows of the
    full block: their attention over every key, their MLP."""
    from jaxtts.nn.transformer import Block, StackConfig

    cfg = StackConfig(num_layers=1, num_heads=2, head_dim=8, d_ff=32, rope_theta=10_000.0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 7, 16)).astype(np.float32)
    pos = np.broadcast_to(np.arange(7), (2, 7))
    mask = np.tril(np.ones((7, 7), bool))[None] & (rng.random((2, 1, 7)) > 0.2)
    mask[:, :, -1] = True
    block = Block(cfg)
    p = block.init(jax.random.key(0), x, pos, mask)
    full, _ = block.apply(p, x, pos, mask)
    last, _ = block.apply(p, x, pos, mask[:, -3:], queries=3)
    assert last.shape == (2, 3, 16)
    np.testing.assert_allclose(last, full[:, -3:], atol=1e-5)


def _get(tree, path):
    for k in path:
        tree = tree[k.key]
    return tree


def test_rope_table_lookup_equals_the_computed_table():
    """`RopeTable.lookup` (constant rows gathered by position) gives the in-graph `RopeTable.of`
    bit for bit; positions past the bound are clipped to its last row."""
    from jaxtts.nn.layers import RopeTable

    pos = jnp.asarray(np.random.default_rng(0).integers(0, 700, (3, 40)), jnp.int32)
    want = jax.jit(lambda p: RopeTable.of(p, 16, 10_000.0))(pos)
    got = jax.jit(lambda p: RopeTable.lookup(p, 700, 16, 10_000.0))(pos)
    np.testing.assert_array_equal(got.cos, want.cos)
    np.testing.assert_array_equal(got.sin, want.sin)
    assert got.cos.shape == (3, 40, 1, 8)
    far = RopeTable.lookup(jnp.array([[699, 5000]]), 700, 16)
    np.testing.assert_array_equal(far.cos[0, 0], far.cos[0, 1])
    half = RopeTable.of(pos, 16)[:, -5:]  # indexing slices positions
    np.testing.assert_array_equal(half.sin, want.sin[:, -5:])


def test_lm_forwards_compute_no_rotary_angles(params):
    """The prefill and the cached forward read their rotary cos / sin from constant rows: the
    compiled programs hold no cosine or sine (computed per layer, XLA evaluated them again in
    every layer's query and key fusions: RESULTS rope-table)."""
    m = TTSLM(TINY)
    p = {"params": params}
    b, x = 2, 6
    text = jnp.ones((b, x), jnp.int32)
    prompt = jnp.full((b, 4), TINY.bos, jnp.int32)
    lens = jnp.array([6, 3], jnp.int32), jnp.array([4, 2], jnp.int32)

    def prefill_then_extend(p):
        cache = m.apply(p, b, x, 12, method="init_cache")
        _, cache = m.apply(p, text, lens[0], prompt, lens[1], cache, method="prefill")
        h, _ = m.apply(p, jnp.ones((b, 3), jnp.int32), cache, method="extend")
        return h

    hlo = jax.jit(prefill_then_extend).lower(p).compile().as_text()
    assert " cosine(" not in hlo and " sine(" not in hlo


@pytest.mark.parametrize("spec", ["far", "car:3", "vadusa:2"])
def test_split_prefill_equals_the_batch_padded_to_the_loop_width(params, spec):
    """`PromptBatch.text_width` wider than the text: the prefill runs at the batch's width and
    its caches are widened for the loop. Greedy tokens, lengths and steps equal those of the
    batch padded to `text_width`, and two narrow widths share one compiled loop."""
    from jaxtts.decode import driver

    rows = random_rows(5, seed=6)
    keys = row_keys(1, range(5))
    strat = registry.get(spec)
    want = run(
        strat, params, batch_of(rows, text_width=24), keys, max_new_tokens=20, sampling=GREEDY
    )
    loops = driver._loop._cache_size()
    for x in (9, 16):
        got = run(
            strat,
            params,
            batch_of(rows, text_width=x).replace(text_width=24),
            keys,
            max_new_tokens=20,
            sampling=GREEDY,
        )
        for name in ("tokens", "length", "steps", "num_forwards"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    assert driver._loop._cache_size() - loops == 1  # one loop for both prefill widths
    assert len(set(np.asarray(want.length).tolist())) > 2


def test_widened_cache_holds_the_prefill_keys_and_empty_text_slots(params):
    """`KVCache.widen_text`: the text keys stay in their slots, zero slots follow them, the
    speech segment moves up; values and transposed keys alike."""
    from jaxtts.methods.lm.strategies import prefill

    rows = random_rows(3, seed=2)
    model = TTSLM(TINY)
    for keys_t in (False, True):
        _, narrow = prefill(model, params, batch_of(rows, text_width=9), 16, keys_t=keys_t)
        _, wide = prefill(model, params, batch_of(rows, text_width=24), 16, keys_t=keys_t)
        got = narrow.widen_text(24)
        assert got.text_slots == 24 and got.num_slots == wide.num_slots
        ax = 3 if keys_t else 2
        for g, w in zip(got.layers, wide.layers, strict=True):
            for a, b, axis in ((g.k, w.k, ax), (g.v, w.v, 2)):
                a, b = np.moveaxis(np.asarray(a), axis, -1), np.moveaxis(np.asarray(b), axis, -1)
                np.testing.assert_allclose(a[..., :9], b[..., :9], atol=1e-5)  # text 0..8
                assert not np.any(a[..., 9:24])  # the inserted slots
                np.testing.assert_allclose(a[..., 24:], b[..., 24:], atol=1e-5)  # speech
    with pytest.raises(ValueError, match="holds 24 text slots"):
        wide.widen_text(16)


def test_slots_prefill_a_request_at_its_own_width(params):
    """`Slots` (continuous batching): a request prefilled at the narrowest of its
    `prefill_widths` (the split prefill into the slots' width) decodes the tokens of one
    prefilled at the slots' full text width."""
    from jaxtts.decode.slots import Slots

    rows = random_rows(3, seed=3)
    keys = row_keys(2, range(3))
    sampling = SamplingConfig(temperature=1.0, top_k=8)
    out = {}
    for step in (8, 32):
        pool = Slots(
            registry.get("car:2"),
            {"target": TTSLM(TINY)},
            {"target": params},
            num_slots=4,
            text_width=32,
            prompt_width=8,
            prompt_example=np.zeros((8,), np.int32),
            max_new_tokens=16,
            sampling=sampling,
            prefill_bucket=step,
        )
        assert pool.prefill_widths == ((8, 16, 24, 32) if step == 8 else (32,))
        for i, (t, p) in enumerate(rows):
            pool.insert(i, (t, p, 0), keys[i : i + 1])
        for _ in range(20):
            pool.advance(4)
        out[step] = pool.read()
    for a, b in zip(out[8][:3], out[32][:3], strict=True):  # length, tokens, done
        np.testing.assert_array_equal(a, b)
    assert out[8][2][:3].all() and len(set(out[8][0][:3].tolist())) > 1


def test_input_noise_replaces_only_target_inputs():
    """`loss.input_noise`: BOS, the prompt and the padding are never replaced; at rate 0 the
    inputs are unchanged, near 1 every target input is a random speech token (not a special
    one); the loss's targets are the clean tokens; a bad rate or key is a one-line error."""
    import ml_collections as mlc

    from jaxtts.methods.lm.task import LMTask, corrupt_inputs, lm_task_from_config

    cfg = dataclasses.replace(TINY, num_speech_tokens=50)
    speech = jnp.asarray(np.arange(2 * 9).reshape(2, 9) % 50, jnp.int32)
    lens, prompt = jnp.asarray([9, 6]), jnp.asarray([3, 2])
    x, x_len = with_bos(speech, lens, cfg)  # [2, 10]
    key = jax.random.PRNGKey(0)
    assert np.array_equal(corrupt_inputs(x, x_len, prompt, 0.0, cfg, key), x)
    y = np.asarray(corrupt_inputs(x, x_len, prompt, 0.999, cfg, key))
    x = np.asarray(x)
    for b, (n, p) in enumerate(zip([10, 7], [3, 2], strict=True)):
        assert np.array_equal(y[b, : p + 1], x[b, : p + 1])  # BOS + prompt
        assert np.array_equal(y[b, n:], x[b, n:])  # padding
        assert np.all((y[b, p + 1 : n] >= 0) & (y[b, p + 1 : n] < 50))
        assert np.mean(y[b, p + 1 : n] != x[b, p + 1 : n]) > 0.6  # 1/50 draws hit the same
    loss = mlc.ConfigDict(dict(alpha=1.0, input_noise=0.2))
    task = lm_task_from_config(mlc.ConfigDict(dict(loss=loss)), cfg)
    assert isinstance(task, LMTask) and task.input_noise == 0.2
    with pytest.raises(ConfigError, match=r"^loss.input_noise=1.0: expected a share in \[0, 1\)$"):
        lm_task_from_config(mlc.ConfigDict(dict(loss=dict(input_noise=1.0))), cfg)
