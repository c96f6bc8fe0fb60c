"""The generic decoding driver: ONE jitted `lax.while_loop` for every autoregressive strategy.

A strategy (`Strategy`) is three small functions over named models and their parameters
(`models = {"target": TTSLM(cfg)}`, later also `"draft"`, `"policy"`; `params` the same keys):

    init(models, params, batch, max_new_tokens) -> carry   # prefill caches etc.
    step(models, params, state, keys, sampling) -> Proposal(tokens [B, C], count [B], carry)
    finish(models, state) -> {name: array}                 # strategy statistics (optional)

The driver owns what every strategy shares (`DecodeState`): the generated-token buffer, each
row's length, done / hit_max flags, per-row step counts and the loop counter. After each step
it *commits* the proposal (`commit`): row b takes the first `count[b]` proposed tokens, cut at
the first EOS among them and at `max_new_tokens`; finished rows stay unchanged. The strategy's
own carry (KV caches, hidden states, a policy's cache) must already reflect what the row took:
a per-row dynamic chunk extends by the largest chunk and rolls each row back to its own
(`jaxtts.methods.lm.strategies.extend_rows`).

Growing caches: a KV buffer sized for the prompt plus the whole generation budget makes every
step attend over (and stream from memory) slots that are still empty. A strategy may list
growing `windows` (buffer sizes, e.g. 128, 256, 512 speech slots, the last one the whole
budget); the driver then runs one `while_loop` per window, `resize`s the strategy's carry
(pads its caches) between them, and leaves a window when `window_fits` says the next step of
some active row would not fit. Attention cost then follows the valid length (a 5 s utterance
does not pay for a 12 s budget at every step); results equal a single full-size buffer's,
since empty slots are masked to exact zeros. Each window is one more compiled loop body.

    out = decode(registry.get("car:3"), {"target": model}, {"target": params}, batch, keys,
                 max_new_tokens=600, sampling=SamplingConfig(greedy=True))

Split prefill: a batch with a `text_width` (`PromptBatch`; >= its text's width) is prefilled
at its own width in one program and decoded in another, compiled per `text_width`, after the
strategy's caches are widened (`Strategy.widen_text`: empty, masked text slots inserted). A
prefill is one forward over all its positions, so padding the text to 64 symbols where 8 would
do computes up to 56 positions for nothing; compiling the loop per 8 symbols would cost a
loop compile per width. `jaxtts.synthesize` pads to 8 for the prefill and to 64 for the loop.

Resumable decoding (`start` / `advance` / `output`): the same loop in segments of a bounded
number of steps, the `DecodeState` (KV caches included) handed back between them and donated to
the next segment, so a caller can stream tokens as they come or add work between segments
(a server's scheduler). It runs at the full-budget cache size from the start (one compiled
segment for every segment length: the step bound is traced) and gives the same tokens as one
`decode` call, however the steps are cut (`tests/test_lm.py::test_segments_equal_one_call`).

    st = start(strategy, models, params, batch, max_new_tokens=600)
    while not st.all_done():
        st = advance(st, params, keys, num_steps=8, sampling=sampling)
        ...  # st.state.tokens[:, :st.state.length] are final
    out = output(st)

Axis letters: B batch, X text, P prompt, N generated tokens, C tokens proposed per step.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp

from jaxtts.decode.sampling import Sampling, SamplingConfig
from jaxtts.nn.attention import write_rows

Models = Mapping[str, nn.Module]
Params = Mapping[str, Any]


@flax.struct.dataclass
class PromptBatch:
    """B rows of text ids and speaker prompts, each with its own length."""

    text: jax.Array  # int32 [B, X] prompt transcript + target text ids, 0-padded
    text_len: jax.Array  # int32 [B]
    prompt: jax.Array  # [B, P, ...] speech prompt (tokens [B, P] or frames [B, P, M]), padded
    prompt_len: jax.Array  # int32 [B] (0 = no prompt)
    # int32 [B]: how many of `text`'s first ids are the prompt's transcript (families that
    # estimate the output length from the prompt's speaking rate read it; None = unknown)
    prompt_text_len: jax.Array | None = None
    # the text width the decoding loop is compiled for (>= X), or None: one program for the
    # prefill and the loop at width X. Set: `decode` prefills at width X in one program and
    # widens the caches to this width for a loop compiled per `text_width` (split prefill)
    text_width: int | None = flax.struct.field(pytree_node=False, default=None)

    @property
    def batch_size(self) -> int:
        return self.text.shape[0]


@flax.struct.dataclass
class DecodeState:
    """The loop carry: what the driver tracks for every strategy, plus the strategy's own."""

    tokens: jax.Array  # int32 [B, N + C] generated tokens (valid < length)
    length: jax.Array  # int32 [B]
    done: jax.Array  # bool [B]
    hit_max: jax.Array  # bool [B] stopped by the length cap, not by EOS
    steps: jax.Array  # int32 [B] loop steps while the row was active
    step: jax.Array  # int32 [] loop iteration
    carry: Any  # the strategy's state (pytree)


