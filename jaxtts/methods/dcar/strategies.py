"""`dcar` (a learned chunk size per row and step) and `vadusa:<tau>` (heads draft, the base
head verifies with tolerance) for the generic decode driver (`jaxtts.decode.driver`).

dcar: models {"target": TTSLM, "policy": ChunkPolicy}. At every step the policy reads each
row's last hidden state and picks c_b in {1..K} (argmax, or sampled with `dcar:sample`; only
among lo..hi with `,sizes=<lo>-<hi>`); every
row samples c tokens from heads 1..c, the batch extends by c = max_b c_b in one forward and
each row rolls back to its own c_b (`dynamic_chunk_step`: a step costs what the batch
chose). A row whose `params["forced_chunk"][b]` > 0 takes that
fixed chunk instead (DCPO's chase-then-exceed rollouts; the policy still runs and its log-prob
of the forced size is recorded). A policy that always picks c reproduces `car:c` exactly, also
when sampling (`sample_tokens` keys each slot apart). With `record=True` the strategy keeps
what DCPO trains on: each decision's policy input [B, S, D], chosen size and log-prob.

vadusa:tau: models {"target"}. From h_t the base head samples y_{t+1} and heads 2..K draft
d_2..d_K; one forward appends all K; the base head at the hidden state of each appended token
verifies the next draft: d_{j+1} is accepted if it is among the base head's top-tau candidates
there; the row keeps y_{t+1} and the drafts up to the first rejection (per-row rollback) and
continues from the hidden state of its last kept token. tau = 1 with greedy sampling gives
exactly greedy FAR's tokens (each accepted draft is the base head's argmax).

Axis letters: B batch, K heads, V vocabulary, S decisions, D width, A actions.
"""

from __future__ import annotations

import dataclasses
import re

import flax.struct
import jax
import jax.numpy as jnp

from jaxtts.decode.driver import Proposal, Strategy
from jaxtts.decode.sampling import sample_tokens, step_keys, suppress_early_eos
from jaxtts.errors import ConfigError
from jaxtts.methods.dcar.policy import PolicyCache, action_logp, head_confidence
from jaxtts.methods.lm import (
    ChunkCarry,
    cache_windows,
    chunk_logits,
    chunk_step,
    dynamic_chunk_step,
    multi_row_keys,
    prefill,
    window_fits,
)

POLICY_KEY_SALT = 0x5EED  # policy draws use fold_in(row key, salt) apart from token draws


@flax.struct.dataclass
class DCARCarry:
    chunk: ChunkCarry
    policy: PolicyCache
    inputs: jax.Array  # float32 [B, S, D + F] policy inputs (S = 1 unless recording)
    actions: jax.Array  # int32 [B, S] chosen chunk sizes (0 = no decision)
    logp: jax.Array  # float32 [B, S] their log-probabilities at decoding time
    hist: jax.Array  # int32 [B, K] how often each chunk size was taken


class _SpeechSlots:
    """Cache sizing shared by the two strategies (extend by K every step)."""

    def _k(self, models) -> int:
        return models["target"].cfg.num_mtp_heads

    def _slots(self, models, batch, max_new_tokens) -> int:
        return batch.prompt.shape[1] + 1 + max_new_tokens + self._k(models)

    def windows(self, models, batch, max_new_tokens):
        return cache_windows(
            batch.prompt.shape[1] + 1, self._slots(models, batch, max_new_tokens), self._k(models)
        )

    def eos(self, models) -> int:
        return models["target"].cfg.eos


