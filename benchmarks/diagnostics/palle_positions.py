"""Why configs/palle.py:small turns RoPE on: a synthetic stage-one (PAR) task that needs
span-relative positions, learned with and without rotary embeddings in the transformer.

    python -m benchmarks.diagnostics.palle_positions --steps 300

Rows count upwards (token t = start + t mod V), so every masked span is predictable from the
last visible token and the distance to it: exactly the left-context continuation PAR training
asks for. The loss is the stage-one span loss (`PALLETask('par')`, fresh masks each step).
The paper's model has sinusoidal (+ convolutional) absolute positions only; with them a 2-layer
model has to infer the distance to the mask boundary from absolute positions.
"""

from __future__ import annotations

import argparse
import sys


def run(rope: float, steps: int, seed: int = 0) -> list[tuple[int, float]]:
    import jax
    import numpy as np
    import optax

    from jaxtts.methods.palle.model import PALLEConfig, init_params
    from jaxtts.methods.palle.task import PALLETask

    cfg = PALLEConfig(
        num_text_symbols=20,
        num_speech_tokens=64,
        d_model=64,
        num_layers=2,
        num_heads=2,
        head_dim=32,
        d_ff=128,
        convnext_ff=128,
        conv_pos_groups=4,
        rope_theta=rope,
    )
    task = PALLETask(cfg, "par")
    b, t = 8, 100
    params = init_params(cfg, jax.random.key(seed))
    opt = optax.adam(3e-3)
    opt_state = opt.init(params)

    def batch(i):
        rng = np.random.default_rng(1000 * seed + i)
        start = rng.integers(0, 64, (b, 1))
        speech = ((start + np.arange(t)[None]) % 64).astype(np.int32)  # [B, T] counting rows
        return {
            "text": rng.integers(0, 20, (b, 40)).astype(np.int32),
            "text_len": np.full(b, 40, np.int32),
            "speech": speech,
            "speech_len": np.full(b, t, np.int32),
        }

    @jax.jit
    def step(p, s, bt, key):
        (loss, _), g = jax.value_and_grad(
            lambda q: task.loss(q, bt, key, train=True), has_aux=True
        )(p)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, loss

    out = []
    for i in range(steps):
        params, opt_state, loss = step(params, opt_state, batch(i), jax.random.key(i))
        if i % 50 == 0 or i == steps - 1:
            out.append((i, float(loss)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args(argv)
    curves = {rope: run(rope, args.steps) for rope in (0.0, 10_000.0)}
    print("| step | span loss, absolute positions only | span loss, + RoPE |\n|--:|--:|--:|")
    for (i, a), (_, r) in zip(curves[0.0], curves[10_000.0], strict=True):
        print(f"| {i} | {a:.3f} | {r:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
