"""SSD speculative decoding: hand-checked acceptance maths, greedy == FAR, batch invariance,
and the lossless property at beta = 0 (a chi-square test against the exact target
distribution)."""

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from engine_checks import check_synthesizes
from hlo_checks import loop_copies, mentions
from lm_reference import TINY, batch_of, init_params, random_rows, run

from jaxtts.decode import registry
from jaxtts.decode.driver import PromptBatch, decode
from jaxtts.decode.sampling import SamplingConfig, row_keys
from jaxtts.errors import ConfigError
from jaxtts.methods.lm.model import TTSLM, with_bos
from jaxtts.methods.ssd.strategy import SSD, residual, verify

pytestmark = pytest.mark.slow  # integration / trained models: `make test-fast` skips it

GREEDY = SamplingConfig(greedy=True)
DRAFT = dataclasses.replace(TINY, num_layers=1, num_mtp_heads=1)


@pytest.fixture(scope="module")
def params():
    return init_params(eos_bias=0.9)


@pytest.fixture(scope="module")
def draft_params():
    return init_params(DRAFT, seed=3, eos_bias=0.9)


def run_ssd(spec, params, dparams, batch, keys, sampling, max_new=20):
    strat = registry.get(spec) if isinstance(spec, str) else spec
    return decode(
        strat,
        {"target": TTSLM(TINY), "draft": TTSLM(DRAFT)},
        {"target": params, "draft": dparams},
        batch,
        keys,
        max_new_tokens=max_new,
        sampling=sampling,
    )


# ----------------------------------------------------------------------------- hand-checked

P3 = jnp.array([0.5, 0.3, 0.2])
Q3 = jnp.array([0.2, 0.5, 0.3])


def test_residual_distribution_by_hand():
    # max(0, q - p) = [0, 0.2, 0.1] -> [0, 2/3, 1/3]
    np.testing.assert_allclose(residual(Q3, P3), [0.0, 2 / 3, 1 / 3], atol=1e-6)
    np.testing.assert_allclose(residual(P3, P3), P3)  # q == p: no residual mass -> q


def test_verify_reject_then_resample_by_hand():
    """L = 1, x = 0: q/p = 0.2/0.5 = 0.4. u = 0.3 accepts; u = 0.5 rejects and resamples from
    [0, 2/3, 1/3] (never token 0); beta = 0.2 moves the threshold to 0.6 so u = 0.5 accepts."""
    x, p, q = jnp.array([0]), P3[None], jnp.stack([Q3, jnp.array([0.0, 0.0, 1.0])])
    n, z = verify(x, p, q, jnp.array([0.3]), 0.0, jax.random.key(0))
    assert (int(n), int(z)) == (1, 2)  # accepted -> bonus from q[1] = one-hot token 2
    draws = [verify(x, p, q, jnp.array([0.5]), 0.0, jax.random.key(i)) for i in range(300)]
    assert all(int(n) == 0 for n, _ in draws)
    zs = np.array([int(z) for _, z in draws])
    assert not np.any(zs == 0)
    assert abs(np.mean(zs == 1) - 2 / 3) < 0.1  # 300 draws: sd 0.027
    # the rule is u < min(1, q/p) + beta, strictly: u equal to the ratio (0.4) rejects
    n, _ = verify(x, p, q, jnp.array([0.4]), 0.0, jax.random.key(0))
    assert int(n) == 0
    n, _ = verify(x, p, q, jnp.array([0.5]), 0.2, jax.random.key(0))
    assert int(n) == 1


def test_verify_bonus_after_all_accepted_by_hand():
    """L = 2: x = (1, 1), q/p = 0.5/0.3 >= 1 twice -> both accepted whatever u; the bonus is
    drawn from q[2] (one-hot token 0)."""
    x = jnp.array([1, 1])
    p = jnp.stack([P3, P3])
    q = jnp.stack([Q3, Q3, jnp.array([1.0, 0.0, 0.0])])
    n, z = verify(x, p, q, jnp.array([0.99, 0.99]), 0.0, jax.random.key(1))
    assert (int(n), int(z)) == (2, 0)
    # greedy: accept iff x is q's argmax (token 1 for both) -> bonus argmax q[2] = 0
    n, z = verify(x, p, q, jnp.zeros(2), 0.0, jax.random.key(1), greedy=True)
    assert (int(n), int(z)) == (2, 0)
    n, z = verify(jnp.array([1, 2]), p, q, jnp.zeros(2), 0.0, jax.random.key(1), greedy=True)
    assert (int(n), int(z)) == (1, 1)  # token 2 is not q[1]'s argmax: replaced by 1


# ----------------------------------------------------------------------------- decoding