@dataclasses.dataclass(frozen=True)
class DCAR(_SpeechSlots, Strategy):
    sample: bool = False  # sample the chunk size from the policy (DCPO rollouts) vs argmax
    # `dcar:<pick>,sizes=<lo>-<hi>`: choose only among chunk sizes lo..hi (the policy's logits
    # outside are masked before the argmax or the draw; the recorded log-prob stays the
    # unmasked policy's). (0, 0): every size 1..K, as trained. Not the paper's: an inference
    # option that keeps a sampled policy inside its guidance range.
    sizes: tuple[int, int] = (0, 0)
    record: bool = False  # keep policy inputs / actions / log-probs (DCPO)
    max_chunk: int = 0  # filled by bind: K (token-buffer headroom)
    # the reference step: every step computes all K heads and extends by K (the step before
    # `dynamic_chunk_step`; same tokens, kept for the equivalence test and the benchmark)
    extend_all: bool = False
    # `dynamic_chunk_step(write_in_branch=...)`: True writes the cache inside the switch (a
    # copy of every layer's cache per step on a CPU; on an H200 the forced-c=3 step took 0.93 /
    # 0.80 of the deferred write's time at batch 1 / 8, RESULTS gpu-check-4), False writes it
    # after. None (default): True on a GPU, else False. Same tokens either way.
    write_in_branch: bool | None = None

    @property
    def name(self) -> str:
        base = "dcar:sample" if self.sample else "dcar"
        if self.sizes == (0, 0):
            return base
        lo, hi = self.sizes
        return f"{base if self.sample else 'dcar:argmax'},sizes={lo}-{hi}"

    def check(self, models) -> None:
        if "policy" not in models:
            raise ConfigError(
                "strategy dcar needs a chunk-size policy: load a DCAR run "
                "(--workdir runs/dcar or pretrained/dcar_deep)"
            )
        k, a = models["target"].cfg.num_mtp_heads, models["policy"].cfg.num_actions
        if a != k:
            raise ConfigError(
                f"strategy dcar: the policy chooses among {a} chunk sizes but the "
                f"backbone has {k} heads"
            )
        if self.max_chunk != k:
            raise ConfigError(
                f"strategy dcar: max_chunk={self.max_chunk}, expected K={k} (use bind)"
            )
        if self.sizes != (0, 0) and self.sizes[1] > k:
            raise ConfigError(
                f"strategy {self.name}: sizes up to {self.sizes[1]}, the backbone has {k} heads"
            )

    def bind(self, models) -> DCAR:
        return dataclasses.replace(self, max_chunk=models["target"].cfg.num_mtp_heads)

    def init(self, models, params, batch, max_new_tokens):
        target, policy = models["target"], models["policy"]
        first = self.windows(models, batch, max_new_tokens)[0]
        keys_t = multi_row_keys(self._k(models))
        hidden, cache = prefill(target, params["target"], batch, first, None, keys_t)
        b = batch.batch_size
        s = max_new_tokens if self.record else 1
        pcache = policy.apply({"params": params["policy"]}, b, max_new_tokens, method="init_cache")
        k = self._k(models)
        return DCARCarry(
            chunk=ChunkCarry(cache=cache, hidden=hidden.astype(jnp.float32)),
            policy=pcache,
            inputs=jnp.zeros((b, s, policy.cfg.d_in), jnp.float32),
            actions=jnp.zeros((b, s), jnp.int32),
            logp=jnp.zeros((b, s), jnp.float32),
            hist=jnp.zeros((b, k), jnp.int32),
        )

    def resize(self, models, carry, window):
        return carry.replace(chunk=carry.chunk.replace(cache=carry.chunk.cache.resize(window)))

    def window_fits(self, state, window):
        return window_fits(state.carry.chunk.cache, state.done, self.max_chunk)

    def step(self, models, params, state, keys, sampling):
        target, policy = models["target"], models["policy"]
        c: DCARCarry = state.carry
        k = self._k(models)
        pin = c.chunk.hidden  # [B, D] the policy's input: h_t ...
        head_logits = None
        if policy.cfg.num_features:  # ... and the heads' confidence: all K heads first
            head_logits = chunk_logits(target, params["target"], c.chunk, state, sampling, k)
            pin = jnp.concatenate([pin, head_confidence(head_logits)], -1)  # [B, D + 2K]
        logits, pcache = policy.apply(
            {"params": params["policy"]}, pin, c.policy, method="step"
        )  # [B, A]
        policy_logits = logits
        if self.sizes != (0, 0):
            size = jnp.arange(1, logits.shape[-1] + 1)  # [A]
            inside = (size >= self.sizes[0]) & (size <= self.sizes[1])
            logits = jnp.where(inside[None], logits, -jnp.inf)
        if self.sample:
            pkeys = jax.vmap(lambda key: jax.random.fold_in(key, POLICY_KEY_SALT))(
                step_keys(keys, state.steps)
            )
            chosen = jax.vmap(jax.random.categorical)(pkeys, logits) + 1
        else:
            chosen = jnp.argmax(logits, axis=-1) + 1
        forced = params.get("forced_chunk")
        if forced is not None:
            chosen = jnp.where(forced > 0, forced, chosen)
        count = chosen.astype(jnp.int32)  # [B]
        logp = action_logp(policy_logits, count)  # [B]
        if self.extend_all:  # the reference step (recomputes the heads)
            prop = chunk_step(target, params["target"], c.chunk, state, keys, sampling, k, count)
        else:
            prop = dynamic_chunk_step(
                target,
                params["target"],
                c.chunk,
                state,
                keys,
                sampling,
                count,
                k,
                write_in_branch=self._write_in_branch() and head_logits is None,
                logits=head_logits,
            )
        active = ~state.done
        i = jnp.minimum(state.steps, c.actions.shape[1] - 1)  # this row's decision index
        if self.record:
            rows = jnp.arange(count.shape[0])
            inputs = c.inputs.at[rows, i].set(jnp.where(active[:, None], pin, c.inputs[rows, i]))
            actions = c.actions.at[rows, i].set(jnp.where(active, count, c.actions[rows, i]))
            lp = c.logp.at[rows, i].set(jnp.where(active, logp, c.logp[rows, i]))
        else:
            inputs, actions, lp = c.inputs, c.actions, c.logp
        hist = c.hist + (active[:, None] & (jnp.arange(1, k + 1)[None] == count[:, None]))
        carry = DCARCarry(
            chunk=prop.carry, policy=pcache, inputs=inputs, actions=actions, logp=lp, hist=hist
        )
        return Proposal(tokens=prop.tokens, count=count, carry=carry)

    def _write_in_branch(self) -> bool:
        if self.write_in_branch is None:
            return jax.default_backend() == "gpu"
        return self.write_in_branch

    def finish(self, models, state):
        c: DCARCarry = state.carry
        out = {"chunk_hist": c.hist}
        if self.record:
            out.update(policy_inputs=c.inputs, actions=c.actions, logp=c.logp)
        return out


