"""DCAR policy + `dcar` / `vadusa` strategies on a tiny random backbone: exact equivalences."""

import dataclasses
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from engine_checks import check_synthesizes
from hlo_checks import loop_carries, loop_copies, mentions
from lm_reference import TINY, batch_of, init_params, random_rows, run

from jaxtts.decode import registry
from jaxtts.decode.driver import decode
from jaxtts.decode.sampling import SamplingConfig, row_keys
from jaxtts.engine import resolve
from jaxtts.errors import ConfigError
from jaxtts.methods.dcar.policy import (
    FEATURE_GAIN,
    ChunkPolicy,
    PolicyConfig,
    action_logp,
)
from jaxtts.methods.lm.model import TTSLM

pytestmark = pytest.mark.slow  # integration / trained models: `make test-fast` skips it

GREEDY = SamplingConfig(greedy=True)
SAMPLE = SamplingConfig(temperature=1.0, top_k=8)
PCFG = PolicyConfig(
    d_model=TINY.d_model, num_actions=TINY.num_mtp_heads, num_heads=2, head_dim=8, d_ff=32
)
PCFG_F = dataclasses.replace(PCFG, features="confidence")  # h_t + the heads' confidence
PCFG_L = dataclasses.replace(PCFG_F, num_layers=0)  # linear over [h_t ; confidence]


@pytest.fixture(scope="module")
def params():
    return init_params(eos_bias=0.9)


def policy_params(seed=0, always=None, scale=1.0, cfg=PCFG):
    """Random policy parameters (kernel scaled so rows choose different sizes), or one that
    always picks chunk size `always`."""
    p = nn.unbox(
        ChunkPolicy(cfg).init(jax.random.key(seed), jnp.zeros((1, 3, cfg.d_in)), jnp.array([3]))
    )["params"]
    k = p["out"]["kernel"]
    p["out"]["kernel"] = scale * jax.random.normal(jax.random.key(seed + 1), k.shape)
    if cfg.num_features:  # the confidence's direct path too (its input is FEATURE_GAIN x f)
        f = p["feat_out"]["kernel"]
        w = jax.random.normal(jax.random.key(seed + 2), f.shape)
        p["feat_out"]["kernel"] = scale * w / FEATURE_GAIN
    if always is not None:
        p["out"]["kernel"] = jnp.zeros_like(k)
        p["out"]["bias"] = jnp.zeros_like(p["out"]["bias"]).at[always - 1].set(100.0)
        if cfg.num_features:
            p["feat_out"]["kernel"] = jnp.zeros_like(p["feat_out"]["kernel"])
    return p


def run_dcar(spec, params, pparams, batch, keys, sampling, forced=None, max_new=20, cfg=PCFG):
    models = {"target": TTSLM(TINY), "policy": ChunkPolicy(cfg)}
    ps = {"target": params, "policy": pparams}
    if forced is not None:
        ps["forced_chunk"] = jnp.asarray(forced, jnp.int32)
    return decode(
        registry.get(spec), models, ps, batch, keys, max_new_tokens=max_new, sampling=sampling
    )


@pytest.mark.parametrize("cfg", [PCFG, PCFG_F, PCFG_L], ids=["hidden", "confidence", "linear"])
def test_policy_cached_steps_equal_full_forward(cfg):
    pol = ChunkPolicy(cfg)
    pp = policy_params(3, cfg=cfg)
    x = jax.random.normal(jax.random.key(0), (2, 5, cfg.d_in))  # [B, S, D (+ F)]
    full = pol.apply({"params": pp}, x, jnp.array([5, 3]))  # [B, S, A]
    cache = pol.apply({"params": pp}, 2, 7, method="init_cache")
    steps = []
    for j in range(5):
        lg, cache = pol.apply({"params": pp}, x[:, j], cache, method="step")
        steps.append(lg)
    steps = jnp.stack(steps, 1)
    np.testing.assert_allclose(steps[0], full[0], atol=1e-5)
    np.testing.assert_allclose(steps[1, :3], full[1, :3], atol=1e-5)  # row 1: 3 valid decisions
    # an untrained (zero output layer) policy is uniform
    p0 = nn.unbox(pol.init(jax.random.key(0), x, jnp.array([5, 3])))["params"]
    np.testing.assert_allclose(pol.apply({"params": p0}, x, jnp.array([5, 3])), 0.0)
    with pytest.raises(ConfigError, match=rf"inputs of width 7, expected {cfg.d_in}"):
        pol.apply({"params": pp}, x[..., :7], jnp.array([5, 3]))


