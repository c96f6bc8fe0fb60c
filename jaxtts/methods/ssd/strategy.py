r"""`ssd`: speech speculative decoding (docs/methods/ssd.md, Algorithm 1 of the SSD paper) for
the generic decode driver. models {"target": TTSLM, "draft": TTSLM (a shallower model made
from the target's own layers, `jaxtts.methods.ssd.draft`)}.

One step, every row at once (L = draft length, beta = tolerance):
1. the draft proposes x_1..x_L autoregressively, x_i ~ p_i (L draft forwards of one token;
   the first also appends the row's pending tokens, see below);
2. the target scores [y, x_1..x_L] in ONE forward (y = the row's last committed token, not
   yet in its cache), giving q_1..q_{L+1} (q_i the distribution of x_i);
3. `verify`: accept x_i while r_i < min(1, q_i(x_i) / p_i(x_i)) + beta (r_i ~ U[0, 1]); at
   the first rejection draw the row's last token from normalize(max(0, q_i - p_i)) and stop;
   if all L are accepted draw a bonus token from q_{L+1}. The row takes n + 1 tokens;
4. per-row rollback: the target cache keeps y and the n accepted drafts; the draft cache
   keeps what it saw of them (when all L were accepted it has not seen x_L yet: x_L joins
   the next step's pending tokens). The drawn token becomes the row's pending token.

Sampling settings (temperature, top-k/top-p, early-EOS suppression) shape p and q alike, so
beta = 0 samples exactly the filtered target distribution (tested statistically). Greedy:
accept x_i iff it is the target's argmax, then the target's argmax: exactly greedy FAR.

The prefill leaves each row's last speech-prompt input (BOS or the last prompt token) out of
both caches: it is the first pending token, so every step has the same shape.

Cost (batch 1 on a CPU, docs/history/deep.md §ssd-windows): both caches grow window by window as
FAR's do (`cache_windows`), so the draft's and the verify's attention follow the valid length rather
than the 12 s budget; the target holds its keys transposed for the verify's L + 1 query rows
(`multi_row_keys`); the prefill computes its last layer at one row (its hidden states are not
read). The windows give the tokens of full-size caches exactly (tested); the transposed keys
change only the logits' float rounding (greedy SSD still equals greedy FAR, tested).

Axis letters: B batch, L draft length, V vocabulary.
"""

from __future__ import annotations

import dataclasses

import flax.struct
import jax
import jax.numpy as jnp

from jaxtts.decode.driver import Proposal, Strategy
from jaxtts.decode.sampling import filter_logits, step_keys, suppress_early_eos
from jaxtts.errors import ConfigError
from jaxtts.methods.lm import KVCache, with_bos
from jaxtts.methods.lm.strategies import ChunkedAR, cache_windows, multi_row_keys, window_fits


@flax.struct.dataclass
class SSDCarry:
    target: KVCache
    draft: KVCache
    pending: jax.Array  # int32 [B, 2] tokens committed but not in the draft cache (first n)
    n_pending: jax.Array  # int32 [B] 1 or 2
    accepted: jax.Array  # int32 [B] accepted draft tokens so far
    proposed: jax.Array  # int32 [B] proposed draft tokens so far
    history: jax.Array  # int32 [B, S] accepted drafts at each step (S = 1 unless recording)
    # int32 [B] accepted drafts the target gives probability 0 after its top-p / top-k filter:
    # only the tolerance beta let them in (always 0 at beta = 0)
    outside: jax.Array


def probs_of(logits: jax.Array, sampling) -> jax.Array:
    """The sampling distribution float32 [..., V] (filtered; one-hot argmax when greedy)."""
    if sampling.greedy:
        return jax.nn.one_hot(jnp.argmax(logits, -1), logits.shape[-1], dtype=jnp.float32)
    return jax.nn.softmax(filter_logits(logits, sampling), axis=-1)