def _compiled_ssd(params, draft_params, rows: int, max_new: int) -> str:
    """The optimized HLO text of a sampled `ssd:L=3,beta=0.4` decode of `rows` random rows."""
    from jaxtts.decode.driver import _decode

    models = {"target": TTSLM(TINY), "draft": TTSLM(DRAFT)}
    return (
        _decode.lower(
            {"target": params, "draft": draft_params},
            batch_of(random_rows(rows, seed=4)),
            row_keys(0, range(rows)),
            strategy=registry.get("ssd:L=3,beta=0.4").bind(models),
            models=tuple(sorted(models.items())),
            max_new_tokens=max_new,
            sampling=SamplingConfig(temperature=1.0, top_p=0.8).traced(),
        )
        .compile()
        .as_text()
    )


@pytest.mark.parametrize("rows", [1, 2])
def test_ssd_loop_writes_the_caches_in_place(params, draft_params, rows):
    """No loop body of the compiled SSD decode copies a KV cache buffer (target or draft),
    at batch 1 and 2."""
    hlo = _compiled_ssd(params, draft_params, rows, max_new=40)
    cache = rf"f32\[{rows},{TINY.num_heads},\d\d+,{TINY.head_dim}\]"  # [B, N, S, H], S >= 10
    assert mentions(hlo, cache) > 0  # the pattern names the cache buffers
    assert not loop_copies(hlo, cache)


def test_profiles_name_the_draft_apart_from_the_verify(params, draft_params):
    """benchmarks/diagnostics/step_parts.py attributes the draft's ops (its forwards, head and
    draws) to one part and the verify forward's to the layer parts: the SSD step's named scopes
    reach the compiled program's metadata."""
    from benchmarks.diagnostics import step_parts as parts

    names = set(parts.op_names(_compiled_ssd(params, draft_params, 1, max_new=12)).values())
    draft = {parts.part(n) for n in names if "/ssd_draft/" in n}
    verify = {parts.part(n) for n in names if "/ssd_verify/" in n}
    assert draft == {"SSD draft (L forwards, base head, draws)"}
    assert "MLP wo" in verify and "attention q projection" in verify
    assert not any(v.startswith("SSD draft") for v in verify)


@pytest.mark.parametrize("L", [1, 3, 5])
def test_greedy_ssd_equals_greedy_far(params, draft_params, L):
    rows = random_rows(5, seed=L)
    keys = row_keys(0, range(5))
    far = run(registry.get("far"), params, batch_of(rows), keys, max_new_tokens=24, sampling=GREEDY)
    out = run_ssd(
        f"ssd:L={L},beta=0.4", params, draft_params, batch_of(rows), keys, GREEDY, max_new=24
    )
    np.testing.assert_array_equal(out.tokens, far.tokens)
    np.testing.assert_array_equal(out.length, far.length)
    assert np.all(np.asarray(out.steps) <= np.asarray(far.steps))


@pytest.mark.parametrize("L", [2, 3])
def test_greedy_ssd_with_the_target_as_draft_accepts_everything(params, L):
    rows = random_rows(3, seed=2)
    full = dataclasses.replace(TINY, num_mtp_heads=1)
    tp = {k: v for k, v in params.items() if not k.startswith("head_")}
    out = decode(
        SSD(L, 0.0),
        {"target": TTSLM(TINY), "draft": TTSLM(full)},
        {"target": params, "draft": tp},
        batch_of(rows),
        row_keys(0, range(3)),
        max_new_tokens=24,
        sampling=GREEDY,
    )
    acc, prop = np.asarray(out.stats["accepted_drafts"]), np.asarray(out.stats["proposed_drafts"])
    # every draft token is accepted except those past the EOS that ended the row (at most
    # L - 1, in the last step): the draft's cache is rolled back to exactly the accepted prefix
    assert np.all(prop - acc <= L - 1) and np.all(acc > 0), (acc, prop)


@pytest.mark.parametrize("L, min_tokens", [(3, 6), (2, 4)])
def test_draft_suppresses_early_eos_at_its_own_positions(L, min_tokens):
    """min_tokens = 6 and an EOS the model always prefers: with the target as its own draft
    (L = 3, greedy) step 1 emits positions 0-3 (3 drafts + the bonus) and step 2 drafts
    positions 4, 5, 6; EOS is allowed from position 6 on, so the draft proposes it there and the
    target accepts it: 6 tokens and the EOS in 2 steps, all 6 proposals accepted. A draft that
    suppressed EOS at the wrong positions is rejected at position 6 (5 accepted). L = 2,
    min_tokens = 4: step 2 drafts positions 3 and 4 (a draft position of `length | i` instead
    of `length + i` would suppress the EOS at 4)."""
    p = init_params(eos_bias=30.0)
    tp = {k: v for k, v in p.items() if not k.startswith("head_")}
    rows = random_rows(3, seed=4)
    out = decode(
        SSD(L, 0.0),
        {"target": TTSLM(TINY), "draft": TTSLM(dataclasses.replace(TINY, num_mtp_heads=1))},
        {"target": p, "draft": tp},
        batch_of(rows),
        row_keys(0, range(3)),
        max_new_tokens=24,
        sampling=SamplingConfig(greedy=True, min_tokens=min_tokens),
    )
    np.testing.assert_array_equal(out.length, [min_tokens] * 3)
    np.testing.assert_array_equal(out.steps, [2, 2, 2])
    np.testing.assert_array_equal(out.stats["proposed_drafts"], [2 * L] * 3)
    np.testing.assert_array_equal(out.stats["accepted_drafts"], [2 * L] * 3)
    assert not (np.asarray(out.tokens)[:, :min_tokens] == TINY.eos).any()