def test_head_confidence_values():
    from jaxtts.methods.dcar.policy import head_confidence

    # head 1 certain (one candidate), head 2 uniform over V = 4
    logits = jnp.array([[[0.0, -jnp.inf, -jnp.inf, -jnp.inf], [1.0, 1.0, 1.0, 1.0]]])
    np.testing.assert_allclose(head_confidence(logits), [[1.0, 0.25, 0.0, 1.0]], atol=1e-6)
    p = np.array([0.5, 0.25, 0.125, 0.125])
    got = head_confidence(jnp.log(jnp.asarray(p))[None, None])
    ent = -(p * np.log(p)).sum() / np.log(4)  # 1.75 bits / 2 bits
    np.testing.assert_allclose(got, [[0.5, ent]], atol=1e-6)
    assert ent == pytest.approx(0.875)
    with pytest.raises(ConfigError, match="policy.features='conf': expected one of"):
        dataclasses.replace(PCFG, features="conf")


def test_threshold_prior_logits_and_linear_policy():
    """The threshold prior's logits are gain x sum_{k=2..c} (top_k - theta), hand-computed;
    the linear policy (no layer) with it has no history (empty cache) and no h_t path."""
    from jaxtts.methods.dcar.policy import threshold_prior

    f = jnp.array([[0.9, 0.5, 0.45, 0.3, 0.1, 0.2, 0.3, 0.4]])  # tops of heads 1-4, entropies
    x = jnp.concatenate([jax.random.normal(jax.random.key(1), (1, PCFG.d_model)), f], -1)
    for cfg in (PCFG_F, PCFG_L):
        pol = ChunkPolicy(cfg)
        p = pol.init(jax.random.key(0), x[:, None], jnp.array([1]))["params"]
        p = nn.unbox(threshold_prior(p, cfg, theta=0.4, gain=20.0))
        cache = pol.apply({"params": p}, 1, 6, method="init_cache")
        logits, cache = pol.apply({"params": p}, x, cache, method="step")
        # c=1: 0; c=2: 20 (0.5 - 0.4) = 2; c=3: 2 + 20 (0.45 - 0.4) = 3; c=4: 3 + 20 (-0.1) = 1
        np.testing.assert_allclose(logits, [[0.0, 2.0, 3.0, 1.0]], atol=1e-4)
        assert int(cache.length[0]) == 1
    assert cache.layer.k.shape[2] == 0 and "feat_in" not in p and "stack" not in p
    # DCPO with `prior_threshold` starts there, its KL reference too
    from ml_collections import ConfigDict

    from jaxtts.methods.dcar.dcpo import DCPOTask

    dcfg = dict(clip_eps=0.2, kl_beta=0.1, kl_warmup_steps=0, prior_threshold=0.4)
    start = nn.unbox(DCPOTask(PCFG_L, ConfigDict(dcfg)).init(jax.random.key(3), None))
    for part in ("policy", "ref"):
        lg = ChunkPolicy(PCFG_L).apply({"params": start[part]}, x[:, None], jnp.array([1]))
        np.testing.assert_allclose(lg[:, 0], [[0.0, 2.0, 3.0, 1.0]], atol=1e-4)
    with pytest.raises(ConfigError, match="prior_threshold=0.4: needs policy.features"):
        threshold_prior({}, PCFG, 0.4, 20.0)
    with pytest.raises(ConfigError, match="policy.num_layers=2: expected 0 or 1"):
        dataclasses.replace(PCFG, num_layers=2)


def test_action_logp_values():
    logits = jnp.log(jnp.array([[0.1, 0.2, 0.3, 0.4]]))
    np.testing.assert_allclose(action_logp(logits, jnp.array([3])), [np.log(0.3)], rtol=1e-6)


@pytest.mark.parametrize("chunk", [1, 2, 3, 4])
@pytest.mark.parametrize("sampling", [GREEDY, SAMPLE], ids=["greedy", "sampling"])
def test_constant_policy_reproduces_car(params, chunk, sampling):
    rows = random_rows(4, seed=chunk)
    keys = row_keys(7, range(4))
    ref = run(
        registry.get("far" if chunk == 1 else f"car:{chunk}"),
        params,
        batch_of(rows),
        keys,
        max_new_tokens=20,
        sampling=sampling,
    )
    out = run_dcar("dcar", params, policy_params(always=chunk), batch_of(rows), keys, sampling)
    np.testing.assert_array_equal(out.tokens, ref.tokens)
    np.testing.assert_array_equal(out.steps, ref.steps)
    hist = np.asarray(out.stats["chunk_hist"])
    np.testing.assert_array_equal(hist[:, chunk - 1], np.asarray(ref.steps))
    if chunk == 3 and sampling is SAMPLE:  # a policy reading the heads' confidence too
        pp = policy_params(always=chunk, cfg=PCFG_F)
        conf = run_dcar("dcar", params, pp, batch_of(rows), keys, sampling, cfg=PCFG_F)
        np.testing.assert_array_equal(conf.tokens, ref.tokens)
        np.testing.assert_array_equal(conf.steps, ref.steps)


