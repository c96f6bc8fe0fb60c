"""Every other model family on 8 simulated devices: the CTC reward ASR and the speaker encoder
give the single-device loss and gradients on (8,1,1), (1,8,1) and (2,2,2) meshes."""

import jax
import numpy as np
import pytest
from toy_train_main import config as base_config

from jaxtts.methods import ctc_asr as C
from jaxtts.methods import speaker_encoder as S
from jaxtts.train import loop
from jaxtts.train import mesh as mesh_lib

MESHES = [{"data": 8}, {"fsdp": 8}, {"data": 2, "fsdp": 2, "tensor": 2}]


def _mel_batch(b=8, t=40, seed=0):
    rng = np.random.default_rng(seed)
    mel_len = rng.integers(10, t + 1, b).astype(np.int32)
    mel_len[-1] = 0  # a padding row
    mel = rng.normal(-5.0, 2.0, (b, t, 80)).astype(np.float32)
    return mel, mel_len, rng


def ctc_case():
    model = C.model_from_config(
        dict(
            d_model=32,
            num_layers=1,
            num_heads=2,
            d_ff=64,
            conv_kernel=5,
            dropout=0.0,
            n_mels=80,
            mel_mean=-5.0,
            mel_std=2.0,
        )
    )
    mel, mel_len, rng = _mel_batch()
    text_len = np.minimum(rng.integers(2, 8, 8), (mel_len + 1) // 2).astype(np.int32)
    text = np.zeros((8, 8), np.int32)
    for i, n in enumerate(text_len):
        text[i, :n] = rng.integers(1, C.VOCAB_SIZE, n)
    batch = {"mel": mel, "mel_len": mel_len, "text": text, "text_len": text_len}
    return C.CTCTask(model, None), batch


def speaker_case():
    model = S.model_from_config(
        dict(
            channels=16,
            num_blocks=1,
            embed_dim=16,
            attention_dim=8,
            n_mels=80,
            mel_mean=-5.0,
            mel_std=2.0,
        )
    )
    mel, mel_len, rng = _mel_batch(seed=1)
    batch = {"mel": mel, "mel_len": mel_len, "speaker": rng.integers(0, 3, 8).astype(np.int32)}
    return S.SpeakerTask(model, 3), batch


CASES = {"ctc_asr": ctc_case, "speaker_encoder": speaker_case}


def _host(tree):
    return jax.tree.map(lambda a: np.asarray(jax.device_get(a)), tree)


def _loss_grads(task, batch, shape, devices=None):
    mesh = mesh_lib.make_mesh(shape, devices)
    tr = loop.Trainer(task, base_config(mesh=shape), mesh=mesh)
    state = tr.init_state(jax.random.key(0), batch)
    loss, grads = tr.loss_and_grads(state, batch, jax.random.key(1))
    return float(loss), _host(grads)


@pytest.mark.parametrize("family", sorted(CASES))
def test_family_sharded_equals_single_device(family):
    task, batch = CASES[family]()
    ref_loss, ref_grads = _loss_grads(task, batch, {"data": 1}, jax.devices()[:1])
    assert np.isfinite(ref_loss)
    for shape in MESHES:
        loss, grads = _loss_grads(task, batch, shape)
        np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, err_msg=str(shape))
        jax.tree.map(
            lambda a, b, s=shape: np.testing.assert_allclose(
                a, b, rtol=2e-4, atol=2e-6, err_msg=str(s)
            ),
            grads,
            ref_grads,
        )
