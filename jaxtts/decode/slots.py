"""Continuous batching: a decode over a fixed number of rows ("slots") that rows join and leave
between segments, for a server that owns the device (`jaxtts.serve`).

    slots = Slots(strategy, models, params, num_slots=8, text_width=320, prompt_width=50,
                  prompt_example=units, max_new_tokens=500, sampling=sampling)
    slots.insert(i, batch1, key1)      # prefill one row (a 1-row PromptBatch) into slot i
    slots.advance(4)                   # every occupied slot takes up to 4 more steps
    length, tokens, done = slots.read()
    slots.free(i)                      # the slot stops decoding; a later insert reuses it

Shapes never change after the first call of each program (the prefill of one row at each of
`prefill_widths`, all compiled at construction; insert; advance), whatever joins or leaves:
nothing recompiles while serving.

A row's tokens do not depend on the other slots or on when it joined: the strategies draw a
row's step-t sample from fold_in(row key, the row's own step count `DecodeState.steps`), every
per-row quantity (cache lengths, done, length) is the row's own, and attention reads only a
row's own valid slots. So a request decoded here gives the tokens of the offline decode of
the same row (tests/test_serve.py checks it against `Synthesizer.synthesize`).

A request is prefilled at the narrowest text width of `prefill_widths` (steps of
`prefill_bucket`, every one compiled at construction) that holds its text, and its caches are
widened to the slots' `text_width` (the driver's split prefill): a short text does not pay a
prefill over the longest one's width.

What it costs: the slots' caches are allocated at the full budget (text_width + the speech
budget) from the start, so every step attends over the whole budget of every slot, where the
offline decode grows its cache window by window (`Strategy.windows`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxtts.decode.driver import (
    DecodeState,
    PromptBatch,
    Strategy,
    loop_body,
    start_state,
)
from jaxtts.decode.sampling import SamplingConfig

__all__ = ["Slots"]


@functools.partial(jax.jit, donate_argnames=("state", "keys"))
def _insert(state: DecodeState, keys: jax.Array, row: DecodeState, key: jax.Array, slot):
    """Slot `slot` of `state` / `keys` <- the one-row `row` / `key` (scalars: the batch's)."""

    def put(big, one):
        if big.ndim == 0:  # the loop counter: the batch's own
            return big
        return jax.lax.dynamic_update_index_in_dim(big, one[0].astype(big.dtype), slot, 0)

    return jax.tree.map(put, state, row), jax.lax.dynamic_update_index_in_dim(keys, key[0], slot, 0)


@functools.partial(jax.jit, donate_argnames=("state",))
def _free(state: DecodeState, slot) -> DecodeState:
    return state.replace(done=state.done.at[slot].set(True))


@functools.partial(
    jax.jit, static_argnames=("strategy", "models", "max_new_tokens"), donate_argnames=("state",)
)
def _advance(state, params, keys, num_steps, *, strategy, models, max_new_tokens, sampling):
    """Up to `num_steps` loop steps while some slot is decoding (no overall step budget: rows
    end by EOS or their length cap, and the loop counter runs on across requests)."""
    models = dict(models)
    stop = state.step + num_steps
    body = loop_body(strategy, models, params, keys, sampling, max_new_tokens)
    return jax.lax.while_loop(lambda s: ~jnp.all(s.done) & (s.step < stop), body, state)


class Slots:
    """`num_slots` rows of one strategy's decode (see the module docstring)."""

    def __init__(
        self,
        strategy: Strategy,
        models,
        params,
        *,
        num_slots: int,
        text_width: int,
        prompt_width: int,
        prompt_example: np.ndarray,
        max_new_tokens: int,
        sampling: SamplingConfig,
        prefill_bucket: int = 64,
    ):
        self.strategy = strategy.bind(models)
        self.strategy.check(models)
        self.models = tuple(sorted(models.items()))
        self.params = dict(params)
        self.num_slots, self.text_width, self.prompt_width = num_slots, text_width, prompt_width
        self.max_new_tokens = int(max_new_tokens)
        self.sampling = sampling.traced()
        unit = np.asarray(prompt_example)
        self._prompt_tail = unit.shape[1:]  # [] tokens, [M] frames
        self._prompt_dtype = unit.dtype
        # every slot free: a prefill of one-id rows, marked done (an insert overwrites a slot)
        empty = self.batch([(np.ones((1,), np.int32), unit[:0], 0)] * num_slots)
        self.state = self._start(empty)
        self.state = self.state.replace(done=jnp.ones((num_slots,), bool))
        # a request's prefill runs at the narrowest of these text widths that holds it (the
        # driver's split prefill: its caches widened to `text_width`), each compiled here
        step = max(1, int(prefill_bucket))
        self.prefill_widths = (*range(step, text_width, step), text_width)
        for w in self.prefill_widths:
            self._start(self.batch([(np.ones((1,), np.int32), unit[:0], 0)], w))
        self.keys = jax.random.split(jax.random.key(0), num_slots)  # free slots' (overwritten)
        # committed to the device like every later state (jit outputs are): one signature,
        # so the first insert / advance compile what every later call runs
        self.state, self.keys = jax.device_put((self.state, self.keys), jax.devices()[0])

    def batch(self, rows, text_width: int | None = None) -> PromptBatch:
        """Rows (text ids, prompt units, prompt transcript length) -> a PromptBatch at the
        slots' widths (ValueError for a row that does not fit them); text_width: the text
        padded to that width only, for the split prefill into the slots' width."""
        b = len(rows)
        text = np.zeros((b, text_width or self.text_width), np.int32)
        prompt = np.zeros((b, self.prompt_width, *self._prompt_tail), self._prompt_dtype)
        text_len, prompt_len, ptext = (np.zeros((b,), np.int32) for _ in range(3))
        for k, (ids, unit, n_ptext) in enumerate(rows):
            if ids.size > text.shape[1] or len(unit) > self.prompt_width:
                raise ValueError(
                    f"row of {ids.size} text ids / {len(unit)} prompt units: the slots hold "
                    f"{self.text_width} / {self.prompt_width}"
                )
            text[k, : ids.size], text_len[k] = ids, ids.size
            prompt[k, : len(unit)], prompt_len[k] = unit, len(unit)
            ptext[k] = n_ptext
        return PromptBatch(text, text_len, prompt, prompt_len, ptext, text_width=self.text_width)

    def _start(self, batch: PromptBatch) -> DecodeState:
        return start_state(
            self.params,
            batch,
            strategy=self.strategy,
            models=self.models,
            max_new_tokens=self.max_new_tokens,
        )

    def insert(self, slot: int, row: tuple, key: jax.Array) -> None:
        """Prefill `row` (text ids, prompt units, prompt transcript length) into `slot`, with
        its PRNG key [1] (`row_keys`)."""
        n = row[0].size
        width = min([w for w in self.prefill_widths if w >= n], default=self.text_width)
        one = self._start(self.batch([row], width))
        self.state, self.keys = _insert(self.state, self.keys, one, key, jnp.int32(slot))

    def free(self, slot: int) -> None:
        """Stop decoding `slot` (its row ended, or its client left)."""
        self.state = _free(self.state, jnp.int32(slot))

    def advance(self, num_steps: int) -> None:
        self.state = _advance(
            self.state,
            self.params,
            self.keys,
            jnp.asarray(num_steps, jnp.int32),
            strategy=self.strategy,
            models=self.models,
            max_new_tokens=self.max_new_tokens,
            sampling=self.sampling,
        )

    def read(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(length [S], tokens [S, N + C], done [S], steps [S]) on the host."""
        s = self.state
        return tuple(np.asarray(x) for x in jax.device_get((s.length, s.tokens, s.done, s.steps)))