def test_sizes_restrict_the_policy_to_a_range(params):
    """`dcar:<pick>,sizes=lo-hi` chooses only sizes lo..hi: a single-size range reproduces
    `car:c` whatever the policy prefers; a policy that always wants c = 1 takes the best size
    inside 2-4 (all tie: the first, 2); a random policy's draws stay inside the range."""
    rows = random_rows(4, seed=5)
    keys = row_keys(3, range(4))
    ref = run(
        registry.get("car:3"), params, batch_of(rows), keys, max_new_tokens=20, sampling=SAMPLE
    )
    out = run_dcar(
        "dcar:sample,sizes=3-3", params, policy_params(2, scale=3.0), batch_of(rows), keys, SAMPLE
    )
    np.testing.assert_array_equal(out.tokens, ref.tokens)
    ref2 = run(
        registry.get("car:2"), params, batch_of(rows), keys, max_new_tokens=20, sampling=GREEDY
    )
    out2 = run_dcar(
        "dcar:argmax,sizes=2-4", params, policy_params(always=1), batch_of(rows), keys, GREEDY
    )
    np.testing.assert_array_equal(out2.tokens, ref2.tokens)
    free = run_dcar(
        "dcar:sample", params, policy_params(2, scale=3.0), batch_of(rows), keys, SAMPLE
    )
    held = run_dcar(
        "dcar:sample,sizes=2-3", params, policy_params(2, scale=3.0), batch_of(rows), keys, SAMPLE
    )
    assert np.asarray(free.stats["chunk_hist"])[:, [0, 3]].sum() > 0  # it does pick 1 and 4
    hist = np.asarray(held.stats["chunk_hist"])
    assert hist[:, [0, 3]].sum() == 0 and hist[:, 1].sum() > 0 and hist[:, 2].sum() > 0


@pytest.mark.parametrize(
    "spec", ["dcar:sample,sizes=0-2", "dcar:sample,sizes=3-2", "dcar:draw", "dcar:sample,size=2"]
)
def test_dcar_spec_errors_name_the_spec(spec):
    with pytest.raises(ConfigError, match="expected dcar"):
        registry.get(spec)


def test_dcar_sizes_name_and_check():
    from jaxtts.methods.dcar.strategies import DCAR

    assert registry.get("dcar:sample,sizes=2-4").name == "dcar:sample,sizes=2-4"
    assert registry.get("dcar:argmax,sizes=2-3").name == "dcar:argmax,sizes=2-3"
    assert registry.get("dcar:argmax").name == "dcar"
    models = {"target": TTSLM(TINY), "policy": ChunkPolicy(PCFG)}
    with pytest.raises(ConfigError, match="sizes up to 5"):
        DCAR(sizes=(2, 5)).bind(models).check(models)


@pytest.mark.parametrize(
    "sampling,cfg",
    [(GREEDY, PCFG), (SAMPLE, PCFG), (SAMPLE, PCFG_F), (SAMPLE, PCFG_L)],
    ids=["greedy", "sampling", "confidence", "linear"],
)
def test_step_that_follows_the_choice_equals_extend_by_k(params, sampling, cfg):
    """The step that extends by the batch's largest chosen size (`dynamic_chunk_step`) gives
    the tokens, steps and chunk histogram of the reference step that computes all K heads and
    extends by K, and so does the variant that writes the cache inside its branch; batch 4,
    rows choosing different sizes. With the heads' confidence as policy input the step samples
    from the logits it computed for the policy: the same tokens as the reference, which
    recomputes them."""
    from jaxtts.methods.dcar.strategies import DCAR

    rows = random_rows(4, seed=21)
    keys = row_keys(5, range(4))
    models = {"target": TTSLM(TINY), "policy": ChunkPolicy(cfg)}
    ps = {"target": params, "policy": policy_params(2, scale=3.0, cfg=cfg)}
    outs = [
        decode(
            strat,
            models,
            ps,
            batch_of(rows),
            keys,
            max_new_tokens=20,
            sampling=sampling,
        )
        for strat in (
            DCAR(write_in_branch=False),
            DCAR(extend_all=True),
            DCAR(write_in_branch=True),
        )
    ]
    fast, ref, branch = outs
    for out in (fast, branch):
        np.testing.assert_array_equal(out.tokens, ref.tokens)
        np.testing.assert_array_equal(out.steps, ref.steps)
    hist = np.asarray(fast.stats["chunk_hist"])
    np.testing.assert_array_equal(hist, np.asarray(ref.stats["chunk_hist"]))
    assert (hist > 0).sum(axis=1).max() >= 2 and len({tuple(h) for h in hist}) >= 2  # mixed


