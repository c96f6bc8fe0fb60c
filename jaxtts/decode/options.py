"""Decode options: a typed dataclass built from `config.decode` in one place."""

from __future__ import annotations

import dataclasses
import math

from jaxtts.decode.sampling import SamplingConfig
from jaxtts.errors import ConfigError

_KEYS = (
    "strategy",
    "greedy",
    "temperature",
    "top_k",
    "top_p",
    "min_tokens",
    "max_seconds",
    "precision",
)
PRECISIONS = ("float32", "bfloat16")


def check_precision(precision: str) -> str:
    """`precision` if it is one of `PRECISIONS`, else a one-line ConfigError."""
    if precision not in PRECISIONS:
        raise ConfigError(f"decode.precision={precision!r}: expected one of {list(PRECISIONS)}")
    return precision


@dataclasses.dataclass(frozen=True)
class DecodeOptions:
    """What a synthesis call decodes with: the strategy spec, sampling, the length cap and the
    matmul precision (`jaxtts.decode.precision`: float32, or bfloat16 weights and matmul
    inputs with float32 accumulation; the parameters on disk stay float32)."""

    strategy: str = "far"
    sampling: SamplingConfig = SamplingConfig()
    max_seconds: float = 12.0
    precision: str = "float32"

    def max_new_tokens(self, frame_rate: float) -> int:
        """The length cap in output units (tokens or frames) at `frame_rate` per second."""
        return max(1, int(math.ceil(self.max_seconds * frame_rate)))

    @classmethod
    def from_config(cls, decode_cfg, **overrides) -> DecodeOptions:
        """From `config.decode` (a mapping) with command-line overrides (None = keep)."""
        d = dict(decode_cfg)
        unknown = sorted(set(d) - set(_KEYS))
        if unknown:
            raise ConfigError(f"decode.{unknown[0]}: unknown key, expected one of {list(_KEYS)}")
        bad = sorted(set(overrides) - set(_KEYS))
        if bad:
            raise ConfigError(f"decode option {bad[0]!r}: unknown, expected one of {list(_KEYS)}")
        d.update({k: v for k, v in overrides.items() if v is not None})
        max_s = float(d.get("max_seconds", 12.0))
        if not max_s > 0:
            raise ConfigError(f"decode.max_seconds={max_s}: expected > 0")
        precision = check_precision(str(d.get("precision", "float32")))
        return cls(str(d.get("strategy", "far")), SamplingConfig.from_config(d), max_s, precision)
