"""MDM decoding: fill every frame of the quantised mel, a few frames per step, in a decoding
order (`orders.py`), with the decoder re-run over the whole buffer at each step.

    out = mdm_decode(model, params, text, text_len, speaker, keys, order="top1*", frames=T)

One jitted `lax.while_loop` of at most T_max steps for one-frame orders (ceil(T_max / k) for
`topk:<k>`), batched, with per-row frame counts; it ends when every row's frames are decoded
(a row whose frames are all decoded takes no more); padded frames are never decoded. Each step:
1. parameters of every frame's mixture from the decoder given mu and the decoded frames;
2. the frames of this step: `random` / `l2r` / `r2l` / `swap:<lam>` by their precomputed rank;
   `top1`, `top1*`, `topk:<k>` the most confident undecoded frames (confidence of a frame =
   sum over bins of the max level log-probability); `duration` one random undecoded frame of
   the current phone segment, the next segment being the most confident (mean over its
   undecoded frames) once the current one is full;
3. their values: sampled (component by Gumbel-max at tau_1, value from the logistic at tau_2,
   quantised), or the argmax level for `top1` and under `greedy`.

Per-row keys are folded with the step (batch-N == batch-1 per row).

Axis letters: B batch, T frames, M mel bins, Q levels, X phones.
"""

from __future__ import annotations

import functools

import flax.struct
import jax
import jax.numpy as jnp

from jaxtts.methods.mdm import dmol
from jaxtts.methods.mdm.model import upsample
from jaxtts.methods.mdm.orders import (
    duration_segments,
    parse_order,
    select_confident,
    static_ranks,
)


@flax.struct.dataclass
class MDMOutput:
    levels: jax.Array  # int32 [B, T, M] decoded levels (-1 on padded frames)
    mel: jax.Array  # float32 [B, T, M] log-mel (level centres, denormalised)
    frames: jax.Array  # int32 [B] frames of each row
    steps: jax.Array  # int32 [B] decoder forwards while the row had undecoded frames
    order_step: jax.Array  # int32 [B, T] the step that decoded each frame (-1: padding)


def predicted_durations(
    logw: jax.Array, text_len: jax.Array, length_scale: float = 1.0
) -> jax.Array:
    """Frames per phone int32 [B, X]: ceil(exp(logw) * length_scale), >= 1 on valid phones."""
    valid = jnp.arange(logw.shape[1])[None] < text_len[:, None]
    d = jnp.ceil(jnp.exp(logw) * length_scale)
    return jnp.where(valid, jnp.maximum(d, 1.0), 0.0).astype(jnp.int32)