@pytest.mark.parametrize("rows", [1, 2])
@pytest.mark.parametrize("spec", ["dcar", "far", "car:3", "vadusa:2"])
def test_decode_loop_writes_the_cache_in_place(params, spec, rows):
    """No loop body or branch of the compiled decode copies a KV cache buffer, at batch 1 and
    2. DCAR's step branches on the chosen size (`lax.switch`) and writes the cache after the
    branch: written inside it, XLA copied every layer's buffer every step. At batch 1 a
    one-token write is a two-index scatter (`jaxtts.nn.attention._write_one_slot`): as a
    dynamic-update-slice it was copied every FAR step."""
    from jaxtts.decode.driver import _decode

    models = {"target": TTSLM(TINY), "policy": ChunkPolicy(PCFG)}
    ps = {"target": params, "policy": policy_params(2, scale=3.0)}
    if spec != "dcar":
        models, ps = {"target": models["target"]}, {"target": params}
    strat = registry.get(spec).bind(models)
    hlo = (
        _decode.lower(
            ps,
            batch_of(random_rows(rows, seed=4)),
            row_keys(0, range(rows)),
            strategy=strat,
            models=tuple(sorted(models.items())),
            max_new_tokens=40,
            sampling=GREEDY.traced(),
        )
        .compile()
        .as_text()
    )
    cache = rf"f32\[{rows},{TINY.num_heads},\d\d+,{TINY.head_dim}\]"  # [B, N, S, H], S >= 10
    keys_t = rf"f32\[{rows},{TINY.num_heads},{TINY.head_dim},\d\d+\]"  # [B, N, H, S]
    assert mentions(hlo, cache) > 0  # the pattern names the cache buffers
    # multi-row steps carry their keys transposed (a prefill transposes its keys either way)
    assert (loop_carries(hlo, keys_t) > 0) == (spec != "far")
    assert loop_carries(hlo, cache) > 0
    assert not loop_copies(hlo, cache)
    assert not loop_copies(hlo, keys_t)


def test_forced_rows_reproduce_car_and_others_follow_the_policy(params):
    rows = random_rows(4, seed=11)
    keys = row_keys(1, range(4))
    forced = [2, 0, 3, 0]
    out = run_dcar(
        "dcar:sample", params, policy_params(always=4), batch_of(rows), keys, SAMPLE, forced=forced
    )
    for i, c in enumerate(forced):
        spec = f"car:{c or 4}"
        ref = run(
            registry.get(spec),
            params,
            batch_of([rows[i]], 9, 6),  # singles share one shape (one compile)
            keys[i : i + 1],
            max_new_tokens=20,
            sampling=SAMPLE,
        )
        n = int(ref.length[0])
        assert int(out.length[i]) == n
        np.testing.assert_array_equal(out.tokens[i, :n], ref.tokens[0, :n])


@pytest.mark.parametrize("spec,sampling", [("dcar", GREEDY), ("dcar:sample", SAMPLE)])
def test_dcar_batch_n_equals_batch_1(params, spec, sampling):
    rows = random_rows(5, seed=5)
    # argmax: a peaked random policy still picks different sizes for different hidden states;
    # sampling: a flatter one, so that draws differ between rows
    pp = policy_params(2, scale=3.0 if spec == "dcar" else 0.1)
    big = run_dcar(spec, params, pp, batch_of(rows, 14, 8), row_keys(3, range(5)), sampling)
    chunks = set()
    for i, row in enumerate(rows):
        one = run_dcar(spec, params, pp, batch_of([row], 9, 6), row_keys(3, [i]), sampling)
        n = int(one.length[0])
        assert int(big.length[i]) == n and int(big.steps[i]) == int(one.steps[0])
        np.testing.assert_array_equal(big.tokens[i, :n], one.tokens[0, :n])
        chunks |= {k + 1 for k in np.flatnonzero(np.asarray(one.stats["chunk_hist"][0]))}
    assert len(chunks) >= 2  # rows really took different chunk sizes


@pytest.mark.parametrize("cfg", [PCFG, PCFG_F, PCFG_L], ids=["hidden", "confidence", "linear"])
def test_dcar_records_what_the_policy_saw(params, cfg):
    """Recorded inputs through the policy's full forward give the recorded log-probs; with the
    heads' confidence, the recorded features are those of the recorded hidden states."""
    from jaxtts.methods.dcar.policy import head_confidence
    from jaxtts.methods.dcar.strategies import DCAR

    rows = random_rows(3, seed=8)
    pp = policy_params(4, scale=3.0, cfg=cfg)
    models = {"target": TTSLM(TINY), "policy": ChunkPolicy(cfg)}
    out = decode(
        DCAR(sample=True, record=True),
        models,
        {"target": params, "policy": pp},
        batch_of(rows),
        row_keys(0, range(3)),
        max_new_tokens=20,
        sampling=SAMPLE,
    )
    st = out.stats
    steps = np.asarray(out.steps)
    logits = ChunkPolicy(cfg).apply({"params": pp}, st["policy_inputs"], out.steps)
    lp = np.asarray(action_logp(logits, st["actions"]))
    x = np.asarray(st["policy_inputs"])
    assert x.shape[-1] == cfg.d_in
    if cfg.num_features:
        heads = TTSLM(TINY).apply({"params": params}, x[..., : cfg.d_model], method="heads")
        np.testing.assert_allclose(
            x[..., cfg.d_model :][steps_mask(out.steps, x.shape[1])],
            np.asarray(head_confidence(heads))[steps_mask(out.steps, x.shape[1])],
            atol=1e-5,
        )
    for i in range(3):
        s = steps[i]
        np.testing.assert_allclose(lp[i, :s], np.asarray(st["logp"])[i, :s], atol=1e-5)
        assert np.all(np.asarray(st["actions"])[i, :s] >= 1)
        assert np.all(np.asarray(st["actions"])[i, s:] == 0)
        # tokens = sum of chosen chunk sizes, except the last step may be cut by EOS / the cap
        assert np.asarray(st["actions"])[i, : s - 1].sum() < int(out.length[i]) + 1