def log_of(p: jax.Array) -> jax.Array:
    """log p with exact zeros -> -inf (never drawn). The log's input is clamped to the
    smallest *normal* float: XLA's CPU log of 0, or of a subnormal (flushed to zero in compiled
    code), gave NaN under jax 0.11, and a NaN logit wins the categorical's argmax."""
    return jnp.where(p > 0, jnp.log(jnp.maximum(p, jnp.finfo(p.dtype).tiny)), -jnp.inf)


def residual(q: jax.Array, p: jax.Array) -> jax.Array:
    """normalize(max(0, q - p)) of one row [V]; q itself where q <= p everywhere."""
    r = jnp.maximum(q - p, 0.0)  # [V]
    z = jnp.sum(r)
    return jnp.where(z > 0, r / jnp.where(z > 0, z, 1.0), q)


def verify(
    x: jax.Array,
    p: jax.Array,
    q: jax.Array,
    u: jax.Array,
    beta: float,
    key: jax.Array,
    greedy: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """One row's acceptance (vmap it for a batch).

    x int [L] drafted tokens, p [L, V] their draft distributions, q [L + 1, V] the target's,
    u [L] uniforms, key for the final draw. -> (n accepted, the final token: the residual
    resample at the first rejection, or the bonus from q[L])."""
    L = x.shape[0]
    rows = jnp.arange(L)
    px, qx = p[rows, x], q[rows, x]  # [L]: each proposal's draft and target probability
    if greedy:
        ok = x == jnp.argmax(q[:L], axis=1)
    else:
        ok = u < jnp.minimum(1.0, qx / jnp.maximum(px, 1e-30)) + beta
    n = jnp.sum(jnp.cumprod(ok.astype(jnp.int32)))
    # rejected at n < L: the residual of q_n over p_n; all accepted: the bonus from q_L (p[n]
    # is then an index past the end, clamped by JAX, and its residual unused)
    dist = jnp.where(n < L, residual(q[n], p[n]), q[n])  # [V], a distribution either way
    if greedy:
        z = jnp.argmax(dist)
    else:
        z = jax.random.categorical(key, log_of(dist))
    return n.astype(jnp.int32), z.astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class SSD(Strategy):
    draft_len: int = 3
    beta: float = 0.0
    record: bool = False  # keep each step's accepted count (`stats['accepted_per_step']`)

    def __post_init__(self):
        if self.draft_len < 1:
            raise ConfigError(f"--strategy {self.name}: expected draft length L >= 1")
        if self.beta < 0:
            raise ConfigError(f"--strategy {self.name}: expected tolerance beta >= 0")

    @property
    def name(self) -> str:
        return f"ssd:L={self.draft_len},beta={self.beta:g}"

    @property
    def max_chunk(self) -> int:
        return self.draft_len + 1

    def check(self, models) -> None:
        if "draft" not in models:
            raise ConfigError(
                "strategy ssd needs a draft model: load an SSD run "
                "(--workdir runs/ssd or pretrained/ssd_deep)"
            )
        t, d = models["target"].cfg, models["draft"].cfg
        for key in ("num_speech_tokens", "num_text_symbols", "d_model"):
            if getattr(t, key) != getattr(d, key):
                raise ConfigError(
                    f"strategy ssd: draft {key}={getattr(d, key)} but target "
                    f"{key}={getattr(t, key)}"
                )

    def eos(self, models) -> int:
        return models["target"].cfg.eos

    def _slots(self, batch, max_new_tokens) -> int:
        return batch.prompt.shape[1] + 2 + max_new_tokens + self.draft_len

    # Growing caches (`jaxtts.decode.driver`): both caches start at a window that holds the
    # prompt and grow window by window, so attention follows the valid length. A step extends
    # the target by L + 1 slots and the draft by at most 2 + (L - 1) = L + 1.
    def windows(self, models, batch, max_new_tokens):
        return cache_windows(
            batch.prompt.shape[1] + 1, self._slots(batch, max_new_tokens), self.draft_len + 1
        )

    def resize(self, models, carry, window):
        return carry.replace(target=carry.target.resize(window), draft=carry.draft.resize(window))

    def window_fits(self, state, window):
        c, n = state.carry, self.draft_len + 1
        return window_fits(c.target, state.done, n) & window_fits(c.draft, state.done, n)

    def init(self, models, params, batch, max_new_tokens):
        speech, speech_len = with_bos(batch.prompt, batch.prompt_len, models["target"].cfg)
        b, x = batch.text.shape
        first = self.windows(models, batch, max_new_tokens)[0]  # the caches grow from there
        slots = self._slots(batch, max_new_tokens) if first is None else first
        # the target's verify attends with L + 1 query rows: keys transposed where that is
        # faster (`multi_row_keys`); the draft's forwards are of one row (two at most)
        keys_t = {"target": multi_row_keys(self.draft_len + 1), "draft": False}
        # the prefill's hidden states are not read (the last input is pending): the last
        # layer is computed at one row only (`TTSLM.prefill`'s rows; the same cache)
        rows = jnp.maximum(speech_len - 2, 0)[:, None]  # [B, 1]
        caches = {}
        for name in ("target", "draft"):
            m, p = models[name], {"params": params[name]}
            cache = m.apply(p, b, x, slots, keys_t=keys_t[name], method="init_cache")
            # everything but the last speech input: it is the first pending token
            _, cache = m.apply(
                p,
                batch.text,
                batch.text_len,
                speech,
                speech_len - 1,
                cache,
                rows=rows,
                method="prefill",
            )
            caches[name] = cache
        last = jnp.take_along_axis(speech, (speech_len - 1)[:, None], 1)[:, 0]  # [B]
        pending = jnp.stack([last, last], 1).astype(jnp.int32)
        ones = jnp.ones((b,), jnp.int32)
        zeros = jnp.zeros((b,), jnp.int32)
        history = jnp.full((b, max_new_tokens if self.record else 1), -1, jnp.int32)
        return SSDCarry(
            caches["target"], caches["draft"], pending, ones, zeros, zeros, history, zeros
        )

    def step(self, models, params, state, keys, sampling):
        tm, dm = models["target"], models["draft"]
        tp, dp = {"params": params["target"]}, {"params": params["draft"]}
        c: SSDCarry = state.carry
        L, eos = self.draft_len, tm.cfg.eos
        k = step_keys(keys, state.steps)  # [B]
        fold = jax.vmap(jax.random.fold_in, in_axes=(0, None))

        # 1. draft: pending tokens (1 or 2 per row), then L - 1 more single-token forwards
        with jax.named_scope(
            "ssd_draft"
        ):  # profiles (benchmarks/diagnostics/step_parts.py) name the draft
            d_start = c.draft.speech_len
            h, dcache = dm.apply(dp, c.pending, c.draft, method="extend")  # [B, 2, D]
            dcache = dcache.rollback(d_start + c.n_pending)
            hd = jnp.take_along_axis(h, (c.n_pending - 1)[:, None, None], 1)[:, 0]  # [B, D]
            xs, ps = [], []
            for i in range(L):
                if i:  # the previous proposal joins the draft cache (L - 1 single-token forwards)
                    h1, dcache = dm.apply(dp, xs[-1][:, None], dcache, method="extend")
                    hd = h1[:, 0]  # [B, D]
                lg = dm.apply(dp, hd, method="base_logits")[:, None]  # [B, 1, V]
                lg = suppress_early_eos(lg, state.length + i, sampling, eos)[:, 0]
                p_i = probs_of(lg, sampling)  # [B, V]
                if sampling.greedy:
                    x_i = jnp.argmax(p_i, axis=1)  # [B]
                else:
                    x_i = jax.vmap(jax.random.categorical)(fold(k, i), log_of(p_i))
                x_i = x_i.astype(jnp.int32)
                xs.append(x_i)
                ps.append(p_i)
        x = jnp.stack(xs, 1)  # [B, L]
        p = jnp.stack(ps, 1)  # [B, L, V]

        # 2. target: [y, x_1..x_L] in one forward -> q_1..q_{L+1}
        t_start = c.target.speech_len
        y = jnp.take_along_axis(c.pending, (c.n_pending - 1)[:, None], 1)  # [B, 1]
        with jax.named_scope("ssd_verify"):
            ht, tcache = tm.apply(tp, jnp.concatenate([y, x], 1), c.target, method="extend")
            lq = tm.apply(tp, ht, method="base_logits")  # [B, L + 1, V]
        lq = suppress_early_eos(lq, state.length, sampling, eos)
        q = probs_of(lq, sampling)

        # 3. accept / resample / bonus, per row
        u = jax.vmap(lambda kk: jax.random.uniform(kk, (L,)))(fold(k, 1000))  # [B, L]
        n, z = jax.vmap(
            lambda x_, p_, q_, u_, k_: verify(x_, p_, q_, u_, self.beta, k_, sampling.greedy)
        )(x, p, q, u, fold(k, 2000))
        qx = jnp.take_along_axis(q[:, :L], x[..., None], -1)[..., 0]  # [B, L]
        outside = jnp.sum((qx == 0) & (jnp.arange(L)[None] < n[:, None]), 1)  # [B]
        j = jnp.arange(L + 1)[None]
        xpad = jnp.concatenate([x, x[:, -1:]], 1)
        tokens = jnp.where(j < n[:, None], xpad, z[:, None]).astype(jnp.int32)  # [B, L + 1]

        # 4. per-row rollback; the drawn token is pending for both models
        tcache = tcache.rollback(t_start + 1 + n)
        all_acc = n == L
        # the draft cache saw the pending tokens and x_1..x_{L-1}: keep the n accepted ones
        # (n = L keeps all it has, x_L is pending: a rollback never lengthens a cache)
        dcache = dcache.rollback(d_start + c.n_pending + n)
        pending = jnp.where(
            all_acc[:, None], jnp.stack([x[:, -1], z], 1), jnp.stack([z, z], 1)
        ).astype(jnp.int32)
        n_pending = jnp.where(all_acc, 2, 1).astype(jnp.int32)
        active = ~state.done
        carry = SSDCarry(
            tcache,
            dcache,
            pending,
            n_pending,
            c.accepted + jnp.where(active, n, 0),
            c.proposed + jnp.where(active, L, 0),
            c.history.at[:, state.step].set(jnp.where(active, n, -1)) if self.record else c.history,
            c.outside + jnp.where(active, outside, 0),
        )
        return Proposal(tokens=tokens, count=(n + 1).astype(jnp.int32), carry=carry)

    def finish(self, models, state):
        out = {
            "accepted_drafts": state.carry.accepted,
            "proposed_drafts": state.carry.proposed,
            "accepted_outside": state.carry.outside,
        }
        if self.record:
            out["accepted_per_step"] = state.carry.history  # [B, S], -1 after the row ended
        return out


def ssd(arg: str | None) -> SSD:
    """'ssd' | 'ssd:3' | 'ssd:L=3,beta=0.4' (also 'ssd:3,0.4')."""
    spec = f"ssd:{arg}" if arg else "ssd"
    vals = {"L": 3, "beta": 0.0}
    if arg:
        parts = [s.strip() for s in arg.split(",") if s.strip()]
        for i, part in enumerate(parts):
            key, eq, val = part.partition("=")
            if not eq:
                key, val = ("L", "beta")[min(i, 1)], part
            if key not in vals:
                raise ConfigError(f"--strategy {spec}: unknown key {key!r}, expected L, beta")
            try:
                vals[key] = int(val) if key == "L" else float(val)
            except ValueError:
                raise ConfigError(f"--strategy {spec}: {key}={val!r} is not a number") from None
    return SSD(vals["L"], vals["beta"])


@dataclasses.dataclass(frozen=True)
class Draft(ChunkedAR):
    """`draft`: FAR on the SSD draft alone (the SSD engine's `decode_models_for` hands the loop
    the draft as its `target`)."""

    chunk: int = 1

    @property
    def name(self) -> str:
        return "draft"


def draft(arg: str | None) -> Draft:
    if arg:
        raise ConfigError(f"--strategy draft:{arg}: 'draft' takes no argument")
    return Draft()