def num_steps(order: str, frames: int) -> int:
    name, arg = parse_order(order)
    return -(-frames // int(arg)) if name == "topk" else frames


@functools.partial(
    jax.jit, static_argnames=("model", "order", "frames", "greedy", "tau1", "tau2", "length_scale")
)
def mdm_decode(
    model,
    params,
    text,
    text_len,
    speaker,
    keys,
    *,
    order: str,
    frames: int,
    greedy: bool = False,
    tau1: float = 1.0,
    tau2: float = 1.0,
    length_scale: float = 1.0,
) -> MDMOutput:
    """text [B, X], text_len [B], speaker [B, E] or None, keys [B] per-row PRNG keys; `frames`
    the static buffer length (rows longer than it are cut: `frame_budget` picks it)."""
    cfg = model.cfg
    name, arg = parse_order(order)
    p = {"params": params}
    _, mu_x, logw = model.apply(p, text, text_len, speaker, method="encode")
    dur = predicted_durations(logw, text_len, length_scale)  # [B, X]
    t_len = jnp.minimum(jnp.sum(dur, axis=1), frames).astype(jnp.int32)  # [B]
    mu = upsample(mu_x, dur, frames)  # [B, T, M]
    b = text.shape[0]
    valid = jnp.arange(frames)[None] < t_len[:, None]  # [B, T]
    per_step = int(arg) if name == "topk" else 1
    steps = num_steps(order, frames)
    ranks = None
    if name in ("random", "l2r", "r2l", "swap"):
        ranks = jax.vmap(lambda k, n: static_ranks(name, arg, k, n[None], frames)[0])(
            jax.vmap(lambda k: jax.random.fold_in(k, 7))(keys), t_len
        )  # [B, T]
    seg_of = duration_segments(dur, frames)  # [B, T]
    n_seg = dur.shape[1]

    def body(carry):
        s, (q, decoded, order_step, seg, row_steps) = carry
        k = jax.vmap(lambda kk: jax.random.fold_in(kk, s))(keys)  # [B]
        out = model.apply(
            p, mu, cfg.level_value(q), decoded, t_len, speaker, method="decode_params"
        )  # [B, T, M, 3K]
        undecoded = valid & ~decoded
        # confidence orders need every frame's mode; fixed orders at most the picked frame's
        top_lp, top_level = dmol.mode(out, cfg.levels) if ranks is None else (None, None)
        if ranks is not None:
            pick = undecoded & (ranks == s)  # [B, T]: at most one frame a row
            if greedy:  # the argmax of the picked frame only (T times cheaper than all)
                at = jnp.argmax(pick, axis=1)[:, None, None, None]  # [B, 1, 1, 1]
                top_level = dmol.mode(jnp.take_along_axis(out, at, axis=1), cfg.levels)[1]
        else:
            conf = jnp.sum(top_lp, axis=-1)  # [B, T]
            if name == "duration":
                # the current segment, or (when it is full) the most confident one
                in_seg = undecoded & (seg_of == seg[:, None])
                seg_conf = jax.vmap(
                    lambda c, u, g: (
                        jax.ops.segment_sum(jnp.where(u, c, 0.0), g, n_seg + 1)
                        / jnp.maximum(jax.ops.segment_sum(u.astype(jnp.float32), g, n_seg + 1), 1.0)
                    )
                )(conf, undecoded, seg_of)
                has = jax.vmap(lambda u, g: jax.ops.segment_sum(u.astype(jnp.int32), g, n_seg + 1))(
                    undecoded, seg_of
                )
                best = jnp.argmax(
                    jnp.where(has[:, :n_seg] > 0, seg_conf[:, :n_seg], -jnp.inf), axis=1
                )
                seg = jnp.where(in_seg.any(1), seg, best).astype(jnp.int32)
                cand = undecoded & (seg_of == seg[:, None])
                u = jax.vmap(lambda kk: jax.random.uniform(jax.random.fold_in(kk, 3), (frames,)))(k)
                pick = select_confident(u, cand, jnp.ones((b,), jnp.int32))
            else:
                pick = select_confident(conf, undecoded, jnp.full((b,), per_step, jnp.int32))
        if greedy or name == "top1":
            vals = top_level  # [B, T, M] ([B, 1, M] for fixed orders)
        else:
            vals = jax.vmap(
                lambda kk, o: dmol.sample(jax.random.fold_in(kk, 5), o, cfg.levels, tau1, tau2)
            )(k, out)
        q = jnp.where(pick[..., None], vals, q)
        order_step = jnp.where(pick, s, order_step)
        row_steps = row_steps + undecoded.any(1).astype(jnp.int32)
        return s + 1, (q, decoded | pick, order_step, seg, row_steps)

    def cond(carry):  # until every row's frames are decoded (at most `steps`)
        s, (_, decoded, *_) = carry
        return (s < steps) & jnp.any(valid & ~decoded)

    init = (
        jnp.zeros((b, frames, cfg.n_mels), jnp.int32),
        jnp.zeros((b, frames), bool),
        jnp.full((b, frames), -1, jnp.int32),
        jnp.zeros((b,), jnp.int32),
        jnp.zeros((b,), jnp.int32),
    )
    _, (q, decoded, order_step, _, row_steps) = jax.lax.while_loop(cond, body, (0, init))
    levels = jnp.where(valid[..., None], q, -1)
    mel = jnp.where(valid[..., None], cfg.denormalize(cfg.level_value(q)), 0.0)
    return MDMOutput(levels, mel, t_len, row_steps, order_step)
