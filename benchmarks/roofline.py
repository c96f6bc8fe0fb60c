"""A roofline cost model of every decoding strategy: FLOPs and bytes per decode step from the
model configs and the strategy's shapes, steps per audio second from the shipped models' decode
statistics, time per step as max(compute, memory) plus a fixed per-forward overhead.

    # 1. calibrate on this machine (achieved matmul FLOP/s by rows, bandwidth, overheads)
    python -m benchmarks.roofline calibrate --out out/roofline_cpu.json
    # 2. check: predicted vs measured LM-RTF for every row of a methods_speed.py JSON
    python -m benchmarks.roofline check --speed out/methods_speed_deep.json \
        --calibration out/roofline_cpu.json
    # 3. predict on accelerators (H100, TPU v5e) for the small / deep / paper configs
    python -m benchmarks.roofline predict --speed out/methods_speed_deep.json \
        --out out/roofline_predict.json --plot benchmarks/roofline_speedup.png

The model (one decode step of a strategy = a list of `Forward`s):
  flops  = 2 B q W  +  4 B q L_a (n h) T            (matmuls; attention scores + values)
  bytes  = W w  +  B L_a 2 (n h) (T + q) c  +  B q V_h 4 (logits written and read)
  time   = max(flops / F(B q), bytes / BW) + o_f + o_l L
B rows, q new positions per row, W matmul weights touched (parameters, from the model's own
parameter tree: `jax.eval_shape` of its init), w bytes per weight, L_a attention layers over a
cache of T positions per row (n heads x h dims, c bytes per cache value), V_h the output
vocabulary times the heads evaluated. F(M) is the achieved matmul FLOP/s at M = B q rows (CPU:
measured, interpolated; accelerators: the peak), BW the achieved bandwidth, o_f a fixed cost
per forward and o_l per layer (the ops' launch / dispatch cost: on a CPU measured with a
near-zero-width stack in a `lax.while_loop`; on accelerators assumed, said in the output).

Steps per audio second and tokens per step come from the measured statistics (`--speed`: the
JSON `benchmarks/methods_speed.py` writes; its per-row steps and tokens per step). For the
`paper` config, which has no trained model, the same statistics of the deep backbone's rows are
used (stated in the output). PALLE and MDM are full-sequence forwards per step (no cache).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import signal
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.timing_lock import exclusive

DEVICES = {
    # name: (peak FLOP/s, bandwidth B/s, bytes per weight, per-forward s, per-layer s)
    # per-forward / per-layer overheads on accelerators are ASSUMED (kernel launches inside a
    # while loop, ~10 fused kernels a layer at ~2 us): 0.27 ms for a 12-layer step. An H200's
    # fitted ones (benchmarks/gpu_check.sh, RESULTS gpu-check-3): 0.19 ms at batch 1, 0.31 at 8
    "h100": dict(peak=989e12, bw=3.35e12, wbytes=2, o_f=30e-6, o_l=20e-6),
    "tpu_v5e": dict(peak=197e12, bw=819e9, wbytes=2, o_f=30e-6, o_l=20e-6),
}
FULL_SEQUENCE = ("palle", "mdm")  # strategies whose step is one forward over every position
PAPER_SPEEDUPS = {
    "dcar": "2.61x (DCAR [2,3,4])",
    "car:3": "2.64x (CAR c=3)",
    "ssd": "1.4x (SSD beta 0.4)",
    "palle": "3.5x over AR",
    "tldr": "1.8x",
}


# ----------------------------------------------------------------------------- model shapes


def param_counts(model, *args) -> dict[str, int]:
    """Parameters per top-level group ('stack/layer_3', 'base_head', 'head_2', ...) of a Flax
    module, from `jax.eval_shape` of its init (no compute)."""
    import jax
    import numpy as np

    shapes = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), *args))["params"]
    out: dict[str, int] = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(shapes)[0]:
        keys = [str(getattr(k, "key", k)) for k in path]
        group = "/".join(keys[:2]) if keys[0] == "stack" else keys[0]
        out[group] = out.get(group, 0) + int(np.prod(leaf.shape))
    return out


@dataclasses.dataclass(frozen=True)
class LMShape:
    """What the cost model needs of an LM config."""

    layers: int
    layer_w: int  # parameters of one layer (all matmuls; norms included, negligible)
    base_head_w: int
    mtp_head_w: int  # one additional head
    attn: int  # n_heads * head_dim
    vocab: int  # padded output vocabulary
    num_heads: int  # K
    d_model: int

    @classmethod
    def from_config(cls, cfg) -> LMShape:
        import jax.numpy as jnp

        from jaxtts.methods.lm.model import TTSLM

        counts = param_counts(
            TTSLM(cfg),
            jnp.zeros((1, 4), jnp.int32),
            jnp.array([4]),
            jnp.zeros((1, 4), jnp.int32),
            jnp.array([4]),
        )
        layer = counts["stack/layer_0"]
        mtp = counts.get("head_2", 0)
        return cls(
            cfg.num_layers,
            layer,
            counts["base_head"],
            mtp,
            cfg.num_heads * cfg.head_dim,
            cfg.padded(cfg.out_vocab),
            cfg.num_mtp_heads,
            cfg.d_model,
        )


@dataclasses.dataclass(frozen=True)
class Forward:
    """One forward of a step: `layers` layers of `layer_w` weights each over `q` new positions
    per row attending to `context` cached positions, plus `head_w` head weights evaluated over
    `head_v` logits per position."""

    name: str
    layers: int
    layer_w: int
    attn: int
    q: float
    context: float
    head_w: int = 0
    head_v: int = 0
    extra_w: int = 0  # weights outside the layers/heads (policy, compressor, ...)

    def flops(self, b: int) -> float:
        w = self.layers * self.layer_w + self.head_w + self.extra_w
        return 2 * b * self.q * w + 4 * b * self.q * self.layers * self.attn * self.context

    def bytes(self, b: int, wbytes: int, cbytes: int) -> float:
        return sum(self.bytes_split(b, wbytes, cbytes))

    def bytes_split(self, b: int, wbytes: int, cbytes: int) -> tuple[float, float]:
        """(weights, streamed): the weight matrices, read one GEMM at a time, and the KV cache
        read and written plus the logits, a few large buffers per layer."""
        w = self.layers * self.layer_w + self.head_w + self.extra_w
        kv = b * self.layers * 2 * self.attn * (self.context + self.q) * cbytes
        logits = 2 * b * self.q * self.head_v * 4
        return w * wbytes, kv + logits


def expected_max(hist, b: int) -> float:
    """E[max of b independent draws] from the sizes 1..K counted in `hist` [K]."""
    p = np.asarray(hist, np.float64) / max(1, np.sum(hist))
    cdf = np.cumsum(p)
    below = np.concatenate([[0.0], cdf[:-1]])
    return float(np.sum(np.arange(1, len(p) + 1) * (cdf**b - below**b)))


def step_forwards(
    strategy: str, lm: LMShape, stats: dict, context: float, extra=None, b: int = 1
) -> list:
    """The forwards of one decode step of `strategy` at batch b (its measured `stats`:
    tokens_per_step, DCAR's chunk_hist)."""
    name = strategy.split(":")[0]
    tps = float(stats.get("tokens_per_step", 1.0))
    stack = dict(layers=lm.layers, layer_w=lm.layer_w, attn=lm.attn, context=context)
    v = lm.vocab
    if name == "far":
        return [Forward("target", q=1, head_w=lm.base_head_w, head_v=v, **stack)]
    if name == "car":
        c = int(strategy.split(":")[1])
        heads = lm.base_head_w + (c - 1) * lm.mtp_head_w
        return [Forward("target", q=c, head_w=heads, head_v=c * v, **stack)]
    if name == "dcar":
        # the batch extends by its largest chosen size: at batch 1 the mean chunk, at batch b
        # the expected largest of b draws from the measured sizes (without them, the mean)
        hist = stats.get("chunk_hist")
        c = expected_max(hist, b) if b > 1 and hist else max(1.0, tps)
        heads = lm.base_head_w + (c - 1) * lm.mtp_head_w
        pol = extra or {}
        return [
            Forward("target", q=c, head_w=heads, head_v=c * v, **stack),
            Forward(
                "policy",
                layers=int(pol.get("policy_layers", 1)),
                layer_w=pol.get("layer_w", lm.layer_w),
                attn=pol.get("attn", lm.attn),
                q=1,
                context=context / max(c, 1.0),
                head_w=lm.d_model * lm.num_heads,
            ),
        ]
    if name == "vadusa":
        heads = lm.base_head_w + (lm.num_heads - 1) * lm.mtp_head_w
        return [Forward("target", q=lm.num_heads, head_w=heads, head_v=lm.num_heads * v, **stack)]
    if name == "ssd":
        opts = dict(kv.split("=") for kv in strategy.split(":")[1].split(","))
        draft_len = int(opts.get("L", 3))
        dl = int((extra or {}).get("draft_layers", max(1, lm.layers // 3)))
        draft = [
            Forward(
                "draft",
                layers=dl,
                layer_w=lm.layer_w,
                attn=lm.attn,
                q=1,
                context=context,
                head_w=lm.base_head_w,
                head_v=v,
            )
        ] * draft_len
        return draft + [
            Forward("target", q=draft_len + 1, head_w=lm.base_head_w, head_v=v, **stack)
        ]
    if name == "tldr":
        e = extra or {}
        p = int(e.get("patch", 4))
        return [
            Forward(
                "compressor",
                layers=1,
                layer_w=e.get("comp_w", 0),
                attn=lm.attn,
                q=p,
                context=e.get("window", 16),
            ),
            Forward(
                "backbone",
                q=1,
                layers=lm.layers,
                layer_w=lm.layer_w,
                attn=lm.attn,
                context=context / p,
            ),
        ] + [
            Forward(
                "extractor",
                layers=e.get("ext_layers", 2),
                layer_w=e.get("ext_w", 0),
                attn=e.get("ext_attn", lm.attn),
                q=1,
                context=p,
                head_w=e.get("out_w", 0),
                head_v=v,
            )
        ] * p
    if name in FULL_SEQUENCE:
        # one full-sequence forward over all positions per step (no cache)
        t = float((extra or {}).get("seq", context))
        full = dict(stack, context=t / 2)
        return [Forward(name, q=t, head_w=lm.base_head_w, head_v=v, **full)]
    raise ValueError(f"roofline: no cost model for strategy {strategy!r}")


# ----------------------------------------------------------------------------- devices


@dataclasses.dataclass
class Device:
    name: str
    bw: float  # B/s, weights read matrix by matrix (and everything when bw_stream is None)
    o_f: float  # s per forward
    o_l: float  # s per layer
    wbytes: int = 4
    cbytes: int = 4
    peak: float = 0.0  # FLOP/s (used when no per-M curve)
    curve: list | None = None  # [[M, FLOP/s], ...] achieved matmul throughput by rows
    # {batch: [o_f, o_l(, o_s, o_sl(, o_c))]} fitted on real decode steps
    fixed_by_batch: dict | None = None
    # B/s over one large buffer (the KV cache, the logits); on a GPU 3x the per-matrix rate,
    # whose many small reads are bound by their launches (RESULTS gpu-check-3)
    bw_stream: float | None = None

    def fixed(self, b: int) -> tuple[float, float, float, float, float]:
        """(per forward, per layer, per extra token slot, per extra slot and layer, per chunk
        choice) fixed costs at batch b: the fit at the nearest calibrated batch (log scale),
        else the constants (no slot or choice terms)."""
        if not self.fixed_by_batch:
            return self.o_f, self.o_l, 0.0, 0.0, 0.0
        near = min(self.fixed_by_batch, key=lambda k: abs(math.log(int(k)) - math.log(b)))
        f = list(self.fixed_by_batch[near]) + [0.0, 0.0, 0.0]
        return f[0], f[1], f[2], f[3], f[4]

    def flops_rate(self, m: float) -> float:
        if not self.curve:
            return self.peak
        ms = [c[0] for c in self.curve]
        if m <= ms[0]:
            return self.curve[0][1] * m / ms[0]  # below the smallest measured: linear in M
        for (m0, f0), (m1, f1) in zip(self.curve, self.curve[1:], strict=False):
            if m <= m1:  # log-linear interpolation
                a = (math.log(m) - math.log(m0)) / (math.log(m1) - math.log(m0))
                return f0 + a * (f1 - f0)
        return self.curve[-1][1]

    def forward_time(self, f: Forward, b: int) -> dict:
        compute = f.flops(b) / self.flops_rate(b * f.q)
        weights, streamed = f.bytes_split(b, self.wbytes, self.cbytes)
        memory = weights / self.bw + streamed / (self.bw_stream or self.bw)
        o_f, o_l, o_s, o_sl, o_c = self.fixed(b)
        # the slot terms: what a forward of q tokens per row costs beyond one token's (its
        # heads' sampling, cache writes, per-layer ops on more rows), fitted on car:3 vs far;
        # the choice term: DCAR's draw of a chunk size and its switch over the sizes, beyond
        # the policy layer's own terms, fitted on DCAR forced to 3 vs car:3
        # (a full-sequence forward, PALLE's or MDM's, is one pass: no per-slot work)
        slots = 0.0 if f.name in FULL_SEQUENCE else max(0.0, f.q - 1)
        fixed = o_f + o_l * f.layers + (o_s + o_sl * f.layers) * slots
        if f.name == "policy":
            fixed += o_c
        return {
            "compute": compute,
            "memory": memory,
            "fixed": fixed,
            "time": max(compute, memory) + fixed,
        }

    def step_time(self, forwards: list, b: int) -> dict:
        parts = [self.forward_time(f, b) for f in forwards]
        out = {k: sum(p[k] for p in parts) for k in ("compute", "memory", "fixed", "time")}
        out["bound"] = "compute" if out["compute"] > out["memory"] else "memory"
        return out


def lm_rtf(
    dev: Device, strategy: str, lm: LMShape, stats: dict, b: int, context: float, extra=None
) -> dict:
    """Predicted LM seconds per audio second at batch b. A step serves b rows, and a batch
    steps until its longest row ends: with the measured `batch_steps_per_audio_s` (the steps
    the batches ran per audio second, methods_speed.py) the time is step time x those steps;
    without it (predictions from batch-1 statistics) rows are taken as equally long, step
    time x steps per audio second / b."""
    fw = step_forwards(strategy, lm, stats, context, extra, b)
    st = dev.step_time(fw, b)
    steps = float(stats["steps_per_audio_s"])
    if b > 1 and "batch_steps_per_audio_s" in stats:
        batch_steps = float(stats["batch_steps_per_audio_s"])
    else:
        batch_steps = steps / b
    return dict(st, lm_rtf=st["time"] * batch_steps, steps_per_audio_s=steps)


# ----------------------------------------------------------------------------- calibration


def _timeit(fn, *args, reps: int = 20) -> float:
    import jax

    jax.block_until_ready(fn(*args))  # compiles
    ts = []
    with exclusive("calibrate"):  # gpu_check.sh: one process times at a time
        for _ in range(reps):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*args))
            ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2]


def calibrate(
    d_model: int = 256,
    d_ff: int = 1024,
    weights_mb: float = 20.0,
    dtype: str = "float32",
    depths: tuple[int, int] = (4, 12),
) -> dict:
    """Measure on this machine: achieved matmul FLOP/s at M rows ([M, D] x [D, F] chains of a
    model's size), streaming bandwidth over a `weights_mb` weight set (on a GPU make it several
    times the L2 cache, else it measures the cache), and the fixed cost per `lax.while_loop`
    iteration and per layer of ops (a stack of width 8). On an accelerator also the dense
    matmul peak ([8192]^3 in bfloat16).

    The matmuls are the decode's own (`jaxtts.nn.layers.matmul` at `dtype`): float32 inputs
    cast to `dtype`, weights stored in `dtype`, and at bfloat16 float32 sums (and one row padded
    to two on the CPU), not a bfloat16-output `x @ w`, which XLA's CPU backend runs 5-8x slower
    than the decode's path (the calibration that predicted every bf16 row 5-8x too slow)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxtts.nn.layers import matmul

    rng = np.random.default_rng(0)
    dt = jnp.dtype(dtype)
    n_mats = max(1, int(weights_mb * 2**20 / (dt.itemsize * d_model * d_ff)))
    ws = [jnp.asarray(rng.standard_normal((d_model, d_ff)), dt) for _ in range(n_mats)]

    @jax.jit
    def chain(x, ws):
        acc = 0.0
        for w in ws:  # independent GEMMs of one weight set, read once each
            acc = acc + jnp.sum(matmul("...d,df->...f", x, w, dtype))  # [M, F]
        return acc

    curve = []
    for m in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512):
        x = jnp.asarray(rng.standard_normal((m, d_model)), jnp.float32)  # [M, D]
        t = _timeit(chain, x, ws)
        curve.append([m, 2 * m * d_model * d_ff * n_mats / t])
    # bandwidth: read the weight set once (a sum over every matrix), model-sized
    total = jax.jit(lambda ws: sum(jnp.sum(w, dtype=jnp.float32) for w in ws))
    bw = dt.itemsize * d_model * d_ff * n_mats / _timeit(total, ws)
    # and over one array of the same size (one kernel: on a GPU the weight-set probe above is
    # bound by its launches, 124 GB/s on an H200, RESULTS gpu-check; this one is the HBM's)
    flat = jnp.ones((n_mats * d_model * d_ff,), dt)
    bw_stream = flat.nbytes / _timeit(jax.jit(lambda a: jnp.sum(a, dtype=jnp.float32)), flat)

    # per-iteration and per-layer fixed costs: a while loop over a stack of width-8 layers
    def loop_time(layers: int, iters: int = 200) -> float:
        small = [jnp.asarray(rng.standard_normal((8, 8)) * 0.1, jnp.float32)] * layers

        def body(c):
            i, h = c
            for w in small:  # a layer's worth of ops: matmul, norm, residual, nonlinearity
                z = h @ w
                z = z * jax.lax.rsqrt(jnp.mean(z * z, -1, keepdims=True) + 1e-6)
                h = h + jax.nn.silu(z) @ w
            return i + 1, h

        f = jax.jit(lambda h: jax.lax.while_loop(lambda c: c[0] < iters, body, (0, h))[1])
        return _timeit(f, jnp.ones((1, 8), jnp.float32), reps=10) / iters

    t0, t4 = loop_time(0), loop_time(4)
    # the fixed costs at the deep model's depths: a fit at 1 and 4 layers extrapolated to 12
    # moved by 3-10x between calibrations on the 2-core CPU; at 4 and 12 two calibrations
    # agree within 8 points on every row (RESULTS roofline)
    peak = None
    if jax.default_backend() != "cpu":
        a = jnp.ones((8192, 8192), jnp.bfloat16)
        peak = 2 * 8192**3 / _timeit(jax.jit(lambda a: a @ a), a, reps=10)
    fixed_by_batch = fit_fixed_costs(
        dict(d_model=d_model, d_ff=d_ff), bw=bw, curve=curve, bw_stream=bw_stream, depths=depths
    )
    return {
        "device": jax.devices()[0].device_kind,
        "backend": jax.default_backend(),
        "dtype": dtype,
        "d_model": d_model,
        "d_ff": d_ff,
        "curve": curve,
        "bw": bw,
        "bw_stream": bw_stream,
        "o_f": t0,
        "o_l": max(0.0, (t4 - t0) / 4),
        "weights_mb": dt.itemsize * d_model * d_ff * n_mats / 2**20,
        "peak_bf16": peak,
        "fixed_by_batch": fixed_by_batch,
    }


def fit_fixed_costs(
    model: dict,
    bw: float,
    curve: list,
    batches=(1, 8),
    depths=(1, 4),
    tokens: int = 64,
    bw_stream: float | None = None,
) -> dict:
    """{batch: [o_f, o_l, o_s, o_sl, o_c]}: the fixed costs of real decode steps. FAR decodes
    `tokens` tokens (EOS suppressed) with random weights of the `small` shapes at two depths; the
    measured time per step minus what the FLOP and byte terms predict for it is the fixed
    part, split into a per-layer slope and a per-forward intercept. CAR c=3 at the same
    depths gives the per-slot terms: what each extra token of a step costs beyond its FLOPs
    and bytes (its head's sampling, cache writes), per forward and per layer. (A synthetic
    fused layer measures far less than a real one: ~15 separate ops, attention over the
    cache, the heads' sampling.) DCAR with a random policy forced to chunk 3 gives the choice
    term o_c: its step minus car:3's, less the policy layer's own FLOP, byte and fixed terms,
    averaged over the depths (the policy has one layer whatever the backbone's depth)."""
    import importlib.util

    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import numpy as np

    spec = importlib.util.spec_from_file_location(
        "bench_decode", Path(__file__).with_name("decode.py")
    )
    bd = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bd)
    from jaxtts.decode import registry
    from jaxtts.decode.sampling import SamplingConfig
    from jaxtts.methods.dcar.policy import ChunkPolicy, PolicyConfig
    from jaxtts.methods.dcar.strategies import DCAR
    from jaxtts.methods.lm.model import TTSLM, LMConfig

    dev = Device("fit", bw=bw, o_f=0.0, o_l=0.0, curve=curve, bw_stream=bw_stream)
    sampling = SamplingConfig(temperature=1.0, top_p=0.6, min_tokens=tokens)
    text_len, prompt_len = 48, 75
    context = text_len + prompt_len + tokens / 2

    def runs(b: int, depth: int, names: tuple[str, ...]) -> tuple:
        """(LMConfig, {strategy: (strategy, models, params)}) on random weights of `depth`
        layers."""
        cfg = LMConfig(
            num_text_symbols=64,
            num_speech_tokens=1024,
            d_model=model["d_model"],
            num_layers=depth,
            num_heads=4,
            head_dim=model["d_model"] // 4,
            d_ff=model["d_ff"],
            num_mtp_heads=4,
        )
        one = np.ones((1, 4), np.int32)
        params = nn.unbox(
            jax.jit(TTSLM(cfg).init)(jax.random.key(0), one, np.array([4]), one, np.array([4]))
        )["params"]
        out = {}
        for name in names:
            if name == "dcar":  # a random policy forced to chunk 3: its choice's cost only
                policy = ChunkPolicy(PolicyConfig(cfg.d_model, cfg.num_mtp_heads))
                x = jnp.zeros((1, 2, cfg.d_model))
                pp = nn.unbox(jax.jit(policy.init)(jax.random.key(1), x, jnp.array([2])))
                out[name] = (
                    DCAR(),
                    {"target": TTSLM(cfg), "policy": policy},
                    {"target": params, "policy": pp["params"], "forced_chunk": jnp.full((b,), 3)},
                )
            else:
                out[name] = (registry.get(name), {"target": TTSLM(cfg)}, {"target": params})
        return cfg, out

    def residuals(b: int, names: tuple[str, ...]) -> dict:
        """{(strategy, depth): measured time per step minus its FLOP / byte term}."""
        resid = {}
        for depth in depths:
            cfg, rs = runs(b, depth, names)
            batch, keys = bd.random_batch(np.random.default_rng(0), cfg, b, text_len, prompt_len)
            lm = LMShape.from_config(cfg)
            for strategy, (strat, models, ps) in rs.items():
                walls, steps = [], 1
                for _ in range(3):
                    o, wall, _ = bd.time_decode(
                        strat, models, ps, batch, keys, tokens, sampling, repeats=1
                    )
                    walls.append(wall)
                    steps = max(1, int(np.max(np.asarray(o.steps))))
                per_step = sorted(walls)[1] / steps
                stats = {"tokens_per_step": 3.0}  # DCAR: the forced size
                pred = dev.step_time(step_forwards(strategy, lm, stats, context), b)
                resid[(strategy, depth)] = per_step - max(pred["compute"], pred["memory"])
        return resid

    out, base = {}, {}
    d0, d1 = depths
    for b in batches:
        resid = base[b] = residuals(b, ("far", "car:3"))
        o_l = max(0.0, (resid[("far", d1)] - resid[("far", d0)]) / (d1 - d0))
        # per extra token slot: (car:3 - far) / 2 at each depth -> per forward + per layer
        slot = {d: (resid[("car:3", d)] - resid[("far", d)]) / 2 for d in depths}
        o_sl = max(0.0, (slot[d1] - slot[d0]) / (d1 - d0))
        o_s = max(0.0, slot[d0] - o_sl * d0)
        o_f = max(0.0, resid[("far", d0)] - o_l * d0)
        out[b] = [o_f, o_l, o_s, o_sl]
        print(
            f"batch {b}: fixed {1e3 * o_f:.2f} ms per forward + {1e3 * o_l:.2f} ms per "
            f"layer; per extra token slot {1e3 * o_s:.2f} ms + {1e3 * o_sl:.2f} ms per layer"
        )
    # DCAR last (its compiles are the slowest): interrupted (gpu_check.sh's time limit sends
    # SIGINT), the fit keeps the terms above and leaves the choice term out
    try:
        for b in batches:
            resid = residuals(b, ("dcar",))
            # DCAR's residual beyond car:3's, less the policy forward's own fixed terms
            over = float(np.mean([resid[("dcar", d)] - base[b][("car:3", d)] for d in depths]))
            o_f, o_l = out[b][:2]
            out[b].append(max(0.0, over - (o_f + o_l)))
            print(
                f"batch {b}: per chunk choice {1e3 * out[b][4]:.2f} ms (DCAR forced to 3 over "
                f"car:3, beyond their FLOP and byte terms: {1e3 * over:.2f} ms)"
            )
    except KeyboardInterrupt:
        out = {b: v[:4] for b, v in out.items()}
        print("interrupted: the chunk-choice cost is not fitted")
    return out


# ----------------------------------------------------------------------------- rows


def saved_counts(folder: str, depth: int = 3) -> dict[str, int]:
    """Parameters per group (the first `depth` keys of each path) of a run folder's saved
    parameter file: the shapes of the shipped model itself."""
    import jax
    import numpy as np

    from jaxtts.run_folder import RunFolder

    out: dict[str, int] = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(RunFolder(folder).saved_params())[0]:
        g = "/".join(str(getattr(k, "key", k)) for k in path[:depth])
        out[g] = out.get(g, 0) + int(np.prod(np.shape(leaf)))
    return out


def row_model(folder: str) -> tuple:
    """(LMShape of the backbone, the strategy's own module shapes) of a run folder; the
    strategy's modules (DCAR policy, TLDR compressor / extractor, SSD draft depth) are counted
    from the folder's saved parameters."""
    from jaxtts.methods.lm import LMConfig
    from jaxtts.run_folder import RunFolder

    cfg = RunFolder(folder).read_config()
    task = cfg.get("task", "lm")
    extra: dict = {}
    backbone = folder
    if task == "ssd":
        backbone = str(cfg.ssd.target)
        extra["draft_layers"] = len(cfg.ssd.layers)
    elif task == "dcar":
        backbone = str(cfg.dcpo.backbone)
        c = saved_counts(folder)
        # the shipped policy is linear (policy.num_layers 0: no causal layer, RESULTS
        # deep-dcar-rule); the paper's has one
        extra["policy_layers"] = int(cfg.policy.get("num_layers", 1))
        extra["layer_w"] = c.get("policy/stack/layer_0", 0)
        extra["attn"] = int(cfg.policy.num_heads) * int(cfg.policy.head_dim)
    elif task == "tldr":
        backbone = str(cfg.tldr.backbone)
        c = saved_counts(folder)
        group = lambda prefix: sum(v for k, v in c.items() if k.startswith(prefix))  # noqa: E731
        layers = int(cfg.tldr.get("ext_layers", 2))
        extra.update(
            patch=int(cfg.tldr.get("patch", 4)),
            ext_layers=layers,
            ext_w=group("extractor/layer_") // layers,
            ext_attn=int(cfg.tldr.get("ext_width", 256)),
            comp_w=group("compressor/"),
            window=int(cfg.tldr.get("window", 16)),
            out_w=group("extractor/out"),
        )
    bcfg = RunFolder(backbone).read_config("lm")
    lm = LMShape.from_config(LMConfig.from_config(bcfg.model, saved=True))
    return lm, extra


def device_from_calibration(cal: dict) -> Device:
    """The Device a `calibrate` JSON measured (its matmul curve, bandwidths, fixed costs)."""
    fixed = {int(k): v for k, v in (cal.get("fixed_by_batch") or {}).items()}
    return Device(
        cal["device"],
        bw=cal["bw"],
        o_f=cal["o_f"],
        o_l=cal["o_l"],
        curve=cal["curve"],
        fixed_by_batch=fixed or None,
        bw_stream=cal.get("bw_stream"),
    )


def check_precisions(cal: dict, rows: list, calibration: str, speed: str) -> None:
    """SystemExit (one line) unless the calibration measured the matmuls at the precision
    every speed row ran at: a float32 curve predicts nothing about bfloat16 rows, and back."""
    cal_dtype = cal.get("dtype", "float32")
    ran = sorted({r.get("precision", "float32") for r in rows})
    if ran != [cal_dtype]:
        raise SystemExit(
            f"{calibration}: dtype={cal_dtype!r}, but the rows of {speed} ran at "
            f"precision {', '.join(ran)}: calibrate with --dtype {ran[0]}"
            + (" (and split the rows by precision)" if len(ran) > 1 else "")
        )


def check(args) -> int:
    cal = json.loads(Path(args.calibration).read_text())
    rows = json.loads(Path(args.speed).read_text())
    check_precisions(cal, rows, args.calibration, args.speed)
    dev = device_from_calibration(cal)
    print(
        f"calibration: {cal['device']}, bandwidth {cal['bw'] / 1e9:.1f} GB/s over "
        f"{cal['weights_mb']:.0f} MB of matrices, {(cal.get('bw_stream') or cal['bw']) / 1e9:.1f}"
        f" GB/s over one buffer, matmul {cal['curve'][0][1] / 1e9:.1f} GFLOP/s at M=1 .. "
        f"{cal['curve'][-1][1] / 1e9:.1f} at M={cal['curve'][-1][0]}, per forward "
        f"{1e6 * cal['o_f']:.0f} us, per layer {1e6 * cal['o_l']:.0f} us"
    )
    print(
        "\n| row | batch | measured LM-RTF | predicted | error | bound | compute / memory / "
        "fixed ms per step |"
    )
    print("|---|--:|--:|--:|--:|---|---|")
    out = []
    for r in rows:
        lm, extra = row_model(r["folder"])
        for key, m in r.items():
            if not key.startswith("b") or not isinstance(m, dict):
                continue
            b = int(key[1:])
            p = lm_rtf(dev, r["strategy"], lm, m, b, args.context, extra)
            err = p["lm_rtf"] / m["lm_rtf"] - 1
            out.append(
                dict(
                    strategy=r["strategy"],
                    folder=r["folder"],
                    batch=b,
                    measured=m["lm_rtf"],
                    predicted=p["lm_rtf"],
                    error=err,
                )
            )
            print(
                f"| {r['strategy']} @{r['folder']} | {b} | {m['lm_rtf']:.4f} | "
                f"{p['lm_rtf']:.4f} | {100 * err:+.0f} % | {p['bound']} | "
                f"{1e3 * p['compute']:.2f} / {1e3 * p['memory']:.2f} / {1e3 * p['fixed']:.2f} |"
            )
    within = sum(abs(o["error"]) <= 0.35 for o in out)
    print(f"\n{within} of {len(out)} predictions within +-35 % of the measurement")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


def config_shapes(names: list[str], tokenizer_run: str = "pretrained/car_small") -> dict:
    """LMShape per config name: 'small' / 'deep' from the shipped run folders, 'paper' (no
    trained model) from configs/car.py's paper model with the shipped tokenizer's vocabulary."""
    from configs import car as car_configs
    from jaxtts.methods.lm import LMConfig
    from jaxtts.run_folder import RunFolder

    folders = {"small": "pretrained/car_small", "deep": "pretrained/car_deep"}
    base = RunFolder(tokenizer_run).read_config("lm").model
    out = {}
    for name in names:
        if name in folders:
            m = RunFolder(folders[name]).read_config("lm").model
        else:
            m = dict(base, **car_configs.MODELS[name])
        out[name] = LMShape.from_config(LMConfig.from_config(m, saved=True))
    return out


def predict(args) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = json.loads(Path(args.speed).read_text())
    stats = {}  # strategy -> measured batch-1 statistics (the first folder that has it)
    extras = {}  # strategy -> its own modules' shapes (DCAR policy, TLDR compressor / extractor)
    for r in rows:
        if r["folder"].endswith(args.stats_from) or args.stats_from in r["backbone"]:
            # batch-1 statistics for every batch size: rows taken as equally long (the batch's
            # own steps, batch_steps_per_audio_s, are those of batch 1 here)
            b1 = {k: v for k, v in r["b1"].items() if k != "batch_steps_per_audio_s"}
            stats.setdefault(r["strategy"], b1)
            extras.setdefault(r["strategy"], row_model(r["folder"])[1])
    palle_extra = None
    if args.palle_steps > 0:  # PALLE has no model on the deep backbone: its measured steps
        stats["palle"] = {"steps_per_audio_s": args.palle_steps, "tokens_per_step": 1.0}
        palle_extra = {"seq": args.palle_seq}
    shapes = config_shapes(args.configs.split(","))
    batches = [int(b) for b in args.batches.split(",")]
    result = []
    print(
        f"steps per audio second and tokens per step: the measured rows of {args.stats_from}; "
        f"context {args.context:.0f} positions; per-forward / per-layer overheads ASSUMED "
        f"(see DEVICES); DCAR's policy and TLDR's compressor / extractor: the shipped modules' "
        f"shapes at every config; SSD's draft: a third of the layers; PALLE: "
        f"{args.palle_steps:g} full-sequence forwards of {args.palle_seq:g} positions per "
        f"audio second"
    )
    devices = []
    for dev_name in args.devices.split(","):
        d = DEVICES[dev_name]
        devices.append(
            Device(
                dev_name,
                bw=d["bw"],
                o_f=d["o_f"],
                o_l=d["o_l"],
                wbytes=d["wbytes"],
                cbytes=d["wbytes"],
                peak=d["peak"],
            )
        )
    for path in filter(None, args.calibrations.split(",")):  # measured devices, as calibrated
        dev = device_from_calibration(json.loads(Path(path).read_text()))
        print(f"{dev.name}: measured calibration {path} (float32 weights, its fitted fixed costs)")
        devices.append(dev)
    for dev in devices:
        dev_name = dev.name
        for cname, lm in shapes.items():
            print(f"\n{dev_name}, config {cname} ({lm.layers} layers, width {lm.d_model})")
            print(
                "| strategy | "
                + " | ".join(f"LM-RTF b{b} | vs FAR" for b in batches)
                + " | the paper |"
            )
            print("|---|" + "--:|--:|" * len(batches) + "---|")
            far = {
                b: lm_rtf(dev, "far", lm, stats["far"], b, args.context)["lm_rtf"] for b in batches
            }
            for strategy, st in stats.items():
                extra = extras.get(strategy) or None  # the shipped modules, at every config
                if strategy.startswith("ssd"):  # the paper's ratio: a third of the layers
                    extra = {"draft_layers": max(1, lm.layers // 3)}
                if strategy == "palle":
                    extra = palle_extra
                cells = []
                for b in batches:
                    p = lm_rtf(dev, strategy, lm, st, b, args.context, extra)
                    up = far[b] / p["lm_rtf"]
                    result.append(
                        dict(
                            device=dev_name,
                            config=cname,
                            strategy=strategy,
                            batch=b,
                            lm_rtf=p["lm_rtf"],
                            speedup=up,
                            bound=p["bound"],
                        )
                    )
                    cells += [f"{p['lm_rtf']:.2e}", f"{up:.2f}x"]
                paper = next((v for k, v in PAPER_SPEEDUPS.items() if strategy.startswith(k)), "")
                print(f"| {strategy} | " + " | ".join(cells) + f" | {paper} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    devs, cfgs = [d.name for d in devices], list(shapes)
    fig, axes = plt.subplots(
        len(devs), len(cfgs), figsize=(4 * len(cfgs), 3.2 * len(devs)), squeeze=False, sharey=True
    )
    for i, dn in enumerate(devs):
        for j, cn in enumerate(cfgs):
            ax = axes[i][j]
            for strategy in stats:
                pts = [
                    (r["batch"], r["speedup"])
                    for r in result
                    if r["device"] == dn and r["config"] == cn and r["strategy"] == strategy
                ]
                ax.plot(*zip(*pts, strict=True), marker="o", label=strategy)
            ax.set_xscale("log", base=2)
            ax.axhline(1.0, color="gray", lw=0.5)
            ax.set_title(f"{dn}, {cn}", fontsize=9)
            ax.set_xlabel("batch")
            if j == 0:
                ax.set_ylabel("predicted speed-up vs FAR")
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)
    print(f"\nwrote {args.out}, {args.plot}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("calibrate")
    c.add_argument("--out", default="out/roofline_cpu.json")
    c.add_argument("--weights_mb", type=float, default=20.0, help="GPU: > 4x its L2 cache")
    c.add_argument(
        "--dtype",
        default="float32",
        help="the decode's matmul precision (bfloat16: weights and inputs, float32 sums); must "
        "match the speed rows' --precision (check refuses another)",
    )
    c.add_argument(
        "--depths",
        default="4,12",
        help="the two depths of the fixed-cost fit (the deep model's span; 1,4 compiles faster)",
    )
    k = sub.add_parser("check")
    k.add_argument("--speed", required=True)
    k.add_argument("--calibration", default="out/roofline_cpu.json")
    k.add_argument(
        "--context", type=float, default=200.0, help="mean cached positions per row during decoding"
    )
    k.add_argument("--out", default="out/roofline_check.json")
    q = sub.add_parser("predict")
    q.add_argument("--speed", required=True)
    q.add_argument(
        "--stats_from",
        default="car_deep",
        help="the backbone whose measured rows give steps and tokens per step",
    )
    q.add_argument("--configs", default="small,deep,paper")
    q.add_argument("--devices", default="h100,tpu_v5e")
    q.add_argument("--batches", default="1,8,32,256")
    q.add_argument(
        "--calibrations",
        default="benchmarks/gpu_h200_calibration.json",
        help="measured calibrations (roofline.py calibrate on that device), predicted as they "
        "were measured: float32, the fitted fixed costs ('' = none)",
    )
    q.add_argument(
        "--palle_steps",
        type=float,
        default=35.5,
        help="PALLE's full-sequence forwards per audio second (100 + 7 refine steps, measured "
        "on the full test split, RESULTS 14c; 0 = no PALLE row)",
    )
    q.add_argument(
        "--palle_seq", type=float, default=250.0, help="positions of PALLE's full-sequence forward"
    )
    q.add_argument("--context", type=float, default=200.0)
    q.add_argument("--out", default="out/roofline_predict.json")
    q.add_argument("--plot", default="benchmarks/roofline_speedup.png")
    args = ap.parse_args(argv)
    if args.cmd == "predict":
        return predict(args)
    if args.cmd == "calibrate":
        depths = tuple(int(d) for d in args.depths.split(","))
        if len(depths) != 2 or not 0 < depths[0] < depths[1]:
            raise SystemExit(
                f"roofline.py calibrate: --depths {args.depths}: expected two depths, a < b"
            )
        # a background job of a shell starts with SIGINT ignored (gpu_check.sh's parts): take
        # it back, so that a time limit's SIGINT ends the DCAR part of the fit and still writes
        # the rest (fit_fixed_costs)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        cal = calibrate(weights_mb=args.weights_mb, dtype=args.dtype, depths=depths)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(cal, indent=1))
        print(json.dumps(cal, indent=1))
        return 0
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
