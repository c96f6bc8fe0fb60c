"""Sampling, shared by every decoding strategy.

- `SamplingConfig`: greedy or temperature / top-k / top-p, as the user sets it (validated,
  hashable). `SamplingConfig.traced()` is what jitted decoding receives: temperature, top_k
  and top_p are traced values, so a sweep or a server changing them reuses one compiled loop;
  greedy, min_tokens and whether top-k / top-p are on at all are static (they change code).
- `filter_logits`: the filtered distribution (speculative decoding applies it to the draft
  and the target alike). Its cutoff is searched among the most likely ids (`lax.top_k`)
  and falls back to a full sort only for rows that need it: the same result as a full sort.
- `sample_tokens`: per-row PRNG keys (key array [B]), so a row's samples do not depend on
  which other rows share its batch (batch-N == batch-1 also when sampling); one uniform per
  token, inverse CDF over the kept candidates.
- `row_keys` / `step_keys`: one key per row from (seed, row id), folded with the step.

Axis letters: B batch, C tokens per step, V vocabulary.
"""

from __future__ import annotations

import dataclasses
import os

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from jaxtts.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """greedy=True takes the argmax; else softmax(logits / temperature) restricted to the
    top_k ids (0 = all) and to the smallest set with mass >= top_p (1.0 = all). EOS is
    suppressed for a row's first `min_tokens` tokens (benchmarks use it for fixed lengths)."""

    greedy: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_tokens: int = 0

    def __post_init__(self):
        if not self.greedy and self.temperature <= 0:
            raise ConfigError(f"decode.temperature={self.temperature}: expected > 0 (or greedy)")
        if self.top_k < 0 or not 0 < self.top_p <= 1 or self.min_tokens < 0:
            raise ConfigError(
                f"decode.top_k={self.top_k} (>= 0), decode.top_p={self.top_p} ((0, 1]), "
                f"min_tokens={self.min_tokens} (>= 0) expected"
            )

    @property
    def nucleus(self) -> bool:
        """Whether top-p filtering is on (top_p < 1)."""
        return self.top_p < 1.0

    @property
    def use_top_k(self) -> bool:
        """Whether top-k filtering is on (top_k > 0)."""
        return self.top_k > 0

    @property
    def static_key(self) -> tuple:
        """What a compiled decoding loop depends on (`traced()` passes the rest as values)."""
        return (self.greedy, self.use_top_k, self.nucleus, self.min_tokens)

    def traced(self) -> Sampling:
        """This config as the pytree jitted decoding takes (see the module docstring)."""
        return Sampling(
            temperature=np.float32(self.temperature if not self.greedy else 1.0),
            top_p=np.float32(self.top_p),
            top_k=np.int32(self.top_k),
            greedy=self.greedy,
            use_top_k=self.use_top_k,
            nucleus=self.nucleus,
            min_tokens=self.min_tokens,
        )

    @classmethod
    def from_config(cls, decode_cfg) -> SamplingConfig:
        get = decode_cfg.get
        return cls(
            bool(get("greedy", False)),
            float(get("temperature", 1.0)),
            int(get("top_k", 0)),
            float(get("top_p", 1.0)),
            int(get("min_tokens", 0) or 0),
        )


@flax.struct.dataclass
class Sampling:
    """A `SamplingConfig` inside jit: temperature, top_k and top_p are (traced) values; the
    rest is static. Every function here takes either form."""

    temperature: jax.Array  # float32 []
    top_p: jax.Array  # float32 []
    top_k: jax.Array  # int32 [] (used when use_top_k)
    greedy: bool = flax.struct.field(pytree_node=False, default=False)
    use_top_k: bool = flax.struct.field(pytree_node=False, default=False)
    nucleus: bool = flax.struct.field(pytree_node=False, default=False)
    min_tokens: int = flax.struct.field(pytree_node=False, default=0)

    def traced(self) -> Sampling:
        return self


# top-k / top-p look for their cutoff among this many most likely ids first (`lax.top_k`, a
# partial sort); a row whose kept set does not fit (or top_k >= CANDIDATES) falls back to the
# full sort.
CANDIDATES = 64