@pytest.mark.parametrize(
    "sampling", [GREEDY, SamplingConfig(temperature=1.0, top_k=8)], ids=["greedy", "sampling"]
)
def test_ssd_batch_n_equals_batch_1(params, draft_params, sampling):
    rows = random_rows(4, seed=7)
    big = run_ssd(
        SSD(3, 0.2, record=True),
        params,
        draft_params,
        batch_of(rows, 14, 8),
        row_keys(2, range(4)),
        sampling,
    )
    for i, row in enumerate(rows):
        one = run_ssd(
            "ssd:L=3,beta=0.2",
            params,
            draft_params,
            batch_of([row], 9, 6),
            row_keys(2, [i]),
            sampling,
        )
        n = int(one.length[0])
        assert int(big.length[i]) == n
        np.testing.assert_array_equal(big.tokens[i, :n], one.tokens[0, :n])
    # the recorded schedule: accepted drafts (0..L) at each of a row's steps, -1 after its end
    hist, steps = np.asarray(big.stats["accepted_per_step"]), np.asarray(big.steps)
    assert len(set(steps.tolist())) > 1  # rows end at different steps
    for i, s in enumerate(steps):
        assert ((hist[i, :s] >= 0) & (hist[i, :s] <= 3)).all() and (hist[i, s:] == -1).all()
        assert hist[i, :s].sum() == int(big.stats["accepted_drafts"][i])


def test_accepted_outside_counts_only_what_the_tolerance_let_in(params, draft_params):
    """`accepted_outside`: accepted drafts whose target probability is 0 after the top-k filter.
    Beta 0 accepts a draft only with probability q/p, so never one with q = 0; at beta 0.6 the
    random draft's picks outside the target's top 8 (of 40) get in with probability 0.6, and at
    beta 1 always (r < 1): some are counted, never more than were accepted. Greedy verification
    accepts the target's argmax only, whatever beta."""
    rows, keys = random_rows(4, seed=3), row_keys(5, range(4))
    top8 = SamplingConfig(temperature=1.0, top_k=8)
    got = {}
    for beta in (0.0, 0.6, 1.0):
        out = run_ssd(SSD(3, beta), params, draft_params, batch_of(rows), keys, top8, max_new=24)
        got[beta] = {k: np.asarray(out.stats[k]) for k in ("accepted_drafts", "accepted_outside")}
    assert (got[0.0]["accepted_outside"] == 0).all(), got[0.0]
    for beta in (0.6, 1.0):
        acc, out = got[beta]["accepted_drafts"], got[beta]["accepted_outside"]
        assert out.sum() > 0 and (out <= acc).all(), (beta, got[beta])
    greedy = run_ssd(SSD(3, 1.0), params, draft_params, batch_of(rows), keys, GREEDY, max_new=24)
    assert (np.asarray(greedy.stats["accepted_outside"]) == 0).all()  # greedy: argmax only


def _exact_first_two(params, text, prompt, sampling):
    """The target's own sampling distribution of tokens 1 and 2 (filtered, EOS suppressed),
    computed exactly: q(t1) and sum_t1 q(t1) q(t2 | t1) from 16 cached extensions."""
    from jaxtts.methods.ssd.strategy import probs_of

    m = TTSLM(TINY)
    ap = {"params": params}
    v = TINY.out_vocab
    speech, slen = with_bos(prompt, np.array([prompt.shape[1]]), TINY)
    cache = m.apply(ap, 1, text.shape[1], 16, method="init_cache")
    h, cache = m.apply(ap, text, np.array([text.shape[1]]), speech, slen, cache, method="prefill")
    mask = jnp.arange(v) == TINY.eos
    lg = jnp.where(mask, -jnp.inf, m.apply(ap, h[0, -1], method="base_logits"))
    q1 = probs_of(lg, sampling)  # [V]
    reps = jax.tree.map(lambda a: jnp.repeat(a, v, 0), cache)
    h2, _ = m.apply(ap, jnp.arange(v)[:, None], reps, method="extend")  # [V, 1, D]
    lg2 = jnp.where(mask, -jnp.inf, m.apply(ap, h2[:, 0], method="base_logits"))
    q2 = jnp.sum(q1[:, None] * probs_of(lg2, sampling), 0)
    return np.asarray(q1), np.asarray(q2)