@flax.struct.dataclass
class Proposal:
    """One step's result: row b takes the first count[b] of its proposed tokens."""

    tokens: jax.Array  # int32 [B, C]
    count: jax.Array  # int32 [B], 1 <= count <= C
    carry: Any  # the strategy's new state, consistent with `count`


@flax.struct.dataclass
class DecodeOutput:
    tokens: jax.Array  # int32 [B, N] generated tokens, -1 past `length`
    length: jax.Array  # int32 [B]
    steps: jax.Array  # int32 [B] decoding steps (model forwards after prefill) of the row
    hit_max: jax.Array  # bool [B] stopped by the length cap, not by EOS
    num_forwards: jax.Array  # int32 [] loop iterations of the batch (forwards after prefill)
    stats: dict  # strategy statistics (`Strategy.finish`), name -> array


class Strategy(abc.ABC):
    """A decoding strategy. Subclasses are frozen dataclasses (hashable: static under jit)."""

    name: str
    max_chunk: int  # most tokens a row can take in one step (token-buffer headroom)

    def bind(self, models: Models) -> Strategy:
        """This strategy with what it reads from the models filled in (e.g. K, the number of
        heads, as `max_chunk`); called by `decode` before `check`."""
        return self

    def check(self, models: Models) -> None:  # noqa: B027 - optional hook
        """Raise ConfigError if the strategy cannot run on these models."""

    def max_steps(self, max_new_tokens: int) -> int:
        """Loop bound (every active row takes >= 1 token a step)."""
        return max_new_tokens

    def windows(
        self, models: Models, batch: PromptBatch, max_new_tokens: int
    ) -> tuple[int | None, ...]:
        """Growing cache sizes, one loop segment each (static); default one segment."""
        return (None,)

    def resize(self, models: Models, carry: Any, window: int | None) -> Any:
        """The carry with its caches grown to `window` (called before every segment but the
        first)."""
        return carry

    def window_fits(self, state: DecodeState, window: int | None) -> jax.Array:
        """Whether the next step of every active row fits in `window`."""
        return jnp.asarray(True)

    @abc.abstractmethod
    def eos(self, models: Models) -> int:
        """The end-of-speech token id."""

    @abc.abstractmethod
    def init(self, models: Models, params: Params, batch: PromptBatch, max_new_tokens: int) -> Any:
        """The strategy's initial carry (e.g. prefilled KV caches)."""

    @abc.abstractmethod
    def step(
        self,
        models: Models,
        params: Params,
        state: DecodeState,
        keys: jax.Array,
        sampling: SamplingConfig,
    ) -> Proposal:
        """Propose tokens for every row (finished rows are ignored by `commit`)."""

    def finish(self, models: Models, state: DecodeState) -> dict:
        """Strategy statistics for `DecodeOutput.stats`."""
        return {}

    def widen_text(self, models: Models, carry: Any, text_width: int) -> Any:
        """The `init` carry of a prefill at a narrower text width, laid out for `text_width`
        (see `decode`'s split prefill). Default: every node of the carry with a
        `widen_text(width)` method (`jaxtts.methods.lm.KVCache`, TLDR's text memory) widened;
        a strategy whose carry holds other text-width-dependent arrays must override it."""
        return jax.tree.map(
            lambda c: c.widen_text(text_width) if hasattr(c, "widen_text") else c,
            carry,
            is_leaf=lambda c: hasattr(c, "widen_text"),
        )


