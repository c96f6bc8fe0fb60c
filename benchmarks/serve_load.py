"""Load generator for `python -m jaxtts.serve`: time to first audio, latency and throughput
against the number of concurrent clients, on the loopback interface.

    python -m benchmarks.serve_load --workdir pretrained/car_small --strategies far,car:3 \
        --clients 1,2,4,8 --requests 16 --out out/serve_load

Starts the server in this process (uvicorn on a free loopback port, warmed up first) unless
`--url` names a running one. Each client is a thread with its own HTTP connection that sends
its share of `--requests` streamed requests one after another (10-word test sentences of the
built-in corpus, voice spk03, seed = request index) and reads each body to the end. Time to
first audio: from sending the request to the first audio byte after the 44-byte wav header, at
the client. Throughput: audio seconds received per wall second. Writes <out>.json and
<out>.png (p50 / p99 latency and throughput against clients, one line per strategy) and prints
a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

import numpy as np

SENTENCES = [
    "The old farmer sold three cows at the market on Monday.",
    "Where did you put the keys that were on the kitchen table?",
    "My sister will visit us with her two children next week.",
    "A small bird sang in the garden before the rain began.",
]


def one_request(client, body: dict) -> dict:
    t0 = time.perf_counter()
    first, n = None, 0
    with client.stream("POST", "/v1/audio/speech", json=body) as r:
        if r.status_code != 200:
            return {"status": r.status_code, "error": r.read().decode()[:200]}
        for piece in r.iter_bytes():
            n += len(piece)
            if first is None and n > 44:
                first = time.perf_counter() - t0
    return {
        "status": 200,
        "ttfa_s": first,
        "latency_s": time.perf_counter() - t0,
        "audio_s": max(0, n - 44) / 2 / 16000,
    }


def run_clients(url: str, clients: int, requests: int, one) -> tuple[dict, float]:
    """`requests` calls `one(client, i)` spread over `clients` threads, each with its own HTTP
    connection -> ({i: result}, wall seconds)."""
    import httpx

    out: dict[int, dict] = {}
    lock = threading.Lock()
    todo = iter(range(requests))

    def client_loop():
        with httpx.Client(base_url=url, timeout=600) as c:
            while True:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
                res = one(c, i)
                with lock:
                    out[i] = res

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client_loop) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out, time.perf_counter() - t0


def body(i: int, strategy: str) -> dict:
    """Request i: a test sentence, voice spk03, seed i."""
    return {
        "input": SENTENCES[i % len(SENTENCES)],
        "voice": "spk03",
        "strategy": strategy,
        "seed": i,
    }


def load(url: str, strategy: str, clients: int, requests: int) -> dict:
    res, wall = run_clients(url, clients, requests, lambda c, i: one_request(c, body(i, strategy)))
    out = list(res.values())
    ok = [r for r in out if r["status"] == 200]
    ttfa = np.array([r["ttfa_s"] for r in ok if r["ttfa_s"] is not None]) * 1e3
    lat = np.array([r["latency_s"] for r in ok]) * 1e3
    audio = sum(r["audio_s"] for r in ok)
    return {
        "strategy": strategy,
        "clients": clients,
        "requests": requests,
        "ok": len(ok),
        "errors": len(out) - len(ok),
        "ttfa_ms_p50": float(np.percentile(ttfa, 50)) if ttfa.size else None,
        "ttfa_ms_p99": float(np.percentile(ttfa, 99)) if ttfa.size else None,
        "latency_ms_p50": float(np.percentile(lat, 50)) if lat.size else None,
        "latency_ms_p99": float(np.percentile(lat, 99)) if lat.size else None,
        "audio_s": audio,
        "wall_s": wall,
        "throughput": audio / wall,
    }


def _rss_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def soak(
    url: str, synth, strategy: str, clients: int, requests: int, leave_every: int, slots: int
) -> dict:
    """`requests` streamed requests from `clients` threads; every `leave_every`-th client
    request reads its first audio chunk and disconnects. Then every completed request's tokens
    (its /v1/requests record) are compared with the same request served alone afterwards and
    with the offline synthesis of its text and seed (`Synthesizer.synthesize` at the server's
    batch, its line 0, and alone at batch 1), and
    this process's resident memory (the server runs here) before and after."""
    import httpx

    from jaxtts.synthesize import resolve_prompt

    rss0 = _rss_mb()

    def one(c, i: int) -> dict:
        leave = i % leave_every == leave_every - 1
        res = {"leave": leave}
        with c.stream("POST", "/v1/audio/speech", json=body(i, strategy)) as r:
            res["status"], res["id"] = r.status_code, r.headers.get("x-request-id")
            n = 0
            for piece in r.iter_bytes():
                n += len(piece)
                if leave and n > 44:
                    break  # closing the response mid-stream: the client is gone
            res["bytes"] = n
        return res

    out, wall = run_clients(url, clients, requests, one)
    time.sleep(1.0)  # the last cancellations reach their segment boundary
    rss1 = _rss_mb()
    with httpx.Client(base_url=url, timeout=60) as c:  # before the offline syntheses below
        compiles = c.get("/metrics").json()["compilations_since_warmup"]
    prompt = resolve_prompt("pretrained/car_small", speaker="spk03")
    same = differ = cancelled = missing = alone_same = alone_differ = same1 = 0
    with httpx.Client(base_url=url, timeout=60) as c:
        for i in range(requests):
            res = out.get(i)
            if res is None or res["status"] != 200:
                missing += 1
                continue
            rec = c.get(f"/v1/requests/{res['id']}").json()
            if res["leave"]:
                cancelled += rec["status"] == "cancelled"
                continue
            # the same request again, alone in the server: its tokens must not depend on what
            # else was in the batch
            r = c.post("/v1/audio/speech", json={**body(i, strategy), "stream": False})
            again = c.get(f"/v1/requests/{r.headers['x-request-id']}").json()
            ok = rec["status"] == "done" and rec["tokens"] == again["tokens"]
            alone_same += ok
            alone_differ += not ok
            # offline, at the server's batch (its line 0 is this request's row and key) and
            # alone: XLA's CPU kernels round a batch-1 step differently from a batch-8 one
            text = SENTENCES[i % len(SENTENCES)]
            kw = dict(strategy=strategy, seed=i, progress=False, vocode=False)
            off = synth.synthesize([text] * slots, prompt, **kw)[0]
            (off1,) = synth.synthesize([text], prompt, **kw)
            ok = rec["status"] == "done" and rec["tokens"] == off.tokens.tolist()
            same += ok
            differ += not ok
            same1 += rec["tokens"] == off1.tokens.tolist()
    res = {
        "strategy": strategy,
        "clients": clients,
        "requests": requests,
        "left_mid_stream": sum(r["leave"] for r in out.values()),
        "left_and_recorded_cancelled": cancelled,
        "completed_equal_alone": alone_same,
        "completed_differ_alone": alone_differ,
        "completed_equal_offline": same,
        "completed_differ": differ,
        "completed_equal_offline_batch1": same1,
        "lost": missing,
        "wall_s": wall,
        "rss_mb_before": rss0,
        "rss_mb_after": rss1,
        "compilations_since_warmup": compiles,
    }
    print(json.dumps(res), flush=True)
    return res


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a0, a1) = plt.subplots(1, 2, figsize=(10, 3.6))
    for s in dict.fromkeys(r["strategy"] for r in rows):
        rs = [r for r in rows if r["strategy"] == s]
        x = [r["clients"] for r in rs]
        a0.plot(x, [r["latency_ms_p50"] for r in rs], "o-", label=f"{s} p50")
        a0.plot(x, [r["latency_ms_p99"] for r in rs], "s--", label=f"{s} p99")
        a0.plot(x, [r["ttfa_ms_p50"] for r in rs], "^:", label=f"{s} first audio p50")
        a1.plot(x, [r["throughput"] for r in rs], "o-", label=s)
    a0.set_xlabel("concurrent clients"), a0.set_ylabel("ms"), a0.set_yscale("log")
    a1.set_xlabel("concurrent clients"), a1.set_ylabel("audio s / wall s")
    for a in (a0, a1):
        a.set_xscale("log", base=2), a.grid(alpha=0.3), a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", default="pretrained/car_small")
    ap.add_argument("--url", default=None, help="a running server (default: start one here)")
    ap.add_argument("--strategies", default="far,car:3")
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("--requests", type=int, default=16, help="requests per (strategy, clients)")
    ap.add_argument("--segment_steps", type=int, default=4)
    ap.add_argument("--slots", type=int, default=8, help="the server's --slots")
    ap.add_argument("--vocoder_frames", type=int, default=16, help="the server's --vocoder_frames")
    ap.add_argument("--vocoder_iters", type=int, default=8, help="the server's --vocoder_iters")
    ap.add_argument(
        "--soak",
        default="",
        help="CLIENTS,REQUESTS,LEAVE_EVERY (e.g. 32,200,8): after the table, that many requests "
        "with every LEAVE_EVERY-th client leaving mid-stream; completed ones vs offline",
    )
    ap.add_argument("--out", default="out/serve_load")
    args = ap.parse_args()
    strategies = args.strategies.split(",")
    if args.soak and args.url:
        sys.exit(
            "error: --soak compares with offline synthesis here: start the server here (no --url)"
        )
    live = None
    url = args.url
    if url is None:
        from jaxtts.serve import LiveServer, Scheduler, create_app
        from jaxtts.synthesize import Synthesizer

        synth = Synthesizer.from_workdir(args.workdir)
        soak_requests = int(args.soak.split(",")[1]) if args.soak else 0
        server = Scheduler(
            synth,
            args.workdir,
            max_queue=256,
            # the soak reads every request's record back, and serves each completed one again
            keep_requests=max(256, 2 * soak_requests + 64),
            segment_steps=args.segment_steps,
            slots=args.slots,
            vocoder_frames=args.vocoder_frames,
            vocoder_iters=args.vocoder_iters,
        )
        server.strategies = strategies  # warm up only these
        server.warm_up()
        live = LiveServer(create_app(server))
        url = live.url
    rows = []
    try:
        for s in strategies:
            load(url, s, 1, 2)  # warm the connection and this text length
            for n in [int(c) for c in args.clients.split(",")]:
                r = load(url, s, n, max(args.requests, n))
                rows.append(r)
                print(json.dumps(r), flush=True)
        soaked = None
        if args.soak:
            n, m, k = (int(x) for x in args.soak.split(","))
            soaked = soak(url, synth, strategies[0], n, m, k, args.slots)
    finally:
        if live is not None:
            live.close()
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    import platform
    import subprocess

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    with open(args.out + ".json", "w") as f:
        json.dump(
            {
                "command": "python -m benchmarks.serve_load " + " ".join(sys.argv[1:]),
                "commit": commit,
                "machine": f"{platform.machine()} {os.cpu_count()} cores",
                "date": time.strftime("%Y-%m-%d"),
                "workdir": args.workdir,
                "rows": rows,
                "soak": soaked,
            },
            f,
            indent=1,
        )
    plot(rows, args.out + ".png")
    print(
        "| strategy | clients | first audio p50 / p99 ms | latency p50 / p99 ms | "
        "audio s / wall s | vs 1 client |"
    )
    print("|---|--:|--:|--:|--:|--:|")
    for r in rows:
        base = next(b for b in rows if b["strategy"] == r["strategy"])["throughput"]
        print(
            f"| {r['strategy']} | {r['clients']} | {r['ttfa_ms_p50']:.0f} / {r['ttfa_ms_p99']:.0f}"
            f" | {r['latency_ms_p50']:.0f} / {r['latency_ms_p99']:.0f} | {r['throughput']:.2f}"
            f" | {r['throughput'] / base:.2f}x |"
        )


if __name__ == "__main__":
    main()