@dataclasses.dataclass(frozen=True)
class VADUSA(_SpeechSlots, Strategy):
    tau: int
    max_chunk: int = 0  # K, filled by bind

    def __post_init__(self):
        if self.tau < 1:
            raise ConfigError(f"--strategy vadusa:{self.tau}: expected tolerance tau >= 1")

    @property
    def name(self) -> str:
        return f"vadusa:{self.tau}"

    def bind(self, models) -> VADUSA:
        return dataclasses.replace(self, max_chunk=models["target"].cfg.num_mtp_heads)

    def check(self, models) -> None:
        k = models["target"].cfg.num_mtp_heads
        if k < 2:
            raise ConfigError(f"strategy {self.name}: needs draft heads, the model has {k} head")
        if self.max_chunk != k:
            raise ConfigError(
                f"strategy {self.name}: max_chunk={self.max_chunk}, expected K={k} (use bind)"
            )
        if self.tau > models["target"].cfg.out_vocab:
            raise ConfigError(f"strategy {self.name}: tau above the vocabulary size")

    def init(self, models, params, batch, max_new_tokens):
        first = self.windows(models, batch, max_new_tokens)[0]
        keys_t = multi_row_keys(self.max_chunk)
        hidden, cache = prefill(models["target"], params["target"], batch, first, None, keys_t)
        return {
            "chunk": ChunkCarry(cache=cache, hidden=hidden.astype(jnp.float32)),
            "accepted": jnp.zeros(hidden.shape[:1], jnp.int32),
        }

    def resize(self, models, carry, window):
        ch = carry["chunk"]
        return {**carry, "chunk": ch.replace(cache=ch.cache.resize(window))}

    def window_fits(self, state, window):
        return window_fits(state.carry["chunk"].cache, state.done, self.max_chunk)

    def step(self, models, params, state, keys, sampling):
        model, p = models["target"], {"params": params["target"]}
        ch: ChunkCarry = state.carry["chunk"]
        logits = model.apply(p, ch.hidden, method="heads")  # [B, K, V]
        logits = suppress_early_eos(logits, state.length, sampling, model.cfg.eos)
        toks = sample_tokens(step_keys(keys, state.steps), logits, sampling)  # [B, K]
        start = ch.cache.speech_len
        h, cache = model.apply(p, toks, ch.cache, method="extend")  # [B, K, D]
        base = model.apply(p, h[:, :-1], method="base_logits")  # [B, K-1, V]
        base = suppress_early_eos(base, state.length + 1, sampling, model.cfg.eos)
        # draft j+1 is verified by the base head at appended token j
        draft = toks[:, 1:]  # [B, K-1]
        own = jnp.take_along_axis(base, draft[..., None], axis=-1)  # [B, K-1, 1]
        rank = jnp.sum(base > own, axis=-1)  # [B, K-1] candidates strictly better
        ok = (rank < self.tau) & jnp.isfinite(own[..., 0])
        n_acc = jnp.sum(jnp.cumprod(ok.astype(jnp.int32), axis=1), axis=1)  # [B]
        count = (1 + n_acc).astype(jnp.int32)
        cache = cache.rollback(start + count)
        hidden = jnp.take_along_axis(h, (count - 1)[:, None, None], axis=1)[:, 0]
        active = ~state.done
        acc = state.carry["accepted"] + jnp.where(active, n_acc, 0)
        return Proposal(
            tokens=toks,
            count=count,
            carry={"chunk": ChunkCarry(cache, hidden.astype(jnp.float32)), "accepted": acc},
        )

    def finish(self, models, state):
        return {"accepted_drafts": state.carry["accepted"]}


def dcar(arg: str | None) -> DCAR:
    usage = "expected dcar, dcar:argmax or dcar:sample, optionally ',sizes=<lo>-<hi>'"
    pick, _, rest = (arg or "argmax").partition(",")
    if pick not in ("sample", "argmax"):
        raise ConfigError(f"--strategy dcar:{arg}: {usage}")
    sizes = (0, 0)
    if rest:
        m = re.fullmatch(r"sizes=(\d+)-(\d+)", rest)
        if m is None or not 1 <= int(m[1]) <= int(m[2]):
            raise ConfigError(f"--strategy dcar:{arg}: {usage}, e.g. dcar:sample,sizes=2-4")
        sizes = (int(m[1]), int(m[2]))
    return DCAR(sample=pick == "sample", sizes=sizes)


def vadusa(arg: str | None) -> VADUSA:
    try:
        tau = int(arg)
    except (TypeError, ValueError):
        raise ConfigError(
            f"--strategy vadusa:{arg}: expected vadusa:<tau>, e.g. vadusa:2"
        ) from None
    return VADUSA(tau)
