"""Open-domain English sentences from WordNet's usage examples (Debian `wordnet-base`).

    sentences = open_domain_sentences()            # every kept sentence, a fixed order
    pools = open_domain_pools(seed=0)              # {'train': [...], 'dev': [...], 'test': [...]}

WordNet 3.0's glosses carry ~48,000 quoted usage examples written by lexicographers ("the
team is a unit", "lard was also used, though its congener, butter, was more frequently
employed"): natural, varied English with names, numbers and long clauses, unlike the corpus
grammar. They are filtered to speakable English (`keep`: 5..24 words after normalisation, only
Latin letters, digits and plain punctuation, no unbalanced quotes / brackets, no
`speech_warnings`), capitalised, given a full stop, and de-duplicated by normalised text.

The three pools are disjoint by normalised text and fixed by a hash of it (not by position):
a sentence's pool never changes when the source or the filter gains other sentences, so a test
sentence can never occur in training.
"""

from __future__ import annotations

import hashlib
import os
import re
from functools import lru_cache
from pathlib import Path

from jaxtts.data.text import normalize_text, speech_warnings
from jaxtts.errors import MissingDependencyError

__all__ = ["WORDNET_DIR", "keep", "open_domain_pools", "open_domain_sentences"]

WORDNET_DIR = Path(os.environ.get("JAXTTS_WORDNET_DIR", "/usr/share/wordnet"))
MIN_WORDS, MAX_WORDS = 5, 24
TEST_SHARE, DEV_SHARE = 0.05, 0.03  # by hash of the normalised text
_RE_QUOTED = re.compile(r'"([^"]+)"')
_RE_OK = re.compile(r"^[A-Za-z0-9 ,.;:!?'$%&-]+$")


def keep(text: str) -> str | None:
    """The sentence as the corpus speaks it, or None when it is not plain speakable English."""
    s = " ".join(text.split()).strip(" ;:,-")
    if not s or not _RE_OK.match(s) or "--" in s or s.count("'") > 3:
        return None
    n = len(normalize_text(s).split())
    if not MIN_WORDS <= n <= MAX_WORDS or speech_warnings(s):
        return None
    if len(re.findall(r"[A-Z]{2,}", s)) > 0:  # acronyms: the voices spell them differently
        return None
    s = s[0].upper() + s[1:]
    return s if s[-1] in ".!?" else s + "."


@lru_cache(maxsize=2)
def open_domain_sentences(wordnet_dir: str | os.PathLike = WORDNET_DIR) -> tuple[str, ...]:
    """Every kept WordNet example, de-duplicated, in the order of data.noun/verb/adj/adv."""
    folder = Path(wordnet_dir)
    files = [folder / f"data.{pos}" for pos in ("noun", "verb", "adj", "adv")]
    if not all(f.is_file() for f in files):
        raise MissingDependencyError(
            f"{folder}: WordNet data files (data.noun ...) not found, the open-domain text "
            "source; sudo apt-get install wordnet-base (or `make setup`)"
        )
    out, seen = [], set()
    for f in files:
        for line in f.read_text(encoding="latin-1").splitlines():
            if line.startswith("  "):  # the licence header
                continue
            _, _, gloss = line.partition(" | ")
            for q in _RE_QUOTED.findall(gloss):
                s = keep(q)
                if s is None:
                    continue
                key = normalize_text(s)
                if key not in seen:
                    seen.add(key)
                    out.append(s)
    return tuple(out)


def _pool_of(text: str) -> str:
    h = int.from_bytes(hashlib.sha256(normalize_text(text).encode()).digest()[:8], "big")
    u = h / 2**64
    return "test" if u < TEST_SHARE else "dev" if u < TEST_SHARE + DEV_SHARE else "train"


def open_domain_pools(seed: int = 0) -> dict[str, list[str]]:
    """Disjoint train / dev / test sentence lists, each shuffled by `seed`."""
    import numpy as np

    pools: dict[str, list[str]] = {"train": [], "dev": [], "test": []}
    for s in open_domain_sentences():
        pools[_pool_of(s)].append(s)
    rng = np.random.default_rng(seed)
    return {k: [v[i] for i in rng.permutation(len(v))] for k, v in pools.items()}
