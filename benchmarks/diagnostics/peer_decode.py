"""jaxtts decoding against Hugging Face `generate` on a same-size Qwen2 (CosyVoice 2's LM).

    pip install -e ".[bench]"          # torch + transformers (never core dependencies)
    python -m benchmarks.diagnostics.peer_decode --batch 1,8,32 --rounds 3

Both models get the `small` LM's shapes (D 256, 4 layers, 4 heads of 64, FFN 1024, SwiGLU,
RMSNorm, RoPE), random weights, float32 on the CPU, the same prefix (a 64-symbol text + BOS +
a 100-token speech prompt) and generate exactly `--tokens` tokens per row by sampling
(temperature 1, no top-k/top-p; EOS suppressed until then on both sides: jaxtts
`min_tokens`, HF `min_new_tokens`). HF uses its KV cache (`use_cache=True`) and its default
attention (SDPA); torch gets `--threads` threads (default: the machine's cores, as XLA uses).
Every (system, batch) is run once untimed first (jaxtts compiles, torch warms up); then
`--rounds` interleaved rounds time each once: round r runs every system and batch before
round r+1 starts, so drifting machine load hits all of them alike. Reported: tokens/s summed
over the batch (median, min, max over rounds), the ratio of medians, the load average.
Every timed run starts after a 0.5 s pause, so the previous system's spinning worker threads
(torch's OpenMP pool spins a while after its work) do not slow the next; torch keeps its
default thread settings (OMP_WAIT_POLICY=PASSIVE would slow HF by ~30 %).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

from benchmarks.decode import random_batch

D, LAYERS, HEADS, HEAD_DIM, FFN, K_TOK, N_TEXT, MTP = 256, 4, 4, 64, 1024, 1024, 64, 4


def jax_runner(spec: str, batch: int, args):
    import jax
    import numpy as np

    from jaxtts.decode import registry
    from jaxtts.decode.driver import decode
    from jaxtts.decode.sampling import SamplingConfig
    from jaxtts.methods.lm.model import TTSLM, LMConfig

    cfg = LMConfig(
        num_text_symbols=N_TEXT,
        num_speech_tokens=K_TOK,
        d_model=D,
        num_layers=LAYERS,
        num_heads=HEADS,
        head_dim=HEAD_DIM,
        d_ff=FFN,
        num_mtp_heads=MTP,
    )
    model = TTSLM(cfg)
    one = np.ones((1, 4), np.int32)
    import flax.linen as nn

    params = nn.unbox(
        jax.jit(model.init)(jax.random.key(0), one, np.array([4]), one, np.array([4]))
    )["params"]
    pb, keys = random_batch(np.random.default_rng(0), cfg, batch, args.text_len, args.prompt_len)
    sampling = SamplingConfig(temperature=1.0, min_tokens=args.tokens)
    strat = registry.get(spec)

    def run():
        out = decode(
            strat,
            {"target": model},
            {"target": params},
            pb,
            keys,
            max_new_tokens=args.tokens,
            sampling=sampling,
        )
        out = jax.block_until_ready(out)
        return int(np.asarray(out.length).sum())

    return run


def hf_runner(batch: int, args):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=K_TOK + 3 + N_TEXT,
        hidden_size=D,
        intermediate_size=FFN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        use_cache=True,
    )
    model = Qwen2ForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(0)
    prefix = args.text_len + 1 + args.prompt_len
    ids = torch.randint(0, K_TOK, (batch, prefix), generator=g)
    mask = torch.ones_like(ids)
    eos = K_TOK  # suppressed until --tokens by min_new_tokens

    def run():
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=args.tokens,
                min_new_tokens=args.tokens,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                use_cache=True,
                eos_token_id=eos,
                pad_token_id=eos,
            )
        return int((out.shape[1] - prefix) * batch)

    return run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", default="1,8,32")
    ap.add_argument("--systems", default="far,car:4,hf", help="jaxtts strategies and/or hf")
    ap.add_argument("--tokens", type=int, default=250)
    ap.add_argument("--text_len", type=int, default=64)
    ap.add_argument("--prompt_len", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default="out/bench_peer_decode.json")
    args = ap.parse_args(argv)
    batches = [int(b) for b in args.batch.split(",")]
    systems = [s for s in args.systems.split(",") if s]
    if "hf" in systems:
        try:
            import torch
            import transformers
        except ImportError as e:
            print(f"error: {e.name} not installed; pip install -e '.[bench]'", file=sys.stderr)
            return 2
        torch.set_num_threads(args.threads)
        versions = f"torch {torch.__version__}, transformers {transformers.__version__}"
    else:
        versions = ""
    import jax

    runners = {}
    for b in batches:
        for s in systems:
            runners[(s, b)] = hf_runner(b, args) if s == "hf" else jax_runner(s, b, args)
            t0 = time.perf_counter()
            runners[(s, b)]()  # compile / warm up
            print(f"warm-up {s} B={b}: {time.perf_counter() - t0:.1f} s", flush=True)
    load0 = os.getloadavg()
    times: dict[tuple, list[float]] = {k: [] for k in runners}
    for r in range(args.rounds):
        for key, run in runners.items():
            time.sleep(0.5)
            t0 = time.perf_counter()
            n = run()
            dt = time.perf_counter() - t0
            times[key].append(n / dt)
            print(f"round {r + 1}: {key[0]:6s} B={key[1]:3d} {n / dt:9.1f} tok/s", flush=True)
    load1 = os.getloadavg()
    rows = []
    for (s, b), v in times.items():
        rows.append(
            {
                "system": s,
                "batch": b,
                "median": statistics.median(v),
                "min": min(v),
                "max": max(v),
                "rounds": v,
            }
        )
    med = {(r["system"], r["batch"]): r["median"] for r in rows}
    print(
        f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} cores, jax "
        f"{jax.__version__} ({jax.default_backend()}){', ' + versions if versions else ''}, "
        f"torch threads {args.threads}; load average {load0[0]:.2f} before, {load1[0]:.2f} "
        f"after; {args.tokens} tokens/row, tokens/s summed over the batch, median [min-max] "
        f"of {args.rounds} interleaved rounds\n"
    )
    print("| system | " + " | ".join(f"batch {b}" for b in batches) + " |")
    print("|---|" + "--:|" * len(batches))
    for s in systems:
        cells = [
            f"{med[(s, b)]:.0f} [{min(times[(s, b)]):.0f}-{max(times[(s, b)]):.0f}]"
            for b in batches
        ]
        print(
            f"| {'HF generate' if s == 'hf' else 'jaxtts ' + s.upper()} | "
            + " | ".join(cells)
            + " |"
        )
    if "hf" in systems:
        for s in systems:
            if s != "hf":
                print(
                    f"| jaxtts {s.upper()} / HF | "
                    + " | ".join(f"**{med[(s, b)] / med[('hf', b)]:.2f}x**" for b in batches)
                    + " |"
                )
    for s in systems:
        if len(batches) > 1:
            print(
                f"{s}: batch {batches[-1]} / batch {batches[0]} throughput = "
                f"{med[(s, batches[-1])] / med[(s, batches[0])]:.1f}x"
            )
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(
            {"args": vars(args), "versions": versions, "load": [load0, load1], "rows": rows},
            f,
            indent=1,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
