"""A learned, non-linear token -> log-mel decoder for k-means tokens (the "conv decoder").

k-means tokens decode by centroid lookup or by the linear context decoder
(`KMeansTokenizer.fit_context_decoder`); both are linear in the one-hot tokens and average
away what a token's wider context says about its frames. This decoder is a small residual
1-D convolution stack over token embeddings that predicts what the linear decoder misses:

    base_t = linear decoder of x (context tables, or centroids)            # [T, f M]
    h_0    = Emb[x_t] * m_t                                                 # [T, C]
    h_l+1  = (h_l + gelu(conv_k(LN(h_l) * m) + b_l) @ P_l + p_l) * m        # L blocks
    z_t    = base_t + LN(h_L)_t @ H + h                                     # [T, f M]

(m_t = 1 inside the utterance, 0 outside; LN = layer norm with scale and bias; conv_k a
'same' convolution of kernel k over time, zero outside the utterance, so a padded batch row
decodes exactly as the row alone). It is trained with the MSE on the standardised frames of
training utterances (random crops), with the head initialised at zero so that training starts
from the linear decoder. A deterministic regression decoder, much smaller than CosyVoice's
flow-matching token-to-mel model (a stand-in for it; said in the README); parameters are
saved as float16 (`conv_decoder.npz` of the tokenizer folder; the error this adds is ~1e-3 of
a standardised value) and applied in float32 numpy at decode time (no compilation per
length).

Axis letters: B batch, T tokens, K clusters, C channels, k kernel taps, F = f M outputs.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Sequence

import numpy as np

from jaxtts.errors import ConfigError, DataError

log = logging.getLogger(__name__)

__all__ = ["ConvDecoderConfig", "apply", "check", "fit", "init_params"]

_KEYS = (
    "emb",
    "ln_s",
    "ln_b",
    "conv",
    "conv_b",
    "proj",
    "proj_b",
    "out_s",
    "out_b",
    "head",
    "head_b",
)


@dataclasses.dataclass(frozen=True)
class ConvDecoderConfig:
    width: int = 256  # C
    layers: int = 4  # L
    kernel: int = 3  # k (odd): receptive field +-L (k // 2) tokens
    steps: int = 3000
    batch: int = 32  # crops per step
    crop: int = 64  # tokens per crop (2.56 s at 25 Hz)
    learning_rate: float = 2e-3
    warmup: int = 100
    token_dropout: float = 0.15  # training: share of input tokens whose embedding is zeroed
    seed: int = 0

    def __post_init__(self):
        for name in ("width", "layers", "kernel", "steps", "batch", "crop"):
            if getattr(self, name) < 1:
                raise ConfigError(f"ConvDecoderConfig.{name}={getattr(self, name)}: expected >= 1")
        if self.kernel % 2 != 1:
            raise ConfigError(f"ConvDecoderConfig.kernel={self.kernel}: expected an odd number")


def init_params(k: int, out_dim: int, cfg: ConvDecoderConfig) -> dict[str, np.ndarray]:
    """float32 parameters for K = `k` tokens (+ 1 outside id) and `out_dim` = f M outputs."""
    rng = np.random.default_rng(cfg.seed)
    c, n, kk = cfg.width, cfg.layers, cfg.kernel
    f32 = np.float32
    return {
        "emb": (rng.standard_normal((k + 1, c)) * 0.5).astype(f32),  # [K + 1, C]
        "ln_s": np.ones((n, c), f32),
        "ln_b": np.zeros((n, c), f32),
        "conv": (rng.standard_normal((n, kk, c, c)) / math.sqrt(kk * c)).astype(f32),  # [L,k,C,C]
        "conv_b": np.zeros((n, c), f32),
        "proj": (rng.standard_normal((n, c, c)) / math.sqrt(c) / math.sqrt(n)).astype(f32),
        "proj_b": np.zeros((n, c), f32),
        "out_s": np.ones((c,), f32),
        "out_b": np.zeros((c,), f32),
        "head": np.zeros((c, out_dim), f32),
        "head_b": np.zeros((out_dim,), f32),  # start: base
    }


def _gelu(x, xp):
    return 0.5 * x * (1.0 + xp.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def _layer_norm(x, s, b, xp, eps: float = 1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / xp.sqrt(var + eps) * s + b


def apply(params, ids, xp=np, keep=None):
    """ids int [B, T] (K = outside / padding) -> the residual [B, T, F] over the linear
    decoder. `xp` is numpy (decoding) or jax.numpy (training): the same function. `keep`
    [B, T] (training only): 0 zeroes a token's embedding (token dropout)."""
    k_out = params["emb"].shape[0] - 1
    mask = (ids < k_out)[..., None].astype(params["emb"].dtype)  # [B, T, 1]
    h = params["emb"][ids] * mask  # [B, T, C]
    if keep is not None:
        h = h * keep[..., None]
    n, kk = params["conv"].shape[:2]
    r = kk // 2
    t = ids.shape[1]
    for i in range(n):
        y = _layer_norm(h, params["ln_s"][i], params["ln_b"][i], xp) * mask
        y = xp.pad(y, ((0, 0), (r, r), (0, 0)))  # zeros outside: 'same' convolution
        win = xp.concatenate([y[:, j : j + t] for j in range(kk)], -1)  # [B, T, k C]
        # one matrix product over (k, C): numpy's einsum of "btkc,kcd->btd" does not call BLAS
        # (decoding 130 tokens: 135 ms vs ~10 ms), and a stream decodes its prefix every segment
        w = params["conv"][i].reshape(kk * h.shape[-1], -1)  # [k C, D]
        y = win @ w + params["conv_b"][i]  # [B, T, D]
        y = _gelu(y, xp) @ params["proj"][i] + params["proj_b"][i]
        h = (h + y) * mask
    return _layer_norm(h, params["out_s"], params["out_b"], xp) @ params["head"] + params["head_b"]


