"""A shared end-to-end check of a loaded engine: what every family's smoke test asserts."""

import numpy as np

TEXTS = ["the cat sat.", "where did you put the keys?", "a dog."]


def check_synthesizes(eng, strategy: str, max_seconds: float = 1.0, same_as_batch_1=True) -> list:
    """Synthesize three sentences at batch 3 and at batch 1 (same seed): every row has the
    tokens of its batch-1 run (batch-N == batch-1), a length within the cap that matches its
    token array and its audio, no EOS / BOS / PAD id among its tokens, and a capped row is
    exactly cap long. Returns the batch results.

    `same_as_batch_1=False` skips the token comparison, for a model whose decisions are
    near-ties: batch 4 and batch 1 run different matmul kernels, whose last-bit differences
    flip an argmax between near-equal logits (an untrained DCAR policy is near-uniform;
    `test_dcar_batch_n_equals_batch_1` checks DCAR's batch-N == batch-1 on a policy whose
    logits are spread)."""
    from jaxtts.synthesize import Synthesizer

    synth = Synthesizer(eng)
    kw = dict(strategy=strategy, max_seconds=max_seconds, progress=False, seed=3)
    res = synth.synthesize(TEXTS, None, batch_size=3, **kw)
    # a row's key comes from (seed, its line index): the same list at batch size 1
    ones = synth.synthesize(TEXTS, None, batch_size=1, **kw) if same_as_batch_1 else None
    cap = int(np.ceil(max_seconds * eng.frame_rate))
    for i, r in enumerate(res):
        if same_as_batch_1:
            np.testing.assert_array_equal(
                r.tokens, ones[i].tokens, err_msg=f"row {i}: batch 3 vs 1"
            )
        n = r.info["num_tokens"]
        assert r.info["strategy"] == strategy and r.tokens.shape == (n,) and 0 < n <= cap
        # capped rows are cap long; a row shorter than the cap ended on EOS (a multi-token step
        # may also end on EOS exactly at the cap)
        assert n == cap if r.info["hit_max"] else n <= cap, (i, n, cap, r.info)
        assert np.all((r.tokens >= 0) & (r.tokens < eng.tokenizer.vocab_size)), r.tokens
        assert r.wav.size > 0 and r.wav.dtype == np.float32 and np.all(np.isfinite(r.wav))
        # the audio is as long as its tokens (within a vocoder window)
        seconds = r.wav.size / synth.vocoder.sample_rate
        assert abs(seconds - n / eng.frame_rate) < 0.1, (seconds, n / eng.frame_rate)
    return res