def steps_mask(steps, slots):
    return np.arange(slots)[None] < np.asarray(steps)[:, None]


def test_vadusa_tau1_greedy_equals_far(params):
    rows = random_rows(5, seed=9)
    keys = row_keys(0, range(5))
    far = run(registry.get("far"), params, batch_of(rows), keys, max_new_tokens=24, sampling=GREEDY)
    vad = run(
        registry.get("vadusa:1"), params, batch_of(rows), keys, max_new_tokens=24, sampling=GREEDY
    )
    np.testing.assert_array_equal(vad.tokens, far.tokens)
    assert np.all(np.asarray(vad.steps) <= np.asarray(far.steps))


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLE], ids=["greedy", "sampling"])
def test_vadusa_batch_n_equals_batch_1(params, sampling):
    rows = random_rows(4, seed=10)
    strat = registry.get("vadusa:3")
    big = run(
        strat,
        params,
        batch_of(rows, 14, 8),
        row_keys(2, range(4)),
        max_new_tokens=20,
        sampling=sampling,
    )
    for i, row in enumerate(rows):
        one = run(
            strat,
            params,
            batch_of([row], 9, 6),
            row_keys(2, [i]),
            max_new_tokens=20,
            sampling=sampling,
        )
        n = int(one.length[0])
        assert int(big.length[i]) == n
        np.testing.assert_array_equal(big.tokens[i, :n], one.tokens[0, :n])


def test_vadusa_accepts_more_with_more_tolerance(params):
    rows = random_rows(6, seed=12)
    keys = row_keys(0, range(6))
    acc = []
    for tau in (1, 4, TINY.out_vocab):
        out = run(
            registry.get(f"vadusa:{tau}"),
            params,
            batch_of(rows),
            keys,
            max_new_tokens=24,
            sampling=GREEDY,
        )
        acc.append(float(np.sum(out.length) / np.sum(out.steps)))
    assert acc[0] <= acc[1] <= acc[2]
    # tau = V accepts every draft: exactly car:K
    car = run(
        registry.get(f"car:{TINY.num_mtp_heads}"),
        params,
        batch_of(rows),
        keys,
        max_new_tokens=24,
        sampling=GREEDY,
    )
    np.testing.assert_array_equal(out.tokens, car.tokens)
    np.testing.assert_array_equal(out.steps, car.steps)


def test_strategy_errors(params):
    with pytest.raises(ConfigError, match="vadusa:0"):
        registry.get("vadusa:0")
    with pytest.raises(ConfigError, match="vadusa:x"):
        registry.get("vadusa:x")
    with pytest.raises(ConfigError, match="needs a chunk-size policy"):
        run(
            registry.get("dcar"),
            params,
            batch_of(random_rows(1)),
            row_keys(0, [0]),
            max_new_tokens=4,
            sampling=GREEDY,
        )
    with pytest.raises(ConfigError, match="dcar:foo"):
        registry.get("dcar:foo")


# ----------------------------------------------------------------------------- DCPO pieces


def test_out_of_range_and_reward_hand_computed():
    from jaxtts.methods.dcar.dcpo import decision_mask, out_of_range, rewards

    actions = np.array([[1, 2, 4, 3], [3, 3, 0, 0], [4, 4, 1, 0]])
    mask = decision_mask(np.array([4, 2, 0]), 4)
    np.testing.assert_array_equal(mask, [[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]])
    # guidance {2, 3}: sizes 1 and 4 are 1 outside; row 0: (1 + 0 + 1 + 0) / 4; row 2: no action
    dist = out_of_range(actions, mask, (2, 3))
    np.testing.assert_allclose(dist, [0.5, 0.0, 0.0])
    np.testing.assert_allclose(out_of_range(actions, mask, (2,)), [(1 + 0 + 2 + 1) / 4, 1.0, 0])
    r = rewards([0.30, 0.10, 0.50], [0.10, 0.10, 0.20], dist, gamma=0.1)
    np.testing.assert_allclose(r, [-(0.30 - 0.10) - 0.05, 0.0, -(0.50 - 0.20)], atol=1e-7)
    fast = rewards([0.30, 0.10, 0.50], [0.10, 0.10, 0.20], dist, 0.1, [2.0, 3.5, 1.0], 0.02)
    np.testing.assert_allclose(fast - r, [0.04, 0.07, 0.02], atol=1e-7)
    # inside a wide range the distance is 0, not negative; one decision divides by 1
    one = decision_mask(np.array([1, 1]), 4)
    wide = out_of_range(np.array([[3, 9, 9, 9], [1, 9, 9, 9]]), one, (2, 3, 4))
    np.testing.assert_array_equal(wide, [0.0, 1.0])


