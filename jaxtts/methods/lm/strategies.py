"""FAR (next-token) and fixed-chunk CAR decoding as one jitted `lax.while_loop`.

Step (chunk c, 1 <= c <= K; c = 1 is FAR): from each row's last hidden state h_t take heads
1..c, sample y_{t+1..t+c} (head k's distribution for y_{t+k}), keep the tokens before the
first EOS (an EOS from any head ends the row), append all c tokens with ONE cached forward,
and continue from the hidden state of the last of them. Rows finish on EOS or at
`max_new_tokens`; the loop stops when every row has finished.

Steps = ceil(T / c) forwards per row for T generated tokens (+ the prefill).
"""

from __future__ import annotations

import functools

import flax.struct
import jax
import jax.numpy as jnp

from jaxtts.decode.base import (
    DecodeOutput,
    PromptBatch,
    SamplingConfig,
    first_eos,
    prefill,
    sample_tokens,
    step_keys,
    suppress_early_eos,
    write_tokens,
)
from jaxtts.errors import ConfigError
from jaxtts.models.lm import TTSLM, KVCache, LMConfig


@flax.struct.dataclass
class ChunkState:
    cache: KVCache
    hidden: jax.Array  # float32 [B, D] last hidden state of each row
    tokens: jax.Array  # int32 [B, N + C] generated tokens (valid < length)
    length: jax.Array  # int32 [B]
    done: jax.Array  # bool [B]
    hit_max: jax.Array  # bool [B]
    steps: jax.Array  # int32 [B] forwards while the row was active
    step: jax.Array  # int32 [] loop iteration


def chunk_step(model: TTSLM, params, keys: jax.Array, state: ChunkState, chunk: int,
               max_new_tokens: int, sampling: SamplingConfig) -> ChunkState:  # fmt: skip
    """One CAR step of chunk `chunk` for every row (finished rows are left unchanged)."""
    cfg = model.cfg
    logits = model.apply({"params": params}, state.hidden, method="heads")[:, :chunk]  # [B,C,V]
    logits = suppress_early_eos(logits, state.length, sampling, cfg.eos)
    toks = sample_tokens(step_keys(keys, state.step), logits, sampling)  # [B, C]
    n_eos, has_eos = first_eos(toks, cfg.eos)
    active = ~state.done
    n_acc = jnp.minimum(n_eos, max_new_tokens - state.length)
    tokens = write_tokens(state.tokens, toks, state.length, active)
    length = state.length + jnp.where(active, n_acc, 0)
    hit_max = state.hit_max | (active & ~has_eos & (length >= max_new_tokens))
    done = state.done | has_eos | (length >= max_new_tokens)
    h, cache = model.apply({"params": params}, toks, state.cache, method="extend")
    return ChunkState(cache=cache, hidden=h[:, -1], tokens=tokens, length=length, done=done,
                      hit_max=hit_max, steps=state.steps + active.astype(jnp.int32),
                      step=state.step + 1)  # fmt: skip


@functools.partial(jax.jit, static_argnames=("cfg", "chunk", "max_new_tokens", "sampling"))
def generate_chunked(params, batch: PromptBatch, keys: jax.Array, *, cfg: LMConfig, chunk: int,
                     max_new_tokens: int, sampling: SamplingConfig) -> DecodeOutput:  # fmt: skip
    """Chunk-wise AR decoding of a batch (see module docstring). keys: [B] per-row keys."""
    model = TTSLM(cfg)
    b = batch.batch_size
    max_steps = -(-max_new_tokens // chunk)
    speech_slots = batch.prompt.shape[1] + 1 + max_steps * chunk
    hidden, cache = prefill(model, params, batch, speech_slots)
    state = ChunkState(
        cache=cache, hidden=hidden.astype(jnp.float32),
        tokens=jnp.full((b, max_new_tokens + chunk), -1, jnp.int32),
        length=jnp.zeros((b,), jnp.int32), done=jnp.zeros((b,), bool),
        hit_max=jnp.zeros((b,), bool), steps=jnp.zeros((b,), jnp.int32),
        step=jnp.zeros((), jnp.int32),
    )  # fmt: skip

    def cond(s: ChunkState):
        return ~jnp.all(s.done) & (s.step < max_steps)

    def body(s: ChunkState):
        return chunk_step(model, params, keys, s, chunk, max_new_tokens, sampling)

    state = jax.lax.while_loop(cond, body, state)
    idx = jnp.arange(max_new_tokens)[None]
    tokens = jnp.where(idx < state.length[:, None], state.tokens[:, :max_new_tokens], -1)
    return DecodeOutput(tokens=tokens, length=state.length, steps=state.steps,
                        hit_max=state.hit_max, num_forwards=state.step)  # fmt: skip


class ChunkedAR:
    """Strategy object: `ChunkedAR(c)(params, batch, keys, cfg=..., max_new_tokens=...,
    sampling=...)`. c = 1 is FAR."""

    def __init__(self, chunk: int):
        if chunk < 1:
            raise ConfigError(f"strategy chunk={chunk}: expected >= 1")
        self.chunk = int(chunk)
        self.name = "far" if chunk == 1 else f"car:{chunk}"

    def check(self, cfg: LMConfig) -> None:
        if self.chunk > cfg.num_mtp_heads:
            raise ConfigError(f"strategy {self.name}: chunk {self.chunk} needs {self.chunk} "
                              f"prediction heads, the model has {cfg.num_mtp_heads}")  # fmt: skip

    def __call__(self, params, batch: PromptBatch, keys: jax.Array, *, cfg: LMConfig,
                 max_new_tokens: int, sampling: SamplingConfig) -> DecodeOutput:  # fmt: skip
        self.check(cfg)
        return generate_chunked(params, batch, keys, cfg=cfg, chunk=self.chunk,
                                max_new_tokens=max_new_tokens, sampling=sampling)  # fmt: skip
