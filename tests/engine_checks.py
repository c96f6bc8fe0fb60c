"""A shared end-to-end check of a loaded engine: what every family's smoke test asserts."""

import numpy as np

TEXTS = ["the cat sat.", "where did you put the keys?", "a dog."]


def check_synthesizes(eng, strategy: str, max_seconds: float = 1.0, same_as_batch_1=True) -> list:
    """Synthesize three sentences at batch 3 and one by one (same seed): every row has the
    tokens of its batch-1 run (batch-N == batch-1), a length within the cap that matches its
    token array and its audio, no EOS / BOS / PAD id among its tokens, and stops before the
    cap exactly when it was not capped. Returns the batch results.

    `same_as_batch_1=False` skips the token comparison, for a model whose decisions are
    near-ties: batch 4 and batch 1 run different matmul kernels, whose last-bit differences
    flip an argmax between near-equal logits (an untrained DCAR policy is near-uniform;
    `test_dcar_batch_n_equals_batch_1` checks DCAR's batch-N == batch-1 on a policy whose
    logits are spread)."""
    from jaxtts.synthesize import Synthesizer

    synth = Synthesizer(eng)
    kw = dict(strategy=strategy, max_seconds=max_seconds, progress=False, seed=3)
    res = synth.synthesize(TEXTS, None, batch_size=3, **kw)
    cap = int(np.ceil(max_seconds * eng.frame_rate))
    for i, r in enumerate(res):
        if same_as_batch_1:
            one = synth.synthesize([TEXTS[i]], None, batch_size=1, **kw)[0]
            np.testing.assert_array_equal(r.tokens, one.tokens, err_msg=f"row {i}: batch 3 vs 1")
        n = r.info["num_tokens"]
        assert r.info["strategy"] == strategy and r.tokens.shape == (n,) and 0 < n <= cap
        assert r.info["hit_max"] == (n == cap)
        assert np.all((r.tokens >= 0) & (r.tokens < eng.tokenizer.vocab_size)), r.tokens
        assert r.wav.size > 0 and r.wav.dtype == np.float32 and np.all(np.isfinite(r.wav))
        # the audio is as long as its tokens (within a vocoder window)
        seconds = r.wav.size / synth.vocoder.sample_rate
        assert abs(seconds - n / eng.frame_rate) < 0.1, (seconds, n / eng.frame_rate)
    return res
