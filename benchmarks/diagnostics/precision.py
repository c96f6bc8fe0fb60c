"""What a matmul and a cached forward cost at float32 and at bfloat16, by rows per step.

    python -m benchmarks.diagnostics.precision --workdir pretrained/car_deep

Two tables, batch 1, 2 CPU cores (or whatever device JAX has):
1. `stack`: 12 layers of the backbone's matmul shapes (q, k, v, o: 256 x 256; SwiGLU
   256 x 1024 x 2 and 1024 x 256) on M rows, through `jaxtts.nn.layers.matmul` at float32 and
   bfloat16, and bfloat16 written three other ways: a bfloat16 product (no float32
   accumulation), one row without the two-row padding, the float32 matmul of weights stored
   as bfloat16 (cast inside the step);
2. `extend`: the model's cached forward of T tokens plus its heads (`TTSLM.extend` then
   `heads` on the last position), 20 steps in a `fori_loop` over a cache with 200 of 384
   speech slots filled, at float32, and at bfloat16 with a float32 or a bfloat16 KV cache.
Each cell: the median over `--repeats` timed runs, ms per forward.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def _ms(fn, *args, repeats: int, inner: int = 20) -> float:
    import jax

    jax.block_until_ready(fn(*args))
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            out = fn(*args)
        jax.block_until_ready(out)
        ts.append((time.perf_counter() - t0) / inner)
    return statistics.median(ts) * 1e3


def stack_table(rows, repeats: int) -> list[str]:
    import jax
    import jax.numpy as jnp

    from jaxtts.nn.layers import matmul

    d, f, layers = 256, 1024, 12
    key = jax.random.key(0)
    shapes = dict(q=(d, d), k=(d, d), v=(d, d), o=(d, d), g=(d, f), u=(d, f), w=(f, d))

    def weights(dtype):
        return [
            {
                n: (0.02 * jax.random.normal(jax.random.fold_in(key, 10 * i + j), s)).astype(dtype)
                for j, (n, s) in enumerate(shapes.items())
            }
            for i in range(layers)
        ]

    eq = "...a,ax->...x"
    variants = {
        "float32": (jnp.float32, lambda x, w: matmul(eq, x, w, "float32")),
        "bfloat16": (jnp.bfloat16, lambda x, w: matmul(eq, x, w, "bfloat16")),
        "bfloat16 product": (
            jnp.bfloat16,
            lambda x, w: jnp.dot(x.astype(jnp.bfloat16), w).astype(jnp.float32),
        ),
        "bfloat16, one row unpadded": (
            jnp.bfloat16,
            lambda x, w: jnp.dot(x.astype(jnp.bfloat16), w, preferred_element_type=jnp.float32),
        ),
        "bfloat16 weights, float32 matmul": (
            jnp.bfloat16,
            lambda x, w: jnp.dot(x, w.astype(jnp.float32)),
        ),
    }

    def norm(x):
        return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6)

    out = [
        "| matmuls | " + " | ".join(f"M = {m}" for m in rows) + " |",
        "|---|" + "--:|" * len(rows),
    ]
    print("\n".join(out), flush=True)
    for name, (dtype, mm) in variants.items():

        def forward(x, ws, mm=mm):
            for w in ws:
                h = norm(x)
                x = x + mm(mm(h, w["q"]) * mm(h, w["k"]) + mm(h, w["v"]), w["o"])
                h = norm(x)
                x = x + mm(jax.nn.silu(mm(h, w["g"])) * mm(h, w["u"]), w["w"])
            return x

        fn, ws = jax.jit(forward), weights(dtype)
        cells = [
            _ms(fn, jax.random.normal(key, (m, d)), ws, repeats=repeats, inner=10) for m in rows
        ]
        out.append(f"| {name} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
        print(out[-1], flush=True)
    return out


def extend_table(workdir: str, tokens, batch: int, repeats: int) -> list[str]:
    import jax
    import jax.numpy as jnp

    from jaxtts.decode.precision import at_precision
    from jaxtts.engine import load_engine

    eng = load_engine(workdir)
    out = [
        f"| cached forward + heads, batch {batch} | "
        + " | ".join(f"T = {t}" for t in tokens)
        + " |",
        "|---|" + "--:|" * len(tokens),
    ]
    print("\n".join(out), flush=True)
    for prec, cache_dtype in (
        ("float32", "float32"),
        ("bfloat16", "float32"),
        ("bfloat16", "bfloat16"),
    ):
        models, params = at_precision({"t": eng.model}, {"t": eng.params}, prec)
        m, p = models["t"], params["t"]
        cache = m.apply({"params": p}, batch, 128, 384, dtype=cache_dtype, method="init_cache")
        cache = cache.replace(
            text_len=jnp.full((batch,), 100, jnp.int32),
            speech_len=jnp.full((batch,), 200, jnp.int32),
        )
        cells = []
        for t in tokens:

            def loop(p, cache, t=t, m=m):
                def body(i, carry):
                    c, acc = carry
                    tok = jnp.full((batch, t), 5, jnp.int32)
                    h, c2 = m.apply({"params": p}, tok, c, method="extend")
                    logits = m.apply({"params": p}, h[:, -1], t, method="heads")
                    return c2.replace(speech_len=c.speech_len), acc + logits.sum()

                return jax.lax.fori_loop(0, 20, body, (cache, 0.0))[1]

            cells.append(_ms(jax.jit(loop), p, cache, repeats=repeats, inner=1) / 20)
        name = f"{prec}, {cache_dtype} KV cache"
        out.append(f"| {name} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
        print(out[-1], flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default="pretrained/car_deep")
    ap.add_argument("--rows", default="1,2,3,4,8,16", help="M of the matmul table")
    ap.add_argument("--tokens", default="1,2,3,4", help="T of the cached-forward table")
    ap.add_argument("--batch", type=int, default=1, help="batch of the cached-forward table")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--skip_stack", action="store_true")
    args = ap.parse_args(argv)
    import jax

    print(f"{jax.devices()[0].device_kind}, ms per forward (median of {args.repeats})\n")
    if not args.skip_stack:
        stack_table([int(x) for x in args.rows.split(",")], args.repeats)
        print()
    extend_table(args.workdir, [int(x) for x in args.tokens.split(",")], args.batch, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
