"""Vocabulary transfer (`jaxtts.methods.lm.retoken`): a new tokenizer that only relabels the old
one's tokens gives a model that computes the same logits, relabelled; counts and the transfer
matrix are exact."""

import dataclasses

import numpy as np
from lm_reference import TINY, init_params

from jaxtts.methods.lm.model import TTSLM
from jaxtts.methods.lm.retoken import cooccurrence, move_params, transfer_matrix


def _logits(cfg, params, speech):
    text = np.array([[3, 5, 7, 9, 2]], np.int32)
    logits, _ = TTSLM(cfg).apply(
        {"params": params}, text, np.array([5]), speech, np.array([speech.shape[1]])
    )
    return np.asarray(logits)  # [1, T, K, V]


def test_a_relabelled_tokenizer_gives_the_same_logits_relabelled():
    k = TINY.num_speech_tokens
    perm = np.random.default_rng(0).permutation(k)  # new token c is old token perm[c]
    p = np.eye(k)[perm]  # P(old k | new c)
    params = init_params(eos_bias=0.5)
    moved = move_params(params, p, k, TINY.padded(k + 3), TINY.padded(TINY.out_vocab))
    old = np.array([[TINY.bos, 4, 0, 15, 7, 7, 2]], np.int32)
    inv = np.argsort(perm)
    new = np.where(old < k, inv[np.minimum(old, k - 1)], old).astype(np.int32)
    a, b = _logits(TINY, params, old), _logits(TINY, moved, new)
    np.testing.assert_allclose(b[..., :k], a[..., perm], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b[..., k], a[..., k], rtol=1e-5, atol=1e-5)  # EOS


def test_a_smaller_vocabulary_takes_weighted_means(tmp_path):
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    old_dir.mkdir(), new_dir.mkdir()
    np.save(old_dir / "u1.npy", np.array([0, 1, 1, 2, 3], np.int32))
    np.save(new_dir / "u1.npy", np.array([0, 0, 1, 1], np.int32))  # one frame shorter
    np.save(old_dir / "u2.npy", np.array([3], np.int32))  # no new tokens: skipped
    counts, used = cooccurrence(old_dir, new_dir, ["u1", "u2"], k_old=4, k_new=3)
    assert used == 1
    np.testing.assert_array_equal(counts, [[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 0, 0]])
    p = transfer_matrix(counts)
    np.testing.assert_allclose(p, [[0.5, 0.5, 0, 0], [0, 0.5, 0.5, 0], [0.25] * 4])
    cfg = dataclasses.replace(TINY, num_speech_tokens=4)
    params = init_params(cfg)
    moved = move_params(params, p, 4, cfg.padded(3 + 3), cfg.padded(3 + 1))
    e_old, e_new = np.asarray(params["speech_embed"]), np.asarray(moved["speech_embed"])
    np.testing.assert_allclose(e_new[1], (e_old[1] + e_old[2]) / 2, rtol=1e-6)
    np.testing.assert_allclose(e_new[2], e_old[:4].mean(0), rtol=1e-6)
    np.testing.assert_array_equal(e_new[3:6], e_old[4:7])  # EOS, BOS, PAD
    w_old, w_new = (
        np.asarray(params["base_head"]["kernel"]),
        np.asarray(moved["base_head"]["kernel"]),
    )
    np.testing.assert_allclose(w_new[:, 0], (w_old[:, 0] + w_old[:, 1]) / 2, rtol=1e-6)
    np.testing.assert_array_equal(w_new[:, 3], w_old[:, 4])  # EOS


def test_bad_input_is_one_line_naming_the_file(tmp_path, capsys):
    from jaxtts.methods.lm.retoken import main

    out = str(tmp_path / "out")
    cases = [
        (
            [str(tmp_path / "nope"), out, "--tokenizer", "pretrained/codec", "--corpus", "x"],
            "config.json",
        ),
        (
            ["pretrained/mdm", out, "--tokenizer", "pretrained/codec", "--corpus", "x"],
            "expected 'lm'",
        ),
        (
            ["pretrained/car_small", out, "--tokenizer", str(tmp_path), "--corpus", "x"],
            "tokenizer.json",
        ),
        (
            [
                "pretrained/car_small",
                out,
                "--tokenizer",
                "pretrained/codec",
                "--corpus",
                str(tmp_path),
            ],
            "train.jsonl",
        ),
    ]
    for argv, expect in cases:
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and expect in err, err
    assert not (tmp_path / "out").exists()  # nothing written
