"""Decoding strategies of every family, by name: one grammar, parsed once.

A spec is `<name>` or `<name>:<argument>` (`car:3`, `ssd:L=3,beta=0.4`, `mdm:topk:4`,
`palle:steps=50,refine=3`). Each entry maps a name to `"module:factory"` plus the family that
decodes it, its syntax and one line on what it is; the module is imported only when that
strategy is asked for, so one method's code (and its dependencies) never loads for another. A
factory takes the spec's argument (the text after the first ':' or None) and returns a frozen
strategy object with a `.name` (its canonical spec): a driver `Strategy`
(`jaxtts.decode.driver`) for the step-wise LM families, a small settings object for MDM and
PALLE, whose engines run their own loops. `get` caches by spec: the synthesizer's check and the
engine's decode share one parse.

`describe()` is the table `infer.py --help`, `python -m jaxtts.evaluate --help` and
`docs/CLI.md` show (`python -m jaxtts.decode.registry` prints it; a test fails when
docs/CLI.md is stale).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib

from jaxtts.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Entry:
    target: str  # "module:factory"
    family: str  # the run family that decodes it (jaxtts/families.py)
    syntax: str
    what: str


_ENTRIES: dict[str, Entry] = {
    "far": Entry(
        "jaxtts.methods.lm.strategies:far",
        "lm",
        "far",
        "one token per step (the autoregressive baseline)",
    ),
    "car": Entry(
        "jaxtts.methods.lm.strategies:car",
        "lm",
        "car:<c>",
        "c tokens per step from heads 1..c (c <= K)",
    ),
    "vadusa": Entry(
        "jaxtts.methods.dcar.strategies:vadusa",
        "lm",
        "vadusa:<tau>",
        "heads draft, the base head verifies within its top-tau",
    ),
    "dcar": Entry(
        "jaxtts.methods.dcar.strategies:dcar",
        "dcar",
        "dcar[:sample][,sizes=<lo>-<hi>]",
        "a learned chunk size per step (argmax, or sampled from the policy; only sizes lo..hi)",
    ),
    "ssd": Entry(
        "jaxtts.methods.ssd.strategy:ssd",
        "ssd",
        "ssd:L=<n>,beta=<b>",
        "speculative decoding, a draft of the target's own layers, tolerance beta",
    ),
    "draft": Entry(
        "jaxtts.methods.ssd.strategy:draft", "ssd", "draft", "FAR on the SSD draft alone"
    ),
    "tldr": Entry(
        "jaxtts.methods.tldr.strategy:tldr",
        "tldr",
        "tldr",
        "patch-level decoding: P tokens per backbone step",
    ),
    "mdm": Entry(
        "jaxtts.methods.mdm.orders:strategy",
        "mdm",
        "mdm:<order>",
        "masked diffusion; order random, l2r, r2l, swap:<lam>, top1, top1*, topk:<k> or duration",
    ),
    "gradtts": Entry(
        "jaxtts.methods.mdm.gradtts:strategy",
        "mdm",
        "gradtts[:<steps>], gradtts:length",
        "the Grad-TTS score decoder of an MDM run (baseline)",
    ),
    "par": Entry(
        "jaxtts.methods.palle.engine:strategy",
        "palle",
        "par[:steps=,ratio=,scale=]",
        "pseudo-autoregressive span decoding at fixed steps (stage one)",
    ),
    "palle": Entry(
        "jaxtts.methods.palle.engine:strategy",
        "palle",
        "palle[:steps=,ratio=,refine=,gamma=,scale=]",
        "stage one + NAR refinement",
    ),
    "nar": Entry(
        "jaxtts.methods.palle.engine:strategy",
        "palle",
        "nar[:steps=,scale=]",
        "MaskGCT-style non-autoregressive decoding",
    ),
}
_EXAMPLES = "e.g. far, car:3, dcar, ssd:L=3,beta=0.4, tldr, mdm:top1, palle:refine=3"


def register(name: str, target: str, family: str = "", syntax: str = "", what: str = "") -> None:
    """Register `name` -> `"module:factory"` (a factory takes the argument, see above)."""
    if name in _ENTRIES:
        raise ValueError(f"decoding strategy {name!r} registered twice")
    _ENTRIES[name] = Entry(target, family, syntax or name, what)
    get.cache_clear()


def names(family: str | None = None) -> list[str]:
    """Every strategy name, or those of one family."""
    return sorted(n for n, e in _ENTRIES.items() if family is None or e.family == family)


def family_of(spec: str) -> str | None:
    e = _ENTRIES.get(str(spec).strip().partition(":")[0])
    return e.family if e else None


@functools.lru_cache(maxsize=256)
def get(spec: str):
    """A spec -> its strategy object (frozen: one parse per spec serves every call)."""
    name, _, arg = str(spec).strip().partition(":")
    if name not in _ENTRIES:
        raise ConfigError(
            f"--strategy {spec!r}: unknown strategy {name!r}, expected one of "
            f"{names()} ({_EXAMPLES})"
        )
    module, fn = _ENTRIES[name].target.split(":")
    factory = getattr(importlib.import_module(module), fn)
    return factory(arg or None) if fn != "strategy" else factory(name, arg or None)


def check_family(spec: str, family: str, offered: str) -> None:
    """ConfigError unless `spec` is one of `family`'s strategies; `offered` names them."""
    get(spec)  # unknown names and bad arguments first
    if family_of(spec) != family:
        raise ConfigError(f"--strategy {spec!r}: a {family} run decodes with {offered}")


def syntax_by_family() -> list[tuple[str, str]]:
    """(syntax, family) of every strategy, grouped by family."""
    return [(e.syntax, e.family) for e in sorted(_ENTRIES.values(), key=lambda e: e.family)]


def describe(markdown: bool = False) -> str:
    """The strategy table: syntax, family, what it is (one line each)."""
    rows = sorted(_ENTRIES.values(), key=lambda e: (e.family, e.syntax))
    if markdown:
        lines = ["| strategy | run family | what it is |", "|---|---|---|"]
        lines += [f"| `{e.syntax}` | {e.family} | {e.what} |" for e in rows]
        return "\n".join(lines)
    w = max(len(e.syntax) for e in rows)
    return "\n".join(f"{e.syntax:<{w}}  [{e.family}] {e.what}" for e in rows)


if __name__ == "__main__":
    print(describe(markdown=True))