def _kth(vals: jax.Array, k) -> jax.Array:
    """The k-th largest value (k traced, 1-based) of descending vals [..., M] -> [..., 1]."""
    idx = jnp.clip(jnp.asarray(k, jnp.int32) - 1, 0, vals.shape[-1] - 1)
    return jnp.take_along_axis(vals, jnp.broadcast_to(idx, vals.shape[:-1] + (1,)), axis=-1)


def _filter_sorted(x: jax.Array, s: SamplingConfig) -> jax.Array:
    """The reference filter over scaled logits x [..., V], with a full sort: top-k keeps the
    ids >= the k-th largest value, top-p then keeps the ids >= the smallest value of the
    shortest descending prefix whose mass (of the top-k-filtered softmax) reaches top_p."""
    if s.use_top_k:  # k >= V keeps everything (the clip takes the smallest value)
        kth = _kth(jnp.sort(x, axis=-1)[..., ::-1], s.top_k)
        x = jnp.where(x < kth, -jnp.inf, x)
    if s.nucleus:
        srt = jnp.sort(x, axis=-1)[..., ::-1]
        probs = jnp.exp(srt - jax.nn.logsumexp(x, axis=-1, keepdims=True))
        before = jnp.cumsum(probs, axis=-1) - probs  # mass strictly above each sorted id
        cutoff = jnp.min(jnp.where(before < s.top_p, srt, jnp.inf), axis=-1, keepdims=True)
        x = jnp.where(x < cutoff, -jnp.inf, x)
    return x


def _candidates(x: jax.Array, s: SamplingConfig):
    """The filter on the `CANDIDATES` largest ids of x [..., V]: (values [..., M]
    descending, their ids, keep [..., M], covered [...]). Where `covered`, the kept candidates
    are exactly the ids `_filter_sorted` keeps (the last candidate is dropped, so no kept id
    lies outside them); elsewhere the caller falls back to it."""
    v = x.shape[-1]
    m = min(v, CANDIDATES)
    vals, ids = jax.lax.top_k(x, m)  # [..., M]
    keep = jnp.ones(vals.shape, bool)
    lse = None
    covered = jnp.ones(vals.shape[:-1], bool)
    if s.use_top_k:
        keep = vals >= _kth(vals, s.top_k)
        if m < v:  # no id tied with the k-th lies past the candidates (k < M: else it may)
            covered = ~keep[..., -1] & (jnp.asarray(s.top_k) < m)
        lse = jax.nn.logsumexp(jnp.where(keep, vals, -jnp.inf), axis=-1, keepdims=True)
    if s.nucleus:
        if lse is None:
            lse = jax.nn.logsumexp(x, axis=-1, keepdims=True)
        probs = jnp.where(keep, jnp.exp(vals - lse), 0.0)
        before = jnp.cumsum(probs, axis=-1) - probs
        cutoff = jnp.min(
            jnp.where(keep & (before < s.top_p), vals, jnp.inf), axis=-1, keepdims=True
        )
        keep = keep & (vals >= cutoff)
        if not s.use_top_k and m < v:
            covered = ~keep[..., -1]  # the nucleus ends inside the candidates
    return vals, ids, keep, covered


def _unless_covered(covered: jax.Array, fast: jax.Array, full) -> jax.Array:
    """`full()` where some row is not `covered`, else `fast`: a `lax.cond`, so the fallback's
    sort runs only when needed. JAXTTS_SAMPLING_FALLBACK=where computes the fallback always
    instead (the same values), for accelerators where a conditional in the decode loop might
    cost a host round trip; on an H200 the two timed the same (RESULTS gpu-check-3)."""
    mode = os.environ.get("JAXTTS_SAMPLING_FALLBACK", "cond")
    if mode == "where":
        return full()
    if mode != "cond":
        raise ConfigError(f"JAXTTS_SAMPLING_FALLBACK: {mode!r}: expected 'cond' or 'where'")
    return jax.lax.cond(jnp.all(covered), lambda: fast, full)


