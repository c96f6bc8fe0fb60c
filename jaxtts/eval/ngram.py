"""Interpolated Kneser-Ney n-gram language models of any order, written as ARPA back-off files.

pocketsphinx's own builder (`pocketsphinx.lm.ArpaBoLM`) stops at trigrams with a fixed
discount mass. The built-in corpus's generator enforces agreement over longer spans ("is the
grandfather catching ..." vs "the grandfathers catch ..."), which a trigram cannot see; a 5-gram
can. This module counts n-grams of `order` over whitespace-tokenised sentences and writes the
interpolated Kneser-Ney model (Chen & Goodman 1998, one discount per order) in the ARPA format
that pocketsphinx, KenLM and SRILM read.

Model, for order n with context h = w_{i-n+1..i-1}:

    P_n(w | h) = max(a(h w) - D_n, 0) / S(h) + gamma(h) * P_{n-1}(w | h[1:])
    gamma(h)   = D_n * T(h) / S(h)

with a(.) the raw count at the highest order and for n-grams that start with <s>, and the
continuation count (number of distinct left neighbours) otherwise; S(h) = sum_w a(h w);
T(h) = number of distinct w with a(h w) > 0; D_n = n1 / (n1 + 2 n2) from the count-of-counts of
a(.) at order n; P_0 = uniform over the vocabulary. The ARPA file stores P_n for every seen
n-gram and gamma(h) as the back-off weight of h, which reproduces the interpolated model exactly
for unseen n-grams. `<s>` gets log-probability -99 (it is never predicted).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import TextIO

__all__ = ["BOS", "EOS", "KneserNeyLM"]

BOS, EOS = "<s>", "</s>"
_LOG10_ZERO = -99.0


class KneserNeyLM:
    """Interpolated Kneser-Ney LM: `KneserNeyLM(sentences, order).write_arpa(f)`.

    Args:
      sentences: whitespace-tokenised sentences (already normalised; no <s>/</s>).
      order: n-gram order >= 1.
      extra_words: words added to the vocabulary with unigram count 1 (never seen in text).
    """

    def __init__(self, sentences: Iterable[str], order: int = 3, extra_words: Iterable[str] = ()):
        if order < 1:
            raise ValueError(f"order={order}, expected >= 1")
        self.order = order
        raw: list[Counter] = [Counter() for _ in range(order + 1)]  # raw[n][ngram tuple]
        num_sentences = 0
        for sent in sentences:
            words = sent.split()
            if not words:
                continue
            num_sentences += 1
            toks = (BOS, *words, EOS)
            for n in range(1, order + 1):
                c = raw[n]
                for i in range(len(toks) - n + 1):
                    c[toks[i : i + n]] += 1
        if not num_sentences:
            raise ValueError("sentences: no non-empty sentence")
        self.num_sentences = num_sentences
        # adjusted counts: raw at the top order and for <s>-initial n-grams, else continuation
        adj: list[dict] = [{} for _ in range(order + 1)]
        adj[order] = dict(raw[order])
        for n in range(order - 1, 0, -1):
            cont: Counter = Counter()
            for g in raw[n + 1]:
                cont[g[1:]] += 1
            a = adj[n]
            for g, c in raw[n].items():
                a[g] = c if g[0] == BOS else cont[g]
        for w in extra_words:
            if (w,) not in adj[1]:
                adj[1][(w,)] = 1
        a1 = adj[1]
        a1.pop((BOS,), None)  # <s> is a context, never a prediction
        self.vocab = sorted({g[0] for g in a1} | {BOS})
        self.discounts = [0.0] + [self._discount(adj[n]) for n in range(1, order + 1)]

        # per-context totals S(h), T(h)
        probs: list[dict] = [{} for _ in range(order + 1)]
        self.backoff: list[dict] = [{} for _ in range(order + 1)]
        num_predicted = len(self.vocab) - 1  # every word but <s>
        for n in range(1, order + 1):
            d = self.discounts[n]
            tot: dict = defaultdict(float)
            typ: dict = defaultdict(int)
            for g, c in adj[n].items():
                tot[g[:-1]] += c
                typ[g[:-1]] += 1
            gamma = {h: d * typ[h] / tot[h] for h in tot}
            lower = probs[n - 1]
            p = probs[n]
            for g, c in adj[n].items():
                h = g[:-1]
                lo = 1.0 / num_predicted if n == 1 else lower[g[1:]]
                p[g] = max(c - d, 0.0) / tot[h] + gamma[h] * lo
            if n > 1:
                self.backoff[n - 1] = gamma
        self.probs = probs

    @staticmethod
    def _discount(counts: dict) -> float:
        coc = Counter(c for c in counts.values() if c <= 2)
        n1, n2 = coc.get(1, 0), coc.get(2, 0)
        if n1 == 0 or n2 == 0:
            return 0.5
        return min(max(n1 / (n1 + 2.0 * n2), 0.05), 0.95)

    def drop_words(self, words: set[str]) -> None:
        """Remove every n-gram containing one of `words` (e.g. words a decoder cannot
        pronounce). The remaining probabilities are left as estimated (mass is lost, not
        renormalised), which is what a decoder with a smaller dictionary sees anyway."""
        if not words:
            return
        for table in (*self.probs, *self.backoff):
            for g in [g for g in table if any(w in words for w in g)]:
                del table[g]
        self.vocab = [w for w in self.vocab if w not in words]

    def num_ngrams(self, n: int) -> int:
        return len(self.probs[n]) + (1 if n == 1 else 0)  # + <s>

    def logprob(self, ngram: tuple[str, ...]) -> float:
        """log10 P(ngram[-1] | ngram[:-1]) under the back-off model (what a decoder computes)."""
        ngram = tuple(ngram)[-self.order :]
        total = 0.0
        while True:
            n = len(ngram)
            if ngram in self.probs[n]:
                return total + math.log10(self.probs[n][ngram])
            if n == 1:
                return _LOG10_ZERO
            total += math.log10(self.backoff[n - 1].get(ngram[:-1], 1.0))
            ngram = ngram[1:]

    def write_arpa(self, f: TextIO) -> None:
        order = self.order
        f.write("\\data\\\n")
        for n in range(1, order + 1):
            f.write(f"ngram {n}={self.num_ngrams(n)}\n")
        for n in range(1, order + 1):
            f.write(f"\n\\{n}-grams:\n")
            bows = self.backoff[n] if n < order else {}
            items = self.probs[n].items()
            if n == 1:
                items = [((BOS,), 0.0), *items]
            for g, p in sorted(items):
                lp = _LOG10_ZERO if p <= 0.0 else math.log10(p)
                line = f"{lp:.6f}\t{' '.join(g)}"
                if n < order and g[-1] != EOS:
                    bow = bows.get(g)
                    if bow is not None:
                        line += f"\t{math.log10(bow):.6f}" if bow > 0 else f"\t{_LOG10_ZERO}"
                f.write(line + "\n")
        f.write("\n\\end\\\n")