def _chi2(counts, probs):
    keep = probs > 0
    n = counts.sum()
    exp = n * probs[keep]
    return float(np.sum((counts[keep] - exp) ** 2 / exp)), int(keep.sum()) - 1


def test_beta0_is_lossless(params, draft_params):
    """N = 6000 rows, one sentence and prompt, different keys: the empirical distributions of
    the first and the second generated token under SSD (beta = 0, L = 3, a poor 1-layer random
    draft, so most drafts are rejected and resampled) match the target's exact distribution:
    chi-square below the 99.99 % quantile of its degrees of freedom (16 categories: 15 dof,
    44.3; an exact sampler fails with probability 1e-4 per statistic).

    The test has power: the same statistic for a wrong acceptance rule, beta = 1 (accept every
    draft: the output is the draft's distribution), is far above it (asserted below), and
    with the residual replaced by q (resample from q at a rejection, a classic mistake) it is
    818 for token 1 and 411 for token 2 (tried by hand while writing this test)."""
    rng = np.random.default_rng(0)
    text = rng.integers(2, TINY.num_text_symbols, (1, 6)).astype(np.int32)
    prompt = rng.integers(0, TINY.num_speech_tokens, (1, 4)).astype(np.int32)
    s = SamplingConfig(temperature=1.0, min_tokens=3)
    q1, q2 = _exact_first_two(params, text, prompt, s)
    n = 6000
    batch = PromptBatch(
        np.repeat(text, n, 0),
        np.full((n,), 6, np.int32),
        np.repeat(prompt, n, 0),
        np.full((n,), 4, np.int32),
    )
    keys = row_keys(1, range(n))
    crit = 44.3
    for beta, ok in ((0.0, True), (1.0, False)):
        out = run_ssd(SSD(3, beta), params, draft_params, batch, keys, s, max_new=2)
        toks = np.asarray(out.tokens)
        stats = []
        for pos, q in ((0, q1), (1, q2)):
            counts = np.bincount(toks[:, pos], minlength=TINY.out_vocab).astype(np.float64)
            stats.append(_chi2(counts, q)[0])
        if ok:
            assert max(stats) < crit, stats
        else:
            assert min(stats) > 10 * crit, stats


def test_ssd_errors(params):
    for spec, msg in (
        ("ssd:0", "draft length"),
        ("ssd:L=2,beta=-0.1", "beta >= 0"),
        ("ssd:L=x", "not a number"),
        ("ssd:k=3", "unknown key"),
    ):
        with pytest.raises(ConfigError, match=msg):
            registry.get(spec)
    with pytest.raises(ConfigError, match="needs a draft model"):
        run(
            registry.get("ssd:3"),
            params,
            batch_of(random_rows(1)),
            row_keys(0, [0]),
            max_new_tokens=4,
            sampling=GREEDY,
        )
    other = dataclasses.replace(DRAFT, num_speech_tokens=32)
    with pytest.raises(ConfigError, match="draft num_speech_tokens=32 but target"):
        registry.get("ssd:3").check({"target": TTSLM(TINY), "draft": TTSLM(other)})


def test_spec_parsing():
    assert registry.get("ssd:3") == SSD(3, 0.0)
    assert registry.get("ssd:L=3,beta=0.4") == SSD(3, 0.4)
    assert registry.get("ssd:2,0.1") == SSD(2, 0.1)
    assert registry.get("ssd").name == "ssd:L=3,beta=0"


# ----------------------------------------------------------------------------- draft + engine


def test_draft_is_made_of_the_targets_layers(params):
    from jaxtts.methods.ssd.draft import draft_config, draft_layers, draft_params, forward_cost

    assert draft_layers(24, 2, 6) == (0, 1, 18, 19, 20, 21, 22, 23)  # the paper's draft
    assert draft_layers(4, 1, 1) == (0, 3)
    # the deep backbone (12 layers, 4 in the draft = the paper's 1/3): both splits tried
    assert draft_layers(12, 1, 3) == (0, 9, 10, 11)
    assert draft_layers(12, 2, 2) == (0, 1, 10, 11)
    # with the default expansion map car_small's layers sit at (0, 9, 10, 11): the first-1 /
    # last-3 draft of car_deep is exactly those trained layers
    from jaxtts.methods.lm.expand import default_layer_map

    assert default_layer_map(4, 12) == draft_layers(12, 1, 3)
    with pytest.raises(ConfigError, match="first \\+ last <= the target's 4 layers"):
        draft_layers(4, 2, 3)
    cfg = draft_config(TINY, (1,))
    dp = draft_params(params, (1,))
    np.testing.assert_array_equal(
        dp["stack"]["layer_0"]["attn"]["q"]["kernel"],
        params["stack"]["layer_1"]["attn"]["q"]["kernel"],
    )
    assert not any(k.startswith("head_") for k in dp)
    # the one-layer draft of layer 1 is the target run with layers=(1,): same hidden states
    text = np.array([[3, 4, 5, 6]], np.int32)
    speech = np.array([[TINY.bos, 1, 2]], np.int32)
    _, h_draft = TTSLM(cfg).apply({"params": dp}, text, np.array([4]), speech, np.array([3]))
    m = TTSLM(TINY)
    cache = m.apply({"params": params}, 1, 4, 3, layers=(1,), method="init_cache")
    h_sub, _ = m.apply(
        {"params": params},
        text,
        np.array([4]),
        speech,
        np.array([3]),
        cache,
        layers=(1,),
        method="prefill",
    )
    np.testing.assert_allclose(h_draft, h_sub, atol=1e-5)
    big = dataclasses.replace(TINY, num_layers=24, num_mtp_heads=1)
    paper = draft_config(big, draft_layers(24, 2, 6))
    assert 0.3 < forward_cost(paper) / forward_cost(big) < 0.36  # ~8/24 plus the head


