"""The TTS LM on 8 simulated devices: loss and gradients of one step on (data, fsdp, tensor)
meshes equal the single-device values; parameters are sharded as the logical rules say."""

import jax
import numpy as np
import pytest
from lm_reference import TINY
from toy_train_main import config as base_config

from jaxtts.methods.lm.task import LMTask
from jaxtts.train import loop
from jaxtts.train import mesh as mesh_lib

P = jax.sharding.PartitionSpec


def lm_batch(b=8, seed=0):
    """A ragged LM batch: text / speech / prompt lengths differ per row (one padding row)."""
    rng = np.random.default_rng(seed)
    x, t = 12, 20
    text = np.zeros((b, x), np.int32)
    speech = np.zeros((b, t), np.int32)
    text_len = rng.integers(3, x + 1, b).astype(np.int32)
    speech_len = rng.integers(5, t + 1, b).astype(np.int32)
    prompt_len = (speech_len * rng.uniform(0, 0.5, b)).astype(np.int32)
    text_len[-1] = speech_len[-1] = prompt_len[-1] = 0  # an empty padding row
    for i in range(b):
        text[i, : text_len[i]] = rng.integers(2, TINY.num_text_symbols, text_len[i])
        speech[i, : speech_len[i]] = rng.integers(0, TINY.num_speech_tokens, speech_len[i])
    return {
        "text": text,
        "text_len": text_len,
        "speech": speech,
        "speech_len": speech_len,
        "prompt_len": prompt_len,
    }


def _cfg(shape, microbatches=1):
    cfg = base_config(mesh=shape)
    cfg.train.microbatches = microbatches
    return cfg


def _host(tree):
    return jax.tree.map(lambda a: np.asarray(jax.device_get(a)), tree)


@pytest.fixture(scope="module")
def reference():
    tr = loop.Trainer(
        LMTask(TINY), _cfg({"data": 1}), mesh=mesh_lib.make_mesh({"data": 1}, jax.devices()[:1])
    )
    batch = lm_batch()
    state = tr.init_state(jax.random.key(0), batch)
    loss, grads = tr.loss_and_grads(state, batch, jax.random.key(1))
    return float(loss), _host(grads), _host(state.params)


@pytest.mark.parametrize(
    "shape,micro",
    [
        ({"data": 8, "fsdp": 1, "tensor": 1}, 1),
        ({"data": 1, "fsdp": 8, "tensor": 1}, 1),
        ({"data": 2, "fsdp": 2, "tensor": 2}, 1),
        ({"data": 2, "fsdp": 2, "tensor": 2}, 2),
    ],
    ids=["8x1x1", "1x8x1", "2x2x2", "2x2x2-micro2"],
)
def test_lm_sharded_loss_and_grads_match_single_device(reference, shape, micro):
    ref_loss, ref_grads, ref_params = reference
    tr = loop.Trainer(LMTask(TINY), _cfg(shape, micro))
    batch = lm_batch()
    state = tr.init_state(jax.random.key(0), batch)
    jax.tree.map(np.testing.assert_array_equal, _host(state.params), ref_params)
    loss, grads = tr.loss_and_grads(state, batch, jax.random.key(1))
    np.testing.assert_allclose(float(loss), ref_loss, rtol=2e-6)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6), _host(grads), ref_grads
    )


def test_lm_param_shardings_follow_rules():
    tr = loop.Trainer(LMTask(TINY), _cfg({"data": 2, "fsdp": 2, "tensor": 2}))
    state = tr.init_state(jax.random.key(0), lm_batch())
    p = state.params
    assert p["speech_embed"].sharding.spec == P("tensor", "fsdp")  # (vocab, embed)
    attn = p["stack"]["layer_0"]["attn"]
    assert attn["q"]["kernel"].sharding.spec == P("fsdp", "tensor", None)  # (embed, heads, kv)
    assert attn["o"]["kernel"].sharding.spec == P("tensor", None, "fsdp")
    mlp = p["stack"]["layer_0"]["mlp"]
    assert mlp["wi_gate"]["kernel"].sharding.spec == P("fsdp", "tensor")  # (embed, mlp)
    assert mlp["wo"]["kernel"].sharding.spec == P("tensor", "fsdp")
    assert p["base_head"]["kernel"].sharding.spec == P("fsdp", "tensor")  # (embed, vocab)
    # a [32, 2, 16] q kernel over fsdp=2 x tensor=2 -> [16, 1, 16] per device
    assert attn["q"]["kernel"].addressable_shards[0].data.shape == (16, 1, 16)
