"""What the prediction heads cost in a decoding step, and whether batching the MTP heads helps.

    python -m benchmarks.diagnostics.mtp_heads --workdir pretrained/car_deep --precision bfloat16

A step of `car:c` runs heads 1..c on each row's last hidden state (`TTSLM.heads`): the base
head, then each additional head's `mtp_blocks` residual blocks and its vocabulary projection,
one head after another (4 x 256 x 256 and 256 x V per head). The batched variant stacks the
additional heads' weights and runs each residual block for all of them in one einsum
(`mbd,mde->mbe`), then one einsum for their projections. Both are timed inside a
`lax.fori_loop` (no dispatch per call, as in the decode loop), in turn within each repeat, ms
per step, the median over `--repeats`; the maximum absolute difference of their logits is
printed beside them.
Not used by the library: a measurement (docs/history/deep.md §deep-speed-fresh, "Batching the MTP
heads is no lever").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def batched_heads(params, hidden, num: int, blocks: int, out_vocab: int, dtype):
    """Heads 1..num of `TTSLM.heads`, the additional heads' blocks batched: hidden [B, D] ->
    float32 [B, num, V]."""
    import jax
    import jax.numpy as jnp

    from jaxtts.nn.layers import matmul

    base = params["base_head"]
    logits = [matmul("...a,aw->...w", hidden, base["kernel"], dtype) + base["bias"]]
    extra = [params[f"head_{k}"] for k in range(2, num + 1)]
    if extra:
        h = jnp.broadcast_to(hidden[None], (len(extra), *hidden.shape))  # [M, B, D]
        for i in range(blocks):
            w = jnp.stack([e[f"res_{i}"]["kernel"] for e in extra]).astype(dtype)  # [M, D, D]
            b = jnp.stack([e[f"res_{i}"]["bias"] for e in extra])  # [M, D]
            z = jnp.einsum("mbd,mde->mbe", h.astype(dtype), w, preferred_element_type=jnp.float32)
            h = h + jax.nn.silu(z + b[:, None])
        wo = jnp.stack([e["out"]["kernel"] for e in extra]).astype(dtype)  # [M, D, V]
        out = jnp.einsum("mbd,mdv->mbv", h.astype(dtype), wo, preferred_element_type=jnp.float32)
        logits += list(out)
    return jnp.stack(logits, axis=-2)[..., :out_vocab].astype(jnp.float32)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default="pretrained/car_deep")
    ap.add_argument("--precision", default="bfloat16", choices=["float32", "bfloat16"])
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--heads", default="1,3,4", help="heads per step (car:c uses c)")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)

    import jax
    import jax.numpy as jnp

    from jaxtts.decode.precision import at_precision
    from jaxtts.engine import load_engine
    from jaxtts.errors import JaxttsError

    try:
        eng = load_engine(args.workdir)
    except JaxttsError as e:
        print(f"error: --workdir: {e}", file=sys.stderr)
        return 2
    models, params = at_precision({"t": eng.model}, {"t": eng.params}, args.precision)
    model, p = models["t"], params["t"]
    cfg, steps = model.cfg, 50
    dtype = jnp.dtype(args.precision)

    def compiled(fn):
        def loop(hidden):
            def body(i, acc):  # each step's input depends on the last: nothing is hoisted
                return acc + fn(hidden + 1e-3 * acc).sum(axis=(-2, -1))[:, None]

            return jax.lax.fori_loop(0, steps, body, jnp.zeros((hidden.shape[0], 1)))

        return jax.jit(loop)

    def timed(fns, hidden) -> list[float]:
        """ms per step of each fn, timed in turn within every repeat (interleaved: the
        machine's drift and a first run's warm-up hit both alike)."""
        runs = [compiled(f) for f in fns]
        for run in runs:
            jax.block_until_ready(run(hidden))
        ts = [[] for _ in runs]
        for _ in range(args.repeats):
            for run, t in zip(runs, ts, strict=True):
                t0 = time.perf_counter()
                jax.block_until_ready(run(hidden))
                t.append((time.perf_counter() - t0) / steps)
        return [statistics.median(t) * 1e3 for t in ts]

    print(
        f"{jax.devices()[0].device_kind}, {args.precision}, ms per step (median of {args.repeats})"
    )
    print("\n| batch | heads | one after another | batched | max abs diff |\n|--:|--:|--:|--:|--:|")
    for b in (int(x) for x in args.batch.split(",")):
        hidden = jax.random.normal(jax.random.key(b), (b, cfg.d_model))
        for num in (int(x) for x in args.heads.split(",")):

            def looped(h, num=num):
                return model.apply({"params": p}, h, num, method="heads")

            def stacked(h, num=num):
                return batched_heads(p, h, num, cfg.mtp_blocks, cfg.out_vocab, dtype)

            diff = float(jnp.max(jnp.abs(looped(hidden) - stacked(hidden))))
            a, s = timed([looped, stacked], hidden)
            print(f"| {b} | {num} | {a:.3f} | {s:.3f} | {diff:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
