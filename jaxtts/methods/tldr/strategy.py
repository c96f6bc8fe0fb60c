"""`tldr`: patch-level decoding for the generic decode driver (`jaxtts.decode.driver`).
models {"tldr": TLDRModel}; the backbone's KV cache grows by one slot per patch.

One step, every row at once:
1. the extractor generates the patch's P tokens autoregressively from the global context
   g_j (and the speaker embedding): its slots once, then P calls of one input each, with
   the self-attention keys / values of the patch's earlier inputs in a P-slot cache (causal,
   so each call's logits equal the full patch's at that position), each token
   sampled with the run's sampling settings (per-row keys folded with the step and the
   position, so batch-N == batch-1);
   with `ext_prev` = K the extractor's first input also sees the K tokens before the patch
   (the prompt's last ones, then the previous patch's), kept in the carry; with `ext_text`
   its first layer also reads the text memory (keys / values per symbol, from the prefill);
2. the compressor turns them into the patch vector z_j (its window reads the previous
   `window_patches` patches, kept in the carry), and ONE backbone forward appends z_j to the
   cache, giving g_{j+1}.
The driver keeps the tokens before the first EOS (an EOS anywhere in the patch ends the row).
Backbone forwards per row = ceil(T / P) for T generated tokens (+ the prefill).

Axis letters: B batch, P tokens per patch, NW window patches, V vocabulary.
"""

from __future__ import annotations

import dataclasses

import flax.struct
import jax
import jax.numpy as jnp

from jaxtts.decode.driver import Proposal, Strategy
from jaxtts.decode.sampling import sample_tokens, step_keys, suppress_early_eos
from jaxtts.errors import ConfigError
from jaxtts.methods.lm import KVCache, cache_windows, window_fits
from jaxtts.methods.tldr.model import TextMemory, prompt_tail


@flax.struct.dataclass
class TLDRCarry:
    cache: KVCache  # the backbone's, one speech slot per patch (BOS + prompt patches + ...)
    hidden: jax.Array  # float32 [B, D] g of the next patch
    speaker: jax.Array | None  # [B, E_s] speaker embedding (None without conditioning)
    win_tokens: jax.Array  # int32 [B, NW, P] the last NW patches (compressor window)
    win_valid: jax.Array  # bool [B, NW, P]
    prev: jax.Array  # int32 [B, K] the K = ext_prev stream tokens before the next patch
    text: TextMemory | None  # the extractor's text memory (ext_text), or None


@dataclasses.dataclass(frozen=True)
class TLDR(Strategy):
    patch: int = 0  # P, read from the model (`bind`)

    name = "tldr"

    @property
    def max_chunk(self) -> int:
        return max(self.patch, 1)

    def bind(self, models):
        if "tldr" not in models:
            return self
        return dataclasses.replace(self, patch=models["tldr"].cfg.patch)

    def check(self, models) -> None:
        if "tldr" not in models:
            raise ConfigError(
                "strategy tldr needs a TLDR run (--workdir runs/tldr or pretrained/tldr)"
            )

    def eos(self, models) -> int:
        return models["tldr"].cfg.eos

    def max_steps(self, max_new_tokens: int) -> int:
        return -(-max_new_tokens // self.patch)

    def _slots(self, batch, max_new_tokens: int) -> int:
        return 1 + -(-batch.prompt.shape[1] // self.patch) + self.max_steps(max_new_tokens)

    def windows(self, models, batch, max_new_tokens):
        first = 1 + -(-batch.prompt.shape[1] // self.patch)
        return cache_windows(first, self._slots(batch, max_new_tokens), 1)

    def resize(self, models, carry, window):
        return carry.replace(cache=carry.cache.resize(window))

    def window_fits(self, state, window):
        return window_fits(state.carry.cache, state.done, 1)

    def init(self, models, params, batch, max_new_tokens):
        m, p = models["tldr"], {"params": params["tldr"]}
        b, x = batch.text.shape
        cache = m.apply(
            p, b, x, self.windows(models, batch, max_new_tokens)[0], method="init_cache"
        )
        g, cache, s, win_t, win_v, text = m.apply(
            p, batch.text, batch.text_len, batch.prompt, batch.prompt_len, cache, method="prefill"
        )
        prev = prompt_tail(batch.prompt, batch.prompt_len, m.cfg)  # [B, K]
        return TLDRCarry(cache, g.astype(jnp.float32), s, win_t, win_v, prev, text)

    def step(self, models, params, state, keys, sampling):
        m, p = models["tldr"], {"params": params["tldr"]}
        c: TLDRCarry = state.carry
        cfg = m.cfg
        b, n = state.length.shape[0], self.patch
        k = step_keys(keys, state.steps)  # [B]
        slots = m.apply(p, c.hidden, c.speaker, method="extract_slots")  # [B, L, S, E]
        caches = m.apply(p, b, method="extract_caches")  # the patch's inputs so far
        tok = jnp.full((b, 1), cfg.start, jnp.int32)  # [B, 1] input i
        out = []
        for i in range(n):
            logits, caches = m.apply(
                p, slots, tok, caches, i, c.prev, c.text, method="extract_step"
            )
            logits = suppress_early_eos(logits[:, None], state.length + i, sampling, cfg.eos)
            ki = jax.vmap(lambda kk, i=i: jax.random.fold_in(kk, i))(k)
            tok = sample_tokens(ki, logits, sampling)  # [B, 1]
            out.append(tok)
        tokens = jnp.concatenate(out, axis=1)  # [B, P]
        hidden, cache = m.apply(p, c.win_tokens, c.win_valid, tokens, c.cache, method="extend")
        win_t, win_v = c.win_tokens, c.win_valid
        if win_t.shape[1]:  # slide the window by the new patch
            win_t = jnp.concatenate([win_t[:, 1:], tokens[:, None]], axis=1)
            win_v = jnp.concatenate([win_v[:, 1:], jnp.ones((b, 1, n), bool)], axis=1)
        prev = tokens[:, n - cfg.ext_prev :]  # [B, K]
        carry = c.replace(
            cache=cache,
            hidden=hidden.astype(jnp.float32),
            win_tokens=win_t,
            win_valid=win_v,
            prev=prev,
        )
        return Proposal(tokens=tokens, count=jnp.full((b,), n, jnp.int32), carry=carry)


def tldr(arg: str | None) -> TLDR:
    if arg is not None:
        raise ConfigError(
            f"--strategy tldr:{arg}: 'tldr' takes no argument (the patch size is the model's)"
        )
    return TLDR()