def test_decision_acceptance_and_process_reward_hand_computed():
    from jaxtts.methods.dcar.dcpo import decision_acceptance, process_rewards

    # row 0: chunks 3, 2, 4 over 8 kept tokens; the drafts at t = 2 and t = 6 fail
    # row 1: chunks 4, 4 and a row that ended at 5 tokens (the second chunk keeps 1 of 4);
    # row 2: no decisions
    ok = np.ones((3, 9), bool)
    ok[0, [2, 6]] = False
    ok[1, 0] = False  # the head-1 token of a chunk is never checked
    actions = np.array([[3, 2, 4, 0], [4, 4, 0, 0], [0, 0, 0, 0]])
    kept, acc = decision_acceptance(ok, actions, np.array([3, 2, 0]), np.array([8, 5, 0]))
    # row 0: [0, 1, 2] keeps 3, passes t = 1, fails t = 2 -> 2; [3, 4] -> 2; [5..7] (t = 8 is
    # past the row's 8 tokens): 3 kept, t = 6 fails -> 1
    np.testing.assert_array_equal(kept, [[3, 2, 3, 0], [4, 1, 0, 0], [0, 0, 0, 0]])
    np.testing.assert_array_equal(acc, [[2, 2, 1, 0], [4, 1, 0, 0], [0, 0, 0, 0]])
    r = process_rewards(kept, acc, lam=2.0)  # a - 2 (n - a)
    np.testing.assert_array_equal(r, [[0, 2, -3, 0], [4, 1, 0, 0], [0, 0, 0, 0]])
    assert r.dtype == np.float32


@pytest.mark.parametrize("spec", ["far", "vadusa:2", "car:4"])
def test_teacher_forced_verification_matches_decoding(spec):
    """The base head's teacher-forced ranks of a decoded batch (mixed prompt lengths): greedy
    FAR's tokens are its argmax (rank 0) and greedy VADUSA's kept drafts pass its own check
    (rank < 2), as in the step; CAR c=4's ranks equal each row's own unpadded forward."""
    from jaxtts.methods.dcar.dcpo import teacher_forced_speech, verification_ranks

    params = init_params()  # no EOS bias: rows run on (up to 12 tokens)
    rows = random_rows(4, seed=3)
    batch = batch_of(rows)
    out = run(
        registry.get(spec), params, batch, row_keys(0, range(4)), max_new_tokens=12, sampling=GREEDY
    )
    length = np.asarray(out.length)
    assert length.min() >= 2
    speech, speech_len = teacher_forced_speech(
        batch.prompt, batch.prompt_len, out.tokens, length, TINY
    )
    ranks = np.asarray(
        verification_ranks(TTSLM(TINY), params, batch.text, batch.text_len, speech, speech_len)
    )
    gen = [ranks[i, rows[i][1].size : rows[i][1].size + length[i]] for i in range(4)]
    if spec == "far":
        assert all(np.all(g == 0) for g in gen)
    elif spec == "vadusa:2":
        assert all(np.all(g < 2) for g in gen)
    else:
        for i, (t, q) in enumerate(rows):
            seq = np.concatenate([[TINY.bos], q, np.asarray(out.tokens[i, : length[i]])])
            logits, _ = TTSLM(TINY).apply(
                {"params": params},
                t[None],
                np.array([t.size]),
                seq[None].astype(np.int32),
                np.array([seq.size]),
            )  # [1, T, K, V]
            base = np.asarray(logits[0, :-1, 0])  # [T - 1, V]
            own = base[np.arange(seq.size - 1), seq[1:]]
            want = (base > own[:, None]).sum(-1)
            np.testing.assert_array_equal(ranks[i, : seq.size - 1], want)
            assert np.any(want[q.size + 1 :] > 0)  # heads 2-4 of a random model do miss


def test_reward_metric_is_checked():
    from jaxtts.methods.dcar.dcpo import check_reward_metric

    assert check_reward_metric("cer") == "cer"
    with pytest.raises(ConfigError, match=r"dcpo.reward_metric='mer': expected one of"):
        check_reward_metric("mer")


def test_chase_then_exceed_groups():
    from jaxtts.methods.dcar.dcpo import chase_groups

    f = chase_groups(np.random.default_rng(0), 5, 8, (2, 3)).reshape(5, 8)
    assert np.all(np.isin(f[:, :4], [2, 3])) and np.all(f[:, 4:] == 0)
    assert set(np.unique(f[:, :4])) == {2, 3}
    assert np.all(chase_groups(np.random.default_rng(0), 5, 8, (2, 3), chase=False) == 0)


