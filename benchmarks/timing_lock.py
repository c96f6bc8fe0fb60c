"""One timed section at a time on a shared accelerator, with the host to itself.

`benchmarks/gpu_check.sh` compiles several benchmarks at once (compilation runs on the host's
cores and fills a short GPU lease) but must time them one after another: every timed section
takes an exclusive `flock` on the file that `JAXTTS_TIMING_LOCK` names. Unset: no lock.

A decode step that is short on the GPU is bound by the host that launches its kernels, so a
timing is also disturbed by other processes compiling on the host's cores (the first run
showed a batch-1 calibration slower than batch 8). With `JAXTTS_TIMING_PAUSE=<folder>`, each
process registers its pid there, and the lock holder stops every other registered process
(SIGSTOP) for its timed section and resumes them (SIGCONT) after it, also when interrupted.

Re-entrant within a process (a second flock on a new descriptor of the same file would wait
for the first).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

_held = 0  # nesting depth in this process


def _register(folder: str) -> None:
    import atexit

    os.makedirs(folder, exist_ok=True)
    mine = os.path.join(folder, str(os.getpid()))
    open(mine, "w").close()
    atexit.register(lambda: os.path.exists(mine) and os.remove(mine))


def _others(folder: str) -> list[int]:
    """The other registered processes still running with this pause folder (a pid that ended
    and was reused by some other program is left alone)."""
    pids = []
    for name in os.listdir(folder):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if f"JAXTTS_TIMING_PAUSE={folder}".encode() in f.read():
                    pids.append(int(name))
        except OSError:
            pass
    return pids


def _signal_all(pids: list[int], sig) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # ended (its timeout) or not ours


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

    pause = os.environ.get("JAXTTS_TIMING_PAUSE")
    with open(path, "a") as f:
        t0 = time.perf_counter()
        fcntl.flock(f, fcntl.LOCK_EX)
        waited = time.perf_counter() - t0
        stopped = _others(pause) if pause else []
        _signal_all(stopped, signal.SIGSTOP)
        print(
            f"  [timing lock {label}: waited {waited:.0f} s; {len(stopped)} other processes "
            "paused]",
            flush=True,
        )
        _held += 1
        try:
            yield
        finally:
            _held -= 1
            _signal_all(stopped, signal.SIGCONT)
            fcntl.flock(f, fcntl.LOCK_UN)


if os.environ.get("JAXTTS_TIMING_PAUSE"):  # every process that may take the lock registers
    _register(os.environ["JAXTTS_TIMING_PAUSE"])
