"""What a `lax.cond` costs inside a `lax.while_loop` iteration on this backend.

    python -m benchmarks.diagnostics.cond_cost --out out/cond_cost.json

A while loop of `--iters` iterations whose body is one [B, 256] x [256, 256] product and a
tanh, timed plain and with 1 and 4 `lax.cond`s per iteration (predicates computed on the
device from the carry, both branches a few elementwise ops). The question: does a
conditional cost a host round trip per iteration on an accelerator (its predicate copied to
the host before the chosen branch launches)? On an H200 with jax 0.11.2 it did not: 17.5 /
15.1 / 11.4 us per iteration with 0 / 1 / 4 conds (RESULTS gpu-check-3). The decode loop has
one per sampling call (`jaxtts/decode/sampling.py`, the full-sort fallback) and DCAR one more
(`lax.switch` over chunk sizes). Prints microseconds per iteration and per cond; writes
`--out` (JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchmarks.timing_lock import exclusive


def loop(n_cond: int, iters: int):
    import jax
    import jax.numpy as jnp

    def body(c):
        i, h, w = c
        h = jnp.tanh(h @ w)  # [B, D]
        for k in range(n_cond):
            h = jax.lax.cond(jnp.all(h[:, k] > -2.0), lambda h: h * 0.999, lambda h: h + 1e-3, h)
        return i + 1, h, w

    return jax.jit(lambda h, w: jax.lax.while_loop(lambda c: c[0] < iters, body, (0, h, w))[1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--iters", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--out", default="out/cond_cost.json")
    args = ap.parse_args(argv)

    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    h = jnp.asarray(rng.standard_normal((args.batch, 256)) * 0.1, jnp.float32)
    w = jnp.asarray(rng.standard_normal((256, 256)) / 16, jnp.float32)
    per_iter = {}
    for n in (0, 1, 4):
        f = loop(n, args.iters)
        jax.block_until_ready(f(h, w))  # compiles
        ts = []
        with exclusive(f"cond_cost {n}"):
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                jax.block_until_ready(f(h, w))
                ts.append(time.perf_counter() - t0)
        per_iter[n] = sorted(ts)[len(ts) // 2] / args.iters
    per_cond = (per_iter[4] - per_iter[0]) / 4
    res = {
        "device": jax.devices()[0].device_kind,
        "batch": args.batch,
        "us_per_iteration": {str(n): 1e6 * t for n, t in per_iter.items()},
        "us_per_cond": 1e6 * per_cond,
    }
    print(
        f"{res['device']}: while_loop iteration {1e6 * per_iter[0]:.1f} us plain, "
        f"{1e6 * per_iter[1]:.1f} with 1 cond, {1e6 * per_iter[4]:.1f} with 4: "
        f"{1e6 * per_cond:.1f} us per cond"
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