def test_distill_loss_by_hand():
    """KL(q || p) = sum_v q_v log(q_v / p_v), summed over valid positions only; the teacher's
    entropy alike."""
    from jaxtts.train.losses import distill_loss

    q = np.array([0.5, 0.3, 0.2])
    p = np.array([0.2, 0.5, 0.3])
    # logits up to a constant: log-softmax removes it
    teacher = np.log(np.stack([q, p, q]))[None] + 3.0  # [1, 3, V]
    student = np.log(np.stack([p, p, q]))[None] - 1.0
    valid = np.array([[True, True, False]])
    kl, ent = distill_loss(jnp.asarray(student), jnp.asarray(teacher), jnp.asarray(valid))
    want_kl = np.sum(q * np.log(q / p)) + 0.0  # row 1: q == p, row 2 masked
    want_ent = -np.sum(q * np.log(q)) - np.sum(p * np.log(p))
    np.testing.assert_allclose(float(kl), want_kl, rtol=1e-5)
    assert abs(want_kl - 0.2238) < 1e-4  # 0.5 ln 2.5 + 0.3 ln 0.6 + 0.2 ln (2/3)
    np.testing.assert_allclose(float(ent), want_ent, rtol=1e-5)


def test_teacher_logits_are_the_targets_base_head(params):
    """The distillation teacher scores the positions the draft is scored at: the target's
    base head over [BOS, speech...] (its additional heads dropped)."""
    from jaxtts.methods.ssd.draft import teacher_logits_fn

    rng = np.random.default_rng(0)
    batch = {
        "text": rng.integers(1, TINY.num_text_symbols, (2, 5)).astype(np.int32),
        "text_len": np.array([5, 3], np.int32),
        "speech": rng.integers(0, TINY.num_speech_tokens, (2, 6)).astype(np.int32),
        "speech_len": np.array([6, 4], np.int32),
    }
    got = teacher_logits_fn(TINY, params)(batch)  # [B, T+1, V]
    x, x_len = with_bos(batch["speech"], batch["speech_len"], TINY)
    logits, _ = TTSLM(TINY).apply({"params": params}, batch["text"], batch["text_len"], x, x_len)
    assert got.shape == (2, 7, logits.shape[-1])
    for b, n in enumerate((7, 5)):  # the valid input positions of each row
        np.testing.assert_allclose(got[b, :n], np.asarray(logits[b, :n, 0]), atol=1e-5)


def test_ssd_distill_of_the_whole_target_starts_at_zero_kl(tmp_path):
    """A draft of every target layer is the target's base model: at step 1 its KL to the
    teacher is 0 (the teacher scores the same positions as the draft) and the loss is
    (1 - w) x CE."""
    from configs import ssd as ssd_config
    from jaxtts.methods.ssd.task import train

    config = ssd_config.get_config("tiny")
    config.ssd.update(first=4, last=0, distill=0.5)
    config.train.steps = 1
    res = train(config, str(tmp_path / "run"), progress=False)
    m = res.history[0]
    assert abs(m["train/distill/kl"]) < 1e-5
    assert m["train/distill/teacher_entropy"] > 0.1
    np.testing.assert_allclose(m["train/loss"], 0.5 * m["train/mtp_loss"], rtol=1e-4)


@pytest.fixture(scope="module")
def tiny_ssd_run(tmp_path_factory):
    from configs import ssd as ssd_config
    from jaxtts.methods.ssd.task import train

    wd = str(tmp_path_factory.mktemp("ssd") / "run")
    res = train(ssd_config.get_config("tiny"), wd, progress=False)
    return wd, res