def check(params: dict[str, np.ndarray], k: int, out_dim: int, where: str) -> dict[str, np.ndarray]:
    """Loaded arrays -> float32 parameters for K = `k` tokens and `out_dim` outputs, or a
    one-line DataError naming `where`."""
    missing = [key for key in _KEYS if key not in params]
    if missing:
        raise DataError(f"{where}: conv decoder arrays {missing} missing")
    params = {key: np.asarray(params[key], np.float32) for key in _KEYS}
    if params["emb"].shape[0] != k + 1 or params["head"].shape[1] != out_dim:
        raise DataError(
            f"{where}: conv decoder for {params['emb'].shape[0] - 1} tokens x "
            f"{params['head'].shape[1]} outputs, the tokenizer has {k} x {out_dim}"
        )
    return params


def fit(
    ids: Sequence[np.ndarray],
    residuals: Sequence[np.ndarray],
    k: int,
    cfg: ConvDecoderConfig = ConvDecoderConfig(),
    progress: bool = False,
    eval_fn: Callable[[dict], float] | None = None,
) -> tuple[dict, list[float]]:
    """Trains on utterances' token ids [T_i] and the linear decoder's residuals [T_i, F]
    (standardised frames minus the linear decode). Returns (float32 params, loss curve: the
    mean training MSE of each 100-step block)."""
    import jax  # start-up: jax 630 ms, only fit() trains
    import jax.numpy as jnp  # start-up: see jax above
    import optax  # start-up: optax 835 ms, only fit()
    from tqdm.auto import trange  # start-up: tqdm.auto 56 ms, only fit()

    if not ids or len(ids) != len(residuals):
        raise DataError(f"conv decoder: {len(ids)} token sequences, {len(residuals)} targets")
    out_dim = residuals[0].shape[1]
    params = jax.tree.map(jnp.asarray, init_params(k, out_dim, cfg))
    warmup = min(cfg.warmup, cfg.steps // 2)  # short runs (tests, tiny corpora) still decay
    sched = optax.warmup_cosine_decay_schedule(
        0.0, cfg.learning_rate, warmup, cfg.steps, cfg.learning_rate * 0.02
    )
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=0.01))
    opt_state = opt.init(params)

    @jax.jit
    def step(params, opt_state, x, y, w, keep):  # x [B, T] int, y [B, T, F], w, keep [B, T]
        def loss_fn(p):
            err = (apply(p, x, jnp, keep) - y) * w[..., None]
            return (err**2).sum() / (w.sum() * out_dim)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    rng = np.random.default_rng(cfg.seed + 1)
    lens = np.array([len(x) for x in ids])
    margin = cfg.layers * (cfg.kernel // 2)  # receptive field: crops see their real context
    width = cfg.crop + 2 * margin
    curve, block, evals = [], [], []
    bar = trange(cfg.steps, desc="conv decoder", disable=not progress, leave=False)
    for _ in bar:
        x = np.full((cfg.batch, width), k, np.int32)
        y = np.zeros((cfg.batch, width, out_dim), np.float32)
        w = np.zeros((cfg.batch, width), np.float32)  # loss only on the crop, not the margins
        for b, u in enumerate(rng.integers(0, len(ids), cfg.batch)):
            s = int(rng.integers(0, max(1, lens[u] - cfg.crop + 1)))
            lo, hi = max(0, s - margin), min(lens[u], s + cfg.crop + margin)
            off = margin - (s - lo)
            x[b, off : off + hi - lo] = ids[u][lo:hi]
            y[b, off : off + hi - lo] = residuals[u][lo:hi]
            e = min(lens[u], s + cfg.crop)
            w[b, margin : margin + e - s] = 1.0
        keep = (rng.random(x.shape) >= cfg.token_dropout).astype(np.float32)
        params, opt_state, loss = step(params, opt_state, x, y, w, keep)
        block.append(float(loss))
        if len(block) == 100:
            curve.append(float(np.mean(block)))
            block = []
            bar.set_postfix(mse=f"{curve[-1]:.4f}")
        if eval_fn is not None and (len(curve) * 100) % 500 == 0 and not block:
            evals.append(eval_fn(jax.tree.map(np.asarray, params)))
            log.info(
                "conv decoder step %d: train MSE %.4f, dev %s",
                len(curve) * 100,
                curve[-1],
                evals[-1],
            )
    return jax.tree.map(np.asarray, params), curve
