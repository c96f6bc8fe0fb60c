"""FAR (next-token) and fixed-chunk CAR decoding: strategies for the generic driver
(`jaxtts.decode.driver`), plus the per-row dynamic-chunk step later strategies reuse.

Step (chunk c, 1 <= c <= K; c = 1 is FAR): from each row's last hidden state h_t take heads
1..c, sample y_{t+1..t+c} (head k's distribution for y_{t+k}), append them with ONE cached
forward and continue from the hidden state of the last of them. The driver keeps the tokens
before the first EOS (an EOS from any head ends the row); rows finish on EOS or at
`max_new_tokens`; the loop stops when every row has finished.

Steps = ceil(T / c) forwards per row for T generated tokens (+ the prefill).

Per-row dynamic chunks (a `count` per row, e.g. a DCAR policy's choice): `chunk_step` with
`heads` = c samples c tokens from heads 1..c, extends every row by c in one forward, then rolls
each row's cache back to its own count and continues from the hidden state of its last kept
token (`extend_rows`). `dynamic_chunk_step` picks c = the largest count in the batch (a
`lax.switch` over the static sizes), so a step costs what its rows chose. With count == c for
every row this is exactly `car:c`.
"""

from __future__ import annotations

import dataclasses

import flax.struct
import jax
import jax.numpy as jnp

from jaxtts.decode.driver import DecodeState, PromptBatch, Proposal, Strategy
from jaxtts.decode.sampling import SamplingConfig, sample_tokens, step_keys, suppress_early_eos
from jaxtts.errors import ConfigError
from jaxtts.methods.lm.model import TTSLM, KVCache, with_bos

MIN_WINDOW = 64  # smallest cache window (speech slots); windows double from there


def cache_windows(prompt_slots: int, speech_slots: int, chunk: int) -> tuple[int, ...]:
    """Doubling cache sizes (speech slots) from the first power of two >= max(MIN_WINDOW,
    prompt + one chunk), the last one the whole budget `speech_slots`."""
    w = MIN_WINDOW
    while w < prompt_slots + chunk:
        w *= 2
    out: list[int] = []
    while w < speech_slots:
        out.append(w)
        w *= 2
    return (*out, speech_slots)


def multi_row_keys(rows: int) -> bool:
    """Whether a decode whose steps attend with up to `rows` query rows holds its keys
    transposed, [B, N, H, S] (`jaxtts.nn.attention.LayerCache`): on XLA's CPU backend the
    logits of 2 to 6 query rows are 2-2.5x faster against transposed keys (a plain row-major
    matmul), while one-row steps (FAR) keep the [B, N, S, H] layout, whose one-slot write is
    cheaper (RESULTS keys-t)."""
    return rows > 1 and jax.default_backend() == "cpu"


def window_fits(cache: KVCache, done: jax.Array, chunk: int) -> jax.Array:
    """Every active row's next `chunk` speech slots fit in the cache."""
    return jnp.all(done | (cache.speech_len + chunk <= cache.speech_slots))


def prefill(
    model: TTSLM, params, batch: PromptBatch, speech_slots: int, layers=None, keys_t=False
) -> tuple[jax.Array, KVCache]:
    """Fills a cache with text + BOS + prompt; returns (last hidden [B, D], cache). keys_t:
    the cache holds its keys transposed (`multi_row_keys`)."""
    b, x = batch.text.shape
    cache = model.apply(
        {"params": params}, b, x, speech_slots, layers=layers, keys_t=keys_t, method="init_cache"
    )
    speech, speech_len = with_bos(batch.prompt, batch.prompt_len, model.cfg)
    h, cache = model.apply(
        {"params": params},
        batch.text,
        batch.text_len,
        speech,
        speech_len,
        cache,
        layers=layers,
        rows=batch.prompt_len[:, None],  # the last prompt token's slot (BOS at 0)
        method="prefill",
    )
    return h[:, 0], cache  # [B, D]


def last_kept(h: jax.Array, count: jax.Array) -> jax.Array:
    """The hidden state of each row's last kept token: h [B, C, D], count [B] in 1..C -> [B, D]."""
    return jnp.take_along_axis(h, (count - 1)[:, None, None], axis=1)[:, 0]


