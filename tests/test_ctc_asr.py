"""CTC reward ASR: greedy decoding, loss, padding invariance, train -> load -> transcribe."""

import json
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtts.data.pipeline import pad_batch
from jaxtts.methods import ctc_asr as C
from jaxtts.train import loop
from jaxtts.train import mesh as mesh_lib

TINY = dict(
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


def _one_device_mesh():
    return mesh_lib.make_mesh({"data": 1}, jax.devices()[:1])


def _ids(s):
    return [C.VOCAB.index(c) if c != "_" else C.BLANK for c in s]


def _logits(frames):  # one-hot-ish logits [T, V] of a frame string ('_' = blank)
    out = np.full((len(frames), C.VOCAB_SIZE), -5.0, np.float32)
    out[np.arange(len(frames)), _ids(frames)] = 5.0
    return out


def test_vocab_and_text_ids():
    assert C.VOCAB_SIZE == 29 and C.VOCAB[C.BLANK] == "<blank>"
    ids = C.text_to_ids("Dr. Smith's 2 cats!")
    assert C.ids_to_text(ids) == "doctor smith's two cats"
    assert ids.dtype == np.int32 and ids.min() >= 1 and len(ids) == 23


def test_greedy_decode_hand_made_logits():
    rows = ["aa_a", "hhe_ll_llo_ _w", "__a  b_", "zzzz"]
    width = max(map(len, rows)) + 3
    logits = np.zeros((len(rows), width, C.VOCAB_SIZE), np.float32)
    logits[:, :, C.VOCAB.index("q")] = 9.0  # padding frames say 'q': must be ignored
    for i, r in enumerate(rows):
        logits[i, : len(r)] = _logits(r)
    lens = np.array([len(r) for r in rows])
    lens[3] = 0  # an empty row
    assert C.greedy_decode(logits, lens) == ["aa", "hello w", "a b", ""]
    best, keep = C.greedy_ids(jnp.asarray(logits), jnp.asarray(lens))
    assert np.asarray(keep).sum() == 2 + 7 + 3 + 0


def test_error_rates_numbers():
    r = C.error_rates(["hello world", "a b"], ["hello word", "a b"])
    assert r["wer"] == pytest.approx(1 / 4)
    assert r["cer"] == pytest.approx(1 / 14)


def test_spec_augment_masks_within_bounds():
    mel = jnp.zeros((4, 100, 80))
    lens = jnp.array([100, 50, 10, 0])
    out = C.spec_augment(
        jax.random.key(0),
        mel,
        lens,
        1.0,
        freq_masks=2,
        freq_width=10,
        time_masks=2,
        time_width=20,
        max_time_fraction=0.2,
    )
    out = np.asarray(out)
    full_time = (out == 1.0).all(axis=2)  # [B, T] frames masked in every bin
    assert full_time[1].sum() <= 2 * 10 and full_time[2].sum() <= 2 * 2 and full_time[3].sum() == 0
    assert not full_time[1, 50:].any()  # nothing masked beyond a row's length
    full_freq = (out == 1.0).all(axis=1)  # [B, M]
    assert 0 < full_freq.sum() <= 4 * 2 * 10
    again = C.spec_augment(jax.random.key(0), mel, lens, 1.0)
    np.testing.assert_array_equal(np.asarray(again), out)


def _tiny_params(seed=0):
    m = C.model_from_config(TINY)
    mel = jnp.zeros((1, 16, 80))
    return nn.unbox(m.init(jax.random.key(seed), mel, jnp.array([16])))["params"]


def test_batch_n_equals_batch_1_with_mixed_lengths():
    params = _tiny_params()
    rng = np.random.default_rng(0)
    lengths = [37, 130, 13, 64, 1]
    mels = [rng.normal(-5.0, 2.0, size=(n, 80)).astype(np.float32) for n in lengths]
    batched = C.CTCASR(TINY, params, batch_size=8, frame_bucket=64)
    single = C.CTCASR(TINY, params, batch_size=1, frame_bucket=1)  # each row at its own length
    hyp_n, hyp_1 = batched.transcribe_mels(mels), single.transcribe_mels(mels)
    assert hyp_n == hyp_1 and len(hyp_n) == 5 and sum(map(len, hyp_n)) > 0
    pad, lens = pad_batch(mels, 192)
    lg, ol = batched.logits(pad, lens)
    assert ol.tolist() == [19, 65, 7, 32, 1]
    for i, m in enumerate(mels):
        lg1, ol1 = single.logits(m[None], np.array([len(m)]))
        np.testing.assert_allclose(lg[i, : ol[i]], lg1[0, : ol1[0]], atol=1e-4)
    # Padded-array input form gives the same transcripts.
    assert batched.transcribe_mels(pad, lens) == hyp_n


def test_ctc_loss_finite_and_decreasing():
    cfg = _config("tiny")
    cfg.train.update(steps=30, learning_rate=1e-2, warmup_steps=1)
    task = C.CTCTask(C.model_from_config(TINY), None)
    rng = np.random.default_rng(0)
    batch = {
        "mel": rng.normal(-5.0, 2.0, size=(4, 64, 80)).astype(np.float32),
        "mel_len": np.array([64, 50, 40, 0], np.int32),  # last row = padding
        "text": rng.integers(1, C.VOCAB_SIZE, size=(4, 8)).astype(np.int32),
        "text_len": np.array([8, 6, 5, 0], np.int32),
    }
    tr = loop.Trainer(task, cfg, mesh=_one_device_mesh())
    state = tr.init_state(jax.random.key(0), batch)
    losses = []
    for _ in range(30):
        state, m = tr.train_step(state, tr.put_batch(batch), jax.random.key(1))
        losses.append(float(m["loss"]))
    assert np.all(np.isfinite(losses))
    assert losses[0] > 3.0 and losses[-1] < 0.5 * losses[0]
    loss, metrics = task.loss(state.params, batch, jax.random.key(0), train=False)
    assert float(metrics["weight"]) == 19.0 and float(metrics["skipped_rows"]) == 0.0
    # A row too short for its labels (T' = 2 < 8) is skipped, not inf.
    short = dict(batch, mel_len=np.array([3, 50, 40, 0], np.int32))
    loss, metrics = task.loss(state.params, short, jax.random.key(0), train=False)
    assert np.isfinite(float(loss)) and float(metrics["skipped_rows"]) == 1.0
    assert float(metrics["weight"]) == 11.0


def _config(arg):
    from configs import ctc_asr as cfg_mod

    return cfg_mod.get_config(arg)


def test_train_load_transcribe_on_tiny_corpus(tiny_corpus, tmp_path):
    pytest.importorskip("jaxtts.data.audio")
    from jaxtts.data.audio import load_audio
    from jaxtts.data.manifest import read_manifest

    cfg = _config("tiny")
    cfg.data.corpus_dir = str(tiny_corpus)
    wd = str(tmp_path / "asr")
    res = C.train(cfg, wd, progress=False, mesh=_one_device_mesh())
    assert res.history and np.isfinite(res.history[0]["train/loss"])
    rows = [json.loads(x) for x in open(os.path.join(wd, "metrics.jsonl"))]
    evals = [r for r in rows if "dev/cer" in r]
    assert evals and 0.0 <= evals[-1]["dev/cer"] and evals[-1]["step"] == 4
    saved = json.load(open(os.path.join(wd, "config.json")))
    assert saved["task"] == "ctc_asr" and saved["model"]["mel_std"] > 0

    asr = C.CTCASR.load(wd)
    from jaxtts.checkpoint import tree_equal

    assert tree_equal(asr.params, res.state.params)
    utts = read_manifest(tiny_corpus / "test.jsonl")[:3]
    wavs = [load_audio(u.path, 16000) for u in utts]
    hyps = asr.transcribe(wavs, 16000)
    assert len(hyps) == 3 and all(isinstance(h, str) for h in hyps)
    # Resampled input goes through the same path.
    assert len(asr.transcribe([wavs[0][::2]], 8000)) == 1
