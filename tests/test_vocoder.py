"""The Vocos-style vocoder: its inverse STFT and JAX log-mel, batch-N == batch-1, a tiny model
that overfits one utterance, the run-folder loader's errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import vocoder as vocoder_cfg
from jaxtts.data.audio import MelConfig, log_mel, stft
from jaxtts.errors import ConfigError
from jaxtts.methods.vocoder import VocoderTask
from jaxtts.vocoders import make_vocoder
from jaxtts.vocoders.vocos import VocosGenerator, istft, jax_log_mel, stft_mag

pytestmark = pytest.mark.slow  # integration / trained models: `make test-fast` skips it


def _tone(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000
    f0 = 120 + 40 * np.sin(2 * np.pi * 1.5 * t)
    x = 0.5 * np.sin(2 * np.pi * np.cumsum(f0) / 16000) + 0.05 * rng.standard_normal(n)
    return x.astype(np.float32)


def test_istft_inverts_the_projects_stft_and_jax_log_mel_equals_numpy():
    x = _tone(320 * 40)
    cfg = MelConfig(n_fft=1280, win_length=1280, hop_length=320)
    y = np.asarray(istft(jnp.asarray(stft(x, cfg))[None], 1280, 320))[0]
    assert y.shape == (320 * 40,) and np.abs(y - x).max() < 1e-5
    c = MelConfig()
    m = np.asarray(jax_log_mel(jnp.asarray(x)[None], c))[0]
    assert np.abs(m - log_mel(x, c)).max() < 1e-4
    mag = np.asarray(stft_mag(jnp.asarray(x)[None], 512, 128))[0]
    ref = np.abs(stft(x, MelConfig(n_fft=512, win_length=512, hop_length=128)))
    assert np.abs(mag - ref).max() < 1e-3 * ref.max()


def test_padded_rows_equal_the_rows_alone():
    gen = VocosGenerator(dim=16, mlp_dim=32, layers=2)
    mels = [
        np.random.default_rng(i).standard_normal((n, 80)).astype(np.float32)
        for i, n in enumerate((23, 40, 9))
    ]
    p = gen.init(jax.random.PRNGKey(0), jnp.zeros((1, 8, 80)), jnp.array([8]))
    x = np.zeros((3, 40, 80), np.float32)
    for i, m in enumerate(mels):
        x[i, : len(m)] = m
    batch = np.asarray(gen.apply(p, x, jnp.array([23, 40, 9])))
    for i, m in enumerate(mels):
        alone = np.asarray(gen.apply(p, m[None], jnp.array([len(m)])))[0]
        n = (len(m) - 1) * 320
        np.testing.assert_allclose(batch[i, :n], alone, atol=2e-5, rtol=0)


def _tiny_task():
    cfg = vocoder_cfg.get_config("tiny")
    cfg.model.mel_mean, cfg.model.mel_std = -5.0, 2.5
    return VocoderTask(cfg)


def test_tiny_vocoder_overfits_one_utterance():
    """160 Adam steps on one 0.3 s crop (the log-mel L1 alone; the STFT loss is the slow part
    under the tests' unoptimised XLA): the output's log-mel L1 falls from 0.73 nats (the
    untrained generator) to ~0.07, below Griffin-Lim 32's 0.084 on the same crop."""
    import optax

    task = _tiny_task()
    task.loss_cfg.stft = 0.0
    x = _tone(320 * 15)
    batch = {"audio": x[None], "mel": log_mel(x, MelConfig())[None]}
    params = task.init(jax.random.PRNGKey(0), batch)
    opt = optax.adam(3e-3)
    state = opt.init(params["gen"])

    @jax.jit
    def step(gp, s):
        def f(g):
            return task.loss({**params, "gen": g}, batch, None, train=True)

        (loss, m), grads = jax.value_and_grad(f, has_aux=True)(gp)
        upd, s = opt.update(grads, s)
        return optax.apply_updates(gp, upd), s, m["mel_l1"]

    gp = params["gen"]
    first = None
    for _ in range(160):
        gp, state, l1 = step(gp, state)
        first = float(l1) if first is None else first
    mel = batch["mel"][0]
    gl = make_vocoder("griffin_lim", MelConfig(), n_iter=32).mel_to_audio(mel)[: len(x)]
    gl_l1 = float(np.abs(log_mel(gl, MelConfig()) - mel).mean())
    assert first > 0.5 and float(l1) < gl_l1 < 0.1


def test_vocoder_folder_errors_are_one_line(tmp_path):
    with pytest.raises(ConfigError, match="expected one of .*'vocos'.* or a vocoder run folder"):
        make_vocoder("wavenet", MelConfig())
    with pytest.raises(ConfigError, match="no config.json there, expected a vocoder run folder"):
        make_vocoder(str(tmp_path), MelConfig())


def _neural(layers: int = 2):
    """A NeuralVocoder around an untrained tiny generator (no run folder needed)."""
    from jaxtts.vocoders import NeuralVocoder

    gen = VocosGenerator(dim=16, mlp_dim=32, layers=layers)
    params = gen.init(jax.random.PRNGKey(1), jnp.zeros((1, 8, 80)), jnp.array([8]))["params"]
    voc = object.__new__(NeuralVocoder)
    voc.mel_cfg, voc.sample_rate, voc.hop = MelConfig(), 16000, 320
    voc.mean, voc.std, voc._params = -5.0, 2.5, params
    voc._fn = jax.jit(lambda p, m, n: gen.apply({"params": p}, m, n))
    return voc


def test_neural_vocoder_batch_equals_rows_and_the_stream_equals_the_whole():
    from jaxtts.stream import NeuralVocoderStream, make_vocoder_stream, push_many

    voc = _neural(layers=8)  # the shipped depth: +-27 frames of convolution
    rng = np.random.default_rng(0)
    mels = [(rng.standard_normal((n, 80)) * 2 - 5).astype(np.float32) for n in (150, 97)]
    whole = voc.batch_mel_to_audio(mels)
    for m, w in zip(mels, whole, strict=True):
        assert w.shape == ((len(m) - 1) * 320,)
        np.testing.assert_allclose(voc.mel_to_audio(m), w, atol=2e-5, rtol=0)
    streams = [make_vocoder_stream(voc) for _ in mels]
    assert isinstance(streams[0], NeuralVocoderStream)
    got, pos, done = [[], []], [0, 0], [False, False]
    while not all(done):
        chunks, finals = [], []
        for i, m in enumerate(mels):
            k = int(rng.integers(3, 20))
            chunks.append(m[pos[i] : pos[i] + k])
            pos[i] = min(len(m), pos[i] + k)
            finals.append(pos[i] >= len(m) and not done[i])
        for i, a in enumerate(push_many(streams, chunks, finals)):
            got[i].append(a)
            done[i] = done[i] or finals[i]
    for i, w in enumerate(whole):
        joined = np.concatenate(got[i])
        assert joined.shape == w.shape
        np.testing.assert_allclose(joined, np.clip(w, -1, 1), atol=5e-5, rtol=0)
