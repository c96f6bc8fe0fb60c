"""Decoding strategies by name: `get('far')`, `get('car:3')`.

Each entry maps a name to `"module:factory"`; the module is imported only when that strategy
is asked for, so one method's code (and its dependencies) never loads for another. A factory
takes the spec's argument (the text after ':' or None) and returns a `Strategy`
(`jaxtts.decode.driver`). A method adds its strategies with `register` or an entry below.
"""

from __future__ import annotations

import functools
import importlib

from jaxtts.errors import ConfigError

_FACTORIES: dict[str, str] = {
    "far": "jaxtts.methods.lm.strategies:far",
    "car": "jaxtts.methods.lm.strategies:car",
    "dcar": "jaxtts.methods.dcar.strategies:dcar",
    "vadusa": "jaxtts.methods.dcar.strategies:vadusa",
    "ssd": "jaxtts.methods.ssd.strategy:ssd",
    "tldr": "jaxtts.methods.tldr.strategy:tldr",
}
_EXAMPLES = "e.g. far, car:3, vadusa:2, dcar, ssd:L=3,beta=0.4, tldr"


def register(name: str, target: str) -> None:
    """Register `name` -> `"module:factory"`."""
    if name in _FACTORIES:
        raise ValueError(f"decoding strategy {name!r} registered twice")
    _FACTORIES[name] = target
    get.cache_clear()


def names() -> list[str]:
    return sorted(_FACTORIES)


@functools.lru_cache(maxsize=256)
def get(spec: str):
    """'far' | 'car:<c>' (| later strategies) -> strategy object (frozen, so one parse per
    spec serves every call: the synthesizer's check and the engine's decode share it)."""
    name, _, arg = spec.strip().partition(":")
    if name not in _FACTORIES:
        raise ConfigError(
            f"--strategy {spec!r}: unknown strategy {name!r}, expected one of "
            f"{names()} ({_EXAMPLES})"
        )
    module, fn = _FACTORIES[name].split(":")
    return getattr(importlib.import_module(module), fn)(arg or None)
