"""Monotonic alignment search (Glow-TTS / Grad-TTS MAS), jitted and batched.

Given a log-likelihood `logp[b, i, j]` of mel frame j under text token i's prior, find the
alignment that maps every frame to one token, starts at (token 0, frame 0), ends at (token
N_b - 1, frame T_b - 1) and at every frame either stays on its token or moves to the next:

    Q[i, j] = logp[i, j] + max(Q[i, j - 1], Q[i - 1, j - 1]),   Q[0, 0] = logp[0, 0]

A forward `lax.scan` over frames keeps Q's column and whether each cell came from the
previous token; a backward scan follows those choices from (N_b - 1, T_b - 1). Rows need
T_b >= N_b (each token gets at least one frame); padded tokens and frames get no alignment.

Axis letters: B batch, N text tokens, T frames.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

NEG = -1e30


@jax.jit
def monotonic_alignment(logp: jax.Array, text_len: jax.Array, frame_len: jax.Array) -> jax.Array:
    """logp float [B, N, T], text_len / frame_len int [B] -> path bool [B, N, T] (one token
    per valid frame); durations are `path.sum(-1)`."""
    b, n, t = logp.shape
    tok = jnp.arange(n)[None]  # [1, N]
    valid_tok = tok < text_len[:, None]  # [B, N]
    lp = jnp.where(valid_tok[:, :, None], logp.astype(jnp.float32), NEG)

    def fwd(q, j):  # q [B, N]: Q[:, j - 1]
        stay = q
        move = jnp.concatenate([jnp.full((b, 1), NEG), q[:, :-1]], axis=1)  # Q[i - 1, j - 1]
        came_from_prev = move > stay  # [B, N]
        new = lp[:, :, j] + jnp.maximum(stay, move)
        new = jnp.where(j == 0, jnp.where(tok == 0, lp[:, :, 0], NEG), new)
        active = (j < frame_len)[:, None]  # frames past a row's end change nothing
        return jnp.where(active, new, q), came_from_prev & active

    _, came = jax.lax.scan(fwd, jnp.full((b, n), NEG), jnp.arange(t))  # came [T, B, N]

    def back(i, j):  # i [B]: the token of frame j
        on = j < frame_len  # [B]
        row = jnp.where(on[:, None], tok == i[:, None], False)  # [B, N]
        prev = jnp.take_along_axis(came[j], i[:, None], axis=1)[:, 0]
        i_next = jnp.where(on & prev & (j > 0), i - 1, i)
        return jnp.maximum(i_next, 0), row

    _, path = jax.lax.scan(back, text_len - 1, jnp.arange(t)[::-1])  # [T, B, N], reversed
    return jnp.transpose(path[::-1], (1, 2, 0))  # [B, N, T]