def extend_rows(
    model: TTSLM, params, tokens: jax.Array, count: jax.Array, cache: KVCache, layers=None
) -> tuple[jax.Array, KVCache]:
    """Append tokens [B, C] with one forward, then keep only the first count[b] of row b
    (per-row rollback). Returns (hidden of each row's last kept token [B, D], cache)."""
    start = cache.speech_len
    h, cache = model.apply(
        {"params": params}, tokens, cache, layers=layers, method="extend"
    )  # [B, C, D]
    cache = cache.rollback(start + count)
    return last_kept(h, count), cache


@flax.struct.dataclass
class ChunkCarry:
    cache: KVCache
    hidden: jax.Array  # float32 [B, D] last hidden state of each row


def chunk_logits(model, params, carry: ChunkCarry, state, sampling, heads: int) -> jax.Array:
    """Heads 1..heads at each row's last hidden, EOS suppressed as sampling says -> [B, C, V]."""
    logits = model.apply({"params": params}, carry.hidden, heads, method="heads")  # [B, C, V]
    return suppress_early_eos(logits, state.length, sampling, model.cfg.eos)


def _sample_chunk(model, params, carry: ChunkCarry, state, keys, sampling, heads: int, logits=None):
    """heads tokens per row from heads 1..heads at each row's last hidden -> int32 [B, heads].
    logits: `chunk_logits` of at least `heads` heads, computed already (not recomputed)."""
    if logits is None:
        logits = chunk_logits(model, params, carry, state, sampling, heads)
    return sample_tokens(step_keys(keys, state.steps), logits[:, :heads], sampling)  # [B, C]


def chunk_step(
    model: TTSLM,
    params,
    carry: ChunkCarry,
    state: DecodeState,
    keys: jax.Array,
    sampling: SamplingConfig,
    heads: int,
    count: jax.Array,
) -> Proposal:
    """Sample `heads` tokens per row from heads 1..heads, keep count[b] of them (int32 [B])."""
    toks = _sample_chunk(model, params, carry, state, keys, sampling, heads)
    hidden, cache = extend_rows(model, params, toks, count, carry.cache)
    return Proposal(tokens=toks, count=count, carry=ChunkCarry(cache, hidden))


def dynamic_chunk_step(
    model: TTSLM,
    params,
    carry: ChunkCarry,
    state: DecodeState,
    keys: jax.Array,
    sampling: SamplingConfig,
    count: jax.Array,
    max_chunk: int,
    write_in_branch: bool = False,
    logits: jax.Array | None = None,
) -> Proposal:
    """`chunk_step` whose cost follows the sizes chosen: count int32 [B] in 1..max_chunk; the
    step computes heads 1..c and extends by c, c = the largest count among active rows, one
    `lax.switch` branch per static c. Row b keeps count[b] tokens as in `chunk_step`, and its
    tokens equal those of `chunk_step(..., max_chunk, count)` (a slot's draw does not depend
    on how many slots the step samples; causal attention: later appended slots do not change
    earlier ones). Tokens come back as [B, max_chunk], zeros past the step's c.

    The branches only read the cache (`TTSLM.extend_deferred`) and return the new keys/values
    padded to max_chunk slots; they are written after the switch, in place. Written inside a
    branch, the whole cache was copied every step (`jaxtts.nn.attention`). The padding slots
    lie past every active row's kept length (the cache holds max_chunk slots of headroom:
    `window_fits`).

    write_in_branch=True is the earlier step: each branch runs `chunk_step`, which writes the
    cache. Same tokens; on a CPU it copies the cache every step, on a GPU it launches fewer
    kernels (benchmarks/diagnostics/dcar_step.py compares both).

    logits [B, max_chunk, V]: every head's `chunk_logits`, when the caller computed them already
    (a DCAR policy that reads the heads' confidence); the branches sample from their first c
    instead of running heads 1..c again. Same tokens."""
    c_max = jnp.max(jnp.where(state.done, 1, count))
    if write_in_branch and logits is not None:
        raise ValueError("dynamic_chunk_step: logits= needs write_in_branch=False")
    if write_in_branch:

        def write(c: int):
            def run(_):
                kept = jnp.minimum(count, c)
                prop = chunk_step(model, params, carry, state, keys, sampling, c, kept)
                return jnp.pad(prop.tokens, ((0, 0), (0, max_chunk - c))), prop.carry

            return run

        branches = [write(c) for c in range(1, max_chunk + 1)]
        toks, new_carry = jax.lax.switch(c_max - 1, branches, None)
        return Proposal(tokens=toks, count=count, carry=new_carry)

    p = {"params": params}

    def branch(c: int):
        def run(_):
            toks = _sample_chunk(model, params, carry, state, keys, sampling, c, logits)  # [B, c]
            emb = model.apply(p, toks, method="embed_speech")
            h, blocks = model.apply(p, emb, carry.cache, method="extend_deferred")
            last = last_kept(h, jnp.minimum(count, c))  # [B, D]
            pad = max_chunk - c
            toks = jnp.pad(toks, ((0, 0), (0, pad)))  # [B, K]
            slots = ((0, 0), (0, 0), (0, pad), (0, 0))
            blocks = tuple(jax.tree.map(lambda x: jnp.pad(x, slots), blk) for blk in blocks)
            return toks, last, blocks  # blocks: [B, N, K, H] per layer

        return run

    toks, last, blocks = jax.lax.switch(
        c_max - 1, [branch(c) for c in range(1, max_chunk + 1)], None
    )
    cache = carry.cache.append(blocks, jnp.minimum(count, c_max))
    return Proposal(tokens=toks, count=count, carry=ChunkCarry(cache, last))


