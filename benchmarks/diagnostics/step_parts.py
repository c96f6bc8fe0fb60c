"""Where a decoding step's time goes: an XLA profile of the compiled decode loop, by model part.

    python -m benchmarks.diagnostics.step_parts --precision bfloat16 --rows \\
        far@pretrained/car_deep,car:3@pretrained/car_deep,dcar:sample@pretrained/dcar_deep

For each `<strategy>@<run folder>` row: a fixed-length decode (EOS suppressed: `--tokens` per
row; random text and prompt of `benchmarks/decode.py`'s sizes; top_p 0.6) is compiled, run
twice, then run once under `jax.profiler.trace`. Every operation XLA executed (a thunk of the
CPU backend) is attributed to the model part named by its HLO metadata (the `op_name` that JAX
and Flax record: module path and primitive, `part`) and summed. Loop-body parts are reported
per decoding step (ms), the rest (the prefill, cache set-up) per call. "thread-pool sync" is the
time the calling thread waits for XLA's worker threads. An SSD step's draft (its L forwards,
base head and draws: the `ssd_draft` scope of `jaxtts.methods.ssd.strategy`) is one part; its
verify forward lands in the layer parts beside the other rows'.

The parts' sum is the thunks' time, which is close to the wall time on 2 cores (each part's
cost includes its share of the parallel split). Profiling adds a few percent. On a GPU the
profile holds kernels, not thunks, and most time lands in "other": use XProf's trace viewer.
Shapes and windows are those of one decode, so compare rows of one run, not across machines.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import sys
import tempfile
import time

ATTN_DOTS = {  # `jaxtts.nn.attention.attend`'s einsums (keys [S, H] or [H, S]; a deferred block R)
    "ZTH,ZSH->ZTS": "logits",
    "ZTH,ZHS->ZTS": "logits",
    "ZTH,ZRH->ZTR": "logits",
    "ZTS,ZSH->ZTH": "probs.V",
    "ZTR,ZRH->ZTH": "probs.V",
}
MODULES = (  # (pattern in the op_name, part), first match wins
    (r"Policy", "DCAR policy"),
    (r"ssd_draft", "SSD draft (L forwards, base head, draws)"),  # `methods/ssd/strategy.py`
    (r"extract", "TLDR extractor"),
    (r"compress", "TLDR compressor"),
    (r"speaker", "speaker encoder"),
    (r"\.heads\b", "prediction heads"),
    (r"embed_speech|embed_text|speech_embed|text_embed", "embeddings"),
)
SYNC = "thread-pool sync"


def part(op_name: str) -> str:
    """The model part of one HLO operation from its `op_name` metadata ("" for none)."""
    if not op_name:
        return "other"
    for pattern, name in MODULES:
        if re.search(pattern, op_name):
            return name
    m = re.search(r"stack/layer_\d+/([^/]+)(?:/([^/]+))?", op_name)
    if m:
        module, sub = m.group(1), m.group(2) or ""
        if module == "attn":
            if sub in ("q", "k", "v", "o"):
                return f"attention {sub} projection"
            if sub == "qkv":  # decoding's fused layout (`jaxtts.nn.layers.fuse_projections`)
                return "attention q, k, v projection"
            return "attention " + ATTN_DOTS.get(sub, "softmax, mask, cache write")
        if module == "mlp" and sub in ("wi_gate", "wi_up", "wo", "wi"):
            return f"MLP {sub}"
        if module == "mlp" and sub == "wi_fused":
            return "MLP wi_gate + wi_up"
        return "norms, residuals, activations"
    if re.search(r"top_k|sort|cumsum|categorical|uniform|random|threefry", op_name):
        return "sampling"
    return "other"


def op_names(hlo_text: str) -> dict[str, str]:
    """HLO instruction name -> its op_name metadata; an instruction without one takes that of
    the first instruction that consumes it (XLA's own copies, bitcasts)."""
    meta: dict[str, str] = {}
    consumers: list[tuple[list[str], str]] = []
    for line in hlo_text.splitlines():
        m = re.match(r"\s*(?:ROOT )?%([\w.\-]+) = ", line)
        if not m:
            continue
        mm = re.search(r'op_name="([^"]+)"', line)
        if mm:
            meta[m.group(1)] = mm.group(1)
            consumers.append((re.findall(r"%([\w.\-]+)", line[m.end() :]), mm.group(1)))
    for operands, name in consumers:
        for op in operands:
            meta.setdefault(op, name)
    return meta


def thunk_times(trace_dir: str) -> collections.Counter:
    """ns per thunk name, summed over the trace's CPU executor lines."""
    from jax.profiler import ProfileData

    path = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)[0]
    out: collections.Counter = collections.Counter()
    for plane in ProfileData.from_file(path).planes:
        for line in plane.lines:
            if "XLAPjRtCpuClient" not in line.name and "XLAEigen" not in line.name:
                continue
            for e in line.events:
                if e.name.startswith("SlinkyThreadPool::Await"):
                    out[SYNC] += e.duration_ns
                elif not e.name.startswith(("Threadpool", "ThunkExecutor", "end:", "Slinky")):
                    out[e.name] += e.duration_ns
    return out


