"""Speed and memory measurement: RTF with compile time separated, LM-RTF, throughput, memory.

Definitions (METHODS.md, Evaluation):
  RTF                    = synthesis wall time / seconds of audio produced (batch 1, warm)
  LM-RTF                 = token-generator wall time / seconds of audio
  tokens/s               = generated speech tokens / token-generator wall time
  forwards per audio s   = model forward calls (decoding steps) / seconds of audio
  KV bytes per audio s   = KV-cache bytes / seconds of audio
Compile time is the wall time of the first call (tracing + XLA compilation + one run); it is
reported separately and never enters the RTF.
"""

from __future__ import annotations

import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any


def block(x: Any) -> Any:
    """Wait for all JAX arrays in the pytree `x` (no-op without JAX arrays)."""
    try:
        import jax  # start-up: jax 1 s; a no-op without jax

        return jax.block_until_ready(x)
    except (ImportError, TypeError):
        return x


class Timer:
    """Wall-clock context manager: `with Timer() as t: ...`; `t.elapsed` in seconds."""

    def __init__(self) -> None:
        self.start = 0.0
        self.elapsed = 0.0

    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.elapsed = time.perf_counter() - self.start


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return float(num) / float(den)


def speed_stats(
    wall_s: float,
    audio_s: float,
    lm_s: float | None = None,
    num_tokens: float | None = None,
    num_forwards: float | None = None,
    kv_cache_bytes: float | None = None,
) -> dict[str, float | None]:
    """The speed columns from totals (None where an input is missing or audio_s is 0)."""
    return {
        "rtf": _ratio(wall_s, audio_s),
        "lm_rtf": _ratio(lm_s, audio_s),
        "tokens_per_s": _ratio(num_tokens, lm_s if lm_s else wall_s),
        "forwards_per_audio_s": _ratio(num_forwards, audio_s),
        "kv_bytes_per_audio_s": _ratio(kv_cache_bytes, audio_s),
    }


@dataclass
class RtfResult:
    """Result of `measure_rtf` (times in seconds)."""

    compile_s: float  # first call (compile + one run)
    run_s: list[float] = field(default_factory=list)  # timed warm calls
    audio_s: float = 0.0  # audio seconds produced per call
    rtf: float | None = None  # median(run_s) / audio_s

    @property
    def median_run_s(self) -> float:
        return statistics.median(self.run_s) if self.run_s else float("nan")

    def to_dict(self) -> dict:
        return {**asdict(self), "median_run_s": self.median_run_s}


def measure_rtf(
    fn: Callable[[], Any],
    n_warmup: int = 1,
    n_runs: int = 3,
    audio_seconds: float | Callable[[Any], float] | None = None,
) -> RtfResult:
    """Time `fn()` (results are block_until_ready'd): first call = compile, then warm runs.

    `n_warmup` counts the compile call; further warm-up calls are untimed. `audio_seconds` is a
    number or a function of `fn`'s result; RTF = median warm wall time / audio seconds.
    """
    if n_warmup < 1 or n_runs < 1:
        raise ValueError(f"measure_rtf: n_warmup={n_warmup}, n_runs={n_runs}, expected >= 1")
    with Timer() as t:
        out = block(fn())
    compile_s = t.elapsed
    for _ in range(n_warmup - 1):
        out = block(fn())
    runs = []
    for _ in range(n_runs):
        with Timer() as t:
            out = block(fn())
        runs.append(t.elapsed)
    audio = audio_seconds(out) if callable(audio_seconds) else audio_seconds
    res = RtfResult(compile_s=compile_s, run_s=runs, audio_s=float(audio or 0.0))
    res.rtf = _ratio(res.median_run_s, res.audio_s)
    return res


def peak_host_rss_bytes() -> int:
    """Peak resident set size of this process (bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # Linux reports KiB


def device_memory_stats(device: Any = None) -> dict[str, int] | None:
    """{'bytes_in_use', 'peak_bytes_in_use', 'bytes_limit'} of a JAX device, or None (CPU)."""
    try:
        import jax  # start-up: jax 1 s; None without jax

        dev = device if device is not None else jax.devices()[0]
        stats = dev.memory_stats()
    except Exception:  # no backend / not supported
        return None
    if not stats:
        return None
    keys = ("bytes_in_use", "peak_bytes_in_use", "bytes_limit")
    return {k: int(stats[k]) for k in keys if k in stats}


def memory_report() -> dict[str, Any]:
    """Peak host RSS and device memory (None where unavailable), for results.json."""
    return {"peak_host_rss_bytes": peak_host_rss_bytes(), "device": device_memory_stats()}
