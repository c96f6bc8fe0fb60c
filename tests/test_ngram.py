"""Kneser-Ney n-gram LM: hand-computed values, normalisation, ARPA read back by pocketsphinx."""

import itertools
import math

import pytest

from jaxtts.eval.ngram import BOS, EOS, KneserNeyLM

CORPUS = [
    "the cat sat on the mat",
    "a dog sat on a log",
    "the dog ate the cat",
    "a cat ate",
    "the cat sat",
    "is the dog on the mat",
]


def test_bigram_values_by_hand():
    # <s> a b </s>, <s> a c </s>. Unigram continuation counts a=1 b=1 c=1 </s>=2 (S=5, T=4),
    # D1 = n1/(n1+2 n2) = 3/5; bigram counts <s>a=2, ab=ac=b</s>=c</s>=1, D2 = 4/6.
    lm = KneserNeyLM(["a b", "a c"], order=2)
    assert lm.discounts[1:] == pytest.approx([0.6, 2 / 3])
    p = lambda *g: 10 ** lm.logprob(g)  # noqa: E731
    assert p("a") == pytest.approx(0.4 / 5 + 0.48 * 0.25)  # 0.2
    assert p(EOS) == pytest.approx(1.4 / 5 + 0.48 * 0.25)  # 0.4
    assert p(BOS, "a") == pytest.approx((2 - 2 / 3) / 2 + (1 / 3) * 0.2)  # 0.7333
    assert p(BOS, "b") == pytest.approx((1 / 3) * 0.2)  # unseen: back-off weight * P1
    assert p("a", "b") == pytest.approx((1 - 2 / 3) / 2 + (2 / 3) * 0.2)  # 0.3
    assert p("a", EOS) == pytest.approx((2 / 3) * 0.4)
    assert p("a", "a") == pytest.approx((2 / 3) * 0.2)


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_distributions_sum_to_one(order):
    lm = KneserNeyLM(CORPUS, order, extra_words=["zebra"])
    vocab = [w for w in lm.vocab if w != BOS]
    assert "zebra" in vocab
    contexts = [
        (),
        (BOS,),
        ("the",),
        ("sat", "on"),
        (BOS, "the", "dog"),
        ("zebra", "the"),
        ("on", "the", "mat"),
    ]
    for h in contexts:
        h = h[max(0, len(h) - (order - 1)) :] if order > 1 else ()
        total = sum(10 ** lm.logprob((*h, w)) for w in vocab)
        assert total == pytest.approx(1.0, abs=1e-9), h


def test_arpa_read_back_by_pocketsphinx(tmp_path):
    ps = pytest.importorskip("pocketsphinx")
    lm = KneserNeyLM(CORPUS, order=3)
    path = tmp_path / "lm.arpa"
    with open(path, "w") as f:
        lm.write_arpa(f)
    text = path.read_text()
    assert "ngram 3=" in text and text.rstrip().endswith("\\end\\")
    model = ps.NGramModel.readfile(str(path))
    words = ["the", "cat", "dog", "sat", "on", "mat", EOS]
    checked = 0
    for h1, h2, w in itertools.product([BOS, "the", "cat"], ["the", "sat", "dog"], words):
        ours = lm.logprob((h1, h2, w)) * math.log(10)  # natural log
        theirs = model.prob([w, h2, h1]) * math.log(1.0001)  # logmath base 1.0001, newest first
        assert theirs == pytest.approx(ours, abs=0.02), (h1, h2, w)
        checked += 1
    assert checked == 63


def test_drop_words_and_bad_input():
    lm = KneserNeyLM(CORPUS, order=3)
    n_before = lm.num_ngrams(2)
    lm.drop_words({"mat"})
    assert "mat" not in lm.vocab
    assert all("mat" not in g for table in lm.probs for g in table)
    assert lm.num_ngrams(2) == n_before - 2  # "the mat", "mat </s>"
    with pytest.raises(ValueError, match="order"):
        KneserNeyLM(CORPUS, order=0)
    with pytest.raises(ValueError, match="no non-empty"):
        KneserNeyLM(["", "  "], order=2)
