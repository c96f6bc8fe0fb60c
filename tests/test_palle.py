"""PALLE: training masks on hand-built rows, the fixed-step decoders (commit sizes, finishing,
never re-masking), greedy batch-N == batch-1, padding invariance of the model, and a tiny
two-stage run through train.py-level code, the engine and its one-line errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtts.decode.sampling import SamplingConfig, row_keys
from jaxtts.engine import resolve
from jaxtts.errors import ConfigError, DataError
from jaxtts.methods.palle import decode as dec
from jaxtts.methods.palle import masking
from jaxtts.methods.palle.model import MaskedGenTransformer, PALLEConfig, init_params

pytestmark = pytest.mark.slow  # integration / trained models: `make test-fast` skips it

CFG = PALLEConfig(
    num_text_symbols=20,
    num_speech_tokens=30,
    d_model=32,
    num_layers=2,
    num_heads=2,
    head_dim=16,
    d_ff=64,
    convnext_ff=64,
    conv_pos_groups=4,
)
GREEDY = SamplingConfig(greedy=True)


# ----------------------------------------------------------------------------- masks


def test_par_mask_bounds_and_loss_span_by_hand():
    lo, hi = masking.par_start_bounds(jnp.array([100, 57, 10]))
    assert lo.tolist() == [30, 17, 3] and hi.tolist() == [89, 51, 8]  # T - floor(0.1T) - 1
    masked, loss = masking.par_masks(jnp.array([50, 17]), jnp.array([100, 57]), 110)
    m, ls = np.asarray(masked), np.asarray(loss)
    assert np.flatnonzero(m[0]).tolist() == list(range(50, 100))  # everything from s on
    assert np.flatnonzero(ls[0]).tolist() == list(range(50, 60))  # k = floor(0.1 * 100)
    assert np.flatnonzero(m[1]).tolist() == list(range(17, 57))
    assert np.flatnonzero(ls[1]).tolist() == list(range(17, 22))  # k = floor(5.7) = 5


def test_sampled_par_starts_cover_exactly_the_bounds():
    length = jnp.full((4000,), 57)
    s = np.asarray(masking.sample_par_start(jax.random.key(0), length))
    assert s.min() == 17 and s.max() == 51  # both ends reached, never outside
    assert len(np.unique(s)) == 51 - 17 + 1


@pytest.mark.parametrize("stage", ["refine", "nar"])
def test_refine_and_nar_masks_never_touch_the_visible_30_percent(stage):
    length = jnp.array([100, 40, 0])
    masked, loss = masking.stage_masks(stage, jax.random.key(1), length, 128, 0.1)
    m = np.asarray(masked)
    assert np.array_equal(m, np.asarray(loss))
    assert not m[0, :30].any() and not m[0, 100:].any()
    assert not m[1, :12].any() and not m[1, 40:].any() and not m[2].any()
    if stage == "refine":  # i.i.d. p = 0.1 beyond 0.3T
        big = masking.refine_masks(jax.random.key(2), jnp.full((200,), 100), 100, 0.1)[0]
        rate = float(np.asarray(big)[:, 30:].mean())
        assert abs(rate - 0.1) < 0.01 and not np.asarray(big)[:, :30].any()


# ----------------------------------------------------------------------------- decoding


def test_commit_sizes_by_hand():
    k = dec.commit_sizes(
        jnp.array([250, 199, 250, 50]),
        jnp.array([175, 140, 175, 30]),
        jnp.array([175, 140, 1, 30]),
        0.01,
        100,
    )
    # floor(2.5) = 2; floor(1.99) = 1 < ceil(140/100) = 2; N_left = 1; floor(0.5) = 0 -> 1
    assert k.tolist() == [2, 2, 1, 1]


def _rows(b=3, width=96, seed=0):
    rng = np.random.default_rng(seed)
    text = rng.integers(0, CFG.num_text_symbols, (b, 40)).astype(np.int32)
    text_len = np.array([40, 25, 31][:b], np.int32)
    speech = rng.integers(0, CFG.num_speech_tokens, (b, width)).astype(np.int32)
    prompt_len = np.array([20, 7, 33][:b], np.int32)
    total = np.array([96, 60, 81][:b], np.int32)
    return text, text_len, speech, prompt_len, total


@pytest.fixture(scope="module")
def params():
    return init_params(CFG, jax.random.key(3))


def test_par_commits_min_floor_rT_nleft_and_finishes_in_fixed_steps(params):
    model = MaskedGenTransformer(CFG)
    text, text_len, speech, p, total = _rows()
    steps, ratio = 30, 0.05  # floor(0.05 T) * 30 >= G for every row: the paper's k' exactly
    tokens, conf, commits = dec.par_decode(
        model,
        params,
        text,
        text_len,
        speech,
        p,
        total,
        row_keys(0, range(3)),
        steps=steps,
        ratio=ratio,
        sampling=GREEDY,
    )
    tokens, commits = np.asarray(tokens), np.asarray(commits)  # [B, T], [steps, B]
    for b in range(3):
        g, left = int(total[b] - p[b]), int(total[b] - p[b])
        for i in range(steps):
            want = min(int(np.floor(ratio * total[b])), left)
            assert commits[i, b] == want, (b, i)
            left -= want
        assert left == 0 and commits[:, b].sum() == g  # done within the fixed steps
        assert np.array_equal(tokens[b, : p[b]], speech[b, : p[b]])  # prompt kept
        gen = tokens[b, p[b] : total[b]]
        assert ((gen >= 0) & (gen < CFG.num_speech_tokens)).all()  # no [MASK] left
        assert (tokens[b, total[b] :] == -1).all()
        assert (np.asarray(conf)[b, p[b] : total[b]] <= 0).all()


def test_par_raises_k_when_floor_rT_cannot_finish(params):
    model = MaskedGenTransformer(CFG)
    text, text_len, speech, p, total = _rows()
    _, _, commits = dec.par_decode(
        model,
        params,
        text,
        text_len,
        speech,
        p,
        total,
        row_keys(0, range(3)),
        steps=10,
        ratio=0.01,
        sampling=GREEDY,
    )
    assert np.asarray(commits).sum(0).tolist() == (total - p).tolist()


def test_refine_never_remasks_an_updated_token(params):
    model = MaskedGenTransformer(CFG)
    text, text_len, speech, p, total = _rows()
    keys = row_keys(0, range(3))
    tokens, conf, _ = dec.par_decode(
        model, params, text, text_len, speech, p, total, keys, steps=30, ratio=0.05, sampling=GREEDY
    )
    steps, gamma = 12, 0.1
    out, updated, remasked = dec.refine(
        model,
        params,
        text,
        text_len,
        tokens,
        conf,
        p,
        total,
        keys,
        steps=steps,
        gamma=gamma,
        sampling=GREEDY,
    )
    updated, remasked = np.asarray(updated), np.asarray(remasked)
    for b in range(3):
        g = int(total[b] - p[b])
        n = int(np.ceil(gamma * g))
        want = [min(n, g - n * i) if g - n * i > 0 else 0 for i in range(steps)]
        assert remasked[:, b].tolist() == want  # each step takes new positions only
        assert updated[b].sum() == sum(want)  # so no position was re-masked twice
        assert not updated[b, : p[b]].any() and not updated[b, total[b] :].any()
    # the first step picks the lowest stage-one confidences
    first = dec._lowest(
        jnp.asarray(conf),
        jnp.asarray((np.arange(96)[None] >= p[:, None]) & (np.arange(96)[None] < total[:, None])),
        jnp.ceil(gamma * (total - p)).astype(jnp.int32),
    )
    n_first = sum(int(np.ceil(gamma * (t - q))) for t, q in zip(total, p, strict=True))
    assert np.asarray(first).sum() == n_first


@pytest.mark.parametrize(
    "which,layout", [("par", "pad"), ("palle", "pad"), ("nar", "pad"), ("palle", "stretch")]
)
def test_greedy_batch_n_equals_batch_1(params, which, layout):
    import dataclasses

    model = MaskedGenTransformer(dataclasses.replace(CFG, text_layout=layout))
    text, text_len, speech, p, total = _rows()
    keys = row_keys(0, range(3))

    def run(sl):
        a = (text[sl], text_len[sl], speech[sl], p[sl], total[sl])
        if which == "nar":
            return np.asarray(
                dec.nar_decode(model, params, *a, keys[sl], steps=8, sampling=GREEDY)[0]
            )
        toks, conf, _ = dec.par_decode(
            model, params, *a, keys[sl], steps=20, ratio=0.05, sampling=GREEDY
        )
        if which == "palle":
            toks = dec.refine(
                model,
                params,
                a[0],
                a[1],
                toks,
                conf,
                a[3],
                a[4],
                keys[sl],
                steps=3,
                gamma=0.05,
                sampling=GREEDY,
            )[0]
        return np.asarray(toks)

    full = run(slice(0, 3))
    for b in range(3):
        assert np.array_equal(full[b], run(slice(b, b + 1))[0]), b


def test_nar_unmasks_on_the_cosine_schedule(params):
    model = MaskedGenTransformer(CFG)
    text, text_len, speech, p, total = _rows()
    tokens, unmasked = dec.nar_decode(
        model,
        params,
        text,
        text_len,
        speech,
        p,
        total,
        row_keys(0, range(3)),
        steps=8,
        sampling=GREEDY,
    )
    unmasked = np.asarray(unmasked)
    for b in range(3):
        g = int(total[b] - p[b])
        remain = [int(np.floor(g * np.cos(np.pi / 2 * (i + 1) / 8))) for i in range(7)] + [0]
        done = np.cumsum(unmasked[:, b])
        assert (g - done).tolist() == remain
    gen = np.asarray(tokens)[0, p[0] : total[0]]
    assert ((gen >= 0) & (gen < CFG.num_speech_tokens)).all()


def test_text_layouts_by_hand():
    import dataclasses

    from jaxtts.methods.palle.model import text_positions

    text = jnp.array([[1, 2, 3, 0, 0], [4, 5, 0, 0, 0], [6, 0, 0, 0, 0]])
    text_len, speech_len = jnp.array([3, 2, 0]), jnp.array([7, 4, 3])
    pad = np.asarray(text_positions(CFG, text, text_len, speech_len, 8))
    assert pad.tolist() == [[1, 2, 3] + [20] * 5, [4, 5] + [20] * 6, [20] * 8]  # [PAD] = 20
    st = dataclasses.replace(CFG, text_layout="stretch")
    got = np.asarray(text_positions(st, text, text_len, speech_len, 8))
    # floor(t * L / S): 0,0,0,1,1,2,2 for L=3, S=7; 0,0,1,1 for L=2, S=4; no text: all [PAD]
    assert got.tolist() == [[1, 1, 1, 2, 2, 3, 3, 20], [4, 4, 5, 5, 20, 20, 20, 20], [20] * 8]
    with pytest.raises(ConfigError, match="model.text_layout='diag'"):
        PALLEConfig.from_config(dict(num_text_symbols=2, num_speech_tokens=2, text_layout="diag"))


@pytest.mark.parametrize("layout", ["pad", "stretch"])
def test_logits_do_not_depend_on_padding(params, layout):
    import dataclasses

    model = MaskedGenTransformer(dataclasses.replace(CFG, text_layout=layout))
    text, text_len, speech, _, total = _rows()
    a = model.apply({"params": params}, text, text_len, speech, total)
    wide = np.pad(speech, ((0, 0), (0, 32)), constant_values=5)
    b = model.apply({"params": params}, np.pad(text, ((0, 0), (0, 7))), text_len, wide, total)
    for r in range(3):
        np.testing.assert_allclose(
            np.asarray(a)[r, : total[r]], np.asarray(b)[r, : total[r]], atol=2e-5
        )


def test_task_loss_covers_only_the_span_and_drops_too_long_text():
    from jaxtts.methods.palle.task import PALLETask

    task = PALLETask(CFG, "par")
    batch = {
        "text": np.ones((2, 50), np.int32),
        "text_len": np.array([10, 50], np.int32),
        "speech": np.ones((2, 40), np.int32),
        "speech_len": np.array([40, 40], np.int32),
    }
    x, loss_mask, ok = task.masked_inputs(batch, jax.random.key(0))
    x, loss_mask = np.asarray(x), np.asarray(loss_mask)
    assert ok.tolist() == [True, False]  # 50 text symbols do not fit 40 positions
    assert loss_mask[0].sum() == 4 and not loss_mask[1].any()
    s = int(np.argmax(x[0] == CFG.mask_id))
    assert 12 <= s <= 35 and (x[0, s:] == CFG.mask_id).all() and (x[0, :s] == 1).all()
    assert np.flatnonzero(loss_mask[0]).tolist() == list(range(s, s + 4))


def test_bad_strategy_specs_are_one_line_errors():
    from jaxtts.methods.palle.engine import parse_spec

    assert parse_spec("palle:refine=3")[1]["refine"] == 3
    for bad in ("far", "par:refine=3", "palle:steps=x", "par:steps=0", "palle:gamma=1.5"):
        with pytest.raises(ConfigError):
            parse_spec(bad)


# ----------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    from configs import palle as palle_config
    from jaxtts.methods.palle.task import train

    root = tmp_path_factory.mktemp("palle")
    par, ref = str(root / "par"), str(root / "refine")
    train(palle_config.get_config("tiny"), par, progress=False)
    cfg = palle_config.get_config("tiny_refine")
    cfg.train.init_from = par
    cfg.palle.par_run = par
    res = train(cfg, ref, progress=False)
    return par, ref, res


def test_tiny_two_stages_train_and_synthesize(tiny_runs):
    from jaxtts.engine import load_engine
    from jaxtts.synthesize import Synthesizer

    par, ref, res = tiny_runs
    losses = [h["train/loss"] for h in res.history if "train/loss" in h]
    assert losses and np.all(np.isfinite(losses)), res.history
    eng = load_engine(ref)
    assert resolve(eng, "palle").name == "palle:steps=100,ratio=0.01,refine=7,gamma=0.05,scale=1"
    synth = Synthesizer(eng, vocoder="griffin_lim")
    texts = ["the cat sat", "a much longer sentence about the weather today"]
    out = synth.synthesize(
        texts, None, strategy="palle:steps=10,refine=2", batch_size=2, progress=False
    )
    assert all(r.wav.size > 0 for r in out)
    assert all(r.info["steps"] == 12 for r in out)  # fixed: 10 PAR + 2 refine steps
    one = synth.synthesize(
        texts, None, strategy="palle:steps=10,refine=2", batch_size=1, progress=False
    )
    for a, b in zip(one, out, strict=True):  # batch-N == batch-1 (sampling, per-row keys)
        assert np.array_equal(a.tokens, b.tokens)
    par_eng = load_engine(par)
    with pytest.raises(ConfigError, match="stage-two run"):
        resolve(par_eng, "palle")
    assert resolve(par_eng, "nar").name.startswith("nar:")


def test_explicit_lengths_are_checked(tiny_runs):
    from jaxtts.decode.driver import PromptBatch
    from jaxtts.engine import load_engine

    eng = load_engine(tiny_runs[1])
    batch = PromptBatch(
        np.ones((1, 8), np.int32),
        np.array([8], np.int32),
        np.zeros((1, 4), np.int32),
        np.array([4], np.int32),
    )
    opts = resolve(eng, "palle:steps=4,refine=1")
    out = eng.generate(batch, row_keys(0, [0]), opts, total_len=np.array([20]))
    assert out.length.tolist() == [16]
    for total, msg in (
        (0, "must exceed its prompt"),
        (4, "must exceed its prompt"),
        (10_000, "longest training row"),
        (6, "shorter than its text"),
    ):
        with pytest.raises(DataError, match=msg):
            eng.generate(batch, row_keys(0, [0]), opts, total_len=np.array([total]))


def test_refine_from_a_mismatched_stage_one_is_a_one_line_error(tiny_runs, tmp_path):
    from configs import palle as palle_config
    from jaxtts.methods.palle.task import train

    cfg = palle_config.get_config("tiny_refine")
    cfg.train.init_from = tiny_runs[0]
    cfg.model.d_model = 64
    with pytest.raises(ConfigError, match="model.d_model=32 there but 64 here"):
        train(cfg, str(tmp_path / "bad"), progress=False)
    cfg.model.d_model = 32
    cfg.model.text_layout = "stretch"
    with pytest.raises(ConfigError, match="model.text_layout='pad' there but 'stretch' here"):
        train(cfg, str(tmp_path / "bad2"), progress=False)


def test_text_information_scores_the_stage_one_span(tiny_runs, tiny_corpus):
    """The right- vs other-text CE of stage one counts exactly floor(0.1 T) span tokens per
    row and mask draw, and repeats exactly (fixed draws)."""
    from jaxtts.data.manifest import read_split
    from jaxtts.engine import load_engine
    from jaxtts.methods.lm.diagnostics import teacher_forcing_loader
    from jaxtts.methods.palle.task import text_information

    par, _, _ = tiny_runs
    eng = load_engine(par)
    utts = read_split(tiny_corpus, "train")[:12]
    a = text_information(eng, utts, batch_size=4, seeds=2)
    b = text_information(eng, utts, batch_size=4, seeds=2)
    np.testing.assert_array_equal(a.ce_right, b.ce_right)
    loader = teacher_forcing_loader(eng, utts, None, 4)
    want = 0
    for s in range(len(loader)):
        n = loader.get_batch(s)["speech_len"]
        if (n > 0).sum() >= 2:
            want += 2 * int(np.sum(np.floor(0.1 * n[n > 0])))
    assert a.tokens == want > 0
    assert np.isfinite(a.ce_right).all() and np.isfinite(a.ce_other).all()
