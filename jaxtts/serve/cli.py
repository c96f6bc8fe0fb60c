"""The command line of `python -m jaxtts.serve`: flags -> a `Scheduler` -> the app, served
by uvicorn on the loopback interface; and `LiveServer`, the app on a free port in a thread
(tests and benchmarks: real sockets, so a client can leave mid-stream)."""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time

from jaxtts.errors import JaxttsError
from jaxtts.serve.app import create_app
from jaxtts.serve.scheduler import Scheduler

log = logging.getLogger("jaxtts.serve")


class LiveServer:
    """uvicorn serving `app` on a free loopback port in a daemon thread (tests and
    benchmarks: real sockets, so a client can leave mid-stream). `.url`, `.close()`."""

    def __init__(self, app, host: str = "127.0.0.1", timeout: float = 30.0):
        import uvicorn  # start-up: uvicorn 64 ms, only to listen

        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=0, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        t0 = time.perf_counter()
        while not self.server.started:
            if time.perf_counter() - t0 > timeout or not self.thread.is_alive():
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://{host}:{port}"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m jaxtts.serve",
        description="An HTTP server for one shipped model (OpenAI-shaped /v1/audio/speech).",
    )
    ap.add_argument("--workdir", required=True, help="a run folder, e.g. pretrained/car_small")
    ap.add_argument("--host", default="127.0.0.1", help="interface (default: loopback only)")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--max_queue", type=int, default=16, help="waiting requests before 503")
    ap.add_argument("--segment_steps", type=int, default=4, help="decode steps per chunk")
    ap.add_argument(
        "--slots", type=int, default=8, help="requests decoded together (0: one at a time)"
    )
    ap.add_argument(
        "--vocoder_frames",
        type=int,
        default=16,
        help="after the first audio, vocode at least this many new mel frames at a time",
    )
    ap.add_argument(
        "--vocoder_iters",
        type=int,
        default=8,
        help="Griffin-Lim iterations per streamed window (offline synthesis: 32; 8 and 16 "
        "measured the same CER against the offline audio, RESULTS serve)",
    )
    ap.add_argument("--max_chars", type=int, default=600, help="longest input text accepted")
    ap.add_argument("--keep_requests", type=int, default=256, help="records for /v1/requests")
    ap.add_argument("--no_warmup", action="store_true", help="skip compiling before serving")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        import uvicorn  # start-up: uvicorn 64 ms, after parsing args

        from jaxtts.synthesize import Synthesizer  # start-up: jax 820 ms, after parsing args

        synth = Synthesizer.from_workdir(args.workdir)
        sched = Scheduler(
            synth,
            args.workdir,
            max_queue=args.max_queue,
            segment_steps=args.segment_steps,
            max_chars=args.max_chars,
            keep_requests=args.keep_requests,
            slots=args.slots,
            vocoder_frames=args.vocoder_frames,
            vocoder_iters=args.vocoder_iters,
        )
        if not args.no_warmup:
            log.info("compiling %s (once, before serving)", ", ".join(sched.strategies))
            sched.warm_up()
    except JaxttsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    log.info("serving %s on http://%s:%d/", args.workdir, args.host, args.port)
    uvicorn.run(create_app(sched), host=args.host, port=args.port, log_level="warning")
    return 0