def commit(state: DecodeState, prop: Proposal, max_new_tokens: int, eos: int) -> DecodeState:
    """Append each active row's first `count` proposed tokens, cut at the first EOS among them
    (an EOS ends the row) and at `max_new_tokens`."""
    toks, count = prop.tokens, prop.count  # [B, C], [B]
    within = jnp.arange(toks.shape[1])[None] < count[:, None]  # [B, C]
    is_eos = (toks == eos) & within
    has_eos = is_eos.any(axis=1)  # [B]
    n_eos = jnp.where(has_eos, jnp.argmax(is_eos, axis=1), count).astype(jnp.int32)
    active = ~state.done
    n_acc = jnp.minimum(n_eos, max_new_tokens - state.length)
    tokens = jnp.where(active[:, None], write_rows(state.tokens, toks, state.length), state.tokens)
    length = state.length + jnp.where(active, n_acc, 0)
    hit_max = state.hit_max | (active & ~has_eos & (length >= max_new_tokens))
    done = state.done | has_eos | (length >= max_new_tokens)
    return DecodeState(
        tokens=tokens,
        length=length,
        done=done,
        hit_max=hit_max,
        steps=state.steps + active.astype(jnp.int32),
        step=state.step + 1,
        carry=prop.carry,
    )


def _initial_state(strategy, models, params, batch: PromptBatch, max_new_tokens, carry=None):
    """The loop state before the first step: nothing generated, the strategy's `init` carry."""
    b = batch.batch_size
    if carry is None:
        carry = strategy.init(models, params, batch, max_new_tokens)
    return DecodeState(
        tokens=jnp.full((b, max_new_tokens + strategy.max_chunk), -1, jnp.int32),
        length=jnp.zeros((b,), jnp.int32),
        done=jnp.zeros((b,), bool),
        hit_max=jnp.zeros((b,), bool),
        steps=jnp.zeros((b,), jnp.int32),
        step=jnp.zeros((), jnp.int32),
        carry=carry,
    )


def loop_body(strategy, models, params, keys, sampling, max_new_tokens):
    """The `lax.while_loop` body of every decode (a step of `strategy`, committed): public for
    drivers that run the loop their own way (`jaxtts.decode.slots`)."""
    eos = strategy.eos(models)

    def body(s: DecodeState) -> DecodeState:
        return commit(s, strategy.step(models, params, s, keys, sampling), max_new_tokens, eos)

    return body


def _output(strategy, models, state: DecodeState, max_new_tokens) -> DecodeOutput:
    idx = jnp.arange(max_new_tokens)[None]
    tokens = jnp.where(idx < state.length[:, None], state.tokens[:, :max_new_tokens], -1)
    return DecodeOutput(
        tokens=tokens,
        length=state.length,
        steps=state.steps,
        hit_max=state.hit_max,
        num_forwards=state.step,
        stats=strategy.finish(models, state),
    )


