"""Benchmark: build the built-in corpus from scratch, then the cached and resumed rebuilds.

    python -m benchmarks.corpus_build [--num_utterances 2000 --seed 0 --workers N --out DIR]

Without --out it builds into a fresh temp folder (deleted afterwards) so the timing is a cold
build. Prints wall time, utterances/s, hours of audio, realtime factor, the cache-hit time and
the time to resume after deleting a quarter of the wavs. Requirement: < 5 min for 2000+
utterances on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from jaxtts.data.corpus import build_corpus, corpus_stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num_utterances", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--out", default=None, help="build here (kept); default: a temp folder")
    args = ap.parse_args()
    tmp = None if args.out else tempfile.mkdtemp(prefix="jaxtts_corpus_bench_")
    out = Path(args.out) if args.out else Path(tmp) / "builtin"
    kw = dict(num_utterances=args.num_utterances, seed=args.seed, workers=args.workers)
    try:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(
            f"cpus {os.cpu_count()}, workers {args.workers or os.cpu_count()}, "
            f"load average before {load:.2f}"
        )
        t0 = time.perf_counter()
        build_corpus(out, progress=True, **kw)
        cold = time.perf_counter() - t0
        stats = corpus_stats(out)
        n, hours = stats["utterances"], stats["hours"]
        splits = ", ".join(f"{k} {v['utterances']}" for k, v in stats["splits"].items())
        print(
            f"cold build: {cold:.1f} s for {n} utterances ({splits}) = {n / cold:.1f} utt/s, "
            f"{hours:.2f} h of audio ({hours * 3600 / cold:.0f}x realtime)"
        )

        t0 = time.perf_counter()
        build_corpus(out, progress=False, **kw)
        print(f"cache hit: {1000 * (time.perf_counter() - t0):.1f} ms")

        wavs = sorted(out.glob("wavs/*/*.wav"))
        for p in wavs[::4]:
            p.unlink()
        (out / "done").unlink()
        t0 = time.perf_counter()
        build_corpus(out, progress=False, **kw)
        print(f"resume after deleting {len(wavs[::4])} wavs: {time.perf_counter() - t0:.1f} s")
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"load average after {load:.2f}")
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