@dataclasses.dataclass(frozen=True)
class ChunkedAR(Strategy):
    """`far` (chunk 1) and `car:<chunk>`: every row takes `chunk` tokens per step."""

    chunk: int

    def __post_init__(self):
        if self.chunk < 1:
            raise ConfigError(f"strategy chunk={self.chunk}: expected >= 1")

    @property
    def name(self) -> str:
        return "far" if self.chunk == 1 else f"car:{self.chunk}"

    @property
    def max_chunk(self) -> int:
        return self.chunk

    def check(self, models) -> None:
        heads = models["target"].cfg.num_mtp_heads
        if self.chunk > heads:
            raise ConfigError(
                f"strategy {self.name}: chunk {self.chunk} needs {self.chunk} "
                f"prediction heads, the model has {heads}"
            )

    def max_steps(self, max_new_tokens: int) -> int:
        return -(-max_new_tokens // self.chunk)

    def eos(self, models) -> int:
        return models["target"].cfg.eos

    def speech_slots(self, batch, max_new_tokens: int) -> int:
        return batch.prompt.shape[1] + 1 + self.max_steps(max_new_tokens) * self.chunk

    def init(self, models, params, batch, max_new_tokens):
        first = self.windows(models, batch, max_new_tokens)[0]  # the cache grows from there
        speech_slots = self.speech_slots(batch, max_new_tokens) if first is None else first
        keys_t = multi_row_keys(self.chunk)
        hidden, cache = prefill(
            models["target"], params["target"], batch, speech_slots, None, keys_t
        )
        return ChunkCarry(cache=cache, hidden=hidden.astype(jnp.float32))

    def windows(self, models, batch, max_new_tokens):
        return cache_windows(
            batch.prompt.shape[1] + 1, self.speech_slots(batch, max_new_tokens), self.chunk
        )

    def resize(self, models, carry, window):
        return carry.replace(cache=carry.cache.resize(window))

    def window_fits(self, state, window):
        return window_fits(state.carry.cache, state.done, self.chunk)

    def step(self, models, params, state, keys, sampling):
        count = jnp.full(state.length.shape, self.chunk, jnp.int32)
        return chunk_step(
            models["target"],
            params["target"],
            state.carry,
            state,
            keys,
            sampling,
            self.chunk,
            count,
        )


def far(arg: str | None) -> ChunkedAR:
    if arg is not None:
        raise ConfigError(f"--strategy far:{arg}: 'far' takes no argument")
    return ChunkedAR(1)


def car(arg: str | None) -> ChunkedAR:
    try:
        chunk = int(arg)
    except (TypeError, ValueError):
        raise ConfigError(f"--strategy car:{arg}: expected car:<chunk size>, e.g. car:3") from None
    return ChunkedAR(chunk)