def test_dcpo_loss_masks_inner_positions_and_moves_toward_reward():
    """The loss only sees decision positions (changing a masked entry changes nothing), its
    value at the start equals the hand-computed GRPO value, and Adam steps on a known reward
    (size 3 rewarded) raise pi(3)."""
    import optax
    from ml_collections import ConfigDict

    from jaxtts.methods.dcar.dcpo import DCPOTask

    dcfg = ConfigDict(dict(clip_eps=0.2, kl_beta=0.1, kl_warmup_steps=0))
    task = DCPOTask(PCFG, dcfg)
    params = nn.unbox(task.init(jax.random.key(0), None))
    n, s = 4, 3
    inputs = jax.random.normal(jax.random.key(1), (n, s, PCFG.d_model))
    actions = jnp.array([[3, 3, 3], [1, 2, 1], [3, 3, 1], [4, 1, 1]])
    steps = jnp.array([3, 2, 2, 1])
    mask = jnp.arange(s)[None] < steps[:, None]
    adv = jnp.array([1.5, -0.5, 0.5, -1.5])
    logits = ChunkPolicy(PCFG).apply({"params": params["policy"]}, inputs, steps)
    batch = {
        "inputs": inputs,
        "steps": steps,
        "actions": actions,
        "mask": mask,
        "logp_old": action_logp(logits, actions),
        "advantages": adv,
        "forced": jnp.zeros(n, jnp.int32),
    }
    for k in ("reward", "wer", "cer", "mean_chunk", "out_of_range"):
        batch[k] = jnp.zeros(n)
    loss, m = task.loss(params, batch, None, train=True, step=jnp.asarray(0))
    # ratio 1, KL 0 at the start: loss = -(sum_valid A) / #valid
    expected = -(3 * 1.5 + 2 * -0.5 + 2 * 0.5 + 1 * -1.5) / 8
    assert float(loss) == pytest.approx(expected, abs=1e-6)
    changed = dict(batch, actions=batch["actions"].at[3, 2].set(2))  # a masked position
    assert float(task.loss(params, changed, None, train=True)[0]) == pytest.approx(float(loss))

    # one plain gradient step, exactly: at the start (uniform policy, ratio 1, KL gradient 0)
    # d loss / d out.bias = -(1/#valid) sum_valid A (onehot(a) - 1/4); with the output kernel at
    # zero the logits are the bias, so one SGD step of rate 1 on it sets the policy to
    # softmax(-grad) at every position: pi(3) from 0.25 to the value computed here
    def f_all(p):
        return task.loss(
            {"policy": p, "ref": params["ref"]}, batch, None, train=True, step=jnp.asarray(0)
        )[0]

    g = jax.grad(f_all)(params["policy"])["out"]["bias"]
    sum_a = np.array([-0.5, -0.5, 3 * 1.5 + 2 * 0.5, -1.5])  # sum of A per chosen size
    want_g = -(sum_a - 0.25 * (3 * 1.5 + 2 * -0.5 + 2 * 0.5 - 1.5)) / 8
    np.testing.assert_allclose(g, want_g, atol=1e-6)  # [0.15625, 0.15625, -0.59375, 0.28125]
    stepped = dict(params["policy"], out=dict(params["policy"]["out"], bias=-g))
    pi = jax.nn.softmax(ChunkPolicy(PCFG).apply({"params": stepped}, inputs, steps), axis=-1)
    want_pi = np.exp(-want_g) / np.exp(-want_g).sum()
    np.testing.assert_allclose(pi[mask], np.broadcast_to(want_pi, (8, 4)), atol=1e-6)
    assert want_pi[2] == pytest.approx(0.4234, abs=1e-4)  # the rewarded size 3: 0.25 -> 0.42

    opt = optax.adam(1e-2)
    pol = params["policy"]
    state = opt.init(pol)

    def f(p):
        return task.loss(
            {"policy": p, "ref": params["ref"]}, batch, None, train=True, step=jnp.asarray(5)
        )[0]

    x = inputs[:1]
    p3 = jax.nn.softmax(ChunkPolicy(PCFG).apply({"params": pol}, x, steps[:1]))[0, 0, 2]
    for _ in range(10):
        g = jax.grad(f)(pol)
        upd, state = opt.update(g, state)
        pol = optax.apply_updates(pol, upd)
    p3_after = jax.nn.softmax(ChunkPolicy(PCFG).apply({"params": pol}, x, steps[:1]))[0, 0, 2]
    assert float(p3) == pytest.approx(0.25, abs=1e-6)  # uniform start
    assert float(p3_after) > 0.3  # past 1.2 x 0.25: the clip bounds each ratio, not pi
    _, m = task.loss({"policy": pol, "ref": params["ref"]}, batch, None, train=True)
    assert float(m["kl"]) > 0  # moved away from the reference


def test_guidance_above_k_is_an_error():
    from jaxtts.methods.dcar.dcpo import check_guidance

    with pytest.raises(ConfigError, match=r"guidance=\[2, 5\]: expected chunk sizes in 1..K=4"):
        check_guidance((2, 5), 4)
    # the edges 1 and K are valid sizes; empty, 0 and K + 1 are not
    assert check_guidance([2, 3, 4], 4) == (2, 3, 4)
    assert check_guidance((1,), 4) == (1,) and check_guidance((4,), 4) == (4,)
    assert check_guidance(np.array([1, 4]), 4) == (1, 4)
    for bad in ((), (0, 2), (5,), (1, 5)):
        with pytest.raises(ConfigError, match="dcpo.guidance"):
            check_guidance(bad, 4)


