"""Global KV-cache bytes against output duration: the token-level backbone (FAR) against TLDR
with patch sizes P (the backbone caches one slot per patch), one row, a 2 s prompt.

    python -m benchmarks.diagnostics.tldr_kv --backbone pretrained/car_small --patches 2,4,8 \
        --out benchmarks/tldr_kv

The text prefix (prompt transcript + target text, phonemes) grows with the duration at
`--symbols_per_second`; it is not compressed, except in a `P:Q` entry of `--patches` (TLDR
with `tldr.text_patch` Q: one text slot per Q symbols, e.g. `--patches 4,4:4`; `P:Q:M` adds
the extractor's text memory of `tldr.ext_text` M, e.g. `4:3:64`; `P:Q:M:L` caches the text in
L layers only, `tldr.text_layers`, e.g. `4:1:0:4`). Bytes = slots x the
backbone's K+V bytes per slot (all layers, float32) + the text memory, from
`jaxtts.methods.tldr.engine.global_kv_bytes` (the same count the evaluate column uses).
Writes `<out>.png`; prints a markdown table (MiB, and TLDR / FAR).
"""

from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backbone", default="pretrained/car_small")
    ap.add_argument(
        "--patches",
        default="2,4,8",
        help="P, P:Q, P:Q:M or P:Q:M:L (Q = tldr.text_patch, M = tldr.ext_text, "
        "L = layers caching the text, tldr.text_layers; 0 = all)",
    )
    ap.add_argument(
        "--symbols_per_second",
        type=float,
        default=15.0,
        help="text symbols per second of speech (15.05 on the built-in test "
        "split's phonemes): the text prefix is the prompt's and the output's",
    )
    ap.add_argument("--prompt_seconds", type=float, default=2.0)
    ap.add_argument("--out", default="benchmarks/tldr_kv")
    args = ap.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from jaxtts.errors import JaxttsError
    from jaxtts.methods.lm.model import LMConfig
    from jaxtts.methods.tldr.engine import global_kv_bytes
    from jaxtts.run_folder import RunFolder

    try:
        run = RunFolder(args.backbone)
        cfg = LMConfig.from_config(run.read_config("lm").model, saved=True)
        rate = float(run.read_data_info().get("frame_rate", 25.0))
    except JaxttsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    per_slot = cfg.kv_bytes_per_token()
    prompt = int(round(args.prompt_seconds * rate))
    secs = list(range(4, 21, 2))
    curves = {"FAR": (1, 1, 0, 0)}
    for entry in args.patches.split(","):
        fields = entry.strip().split(":")
        try:
            pqm = tuple(int(f) for f in fields) + (1, 0, 0)[len(fields) - 1 :]
        except ValueError:
            pqm = ()
        if len(fields) > 4 or len(pqm) != 4:
            print(
                f"error: --patches {entry!r}: expected P, P:Q, P:Q:M or P:Q:M:L (integers)",
                file=sys.stderr,
            )
            return 2
        if min(pqm[:2]) < 1 or min(pqm[2:]) < 0 or pqm[3] > cfg.num_layers:
            print(
                f"error: --patches {entry!r}: expected P, Q >= 1, M >= 0 and "
                f"0 <= L <= {cfg.num_layers}",
                file=sys.stderr,
            )
            return 2
        p, q, m, n = pqm
        name = f"TLDR P={p}" + (f" Q={q}" if q > 1 else "") + (f" M={m}" if m else "")
        curves[name + (f" L={n}" if n else "")] = pqm

    def text_len(s):
        return int(round(args.symbols_per_second * (args.prompt_seconds + s)))

    mib = {
        name: [global_kv_bytes(cfg, text_len(s), prompt, int(s * rate), *pqm) / 2**20 for s in secs]
        for name, pqm in curves.items()
    }
    print(
        f"{args.backbone}: {per_slot} bytes per slot, {rate:g} tokens/s, text "
        f"{args.symbols_per_second:g} symbols per second of speech, prompt "
        f"{args.prompt_seconds:g} s\n"
    )
    print(
        "| output s | "
        + " | ".join(f"{n} MiB" for n in curves)
        + " | "
        + " | ".join(f"{n} / FAR" for n in list(curves)[1:])
        + " |"
    )
    print("|--:|" + "--:|" * (2 * len(curves) - 1))
    for i, s in enumerate(secs):
        vals = [f"{mib[n][i]:.2f}" for n in curves]
        ratios = [f"{mib[n][i] / mib['FAR'][i]:.2f}" for n in list(curves)[1:]]
        print(f"| {s} | " + " | ".join(vals + ratios) + " |")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name in curves:
        ax.plot(secs, mib[name], "o-" if name == "FAR" else "s--", label=name)
    ax.set_xlabel("output duration (s)")
    ax.set_ylabel("global KV cache, one row (MiB)")
    ax.set_title(f"{args.backbone}: {cfg.num_layers} layers, D {cfg.d_model}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out + ".png", dpi=100)
    print(f"\n-> {args.out}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