def profile_row(strategy: str, folder: str, args) -> dict:
    import jax
    import numpy as np

    from benchmarks.decode import random_batch
    from jaxtts.decode.driver import _decode
    from jaxtts.decode.sampling import SamplingConfig
    from jaxtts.engine import load_engine, resolve

    eng = load_engine(folder)
    batch, keys = random_batch(
        np.random.default_rng(0), eng.cfg, args.batch, args.text_len, args.prompt_len
    )
    plan = resolve(eng, strategy, precision=args.precision)
    strat = plan.strategy
    models, params = eng.decode_models_for(batch, plan)
    samp = SamplingConfig(temperature=1.0, top_p=0.6, min_tokens=args.tokens).traced()
    kw = dict(
        strategy=strat.bind(models),
        models=tuple(sorted(models.items())),
        max_new_tokens=args.tokens,
        sampling=samp,
    )
    params = dict(params)
    compiled = _decode.lower(params, batch, keys, **kw).compile()
    meta = op_names(compiled.as_text())

    def run():
        return jax.block_until_ready(compiled(params, batch, keys, sampling=samp))

    run()
    run()
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d):
            t0 = time.perf_counter()
            out = run()
            wall = time.perf_counter() - t0
        times = thunk_times(d)
    steps = int(np.max(np.asarray(out.steps)))
    per_step: collections.Counter = collections.Counter()
    per_call: collections.Counter = collections.Counter()
    for name, ns in times.items():
        src = meta.get(name, "")
        if name == SYNC:
            per_step[SYNC] += ns / 1e6 / steps
        elif "/while/body/" in src or not src:
            per_step[part(src)] += ns / 1e6 / steps
        else:
            per_call[part(src) if "prefill" not in src else "prefill"] += ns / 1e6
    return {
        "strategy": strategy,
        "folder": folder,
        "steps": steps,
        "wall_ms": 1e3 * wall,
        "ms_per_step": 1e3 * wall / steps,
        "per_step": dict(per_step),
        "per_call": dict(per_call),
    }


def table(rows: list[dict]) -> str:
    names = [f"{r['strategy']}" for r in rows]
    parts = sorted(
        {p for r in rows for p in r["per_step"]}, key=lambda p: -rows[-1]["per_step"].get(p, 0)
    )
    head = "| ms per step | " + " | ".join(names) + " |\n|---|" + "--:|" * len(rows)
    lines = [head]
    for p in parts:
        cells = [f"{r['per_step'].get(p, 0.0):.2f}" for r in rows]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    lines.append(
        "| **sum of parts** | "
        + " | ".join(f"**{sum(r['per_step'].values()):.2f}**" for r in rows)
        + " |"
    )
    lines.append(
        "| wall / steps (profiled) | " + " | ".join(f"{r['ms_per_step']:.2f}" for r in rows) + " |"
    )
    lines.append("| steps | " + " | ".join(str(r["steps"]) for r in rows) + " |")
    calls = [sum(r["per_call"].values()) for r in rows]
    lines.append(
        "| per call, ms (prefill, set-up) | " + " | ".join(f"{c:.1f}" for c in calls) + " |"
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", required=True, help="<strategy>@<run folder>, comma-separated")
    ap.add_argument("--precision", default="float32")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--text_len", type=int, default=48)
    ap.add_argument("--prompt_len", type=int, default=75)
    ap.add_argument("--out", default="", help="also write the rows as JSON here")
    args = ap.parse_args(argv)

    import jax

    from jaxtts.evaluate import split_specs

    # the parts are read off the HLO's op_name metadata, which the persistent compilation
    # cache's key leaves out by default: a cached program would bring an older code's names
    jax.config.update("jax_compilation_cache_include_metadata_in_key", True)

    rows = []
    for spec in split_specs(args.rows):
        strategy, sep, folder = spec.rpartition("@")
        if not sep or not strategy or not os.path.isdir(folder):
            print(f"error: --rows: {spec!r}: expected <strategy>@<run folder>", file=sys.stderr)
            return 2
        rows.append((strategy, folder))
    out = []
    for strategy, folder in rows:
        print(f"  profiling {strategy}@{folder} ...", file=sys.stderr, flush=True)
        out.append(profile_row(strategy, folder, args))
    print(
        f"batch {args.batch}, {args.tokens} tokens, {args.precision}; "
        f"ms per decoding step by part (XLA profile):\n"
    )
    print(table(out))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "rows": out}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