def filter_logits(logits: jax.Array, s: SamplingConfig) -> jax.Array:
    """Temperature, top-k and top-p applied to logits [..., V] (removed ids -> -inf).

    The cutoff is found among the most likely ids (`_candidates`, no full sort); rows whose
    kept set does not fit there take the full sort (`_filter_sorted`, computed only when some
    row needs it). Either way a row's result is that of the full sort."""
    x = logits.astype(jnp.float32) / s.temperature
    if not s.use_top_k and not s.nucleus:
        return x
    vals, _, keep, covered = _candidates(x, s)
    thr = jnp.min(jnp.where(keep, vals, jnp.inf), axis=-1, keepdims=True)
    fast = jnp.where(x < thr, -jnp.inf, x)
    full = _unless_covered(covered, fast, lambda: _filter_sorted(x, s))
    return jnp.where(covered[..., None], fast, full)


def _inverse_cdf(x: jax.Array, u: jax.Array) -> jax.Array:
    """Index drawn from softmax(x) over the last axis (-inf = never) by inverting its CDF at
    u [...] in [0, 1): x [..., M] -> int32 [...]."""
    w = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))  # [..., M]
    c = jax.lax.associative_scan(jnp.add, w, axis=-1)
    idx = jnp.argmax(c > u[..., None] * c[..., -1:], axis=-1)
    # u * total can round up to total: then take the last id with mass
    last = w.shape[-1] - 1 - jnp.argmax(w[..., ::-1] > 0, axis=-1)
    return jnp.where(jnp.any(c > u[..., None] * c[..., -1:], axis=-1), idx, last).astype(jnp.int32)


def suppress_early_eos(
    logits: jax.Array, length: jax.Array, s: SamplingConfig, eos: int
) -> jax.Array:
    """logits [B, C, V] of the next C tokens of rows that have `length` [B] tokens: EOS is
    removed where the token's index would be < s.min_tokens."""
    if s.min_tokens <= 0:
        return logits
    idx = length[:, None] + jnp.arange(logits.shape[1])[None]  # [B, C]
    early = (idx < s.min_tokens)[..., None] & (jnp.arange(logits.shape[-1]) == eos)
    return jnp.where(early, -jnp.inf, logits)


def sample_tokens(keys: jax.Array, logits: jax.Array, s: SamplingConfig) -> jax.Array:
    """keys [B] PRNG keys, logits [B, C, V] -> int32 [B, C] (one independent draw per slot).

    Slot i of row b draws ONE uniform with fold_in(keys[b], i) and inverts the CDF of the
    filtered distribution: over the kept candidates in descending order (`_candidates`), or,
    for a row whose kept set does not fit them, over the full filtered vocabulary in id order.
    No sort of the vocabulary and no V random numbers per token. A slot's draw does not depend
    on how many slots the step samples (DCAR sampling K heads and keeping c tokens then equals
    car:c sampling c), nor on the other rows (the fallback is chosen per row)."""
    if s.greedy:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    b, c = logits.shape[:2]
    u = jax.vmap(
        lambda key: jax.vmap(lambda i: jax.random.uniform(jax.random.fold_in(key, i)))(
            jnp.arange(c)
        )
    )(keys)  # [B, C]
    x = logits.astype(jnp.float32) / s.temperature
    if not s.use_top_k and not s.nucleus:
        return _inverse_cdf(x, u)
    vals, ids, keep, covered = _candidates(x, s)
    pick = _inverse_cdf(jnp.where(keep, vals, -jnp.inf), u)  # [B, C] index into candidates
    fast = jnp.take_along_axis(ids, pick[..., None], axis=-1)[..., 0].astype(jnp.int32)
    full = _unless_covered(covered, fast, lambda: _inverse_cdf(_filter_sorted(x, s), u))
    return jnp.where(covered, fast, full)


def step_keys(keys: jax.Array, step: jax.Array) -> jax.Array:
    """Per-row keys for decoding step `step` (one for all rows, or int [B]: each row's own
    step count, so that a row's draws do not depend on when it joined a batch):
    fold_in(row key, step)."""
    step = jnp.broadcast_to(jnp.asarray(step, jnp.uint32), keys.shape)
    return jax.vmap(jax.random.fold_in)(keys, step)


def row_keys(seed: int, row_ids: np.ndarray | list[int]) -> jax.Array:
    """One PRNG key per row from (seed, row id): independent of batch composition."""
    base = jax.random.key(seed)
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.asarray(row_ids, jnp.uint32))
