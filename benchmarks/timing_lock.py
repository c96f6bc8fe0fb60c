"""One timed section at a time on a shared accelerator.

`benchmarks/gpu_check.sh` compiles several benchmarks at once (compilation runs on the host's
cores and fills a short GPU lease) but must time them one after another: every timed section
takes an exclusive `flock` on the file that `JAXTTS_TIMING_LOCK` names. Unset: no lock.
"""

from __future__ import annotations

import contextlib
import os
import time

_held = 0  # nesting depth in this process


@contextlib.contextmanager
def exclusive(label: str = ""):
    """Hold the timing lock (if `JAXTTS_TIMING_LOCK` is set) for the body; prints the wait."""
    global _held
    path = os.environ.get("JAXTTS_TIMING_LOCK")
    if not path or _held:
        _held += 1
        try:
            yield
        finally:
            _held -= 1
        return
    import fcntl

    with open(path, "a") as f:
        t0 = time.perf_counter()
        fcntl.flock(f, fcntl.LOCK_EX)
        waited = time.perf_counter() - t0
        print(f"  [timing lock {label}: waited {waited:.0f} s]", flush=True)
        _held += 1
        try:
            yield
        finally:
            _held -= 1
            fcntl.flock(f, fcntl.LOCK_UN)
