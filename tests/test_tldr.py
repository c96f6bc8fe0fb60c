"""TLDR: the patch grid, the shift, the compressor's mask, LoRA at zero, frozen parameters,
padding, decoding == the teacher-forced model, batch-N == batch-1, bad input."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtts.decode.driver import PromptBatch, decode
from jaxtts.decode.sampling import SamplingConfig, row_keys
from jaxtts.engine import resolve
from jaxtts.errors import CheckpointError, ConfigError, DataError
from jaxtts.methods.lm.model import TTSLM, LMConfig
from jaxtts.methods.speaker_encoder import SpeakerEncoderModel
from jaxtts.methods.tldr.model import (
    TLDRConfig,
    TLDRModel,
    patch_grid,
    previous_tokens,
    prompt_tail,
)
from jaxtts.methods.tldr.strategy import TLDR
from jaxtts.trees import tree_from_flat, tree_to_flat

pytestmark = pytest.mark.slow  # integration / trained models: `make test-fast` skips it

K = 40  # speech tokens
LM = LMConfig(
    num_text_symbols=20,
    num_speech_tokens=K,
    d_model=32,
    num_layers=2,
    num_heads=2,
    head_dim=16,
    d_ff=64,
    num_mtp_heads=1,
    vocab_multiple=8,
)


def make_cfg(text_layers=(), **kw) -> TLDRConfig:
    base = dict(
        backbone=dataclasses.replace(LM, lora_rank=4, lora_alpha=4.0, text_layers=text_layers),
        patch=4,
        window=6,
        comp_heads=2,
        comp_ff=64,
        ext_layers=2,
        ext_width=32,
        ext_heads=2,
        ext_ff=64,
        slots=3,
        speaker=True,
        speaker_proj=8,
        speaker_dim=16,
        token_frames=2,
        n_mels=8,
        min_reference_frames=4,
    )
    base.update(kw)
    return TLDRConfig(**base)


SPK = SpeakerEncoderModel(channels=8, num_blocks=1, embed_dim=16, attention_dim=8, n_mels=8)


ZERO_INIT = ("lora_b", "mel_table", "prev_embed", "slot_pos", "order/kernel", "text_o/kernel")


def init_model(cfg: TLDRConfig, seed: int = 0):
    model = TLDRModel(cfg, SPK if cfg.speaker else None)
    text, speech = jnp.ones((1, 6), jnp.int32), jnp.ones((1, 12), jnp.int32)
    params = jax.jit(model.init)(
        jax.random.key(seed), text, jnp.array([6]), speech, jnp.array([12]), jnp.array([5])
    )["params"]
    flat = tree_to_flat(nn.unbox(params))
    # a random LoRA B, mel table and zero-initialised tables so that every path is exercised
    keys = iter(jax.random.split(jax.random.key(seed + 1), len(flat)))
    flat = {
        k: 0.05 * jax.random.normal(next(keys), v.shape) if k.endswith(ZERO_INIT) else v
        for k, v in flat.items()
    }
    return model, tree_from_flat(flat)


def rows(seed=0, b=3, x=7, t=20):
    rng = np.random.default_rng(seed)
    text = rng.integers(1, LM.num_text_symbols, (b, x)).astype(np.int32)
    text_len = np.array([7, 5, 6][:b], np.int32)
    speech = rng.integers(0, K, (b, t)).astype(np.int32)
    prompt_len = np.array([5, 8, 0][:b], np.int32)
    speech_len = np.array([17, 20, 9][:b], np.int32)
    return text, text_len, speech, speech_len, prompt_len


def test_patch_grid_exact():
    cfg = make_cfg(patch=3)
    speech = jnp.array([[10, 11, 12, 13, 14, 20, 21, 22, 23, 0]])  # prompt 5, target 4
    tok, valid, target = patch_grid(
        speech, jnp.array([9]), jnp.array([5]), cfg, cfg.num_patches(10)
    )
    pad, eos = cfg.pad, cfg.eos
    want = [[10, 11, 12], [13, 14, pad], [20, 21, 22], [23, eos, pad], [pad, pad, pad]]
    assert cfg.num_patches(10) == 5
    # ceil((T + 1) / P) + 1: room for the target's EOS and both segments' padding
    assert [cfg.num_patches(t) for t in (8, 9, 11, 12)] == [4, 5, 5, 6]
    assert [make_cfg(patch=4).num_patches(t) for t in (7, 8)] == [3, 4]
    np.testing.assert_array_equal(tok[0], want)
    np.testing.assert_array_equal(
        target[0].astype(int), [[0, 0, 0], [0, 0, 0], [1, 1, 1], [1, 1, 0], [0, 0, 0]]
    )
    np.testing.assert_array_equal(valid[0].astype(int).sum(-1), [3, 2, 3, 2, 0])


def _hidden_and_logits(model, params, args):
    def run(params, *args):
        (logits, _, _), inter = model.apply(
            {"params": params},
            *args,
            capture_intermediates=lambda mdl, name: name == "hidden_embedded",
        )
        return inter["intermediates"]["backbone"]["hidden_embedded"][0], logits

    g, logits = jax.jit(run)(params, *map(jnp.asarray, args))
    return np.asarray(g), np.asarray(logits)


def test_shift_no_leak_from_target_patch():
    """Changing the tokens of target patch j changes no global context g_k for k <= j, no
    logits of patches < j, and inside patch j no logit at or before the changed position."""
    cfg = make_cfg()
    model, params = init_model(cfg)
    text, text_len, speech, speech_len, prompt_len = rows()
    # row 0: prompt 5 tokens = patches 0-1; target patch j = 3 holds target tokens 4..7.
    # One batch: the 3 rows, then row 0 with that token changed
    j, i = 3, 2
    pos = 5 + (j - 2) * 4 + i
    s2 = speech.copy()
    s2[0, pos] = (s2[0, pos] + 1) % K
    two = (np.concatenate([a, a]) for a in (text, text_len, speech, speech_len, prompt_len))
    text2, tl2, sp2, sl2, pl2 = two
    sp2[3:] = s2
    g, lg = _hidden_and_logits(model, params, (text2, tl2, sp2, sl2, pl2))
    assert g.shape[:2] == lg.shape[:2] == (6, cfg.num_patches(speech.shape[1]))
    g0, l0, g1, l1 = g[:3], lg[:3], g[3:], lg[3:]
    np.testing.assert_array_equal(g0[0, : j + 1], g1[0, : j + 1])
    np.testing.assert_array_equal(l0[0, :j], l1[0, :j])
    np.testing.assert_array_equal(l0[0, j, : i + 1], l1[0, j, : i + 1])
    assert np.abs(l0[0, j, i + 1] - l1[0, j, i + 1]).max() > 1e-6  # the next token sees it
    assert np.abs(g0[0, j + 1] - g1[0, j + 1]).max() > 1e-6  # the next patch sees it
    np.testing.assert_array_equal(l0[1:], l1[1:])  # other rows untouched


def test_compressor_patch_sees_only_its_tokens():
    """Window 1 (no token mixing): a patch vector depends on its own tokens only."""
    cfg = make_cfg(window=1)
    model, params = init_model(cfg)
    tok = jnp.array(np.random.default_rng(0).integers(0, K, (2, 5, 4)), jnp.int32)
    valid = jnp.ones((2, 5, 4), bool).at[1, 4, 2:].set(False)
    z0 = model.apply({"params": params}, tok, valid, method="compress")
    z1 = model.apply(
        {"params": params}, tok.at[:, 2, 1].set((tok[:, 2, 1] + 3) % K), valid, method="compress"
    )
    changed = np.abs(np.asarray(z0 - z1)).max(-1)  # [B, J]
    assert (changed[:, 2] > 1e-6).all()
    np.testing.assert_array_equal(changed[:, [0, 1, 3, 4]], 0.0)
    # an invalid cell's token is never read
    z2 = model.apply({"params": params}, tok.at[1, 4, 3].set(0), valid, method="compress")
    np.testing.assert_array_equal(np.asarray(z0), np.asarray(z2))


def test_compressor_last_patch_equals_the_full_grid():
    """Decoding compresses only the newest patch (`last=True`: the window's earlier patches are
    keys of the local layer, nothing else): the last row of the full computation."""
    cfg = make_cfg(window=6)
    model, params = init_model(cfg)
    tok = jnp.array(np.random.default_rng(1).integers(0, K, (2, 5, 4)), jnp.int32)
    valid = jnp.ones((2, 5, 4), bool).at[1, :2].set(False).at[0, 4, 3].set(False)
    full = model.apply({"params": params}, tok, valid, method="compress")
    last = model.apply({"params": params}, tok, valid, True, method="compress")
    assert last.shape == (2, 1, full.shape[-1])
    np.testing.assert_allclose(last, full[:, -1:], atol=1e-5)


def test_mean_compressor_by_hand():
    """compressor='mean': RMSNorm (unit scale at init) of the mean of a patch's valid token
    embeddings; a patch with no valid token is 0. The attention compressor's query is the
    same vector."""
    from jaxtts.methods.tldr.model import Compressor

    rng = np.random.default_rng(0)
    emb = rng.normal(size=(2, 3, 4, 8)).astype(np.float32)  # [B, J, P, D]
    valid = np.ones((2, 3, 4), bool)
    valid[0, 1, 2:] = False
    valid[1, 0, 1:] = False
    valid[1, 2, :] = False
    mod = Compressor(make_cfg(compressor="mean"))
    variables = mod.init(jax.random.key(0), emb, valid)
    got = np.asarray(mod.apply(variables, emb, valid))
    w = valid[..., None]
    mean = (emb * w).sum(2) / np.maximum(w.sum(2), 1)
    want = mean / np.sqrt((mean * mean).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        got[1, 0], emb[1, 0, 0] / np.sqrt((emb[1, 0, 0] ** 2).mean() + 1e-6), rtol=1e-5
    )
    assert not got[1, 2].any()


def test_compressor_heads_split_the_width():
    """The attention compressor's local layer and cross-attention: comp_heads heads of
    D / comp_heads each (D = the backbone's width)."""
    from jaxtts.methods.tldr.model import Compressor

    cfg = make_cfg(comp_heads=4)
    d = cfg.backbone.d_model
    emb = np.zeros((1, 2, cfg.patch, d), np.float32)
    variables = Compressor(cfg).init(jax.random.key(0), emb, np.ones((1, 2, cfg.patch), bool))
    shapes = {k: v.shape for k, v in tree_to_flat(nn.unbox(variables["params"])).items()}
    for block in ("local/attn", "cross"):
        for w in "qkv":
            assert shapes[f"{block}/{w}/kernel"] == (d, 4, d // 4), block
        assert shapes[f"{block}/o/kernel"] == (4, d // 4, d), block


def test_lora_at_zero_is_the_frozen_backbone():
    cfg = make_cfg()
    model, _ = init_model(cfg)
    text, text_len, speech, speech_len, _ = rows()
    emb = jax.random.normal(jax.random.key(3), (3, 6, LM.d_model))
    plain = TTSLM(LM)
    p_plain = nn.unbox(
        plain.init(
            jax.random.key(0),
            jnp.asarray(text),
            jnp.asarray(text_len),
            jnp.asarray(speech),
            jnp.asarray(speech_len),
        )["params"]
    )
    lora = TTSLM(cfg.backbone)
    p_lora = nn.unbox(
        lora.init(
            jax.random.key(1),
            jnp.asarray(text),
            jnp.asarray(text_len),
            jnp.asarray(speech),
            jnp.asarray(speech_len),
        )["params"]
    )
    from jaxtts.train.state import overlay

    p_lora, n = overlay(p_lora, p_plain, "test")  # base weights from the plain model
    assert n == len(jax.tree.leaves(p_plain))
    n_len = jnp.array([6, 4, 2])
    h0 = plain.apply(
        {"params": p_plain},
        jnp.asarray(text),
        jnp.asarray(text_len),
        emb,
        n_len,
        method="hidden_embedded",
    )
    h1 = lora.apply(
        {"params": p_lora},
        jnp.asarray(text),
        jnp.asarray(text_len),
        emb,
        n_len,
        method="hidden_embedded",
    )
    np.testing.assert_array_equal(np.asarray(h0), np.asarray(h1))


def test_padding_carries_no_loss():
    from jaxtts.methods.tldr.task import TLDRTask

    cfg = make_cfg()
    task = TLDRTask(cfg, SPK)
    _, params = init_model(cfg)
    text, text_len, speech, speech_len, prompt_len = rows()
    batch = dict(
        text=text, text_len=text_len, speech=speech, speech_len=speech_len, prompt_len=prompt_len
    )
    loss_fn = jax.jit(lambda p, b: task.loss(p, b, None, train=False))
    loss0, m0 = loss_fn(params, batch)
    s2 = speech.copy()
    s2[0, 17:] = 0  # beyond row 0's length
    s2[2, 9:] = 3
    t2 = text.copy()
    t2[1, 5:] = 9  # beyond row 1's text
    loss1, m1 = loss_fn(params, dict(batch, speech=s2, text=t2))
    np.testing.assert_allclose(float(loss0), float(loss1), rtol=0, atol=0)
    # the weight counts target tokens + one EOS per row
    assert float(m0["weight"]) == float(np.sum(speech_len - prompt_len + 1))


def _decode(
    model, params, args, max_new=24, greedy=True, seed=0, row_ids=None, pw=8, text_width=None
):
    text, text_len, speech, speech_len, prompt_len = args
    prompt = np.zeros((len(text), pw), np.int32)
    for r in range(len(text)):
        prompt[r, : prompt_len[r]] = speech[r, : prompt_len[r]]
    batch = PromptBatch(
        jnp.asarray(text),
        jnp.asarray(text_len),
        jnp.asarray(prompt),
        jnp.asarray(prompt_len),
        text_width=text_width,
    )
    out = decode(
        TLDR(),
        {"tldr": model},
        {"tldr": params},
        batch,
        row_keys(seed, row_ids or list(range(len(text)))),
        max_new_tokens=max_new,
        sampling=SamplingConfig(greedy=greedy),
    )
    return jax.device_get(out)


@pytest.mark.parametrize(
    "token_rate,ext_prev,text_patch,ext_text,text_layers",
    [
        (True, 0, 1, 0, ()),
        (False, 0, 1, 0, ()),
        (True, 3, 1, 0, ()),
        # Q = 3 with the extractor reading the symbols covers Q = 3's path without them; the
        # text in layer 1 with ext_text covers it without (fewer compiles, RESULTS #test-time)
        (True, 3, 3, 16, ()),
        (True, 3, 1, 0, (0,)),
        (True, 3, 1, 16, (1,)),
    ],
)
def test_greedy_decode_equals_teacher_forced_argmax(
    token_rate, ext_prev, text_patch, ext_text, text_layers
):
    """Greedy decoding (prefill + per-patch extend with the compressor's window) reproduces
    the teacher-forced model: fed back its own output, every generated token is the argmax
    (backbone positions at the token rate or one per patch; with `ext_prev` the extractor's
    previous tokens: the prompt's last ones, then the previous patch's; with `text_patch` the
    compressed text, rows of 7 / 5 / 6 symbols in slots of 3; with `ext_text` the extractor
    reading the text memory; with `text_layers` the text in one of the two backbone layers, the
    other one caching no text slots: (1,) has the text pass through that layer in the
    prefill)."""
    cfg = make_cfg(
        token_rate_positions=token_rate,
        ext_prev=ext_prev,
        text_patch=text_patch,
        ext_text=ext_text,
        text_layers=text_layers,
    )
    model, params = init_model(cfg)
    text, text_len, speech, _, prompt_len = rows()
    out = _decode(model, params, (text, text_len, speech, None, prompt_len), max_new=20)
    # every row fed back its prompt + generated tokens, in one teacher-forced batch
    n = np.asarray(out.length)
    full = np.zeros((3, int((prompt_len + n).max())), np.int32)
    for r in range(3):
        full[r, : prompt_len[r]] = speech[r, : prompt_len[r]]
        full[r, prompt_len[r] : prompt_len[r] + n[r]] = out.tokens[r, : n[r]]
    logits, tok, target = jax.jit(model.apply)(
        {"params": params},
        jnp.asarray(text),
        jnp.asarray(text_len),
        jnp.asarray(full),
        jnp.asarray(prompt_len + n),
        jnp.asarray(prompt_len),
    )
    am, tok, target = (np.asarray(a) for a in (jnp.argmax(logits, -1), tok, target))
    for r in range(3):
        got, want = am[r][target[r]], tok[r][target[r]]  # target cells in order (+ EOS cell)
        if out.hit_max[r]:  # no EOS generated: compare the generated tokens only
            got, want = got[: n[r]], want[: n[r]]
        np.testing.assert_array_equal(got, want)
    # one backbone forward per patch (the EOS patch included)
    want_steps = np.where(out.hit_max, -(-n // cfg.patch), -(-(n + 1) // cfg.patch))
    np.testing.assert_array_equal(out.steps, want_steps)


@pytest.mark.parametrize("b", [1, 2])
def test_tldr_loop_writes_the_caches_in_place(b):
    """No loop body of the compiled TLDR decode copies a KV cache buffer (backbone at the
    patch rate, extractor), at batch 1 and 2."""

    from hlo_checks import loop_copies, mentions

    from jaxtts.decode.driver import _decode as jit_decode

    cfg = make_cfg()
    model, params = init_model(cfg)
    text, text_len, speech, _, prompt_len = rows(b=b)
    prompt = np.where(np.arange(8)[None] < prompt_len[:, None], speech[:, :8], 0).astype(np.int32)
    hlo = (
        jit_decode.lower(
            {"tldr": params},
            PromptBatch(text, text_len, prompt, prompt_len),
            row_keys(0, range(b)),
            strategy=TLDR().bind({"tldr": model}),
            models=(("tldr", model),),
            max_new_tokens=40,
            sampling=SamplingConfig(greedy=True).traced(),
        )
        .compile()
        .as_text()
    )
    cache = rf"f32\[{b},{LM.num_heads},\d\d+,{LM.head_dim}\]"  # [B, N, S, H], S >= 10
    assert mentions(hlo, cache) > 0  # the pattern names the cache buffers
    assert not loop_copies(hlo, cache)


@pytest.mark.parametrize(
    "ext_prev,text_patch,ext_text,text_layers",
    [
        (0, 1, 0, ()),
        (4, 1, 0, ()),
        # the unshipped text options, each with the extractor reading the symbols (a superset
        # of the same option without it, which the teacher-forced test covers)
        (4, 3, 48, ()),
        (4, 1, 32, (0,)),
    ],
)
def test_batch_n_equals_batch_1(ext_prev, text_patch, ext_text, text_layers, greedy=False):
    """Sampled decoding (per-row keys): each row of a batch equals that row decoded alone
    (greedy rows are covered by the teacher-forced test above)."""
    cfg = make_cfg(
        ext_prev=ext_prev, text_patch=text_patch, ext_text=ext_text, text_layers=text_layers
    )
    model, params = init_model(cfg)
    args = rows()
    full = _decode(model, params, args, greedy=greedy)
    for r in range(3):
        one = _decode(model, params, tuple(a[r : r + 1] for a in args), greedy=greedy, row_ids=[r])
        n = int(full.length[r])
        assert int(one.length[0]) == n
        np.testing.assert_array_equal(one.tokens[0, :n], full.tokens[r, :n])


def test_text_compressor_reads_only_valid_symbols():
    """`text_patch` Q = 3: the text is 3 slots of 3 symbols for rows of 7 / 5 / 6; symbols
    past a row's text_len change nothing (logits equal), a valid one changes its row only."""
    cfg = make_cfg(text_patch=3)
    model, params = init_model(cfg)
    text, text_len, speech, speech_len, prompt_len = rows()
    text = np.pad(text, ((0, 0), (0, 2)), constant_values=1)  # width 9: three full slots

    def logits(t):
        out, _, _ = jax.jit(model.apply)(
            {"params": params}, t, text_len, speech, speech_len, prompt_len
        )
        return np.asarray(out)

    base = logits(text)
    junk = text.copy()
    for r in range(3):
        junk[r, text_len[r] :] = 2 + r  # past text_len
    np.testing.assert_array_equal(logits(junk), base)
    edit = text.copy()
    edit[1, 0] = 2 if edit[1, 0] == 1 else 1  # another valid symbol (ids are >= 1)
    changed = logits(edit)
    assert not np.allclose(changed[1], base[1])
    np.testing.assert_array_equal(changed[[0, 2]], base[[0, 2]])
    text_in = model.apply({"params": params}, text, text_len, method="text_input")
    assert text_in.shape == (3, 3, LM.d_model)


def test_text_slot_order_starts_as_the_same_function():
    """`text_slot_order` (Q = 3) with its two leaves at zero (a warm start from an order-free
    run) gives the order-free model's logits exactly; set, they make a slot's vector depend on
    the order of its symbols (two symbols of a slot swapped; without them the slot sees the
    order only through the local layer's RoPE distances to the other slots' symbols)."""
    free_model, free = init_model(make_cfg(text_patch=3, text_slot_order=False))
    model, params = init_model(make_cfg(text_patch=3))
    order = {
        k: v for k, v in tree_to_flat(params).items() if k.endswith(("slot_pos", "order/kernel"))
    }
    assert len(order) == 2
    flat = {**tree_to_flat(free), **{k: jnp.zeros_like(v) for k, v in order.items()}}
    assert set(flat) == set(tree_to_flat(params))
    args = tuple(jnp.asarray(a) for a in rows())
    want, _, target = free_model.apply({"params": free}, *args)
    got, _, _ = model.apply({"params": tree_from_flat(flat)}, *args)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    text, text_len = rows()[:2]
    text[:, 3:5] = (2, 3)  # slot 1's first two symbols (valid in every row), then swapped
    swap = text.copy()
    swap[:, 3:5] = (3, 2)
    a, b = (
        np.asarray(
            model.apply(
                {"params": tree_from_flat({**flat, **order})}, t, text_len, method="text_input"
            )
        )
        for t in (text, swap)
    )
    assert np.abs(a[:, 1] - b[:, 1]).max(-1).min() > 1e-3  # every row's slot 1 moved


@pytest.mark.parametrize("text_patch,text_layers", [(3, ()), (1, (1,))])
def test_ext_text_starts_as_the_same_function(text_patch, text_layers):
    """`ext_text` (Q = 3; or Q = 1 with `text_layers`, its symbols' states from the
    `TextReader`) with its output projection at zero (a warm start from a run without it)
    gives that run's logits exactly; set, the memory moves the target cells' logits, and
    symbols past text_len still change nothing."""
    base_model, base = init_model(make_cfg(text_layers, text_patch=text_patch))
    model, params = init_model(make_cfg(text_layers, text_patch=text_patch, ext_text=16))
    flat = tree_to_flat(params)
    new = {k for k in flat if k not in tree_to_flat(base)}
    reader = ["text_reader"] if text_patch == 1 else []
    assert sorted({k.split("/")[0] for k in new}) == ["extractor", *reader]
    assert sorted(k.rsplit("/", 2)[-2] for k in new if k.endswith("kernel") and "/text_" in k) == [
        "text_k",
        "text_o",
        "text_q",
        "text_v",
    ]
    zero = {**tree_to_flat(base), **{k: flat[k] for k in new}}
    zero = {k: jnp.zeros_like(v) if k.endswith("text_o/kernel") else v for k, v in zero.items()}
    args = tuple(jnp.asarray(a) for a in rows())
    want, _, target = base_model.apply({"params": base}, *args)
    got, _, _ = model.apply({"params": tree_from_flat(zero)}, *args)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    read = {**zero, **{k: flat[k] for k in new}}  # text_o random (ZERO_INIT)
    moved, _, _ = model.apply({"params": tree_from_flat(read)}, *args)
    assert np.abs(np.asarray(moved - want))[np.asarray(target)].max() > 1e-3
    text, text_len = args[0], np.asarray(args[1])
    junk = np.asarray(text).copy()
    for r in range(3):
        junk[r, text_len[r] :] = 2 + r
    again, _, _ = model.apply({"params": tree_from_flat(read)}, jnp.asarray(junk), *args[1:])
    np.testing.assert_array_equal(np.asarray(again), np.asarray(moved))


def test_global_kv_slots_exact():
    from jaxtts.methods.tldr.engine import global_kv_slots

    # FAR: 30 text + BOS + 50 prompt + 300 output
    assert global_kv_slots(30, 50, 300) == 381
    # P = 4: 30 + 1 + 13 + 75; with Q = 4 text symbols per slot: 8 + 1 + 13 + 75
    assert global_kv_slots(30, 50, 300, 4) == 119
    assert global_kv_slots(30, 50, 300, 4, 4) == 97
    # bytes: LM (2 heads x 16 dims x 2 layers, K + V, float32) = 256 per slot; the text memory of
    # ext_text 16 adds 30 symbols x (16 keys + 16 values) x 4 bytes
    from jaxtts.methods.tldr.engine import global_kv_bytes

    assert LM.kv_bytes_per_token() == 2 * LM.num_heads * LM.head_dim * LM.num_layers * 4
    per = LM.kv_bytes_per_token()
    assert global_kv_bytes(LM, 30, 50, 300, 4, 3) == per * (10 + 1 + 13 + 75)
    assert global_kv_bytes(LM, 30, 50, 300, 4, 3, 16) == per * 99 + 30 * 32 * 4
    # text in 1 of the 2 layers (`tldr.text_layers`): the 30 text slots at half the bytes
    assert global_kv_bytes(LM, 30, 50, 300, 4, 1, 0, 1) == per * 89 + per // 2 * 30


def test_text_layers_cache_holds_no_text_outside_them():
    """`text_layers` (1,): layer 0's buffers hold the speech slots only, layer 1's the text too;
    slot counts and write offsets follow, and growing keeps the difference (what is written
    there is checked by the decode == teacher-forced test's `text_layers` cases)."""
    model, params = init_model(make_cfg(text_layers=(1,)))
    cache = model.apply({"params": params}, 2, 9, 12, method="init_cache")
    assert cache.no_text == (0,)
    assert cache.layers[0].k.shape == (2, LM.num_heads, 12, LM.head_dim)
    assert cache.layers[1].k.shape == (2, LM.num_heads, 9 + 12, LM.head_dim)
    assert (cache.num_slots, cache.speech_slots, cache.offset(0), cache.offset(1)) == (21, 12, 0, 9)
    grown = cache.resize(20)
    assert grown.layers[0].v.shape[2] == 20 and grown.layers[1].v.shape[2] == 29


def test_text_layers_hide_the_text_from_the_other_layers():
    """Teacher-forced logits with `text_layers` (0,): the text still matters (through layer 0);
    listing every layer is the option off (()); a bad index is a one-line ConfigError naming the
    key and the depth."""
    from jaxtts.methods.tldr.assemble import text_layers

    args = tuple(jnp.asarray(a) for a in rows())
    model, params = init_model(make_cfg())
    want, _, _ = model.apply({"params": params}, *args)
    one, _, _ = TLDRModel(make_cfg(text_layers=(0,)), SPK).apply({"params": params}, *args)
    assert np.abs(np.asarray(one - want)).max() > 1e-3
    other = args[0][::-1]
    moved, _, _ = TLDRModel(make_cfg(text_layers=(0,)), SPK).apply(
        {"params": params}, other, *args[1:]
    )
    assert np.abs(np.asarray(moved - one)).max() > 1e-3
    assert text_layers("0,1", 2) == () and text_layers([1], 2) == (1,)
    with pytest.raises(ConfigError, match=r"tldr.text_layers='0,2': expected backbone layer"):
        text_layers("0,2", 2)
    with pytest.raises(ConfigError, match=r"tldr.text_layers='a': expected"):
        text_layers("a", 2)


def test_previous_tokens_exact():
    """The K tokens before each target patch, by hand: the prompt's last ones for the first
    target patch, PAD before the stream starts and for prompt patches."""
    cfg = make_cfg(patch=2, ext_prev=2)
    pad = LM.pad
    speech = jnp.array([[10, 11, 12, 13, 14, 15, 16], [20, 21, 22, 23, 24, 25, 26]], jnp.int32)
    prompt_len = jnp.array([3, 0], jnp.int32)
    got = np.asarray(previous_tokens(speech, prompt_len, cfg, 4))
    # row 0: prompt patches [10 11] [12 -], target patches [13 14] [15 16]
    want0 = [[pad, pad], [pad, pad], [11, 12], [13, 14]]
    # row 1: no prompt; target patches [20 21] [22 23] [24 25] [26 EOS]
    want1 = [[pad, pad], [20, 21], [22, 23], [24, 25]]
    np.testing.assert_array_equal(got, [want0, want1])
    prompt = speech[:, :3]
    np.testing.assert_array_equal(
        np.asarray(prompt_tail(prompt, prompt_len, cfg)), [[11, 12], [pad, pad]]
    )


def test_ext_prev_starts_as_the_same_function():
    """`ext_prev` > 0 with its tables at zero (a warm start from a K = 0 model) gives the
    K = 0 model's logits exactly; non-zero tables change them."""
    model0, params0 = init_model(make_cfg())
    model4, params4 = init_model(make_cfg(ext_prev=4))
    flat4 = tree_to_flat(params4)
    flat = {**tree_to_flat(params0)}
    flat.update({k: jnp.zeros_like(v) for k, v in flat4.items() if k.endswith("prev_embed")})
    assert set(flat) == set(flat4)
    args = tuple(jnp.asarray(a) for a in rows())
    want, _, target = model0.apply({"params": params0}, *args)
    got, _, _ = model4.apply({"params": tree_from_flat(flat)}, *args)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    moved, _, _ = model4.apply(
        {
            "params": tree_from_flat(
                {**flat, **{k: v for k, v in flat4.items() if k.endswith("prev_embed")}}
            )
        },
        *args,
    )
    assert np.abs(np.asarray(moved - want))[np.asarray(target)].max() > 1e-3


@pytest.mark.parametrize("extra", [{}, {"text_layers": (1,), "ext_text": 32}])
def test_dropout_only_with_a_dropout_rng(extra):
    """`tldr.dropout`: without a 'dropout' rng (decoding, evaluation) the model is exactly the
    rate-0 model with the same parameters; with one (training) the logits move, and the same
    key gives the same logits. The task passes the rng only when training."""
    from jaxtts.methods.tldr.task import TLDRTask

    model0, params = init_model(make_cfg(**extra))
    model, _ = init_model(make_cfg(dropout=0.3, **extra))
    args = tuple(jnp.asarray(a) for a in rows())
    want, _, target = model0.apply({"params": params}, *args)
    got, _, _ = model.apply({"params": params}, *args)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    key = {"dropout": jax.random.key(3)}
    a, _, _ = model.apply({"params": params}, *args, rngs=key)
    b, _, _ = model.apply({"params": params}, *args, rngs=key)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert np.abs(np.asarray(a - want))[np.asarray(target)].max() > 1e-3
    task = TLDRTask(make_cfg(dropout=0.3, **extra), SPK)
    batch = dict(
        zip(("text", "text_len", "speech", "speech_len", "prompt_len"), rows(), strict=True)
    )
    eval_loss, _ = task.loss(params, batch, jax.random.key(3), train=False)
    train_loss, _ = task.loss(params, batch, jax.random.key(3), train=True)
    want_loss, _ = TLDRTask(make_cfg(**extra), SPK).loss(
        params, batch, jax.random.key(3), train=True
    )
    assert float(eval_loss) == float(want_loss) != float(train_loss)


def test_distill_loss_is_the_kl_to_the_teacher():
    """`tldr.distill` = w: the training loss is (1 - w) CE + w KL(teacher || student) over the
    target cells, the KL by hand from the two models' logits; the dev loss stays the CE; a
    teacher equal to the student gives KL 0."""
    from jaxtts.methods.tldr.task import TLDRTask

    student_cfg, teacher_cfg = make_cfg(text_layers=(1,)), make_cfg()
    _, params = init_model(student_cfg)
    _, t_params = init_model(teacher_cfg, seed=5)
    leaves = {k: v for k, v in tree_to_flat(t_params).items() if not k.startswith("backbone/")}
    leaves.update({k: v for k, v in tree_to_flat(t_params).items() if "lora_" in k})
    batch = dict(
        zip(("text", "text_len", "speech", "speech_len", "prompt_len"), rows(), strict=True)
    )
    args = tuple(jnp.asarray(batch[k]) for k in batch)
    plain = TLDRTask(student_cfg, SPK)
    task = TLDRTask(student_cfg, SPK, (teacher_cfg, leaves), 0.75)
    ce, _ = plain.loss(params, batch, None, train=True)
    loss, m = task.loss(params, batch, None, train=True)
    dev_loss, _ = task.loss(params, batch, None, train=False)
    # by hand: the teacher is the student's frozen leaves with the teacher's trained ones
    t_full = tree_from_flat({**tree_to_flat(params), **leaves})
    s_logits, _, mask = TLDRModel(student_cfg, SPK).apply({"params": params}, *args)
    t_logits, _, _ = TLDRModel(teacher_cfg, SPK).apply({"params": t_full}, *args)
    logp, logq = jax.nn.log_softmax(s_logits), jax.nn.log_softmax(t_logits)
    kl = np.asarray(jnp.sum(jnp.exp(logq) * (logq - logp), -1))[np.asarray(mask)].mean()
    np.testing.assert_allclose(float(m["distill_kl"]), kl, rtol=1e-5)
    np.testing.assert_allclose(float(loss), 0.25 * float(ce) + 0.75 * kl, rtol=1e-5)
    assert float(dev_loss) == float(ce) == float(m["ce"]) and kl > 1e-3
    # `tldr.distill_kl = reverse`: KL(student || teacher) in the loss, the forward one logged
    rkl = np.asarray(jnp.sum(jnp.exp(logp) * (logp - logq), -1))[np.asarray(mask)].mean()
    rev = TLDRTask(student_cfg, SPK, (teacher_cfg, leaves), 0.75, reverse=True)
    loss, m = rev.loss(params, batch, None, train=True)
    np.testing.assert_allclose(float(m["distill_kl"]), kl, rtol=1e-5)
    np.testing.assert_allclose(float(m["distill_rkl"]), rkl, rtol=1e-5)
    np.testing.assert_allclose(float(loss), 0.25 * float(ce) + 0.75 * rkl, rtol=1e-5)
    assert abs(rkl - kl) > 1e-4  # the two directions differ here
    # the teacher is the student itself: KL 0, the loss (1 - w) CE
    own = {k: v for k, v in tree_to_flat(params).items() if not k.startswith("backbone/")}
    same = TLDRTask(student_cfg, SPK, (student_cfg, own), 0.75)
    loss, m = same.loss(params, batch, None, train=True)
    assert abs(float(m["distill_kl"])) < 1e-6
    np.testing.assert_allclose(float(loss), 0.25 * float(ce), rtol=1e-5, atol=1e-6)


def test_config_errors():
    with pytest.raises(ConfigError, match="tldr.patch=0"):
        make_cfg(patch=0)
    with pytest.raises(ConfigError, match="tldr.ext_prev=5"):
        make_cfg(ext_prev=5)
    with pytest.raises(ConfigError, match="tldr.text_patch=0"):
        make_cfg(text_patch=0)
    with pytest.raises(ConfigError, match="tldr.ext_text=16: expected 0, or > 0 with"):
        make_cfg(ext_text=16)
    with pytest.raises(ConfigError, match="tldr.ext_text=97: expected a multiple of 3"):
        make_cfg(ext_text=97, text_patch=3)
    with pytest.raises(ConfigError, match="tldr.dropout=1.0: expected 0 <= rate < 1"):
        make_cfg(dropout=1.0)
    with pytest.raises(ConfigError, match="tldr.compressor"):
        make_cfg(compressor="max")
    from jaxtts.methods.tldr.assemble import check_keys

    with pytest.raises(ConfigError, match="tldr.patch_size: unknown key"):
        check_keys({"patch_size": 4})
    from configs import tldr as tldr_cfg

    with pytest.raises(KeyError, match="unknown variant"):
        tldr_cfg.get_config("large")
    from jaxtts.methods.tldr.assemble import teacher_part

    with pytest.raises(ConfigError, match=r"tldr.distill=1.5: expected a weight in \[0, 1\]"):
        teacher_part({"distill": 1.5}, None, None, None, None)
    with pytest.raises(ConfigError, match="tldr.distill=0.5: needs tldr.teacher"):
        teacher_part({"distill": 0.5, "teacher": ""}, None, None, None, None)
    assert teacher_part({"distill": 0.0, "teacher": "x"}, None, None, None, None) is None
    with pytest.raises(ConfigError, match="tldr.distill_kl='both': expected 'forward' or"):
        teacher_part({"distill": 0.5, "distill_kl": "both"}, None, None, None, None)


def test_data_seed_sets_the_loader_seed_only_when_asked():
    from configs import tldr as tldr_cfg
    from jaxtts.methods.tldr.task import run_config
    from jaxtts.run_folder import RunFolder

    backbone = RunFolder("pretrained/car_deep")
    want = backbone.read_config("lm").data.seed
    config = tldr_cfg.get_config("deep_ft2")
    assert config.tldr.data_seed == -1
    assert run_config(config, backbone).data.seed == want
    config = tldr_cfg.get_config("deep_ft3")
    assert (config.tldr.data_seed, want) == (1, 0)
    assert run_config(config, backbone).data.seed == 1


# ------------------------------------------------------------------- the tiny recipe, end to end


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from configs import tldr as tldr_cfg
    from jaxtts.methods.tldr.task import train

    work = tmp_path_factory.mktemp("tldr") / "run"
    result = train(tldr_cfg.get_config("tiny"), str(work), progress=False)
    return work, result


def test_tiny_training_freezes_the_backbone(tiny_run):
    from flax import serialization

    work, result = tiny_run
    init = tree_to_flat(
        serialization.msgpack_restore((work / "tldr_init" / "params.msgpack").read_bytes())
    )
    frozen = tree_to_flat(jax.device_get(result.state.frozen))
    assert frozen and set(frozen) <= set(init)
    for k, v in frozen.items():
        np.testing.assert_array_equal(np.asarray(v), np.asarray(init[k]), err_msg=k)
    trained = tree_to_flat(jax.device_get(result.state.params))
    assert any(k.endswith("lora_b") for k in trained)
    assert all(k.startswith(("compressor", "extractor")) or "lora_" in k for k in trained)
    assert any(np.abs(np.asarray(v)).max() > 0 for k, v in trained.items() if "lora_b" in k)


def test_tiny_run_synthesizes_and_checks_its_backbone(tiny_run, tmp_path):
    from jaxtts.engine import load_engine
    from jaxtts.run_folder import RunFolder

    work, _ = tiny_run
    eng = load_engine(work)
    assert eng.family == "tldr" and resolve(eng, "tldr").name == "tldr"
    # shipped form: the trained parameters alone, the backbone from its own run
    out = RunFolder(work).export(tmp_path / "ship", trained_only=True)
    # its config names the backbone's tokenizer by absolute path; the copy names none and
    # carries no tokenizer / front-end: it loads the backbone's (below)
    assert out.read_config().data.tokenizer_dir == ""
    assert not (out.path / "tokenizer").exists() and not (out.path / "text_frontend").exists()
    assert json.loads((work / "config.json").read_text())["data"]["tokenizer_dir"]
    shipped = load_engine(out.path)
    # value for value: the float16 export loads back as the trained values rounded to float16
    got, want = tree_to_flat(out.trained_params()), tree_to_flat(RunFolder(work).trained_params())
    assert got.keys() == want.keys() and any("lora_b" in k for k in got)
    for k, x in want.items():
        rounded = np.asarray(x, np.float32).astype(np.float16).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(got[k], np.float32), rounded, err_msg=k)
    # both engines decode with the adapters folded into the backbone's kernels (no LoRA
    # leaves); the frozen mel table is rebuilt from the tokenizer at load: exact
    got, want = tree_to_flat(shipped.tldr_params), tree_to_flat(eng.tldr_params)
    assert got.keys() == want.keys() and not any("lora_" in k for k in got)
    for k, x in want.items():
        tol = dict(rtol=0, atol=0) if "mel_table" in k else dict(rtol=2e-3, atol=2e-3)
        np.testing.assert_allclose(np.asarray(got[k]), np.asarray(x), err_msg=k, **tol)
    with pytest.raises(DataError, match="speaker reference of 0.04 s"):
        shipped.check_reference(np.array([1, 50]))
    shipped.check_reference(np.array([0, 50]))  # no prompt: fine
    # a TLDR run trained on another backbone
    bad = tmp_path / "bad"
    shutil.copytree(out.path, bad)
    info = json.loads((bad / "data.json").read_text())
    (bad / "data.json").write_text(json.dumps(dict(info, d_model=512)))
    with pytest.raises(CheckpointError, match="d_model=512"):
        load_engine(bad)


def test_warm_start_takes_the_trained_leaves(tiny_run):
    """`tldr.warm_start`: a run's trained leaves, the extractor's position table cut or padded
    with zeros to the new P; a run on another backbone is refused."""
    from flax import serialization

    from configs import tldr as tldr_cfg
    from jaxtts.methods.tldr.assemble import warm_start_params

    work, result = tiny_run
    init = serialization.msgpack_restore((work / "tldr_init" / "params.msgpack").read_bytes())
    section = tldr_cfg.get_config("tiny").tldr
    section.warm_start = str(work)
    p = int(section.patch)
    trained = tree_to_flat(jax.device_get(result.state.params))
    for new_p in (p + 2, p - 1):
        warm = tree_to_flat(warm_start_params(section, init["backbone"], new_p))
        assert warm.keys() == trained.keys()
        for k, v in trained.items():
            v, w = np.asarray(v), np.asarray(warm[k])
            if k.endswith("pos_embed"):
                n = min(p, new_p)
                assert w.shape == (new_p, v.shape[1])
                np.testing.assert_array_equal(w[:n], v[:n])
                assert not w[n:].any()
            else:
                np.testing.assert_array_equal(w, v, err_msg=k)
    section.warm_start = ""
    assert warm_start_params(section, init["backbone"], p) == {}
    section.warm_start = str(work)
    other = jax.tree.map(lambda x: np.asarray(x) + 1, init["backbone"])
    with pytest.raises(CheckpointError, match="trained on backbone parameters"):
        warm_start_params(section, other, p)
    # `tldr.warm_start_backbone`: trained on that run (same shapes) -> accepted, same leaves
    section.warm_start_backbone = str(section.backbone)
    warm = tree_to_flat(warm_start_params(section, other, p))
    assert warm.keys() == trained.keys()
    for k, v in trained.items():
        np.testing.assert_array_equal(np.asarray(warm[k]), np.asarray(v), err_msg=k)
    # ... but not into another architecture: the leaf and both runs named
    flat = tree_to_flat(other)
    k0 = sorted(flat)[0]
    flat[k0] = np.asarray(flat[k0])[..., :1]
    with pytest.raises(ConfigError, match=f"tldr.warm_start_backbone=.*{re.escape(k0)}"):
        warm_start_params(section, tree_from_flat(flat), p)
    # ... and the warm start must have been trained on the run it names
    section.warm_start_backbone = "pretrained/car_deep"
    with pytest.raises(CheckpointError, match="trained on backbone parameters"):
        warm_start_params(section, other, p)


def test_tiny_distillation_from_a_run(tiny_run, tmp_path):
    """`tldr.teacher` + `tldr.distill`: a student with the text in one layer trains against the
    tiny run (the text in every layer) through the real loop; the train log has the KL and
    the CE, the dev log's loss is the CE."""
    from configs import tldr as tldr_cfg
    from jaxtts.methods.tldr.task import train

    work, _ = tiny_run
    config = tldr_cfg.get_config("tiny")
    config.tldr.update(teacher=str(work), distill=0.5, text_layers="0", warm_start=str(work))
    config.train.eval_every = 1
    train(config, str(tmp_path / "kd"), progress=False)
    logs = [json.loads(x) for x in (tmp_path / "kd" / "metrics.jsonl").read_text().splitlines()]
    tr = [{k[6:]: v for k, v in x.items() if k.startswith("train/")} for x in logs]
    tr = [x for x in tr if "distill_kl" in x]
    dev = [x for x in logs if "dev/distill_kl" in x]
    assert tr and dev and all(0 <= x["distill_kl"] < np.inf for x in tr)
    assert all(abs(x["loss"] - 0.5 * x["ce"] - 0.5 * x["distill_kl"]) < 1e-4 for x in tr)
    assert all(x["dev/loss"] > x["dev/distill_kl"] for x in dev)  # the CE, not the mix


def test_warm_start_rows_for_another_q():
    """A warm start's Q-row leaves (the text compressor's position-in-slot table [Q, D], its
    order map [Q D, D]) keep their first min(Q', Q) blocks of rows, zeros after."""
    from jaxtts.methods.tldr.assemble import _first_rows

    v = np.arange(4 * 2 * 3, dtype=np.float32).reshape(8, 3)  # Q' = 4 blocks of D = 2 rows
    np.testing.assert_array_equal(_first_rows(v, 3, 2), v[:6])
    np.testing.assert_array_equal(_first_rows(v, 4, 2), v)
    grown = _first_rows(v[:4], 4, 1)  # [4, 3] table from a [4, 3] one: unchanged
    np.testing.assert_array_equal(grown, v[:4])
    grown = _first_rows(v[:2], 3, 1)  # Q' = 2 -> Q = 3: one zero row
    np.testing.assert_array_equal(grown, np.concatenate([v[:2], np.zeros((1, 3))]))


def test_segments_equal_one_call():
    """Resumable decoding of TLDR (patch caches, the extractor's state): segments of 1, 2, 3,
    ... steps give one call's sampled tokens, lengths and steps."""
    from lm_reference import assert_same_decode, run_in_segments

    cfg = make_cfg()
    model, params = init_model(cfg)
    text, text_len, speech, speech_len, prompt_len = rows()
    prompt = np.zeros((len(text), 8), np.int32)
    for r in range(len(text)):
        prompt[r, : prompt_len[r]] = speech[r, : prompt_len[r]]
    batch = PromptBatch(
        jnp.asarray(text), jnp.asarray(text_len), jnp.asarray(prompt), jnp.asarray(prompt_len)
    )
    s = SamplingConfig(temperature=1.0)
    keys = row_keys(7, range(len(text)))
    want = decode(
        TLDR(), {"tldr": model}, {"tldr": params}, batch, keys, max_new_tokens=24, sampling=s
    )
    got, n_seg = run_in_segments(
        TLDR(),
        {"tldr": model},
        {"tldr": params},
        batch,
        keys,
        max_new_tokens=24,
        sampling=s,
        seg=[1, 2, 3],
    )
    assert n_seg >= 3
    assert_same_decode(got, want)


@pytest.mark.parametrize(
    "text_patch,ext_text,text_layers", [(1, 0, ()), (3, 16, ()), (1, 16, (1,))]
)
def test_split_prefill_equals_the_batch_padded_to_the_loop_width(text_patch, ext_text, text_layers):
    """The backbone's cache (compressed text slots; layers without text slots) and the
    extractor's text memory widened after a narrow prefill (`PromptBatch.text_width`): greedy
    tokens and steps of the batch padded to the loop's width."""
    cfg = make_cfg(ext_prev=3, text_patch=text_patch, ext_text=ext_text, text_layers=text_layers)
    model, params = init_model(cfg)
    text, *rest = rows()
    wide = np.zeros((3, 24), np.int32)
    wide[:, :7] = text
    narrow = np.zeros((3, 9), np.int32)
    narrow[:, :7] = text
    want = _decode(model, params, (wide, *rest))
    got = _decode(model, params, (narrow, *rest), text_width=24)
    for name in ("tokens", "length", "steps"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    assert int(np.max(want.length)) > 8
