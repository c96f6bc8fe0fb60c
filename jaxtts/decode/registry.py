"""Decoding strategies by name: `get('far')`, `get('car:3')`.

A strategy is a callable `(params, batch: PromptBatch, keys [B], *, cfg: LMConfig,
max_new_tokens: int, sampling: SamplingConfig) -> DecodeOutput` with a `name` and a
`check(cfg)` that rejects models it cannot run on. New strategies (one file each) register a
factory `spec argument (str | None) -> strategy` with `register`.
"""

from __future__ import annotations

from collections.abc import Callable

from jaxtts.decode.chunked import ChunkedAR
from jaxtts.errors import ConfigError

_FACTORIES: dict[str, Callable[[str | None], object]] = {}


def register(name: str, factory: Callable[[str | None], object]) -> None:
    if name in _FACTORIES:
        raise ValueError(f"decoding strategy {name!r} registered twice")
    _FACTORIES[name] = factory


def names() -> list[str]:
    return sorted(_FACTORIES)


def get(spec: str):
    """'far' | 'car:<c>' (| later strategies) -> strategy object."""
    name, _, arg = spec.strip().partition(":")
    if name not in _FACTORIES:
        raise ConfigError(f"--strategy {spec!r}: unknown strategy {name!r}, expected one of "
                          f"{names()} (e.g. far, car:3)")  # fmt: skip
    return _FACTORIES[name](arg or None)


def _far(arg):
    if arg is not None:
        raise ConfigError(f"--strategy far:{arg}: 'far' takes no argument")
    return ChunkedAR(1)


def _car(arg):
    try:
        c = int(arg)
    except (TypeError, ValueError):
        raise ConfigError(f"--strategy car:{arg}: expected car:<chunk size>, e.g. car:3") from None
    return ChunkedAR(c)


register("far", _far)
register("car", _car)
