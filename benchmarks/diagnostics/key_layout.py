"""Attention of a decoding step over a KV cache by key layout: keys [S, H] (the cache's layout)
or [H, S] (transposed), per head, float32, batch 1.

    python -m benchmarks.diagnostics.key_layout

For T = 1..6 query rows (FAR, CAR c, SSD's verify of L = T - 1 drafts) and a cache of S slots,
the softmax attention of `jaxtts.nn.attention.attend` (batch and heads folded into one axis,
4 heads of 64), and its logits dot alone, jitted, median of `--repeats` x 300 calls, us per call.
The keys' layout decides which dot XLA's CPU backend runs: q [T, H] . k [S, H]^T contracts the
minor axis of both operands, q [T, H] @ k [H, S] is a plain row-major matmul. RESULTS
precision ("Tried and not adopted") has the numbers and the end-to-end result.
"""

from __future__ import annotations

import argparse

from benchmarks.diagnostics.precision import _ms


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--slots", default="304,512")
    ap.add_argument("--queries", default="1,2,3,4,6")
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args(argv)

    import jax
    import jax.numpy as jnp

    z, h = 4, 64  # batch 1 x 4 heads, head dim 64 (`car_deep`)
    key = jax.random.key(0)

    def attn_sh(q, k, v):  # k [Z, S, H]
        p = jax.nn.softmax(jnp.einsum("ZTH,ZSH->ZTS", q, k) / h**0.5, -1)
        return jnp.einsum("ZTS,ZSH->ZTH", p, v)

    def attn_hs(q, kt, v):  # kt [Z, H, S]
        p = jax.nn.softmax(jnp.einsum("ZTH,ZHS->ZTS", q, kt) / h**0.5, -1)
        return jnp.einsum("ZTS,ZSH->ZTH", p, v)

    fns = {
        "attention, keys [S, H]": jax.jit(attn_sh),
        "attention, keys [H, S]": jax.jit(attn_hs),
        "logits, keys [S, H]": jax.jit(lambda q, k, v: jnp.einsum("ZTH,ZSH->ZTS", q, k)),
        "logits, keys [H, S]": jax.jit(lambda q, kt, v: jnp.einsum("ZTH,ZHS->ZTS", q, kt)),
    }
    queries = [int(t) for t in args.queries.split(",")]
    print(f"device: {jax.devices()[0].device_kind}; us per call, median of {args.repeats}")
    for s in (int(x) for x in args.slots.split(",")):
        k = jax.random.normal(key, (z, s, h))
        v = jax.random.normal(jax.random.fold_in(key, 1), (z, s, h))
        kt = jnp.asarray(k.transpose(0, 2, 1))  # a materialised [Z, H, S] buffer
        print(f"\n| S = {s} | " + " | ".join(f"T = {t}" for t in queries) + " |")
        print("|---|" + "--:|" * len(queries))
        for name, fn in fns.items():
            keys = kt if "[H, S]" in name else k
            cells = []
            for t in queries:
                q = jax.random.normal(jax.random.fold_in(key, 2), (z, t, h))
                cells.append(1e3 * _ms(fn, q, keys, v, repeats=args.repeats, inner=300))
            print(f"| {name} | " + " | ".join(f"{c:.1f}" for c in cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