# ----------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """2 DCPO steps of configs/dcar.py:tiny on the shipped backbone and reward ASR."""
    from configs import dcar as dcar_config
    from jaxtts.methods.dcar.dcpo import train

    wd = str(tmp_path_factory.mktemp("dcar") / "run")
    res = train(dcar_config.get_config("tiny"), wd, progress=False)
    return wd, res


def test_dcpo_tiny_trains_logs_and_resumes(tiny_run):
    import json

    from configs import dcar as dcar_config
    from jaxtts.methods.dcar.dcpo import train

    wd, res = tiny_run
    rows = [json.loads(x) for x in open(os.path.join(wd, "metrics.jsonl"))]
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("train/reward", "train/wer", "train/mean_chunk", "train/kl", "train/loss"):
        assert np.isfinite(rows[-1][key])
    assert 1.0 <= rows[-1]["train/mean_chunk"] <= 4.0
    cfg = dcar_config.get_config("tiny")
    cfg.train.steps = 3
    cfg.dcpo.process_weight = 1.0  # the step after resuming adds the process reward
    res2 = train(cfg, wd, progress=False)  # resumes at 2, takes one more step
    assert int(res2.state.step) == 3 and len(res2.history) == 1
    last = [json.loads(x) for x in open(os.path.join(wd, "metrics.jsonl"))][-1]
    assert "train/accepted" not in rows[-1] or rows[-1]["train/accepted"] == 0.0
    assert 0.0 < last["train/accepted"] <= 1.0  # the trained backbone's heads mostly pass
    assert np.isfinite(last["train/process"]) and np.isfinite(last["train/loss"])


def test_dcar_engine_synthesizes_and_checks_its_backbone(tiny_run, tmp_path):
    import json
    import shutil

    from jaxtts.engine import load_engine
    from jaxtts.errors import CheckpointError

    wd, _ = tiny_run
    eng = load_engine(wd)
    assert eng.decode_config["strategy"] == "dcar"
    check_synthesizes(eng, "dcar", same_as_batch_1=False)  # 2 DCPO steps: near-uniform policy
    # batch-N == batch-1 of VADUSA: test_vadusa_batch_n_equals_batch_1 (one compile less here)
    check_synthesizes(eng, "vadusa:2", same_as_batch_1=False)
    assert resolve(eng, "vadusa:2").name == "vadusa:2"
    bad = tmp_path / "bad"
    shutil.copytree(wd, bad)
    info = json.loads((bad / "data.json").read_text())
    info["d_model"] = 512
    (bad / "data.json").write_text(json.dumps(info))
    with pytest.raises(CheckpointError, match=r"d_model=512.*car_small has 256"):
        load_engine(str(bad))


@pytest.mark.parametrize("spec", ["dcar", "dcar:sample"])
def test_dcar_segments_equal_one_call(params, spec):
    """Resumable decoding of DCAR (policy cache and chunk histogram in the carry): segments of
    1, 2, 5, ... steps give one call's tokens, steps and chunk histogram."""
    from lm_reference import assert_same_decode, run_in_segments

    rows = random_rows(4, seed=6)
    pp = policy_params(2, scale=3.0 if spec == "dcar" else 0.1)
    batch, keys = batch_of(rows), row_keys(4, range(4))
    want = run_dcar(spec, params, pp, batch, keys, SAMPLE)
    models = {"target": TTSLM(TINY), "policy": ChunkPolicy(PCFG)}
    got, n_seg = run_in_segments(
        registry.get(spec),
        models,
        {"target": params, "policy": pp},
        batch,
        keys,
        max_new_tokens=20,
        sampling=SAMPLE,
        seg=[1, 2, 5],
    )
    assert n_seg >= 3
    assert_same_decode(got, want, stats=True)  # chunk_hist included


def test_dcar_split_prefill_equals_the_batch_padded_to_the_loop_width(params):
    """The target's cache widened after a narrow prefill (`PromptBatch.text_width`; the
    policy's cache holds no text): the tokens, steps and chunk histogram of the batch padded to
    the loop's width, with rows that choose different sizes."""
    from lm_reference import assert_same_decode

    from jaxtts.decode import driver

    rows = random_rows(4, seed=5)
    pp = policy_params(2, scale=3.0)
    keys = row_keys(3, range(4))
    want = run_dcar("dcar", params, pp, batch_of(rows, 24, 8), keys, GREEDY)
    loops = driver._loop._cache_size()
    for x in (9, 16):
        narrow = batch_of(rows, x, 8).replace(text_width=24)
        assert_same_decode(run_dcar("dcar", params, pp, narrow, keys, GREEDY), want, stats=True)
    assert driver._loop._cache_size() - loops == 1  # one loop for both prefill widths
    assert np.count_nonzero(np.asarray(want.stats["chunk_hist"]).sum(0)) >= 2