def _run_windows(strategy, models, params, keys, sampling, max_new_tokens, state, windows):
    """The decoding loop from `state`: one `while_loop` per cache window."""
    max_steps = strategy.max_steps(max_new_tokens)
    body = loop_body(strategy, models, params, keys, sampling, max_new_tokens)
    for i, window in enumerate(windows):
        if i:
            state = state.replace(carry=strategy.resize(models, state.carry, window))

        def cond(s: DecodeState, window=window):
            return ~jnp.all(s.done) & (s.step < max_steps) & strategy.window_fits(s, window)

        state = jax.lax.while_loop(cond, body, state)
    return state


@functools.partial(jax.jit, static_argnames=("strategy", "models", "max_new_tokens"))
def _decode(
    params,
    batch: PromptBatch,
    keys: jax.Array,
    *,
    strategy: Strategy,
    models: tuple,
    max_new_tokens: int,
    sampling: Sampling,
) -> DecodeOutput:
    models = dict(models)
    state = _initial_state(strategy, models, params, batch, max_new_tokens)
    windows = strategy.windows(models, batch, max_new_tokens)
    state = _run_windows(strategy, models, params, keys, sampling, max_new_tokens, state, windows)
    return _output(strategy, models, state, max_new_tokens)


@functools.partial(jax.jit, static_argnames=("strategy", "models", "max_new_tokens", "text_width"))
def _prefill(params, batch: PromptBatch, *, strategy, models, max_new_tokens, text_width):
    """Split prefill, part 1: the strategy's `init` at the batch's own text width, its carry
    widened to `text_width` (one compiled program per narrow width; a forward, cheap)."""
    models = dict(models)
    carry = strategy.init(models, params, batch, max_new_tokens)
    carry = strategy.widen_text(models, carry, text_width)
    return _initial_state(strategy, models, params, batch, max_new_tokens, carry)


@functools.partial(jax.jit, static_argnames=("strategy", "models", "max_new_tokens", "windows"))
def _loop(
    state: DecodeState,
    params,
    keys: jax.Array,
    *,
    strategy,
    models,
    max_new_tokens,
    windows,
    sampling: Sampling,
) -> DecodeOutput:
    """Split prefill, part 2: the decoding loop, compiled once per `text_width`."""
    models = dict(models)
    state = _run_windows(strategy, models, params, keys, sampling, max_new_tokens, state, windows)
    return _output(strategy, models, state, max_new_tokens)


def decode(
    strategy: Strategy,
    models: Models,
    params: Params,
    batch: PromptBatch,
    keys: jax.Array,
    *,
    max_new_tokens: int,
    sampling: SamplingConfig,
) -> DecodeOutput:
    """Run `strategy` on a batch (jitted per strategy, models, lengths and sampling).

    keys: [B] per-row PRNG keys (`jaxtts.decode.sampling.row_keys`).

    Split prefill: with `batch.text_width` set (>= the batch's text width; e.g. text padded to
    a multiple of 8 and `text_width` to a multiple of 64), the prefill runs as its own program
    at the narrow width, so it computes no more padded positions than that, and its caches
    are widened (empty, masked slots inserted after the text) for a loop compiled once per
    `text_width`: many narrow widths share one compiled loop. The tokens equal those of the
    batch padded to `text_width` up to the prefill's float rounding (sums over a different
    number of masked keys; `tests/test_lm.py::test_split_prefill_*`).
    """
    strategy = strategy.bind(models)
    strategy.check(models)
    # temperature and top_p are traced values: changing them reuses the compiled loop
    sampling = sampling.traced()
    models_t = tuple(sorted(models.items()))
    x, width = batch.text.shape[1], batch.text_width
    if width is not None and width < x:
        raise ValueError(f"PromptBatch.text_width={width}: expected >= the text width {x}")
    if width is not None:  # the split prefill (also at width == x: the loop is shared)
        state = _prefill(
            dict(params),
            batch,
            strategy=strategy,
            models=models_t,
            max_new_tokens=int(max_new_tokens),
            text_width=int(width),
        )
        windows = tuple(strategy.windows(models, batch, int(max_new_tokens)))
        return _loop(
            state,
            dict(params),
            keys,
            strategy=strategy,
            models=models_t,
            max_new_tokens=int(max_new_tokens),
            windows=windows,
            sampling=sampling,
        )
    return _decode(
        dict(params),
        batch,
        keys,
        strategy=strategy,
        models=models_t,
        max_new_tokens=int(max_new_tokens),
        sampling=sampling,
    )