def test_ssd_tiny_trains_only_the_first_layer_and_head(tiny_ssd_run):
    """Trained: the draft's first layer and its head; frozen (= the target's values): the
    rest. After 2 steps the frozen layer still equals its initial (target) values."""
    from jaxtts.run_folder import RunFolder

    wd, res = tiny_ssd_run

    def paths(tree):
        return {
            "/".join(str(getattr(k, "key", k)) for k in path): v
            for path, v in jax.tree_util.tree_flatten_with_path(tree)[0]
        }

    trained = paths(res.state.params)
    assert trained and all(p.startswith(("stack/layer_0/", "base_head/")) for p in trained)
    init = paths(RunFolder(os.path.join(wd, "draft_init")).saved_params())
    frozen = paths(res.state.frozen)
    assert any(p.startswith("stack/layer_1/") for p in frozen)
    for p, v in frozen.items():
        np.testing.assert_array_equal(np.asarray(v), np.asarray(init[p]), err_msg=p)
    moved = [p for p, v in trained.items() if not np.array_equal(np.asarray(v), init[p])]
    assert moved


def test_ssd_engine_decodes_and_checks_its_target(tiny_ssd_run, tmp_path):
    import json
    import shutil

    from jaxtts.engine import load_engine
    from jaxtts.errors import CheckpointError
    from jaxtts.synthesize import Synthesizer

    wd, _ = tiny_ssd_run
    eng = load_engine(wd)
    # one strategy end to end (each is two compiles); beta 0 and other draft lengths are
    # checked on the tiny models above (test_beta0_is_lossless, test_greedy_ssd_equals_greedy_far)
    check_synthesizes(eng, "ssd:L=3,beta=0.4")
    # `draft`: greedy FAR on the draft alone equals the driver run on the draft's parameters
    from jaxtts.decode import registry
    from jaxtts.decode.driver import decode

    synth = Synthesizer(eng)
    alone = synth.synthesize(
        ["the cat sat."], None, strategy="draft", greedy=True, max_seconds=1.0, progress=False
    )[0]
    ids = eng.frontend.encode("the cat sat.").astype(np.int32)
    from jaxtts.decode.driver import PromptBatch
    from jaxtts.decode.sampling import SamplingConfig, row_keys

    batch = PromptBatch(
        ids[None],
        np.array([ids.size], np.int32),
        np.zeros((1, 1), np.int32),
        np.array([0], np.int32),
    )
    ref = decode(
        registry.get("far"),
        {"target": eng.draft},
        {"target": eng.draft_params},
        batch,
        row_keys(0, [0]),
        max_new_tokens=eng.max_new_units(eng.options(max_seconds=1.0)),
        sampling=SamplingConfig(greedy=True),
    )
    assert np.array_equal(alone.tokens, np.asarray(ref.tokens)[0, : int(ref.length[0])])
    # the recorded schedule: each step took accepted + 1 tokens (up to the EOS / length cut)
    from jaxtts.methods.ssd.engine import acceptance_schedule

    toks, acc = acceptance_schedule(eng, "the cat sat.", max_seconds=1.0)
    assert acc.size > 0 and ((acc >= 0) & (acc <= 3)).all()
    assert int((acc + 1).sum()) - 4 <= toks.size <= int((acc + 1).sum())
    bad = tmp_path / "bad"
    shutil.copytree(wd, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["model"]["d_model"] = 128
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(
        CheckpointError,
        match=r"draft .*bad has d_model=128 but its target "
        r".*car_small has 256",
    ):
        load_engine(str(bad))


def test_log_of_zero_is_minus_inf_when_compiled():
    """Zero-probability ids get -inf (never drawn), compiled or not: the former
    log(max(p, 1e-38)) gave NaN for p = 0 under jit with jax 0.11 on CPU (1e-38 is below
    float32's normal range), and a NaN logit wins the categorical draw."""
    from jaxtts.methods.ssd.strategy import log_of

    p = jnp.array([0.0, 0.25, 0.75])
    want = np.array([-np.inf, np.log(0.25), np.log(0.75)], np.float32)
    np.testing.assert_array_equal(np.asarray(jax.jit(log_of)(p)), want)
    np.testing.assert_array_equal(np.asarray(log_of(p)), want)
    draws = jax.vmap(lambda k: jax.random.categorical(k, jax.jit(log_of)(p)))(
        row_keys(0, range(64))
    )
    assert int(jnp.min(draws)) >= 1


@pytest.mark.parametrize("beta", [0.0, 0.4])
def test_ssd_segments_equal_one_call(params, draft_params, beta):
    """Resumable decoding of SSD (two caches and pending tokens in the carry): segments of 1, 1,
    2, ... steps give one call's tokens, steps and acceptance statistics."""
    from lm_reference import assert_same_decode, run_in_segments

    rows = random_rows(4, seed=8)
    batch, keys = batch_of(rows), row_keys(5, range(4))
    s = SamplingConfig(temperature=1.0, top_k=8)
    want = run_ssd(SSD(3, beta), params, draft_params, batch, keys, s)
    got, n_seg = run_in_segments(
        SSD(3, beta),
        {"target": TTSLM(TINY), "draft": TTSLM(DRAFT)},
        {"target": params, "draft": draft_params},
        batch,
        keys,
        max_new_tokens=20,
        sampling=s,
        seg=[1, 1, 2],
    )
    assert n_seg >= 3  # cut at least twice
    assert_same_decode(got, want, stats=True)


@dataclasses.dataclass(frozen=True)
class OneWindowSSD(SSD):
    """SSD attending over the whole buffer of both caches at every step (no windows)."""

    def windows(self, models, batch, max_new_tokens):
        return (None,)


@pytest.mark.parametrize("L, beta", [(3, 0.4), (5, 0.0)])
def test_ssd_attention_windows_change_nothing(L, beta):
    """Both caches grown window by window (64, 128, then the whole budget) give the tokens,
    steps and acceptance statistics of full-size caches from the first step (sampled)."""
    params = init_params(eos_bias=-3.0)  # long rows: they cross both window boundaries
    dparams = init_params(DRAFT, seed=3, eos_bias=-3.0)
    rows = random_rows(4, seed=5)
    batch, keys = batch_of(rows), row_keys(0, range(4))
    s = SamplingConfig(temperature=1.0, top_k=8)
    strat = SSD(L, beta)
    assert strat.windows(None, batch, 150) == (64, 128, 6 + 2 + 150 + L)  # prompt 6
    out = run_ssd(strat, params, dparams, batch, keys, s, max_new=150)
    ref = run_ssd(OneWindowSSD(L, beta), params, dparams, batch, keys, s, max_new=150)
    assert int(np.max(out.length)) > 128  # really past the second window
    np.testing.assert_array_equal(out.tokens, ref.tokens)
    np.testing.assert_array_equal(out.steps, ref.steps)
    for k in ("accepted_drafts", "proposed_drafts"):
        np.testing.assert_array_equal(out.stats[k], ref.stats[k])


def test_untrained_draft_folder_loads_the_targets_layers(tmp_path):
    """`python -m jaxtts.methods.ssd.task untrained`: a folder with no parameter file whose
    engine takes the draft's layers from the target at load time, value for value; training
    such a config is a one-line error."""
    from configs import ssd as ssd_configs
    from jaxtts.engine import load_engine
    from jaxtts.methods.ssd import task as ssd_task
    from jaxtts.methods.ssd.draft import draft_params
    from jaxtts.run_folder import RunFolder

    dest = tmp_path / "ssd_untrained"
    assert ssd_task.main(["untrained", "--config", "configs/ssd.py:tiny", str(dest)]) == 0
    assert not (dest / "params.msgpack").exists()
    eng = load_engine(dest)
    want = draft_params(eng.params, list(RunFolder(dest).read_config("ssd").ssd.layers))
    for (pa, a), (pb, b) in zip(
        jax.tree_util.tree_flatten_with_path(eng.draft_params)[0],
        jax.tree_util.tree_flatten_with_path(want)[0],
        strict=True,
    ):
        assert pa == pb
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    config = ssd_configs.get_config("tiny")
    config.ssd.from_target = True
    with pytest.raises(ConfigError, match="from_target"):
        ssd_task.train(config, str(tmp_path / "never"))


def test_untrained_takes_config_overrides_as_train_py_does(tmp_path, capsys):
    """`task untrained --config ... --config.ssd.first=2 <dest>`: the folder's draft is the
    overridden split; an unknown key or a value of the wrong type is a one-line error naming
    the argument, and nothing is written."""
    from jaxtts.methods.ssd import task as ssd_task
    from jaxtts.run_folder import RunFolder

    dest = tmp_path / "ssd_first2"
    argv = ["untrained", "--config", "configs/ssd.py:tiny", "--config.ssd.first=2", str(dest)]
    assert ssd_task.main(argv) == 0
    cfg = RunFolder(dest).read_config("ssd")
    assert int(cfg.ssd.first) == 2
    assert list(cfg.ssd.layers)[:2] == [0, 1]
    for bad, says in (
        ("--config.ssd.frist=2", "unknown config key ssd.frist"),
        ("--config.ssd.first=two", "--config.ssd.first='two': expected int (e.g. 1)"),
    ):
        capsys.readouterr()
        never = tmp_path / "never"
        assert ssd_task.main(["untrained", "--config", "configs/ssd.py:tiny", bad, str(never)]) == 2
        err = capsys.readouterr().err.strip()
        assert says in err and "\n" not in err, err
        assert not never.exists()


def test_each_step_rolls_both_caches_back_to_the_accepted_prefix(params, draft_params):
    """One loop step at a time (a random draft, so rejections happen): after a step in which a
    row accepted n of L drafts, the target cache grew by 1 + n (the last committed token y and
    the n accepted drafts) and the draft cache by its pending tokens plus min(n, L - 1) (it has
    not seen x_L when all L were accepted: x_L is pending with the bonus, n_pending = 2)."""
    from jaxtts.decode import driver

    L = 3
    rows = random_rows(4, seed=9)
    batch, keys = batch_of(rows), row_keys(3, range(4))
    s = SamplingConfig(temperature=1.0, top_k=8)
    run = driver.start(
        SSD(L, 0.0),
        {"target": TTSLM(TINY), "draft": TTSLM(DRAFT)},
        {"target": params, "draft": draft_params},
        batch,
        max_new_tokens=20,
    )
    seen = set()
    while not run.all_done():
        c = run.state.carry
        t0, d0, pend = (
            np.asarray(x) for x in (c.target.speech_len, c.draft.speech_len, c.n_pending)
        )
        acc0, active = np.asarray(c.accepted), ~np.asarray(run.state.done)
        run = driver.advance(
            run, {"target": params, "draft": draft_params}, keys, num_steps=1, sampling=s
        )
        c = run.state.carry
        n = np.asarray(c.accepted) - acc0  # this step's accepted drafts (0 for ended rows)
        for b in np.flatnonzero(active):
            assert int(c.target.speech_len[b]) == t0[b] + 1 + n[b]
            assert int(c.draft.speech_len[b]) == d0[b] + pend[b] + min(n[b], L - 1)
            assert int(c.n_pending[b]) == (2 if n[b] == L else 1)
            seen.add(int(n[b]))
    assert {0, L} <= seen  # rejections and full acceptances both happened


def test_ssd_split_prefill_equals_the_batch_padded_to_the_loop_width(params, draft_params):
    """Both caches widened after a narrow prefill (`PromptBatch.text_width`): the tokens and the
    acceptance statistics of the batch padded to the loop's width (sampled: the same keys)."""
    from lm_reference import assert_same_decode

    rows = random_rows(4, seed=9)
    keys = row_keys(4, range(4))
    s = SamplingConfig(temperature=1.0, top_k=8)
    want = run_ssd(SSD(3, 0.4), params, draft_params, batch_of(rows, 24), keys, s)
    narrow = batch_of(rows, 9).replace(text_width=24)
    got = run_ssd(SSD(3, 0.4), params, draft_params, narrow, keys, s)
    assert_same_decode(got, want, stats=True)
    assert int(np.max(want.length)) > 5


def test_shipped_draft_holds_only_its_trained_parts(tiny_ssd_run, tmp_path):
    """`python -m jaxtts.methods.ssd.task ship`: the params file holds the trained first layer
    and head only; the engine builds the rest from the target and loads the same draft as the
    training run, value for value. A leaf of the wrong shape is a one-line error."""
    from jaxtts.checkpoint import read_params_tree, write_params_file
    from jaxtts.engine import load_engine
    from jaxtts.errors import CheckpointError
    from jaxtts.methods.ssd import task as ssd_task
    from jaxtts.trees import tree_to_flat

    wd, _ = tiny_ssd_run
    dest = tmp_path / "shipped"
    assert ssd_task.main(["ship", wd, str(dest)]) == 0
    saved = tree_to_flat(read_params_tree(dest / "params.msgpack"))
    assert saved and all(k.startswith(("stack/layer_0/", "base_head/")) for k in saved)
    want = jax.tree_util.tree_flatten_with_path(load_engine(wd).draft_params)[0]
    got = jax.tree_util.tree_flatten_with_path(load_engine(dest).draft_params)[0]
    for (pa, a), (pb, b) in zip(got, want, strict=True):
        assert pa == pb
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert ssd_task.main(["ship", str(dest), str(tmp_path / "again")]) == 2  # not a training run
    # --dtype float16: the trained parts stored as float16, loaded back as float32 at the
    # float16 rounding of the trained values; the target's layers as before
    half = tmp_path / "half"
    assert ssd_task.main(["ship", wd, str(half), "--dtype", "float16"]) == 0
    saved16 = tree_to_flat(read_params_tree(half / "params.msgpack"))
    assert saved16.keys() == saved.keys()
    assert {np.asarray(v).dtype for v in saved16.values()} == {np.dtype(np.float16)}
    got16 = tree_to_flat(load_engine(half).draft_params)
    want_flat = tree_to_flat(load_engine(wd).draft_params)
    assert got16.keys() == want_flat.keys()
    for key, a in got16.items():
        b = np.asarray(want_flat[key])
        if key in saved:  # a trained part: its float16 rounding
            b = b.astype(np.float16).astype(np.float32)
        assert np.asarray(a).dtype == np.float32, key
        np.testing.assert_array_equal(np.asarray(a), b, err_msg=key)
    bad = {"base_head": {"kernel": np.zeros((3, 3), np.float32)}}
    write_params_file(dest / "params.msgpack", bad)
    with pytest.raises(CheckpointError, match=r"params.msgpack: 'base_head/kernel' of shape"):
        load_engine(dest)