# ----------------------------------------------------------------------------- resumable


@flax.struct.dataclass
class Resumable:
    """A decode in progress: the loop state plus what it was started with (static)."""

    state: DecodeState
    strategy: Strategy = flax.struct.field(pytree_node=False)
    models: tuple = flax.struct.field(pytree_node=False)
    max_new_tokens: int = flax.struct.field(pytree_node=False)

    def all_done(self) -> bool:
        """Every row has ended (EOS or the length cap), or the step budget is spent."""
        max_steps = self.strategy.max_steps(self.max_new_tokens)
        return bool(jnp.all(self.state.done)) or int(self.state.step) >= max_steps


@functools.partial(jax.jit, static_argnames=("strategy", "models", "max_new_tokens"))
def start_state(params, batch: PromptBatch, *, strategy, models, max_new_tokens) -> DecodeState:
    """The prefilled loop state of `batch` (jitted; `models` as a sorted tuple), its caches at
    the full budget: what `start` and `jaxtts.decode.slots` begin from."""
    models = dict(models)
    carry = strategy.init(models, params, batch, max_new_tokens)
    if batch.text_width is not None:
        carry = strategy.widen_text(models, carry, batch.text_width)  # as in `decode`
    windows = strategy.windows(models, batch, max_new_tokens)
    if len(windows) > 1:  # segments run at the full budget: one shape for every segment
        carry = strategy.resize(models, carry, windows[-1])
    return _initial_state(strategy, models, params, batch, max_new_tokens, carry)


@functools.partial(
    jax.jit, static_argnames=("strategy", "models", "max_new_tokens"), donate_argnames=("state",)
)
def _advance(
    state: DecodeState,
    params,
    keys: jax.Array,
    num_steps: jax.Array,
    *,
    strategy,
    models,
    max_new_tokens,
    sampling: Sampling,
) -> DecodeState:
    models = dict(models)
    max_steps = strategy.max_steps(max_new_tokens)
    stop = state.step + num_steps

    def cond(s: DecodeState):
        return ~jnp.all(s.done) & (s.step < max_steps) & (s.step < stop)

    body = loop_body(strategy, models, params, keys, sampling, max_new_tokens)
    return jax.lax.while_loop(cond, body, state)


def start(
    strategy: Strategy,
    models: Models,
    params: Params,
    batch: PromptBatch,
    *,
    max_new_tokens: int,
) -> Resumable:
    """Prefill and return the state of a decode that `advance` runs segment by segment."""
    strategy = strategy.bind(models)
    strategy.check(models)
    models_t = tuple(sorted(models.items()))
    state = start_state(
        dict(params), batch, strategy=strategy, models=models_t, max_new_tokens=int(max_new_tokens)
    )
    return Resumable(state, strategy, models_t, int(max_new_tokens))


def advance(
    run: Resumable, params: Params, keys: jax.Array, *, num_steps: int, sampling: SamplingConfig
) -> Resumable:
    """Run up to `num_steps` more loop steps (fewer when every row ends). `run.state` is
    donated: use the returned one."""
    state = _advance(
        run.state,
        dict(params),
        keys,
        jnp.asarray(num_steps, jnp.int32),
        strategy=run.strategy,
        models=run.models,
        max_new_tokens=run.max_new_tokens,
        sampling=sampling.traced(),
    )
    return run.replace(state=state)


def output(run: Resumable) -> DecodeOutput:
    """The `DecodeOutput` of a (finished or not) resumable decode, as `decode` returns it."""
    return _output(run.strategy, dict(run.models), run.state, run.max_new_tokens)
