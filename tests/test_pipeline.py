"""Tests of jaxtts.data.pipeline: determinism from (seed, step), resume, sharding, buckets,
prompts, epoch coverage, the mel variant and loading LM records from a corpus folder."""

import numpy as np
import pytest

from jaxtts.data.pipeline import (
    LMLoader,
    LMRecord,
    MelLoader,
    MelRecord,
    load_lm_records,
    make_buckets,
    make_mel_records,
    pad_to_bucket,
)
from jaxtts.errors import ConfigError, DataError

TEXT_BUCKETS = (32, 64, 96, 128)
SPEECH_BUCKETS = (64, 128, 256, 384, 512)
LM_KEYS = ("text", "text_len", "speech", "speech_len", "prompt_len")


def _records(n=100, seed=0):
    """n records over speakers s0..s3 plus 'solo' (a speaker with a single utterance, index 0)."""
    rng = np.random.default_rng(seed)
    recs = []
    for i in range(n):
        spk = "solo" if i == 0 else f"s{i % 4}"
        lx, ly = int(rng.integers(5, 60)), int(rng.integers(20, 400))
        recs.append(
            LMRecord(
                f"u{i:03d}",
                spk,
                rng.integers(2, 40, lx).astype(np.int32),
                rng.integers(0, 100, ly).astype(np.int32),
            )
        )
    return recs


def _lm(records, **kw):
    args = dict(
        batch_size=8,
        text_buckets=TEXT_BUCKETS,
        speech_buckets=SPEECH_BUCKETS,
        prompt_seconds=1.0,
        frame_rate=50.0,
        seed=3,
        shard_index=0,
        shard_count=1,
    )
    args.update(kw)
    return LMLoader(records, **args)


def _equal(a, b):
    return a.keys() == b.keys() and all(
        a[k].shape == b[k].shape and a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k])
        for k in a
    )


@pytest.fixture(scope="module")
def records():
    return _records()


def test_make_buckets_and_pad():
    assert make_buckets(256, 64) == (64, 128, 192, 256)
    assert make_buckets(200, 64) == (64, 128, 192, 200)
    assert pad_to_bucket(65, (64, 128)) == 128
    assert pad_to_bucket(64, (64, 128)) == 64
    with pytest.raises(DataError, match="exceeds the largest bucket 128"):
        pad_to_bucket(129, (64, 128))
    with pytest.raises(ConfigError, match="text_buckets"):
        _lm(_records(10), text_buckets=(64, 32))


def test_batch_format_and_lengths_match_records(records):
    loader = _lm(records)
    assert loader.steps_per_epoch == 100 // 8 and loader.num_dropped == 0
    for step in range(30):
        b = loader.get_batch(step)
        assert tuple(b) == LM_KEYS
        assert all(v.dtype == np.int32 for v in b.values())
        assert b["text"].shape[0] == b["speech"].shape[0] == 8
        rows = loader.rows(step)
        prompts = loader.prompts(step)
        for r, (i, j) in enumerate(zip(rows, prompts, strict=True)):
            rec = records[i]
            pl, sl, tl = b["prompt_len"][r], b["speech_len"][r], b["text_len"][r]
            # target tokens/text follow the prompt unchanged; padding is zero
            assert np.array_equal(b["speech"][r, pl:sl], rec.speech)
            pt = tl - rec.text_ids.shape[0]
            assert np.array_equal(b["text"][r, pt:tl], rec.text_ids)
            assert not b["speech"][r, sl:].any() and not b["text"][r, tl:].any()
            if j < 0:
                assert pl == 0 and pt == 0
                continue
            pr = records[j]
            assert j != i and pr.speaker == rec.speaker
            assert pl == min(50, pr.speech.shape[0])  # round(1.0 s * 50 Hz)
            assert np.array_equal(b["speech"][r, :pl], pr.speech[:pl])
            assert pt == round(pr.text_ids.shape[0] * pl / pr.speech.shape[0])
            assert np.array_equal(b["text"][r, :pt], pr.text_ids[:pt])


def test_single_utterance_speaker_and_no_prompt(records):
    loader = _lm(records)
    seen_solo = 0
    for step in range(loader.steps_per_epoch):
        rows, plen = loader.rows(step), loader.get_batch(step)["prompt_len"]
        if 0 in rows:
            seen_solo += 1
            assert plen[list(rows).index(0)] == 0  # 'solo' has no other utterance
    assert seen_solo <= 1
    # every speaker with >= 2 utterances gets a prompt in every row
    nz = [loader.prompts(s) for s in range(loader.steps_per_epoch)]
    assert (np.concatenate(nz) >= 0).sum() >= loader.steps_per_epoch * 8 - 1
    off = _lm(records, prompt_seconds=0)
    for step in range(5):
        b, rows = off.get_batch(step), off.rows(step)
        assert not b["prompt_len"].any()
        assert list(b["speech_len"]) == [records[i].speech.shape[0] for i in rows]
        assert list(b["text_len"]) == [records[i].text_ids.shape[0] for i in rows]


def test_same_seed_step_same_batch(records):
    a, b = _lm(records), _lm(records)
    for step in (0, 7, 12, 40):  # 12 and 40 lie in later epochs
        assert _equal(a.get_batch(step), a.get_batch(step))
        assert _equal(a.get_batch(step), b.get_batch(step))
        assert _equal(a.get_batch(step), a.dataset()[step])
    assert not np.array_equal(a.rows(0), a.rows(1))
    assert not np.array_equal(a.rows(0), _lm(records, seed=4).rows(0))
    # prompts are re-drawn every epoch, but a function of (seed, epoch, index)
    spe = a.steps_per_epoch
    e0 = np.concatenate([a.rows(s) for s in range(spe)])
    e1 = np.concatenate([a.rows(s) for s in range(spe, 2 * spe)])
    p0 = dict(zip(e0, np.concatenate([a.prompts(s) for s in range(spe)]), strict=True))
    p1 = dict(zip(e1, np.concatenate([a.prompts(s) for s in range(spe, 2 * spe)]), strict=True))
    common = sorted(set(p0) & set(p1))
    assert len(common) >= 80
    assert sum(p0[i] != p1[i] for i in common) > len(common) // 2  # 3 candidates each


def test_resumed_iterator_equals_tail(records):
    full = list(_lm(records).iterator(start_step=0, num_steps=30))  # crosses 2 epoch ends
    assert len(full) == 30
    resumed = list(_lm(records).iterator(start_step=17, num_steps=13, prefetch=4))
    assert all(_equal(x, y) for x, y in zip(full[17:], resumed, strict=True))
    sync = list(_lm(records).iterator(start_step=17, num_steps=3, prefetch=0))
    assert all(_equal(x, y) for x, y in zip(full[17:20], sync, strict=True))


def test_shards_concatenate_to_global_batch(records):
    single = _lm(records, batch_size=8)
    shards = [_lm(records, batch_size=8, shard_index=k, shard_count=4) for k in range(4)]
    for step in (0, 5, 13):
        parts = [s.get_batch(step) for s in shards]
        assert all(p["speech"].shape == (2, parts[0]["speech"].shape[1]) for p in parts)
        merged = {k: np.concatenate([p[k] for p in parts]) for k in LM_KEYS}
        assert _equal(merged, single.get_batch(step))
    with pytest.raises(ConfigError, match="batch_size=10 is not divisible by shard_count=4"):
        _lm(records, batch_size=10, shard_index=0, shard_count=4)


def test_padding_is_bucket_boundary_and_grouping_reduces_it(records):
    def padded_fraction(loader):
        real = area = 0
        for step in range(loader.steps_per_epoch):
            b = loader.get_batch(step)
            for f, buckets in (("text", TEXT_BUCKETS), ("speech", SPEECH_BUCKETS)):
                width = b[f].shape[1]
                assert width == pad_to_bucket(int(b[f"{f}_len"].max()), buckets)
            real += int(b["speech_len"].sum())
            area += b["speech"].size
        return 1 - real / area

    grouped = padded_fraction(_lm(records, sort_window=12))
    ungrouped = padded_fraction(_lm(records, sort_window=1))
    assert grouped < 0.25 < ungrouped


def test_epoch_covers_every_record_once_and_drops_long_ones(records):
    loader = _lm(records, drop_remainder=False)  # 100 records, B=8 -> 12 full + 1 padded batch
    assert loader.steps_per_epoch == 13
    for epoch in range(2):
        steps = range(epoch * 13, (epoch + 1) * 13)
        rows = np.concatenate([loader.rows(s) for s in steps])
        assert sorted(rows[rows >= 0]) == list(range(100)) and (rows < 0).sum() == 4
        last = loader.get_batch(steps[-1])
        assert list(last["speech_len"][4:]) == [0] * 4 and not last["speech"][4:].any()
    exact = _lm(records[:96])  # 96 = 12 * 8: every record exactly once with drop_remainder
    assert sorted(np.concatenate([exact.rows(s) for s in range(12)])) == list(range(96))
    # records longer than the largest bucket are dropped (and never used), counted
    long_ids = [i for i, r in enumerate(records) if r.speech.shape[0] > 256]
    capped = _lm(records, speech_buckets=(128, 256), drop_remainder=False)
    assert capped.num_dropped == len(long_ids) > 0
    used = np.concatenate([capped.rows(s) for s in range(capped.steps_per_epoch)])
    assert sorted(used[used >= 0]) == sorted(set(range(100)) - set(long_ids))
    assert max(int(capped.get_batch(s)["speech_len"].max()) for s in range(20)) <= 256


def test_num_epochs_and_grain_dataset(records):
    loader = _lm(records, num_epochs=2)
    ds = loader.dataset()
    assert len(ds) == len(loader) == 24
    assert _equal(ds[23], loader.get_batch(23))
    with pytest.raises(IndexError, match="beyond num_epochs=2"):
        loader.get_batch(24)
    assert len(list(loader.iterator(start_step=20))) == 4


def test_mel_loader_shares_machinery():
    rng = np.random.default_rng(1)
    recs = [
        MelRecord(
            f"m{i}",
            f"s{i % 3}",
            rng.normal(size=(int(rng.integers(10, 300)), 8)).astype(np.float32),
            rng.integers(2, 30, int(rng.integers(3, 40))).astype(np.int32),
        )
        for i in range(30)
    ]
    kw = dict(batch_size=4, mel_buckets=(64, 128, 256, 320), text_buckets=(16, 32, 48), seed=0)
    single = MelLoader(recs, shard_index=0, shard_count=1, **kw)
    shards = [MelLoader(recs, shard_index=k, shard_count=2, **kw) for k in range(2)]
    for step in (0, 3, 9):
        b = single.get_batch(step)
        assert tuple(b) == ("mel", "mel_len", "text", "text_len")
        assert b["mel"].dtype == np.float32 and b["mel_len"].dtype == np.int32
        assert b["mel"].shape[1] == pad_to_bucket(int(b["mel_len"].max()), kw["mel_buckets"])
        for r, i in enumerate(single.rows(step)):
            t = recs[i].mel.shape[0]
            assert b["mel_len"][r] == t and np.array_equal(b["mel"][r, :t], recs[i].mel)
            assert not b["mel"][r, t:].any()
            assert np.array_equal(b["text"][r, : b["text_len"][r]], recs[i].text_ids)
        parts = [s.get_batch(step) for s in shards]
        assert all(np.array_equal(np.concatenate([p[k] for p in parts]), b[k]) for k in b)
    assert _equal(
        single.get_batch(9), MelLoader(recs, shard_index=0, shard_count=1, **kw).get_batch(9)
    )
    rows = np.concatenate([single.rows(s) for s in range(single.steps_per_epoch)])
    assert single.steps_per_epoch == 7 and len(set(rows)) == 28  # 2 left over this epoch


def test_load_lm_records_from_corpus_dir(tmp_path):
    from jaxtts.data.manifest import Utterance, write_manifest
    from jaxtts.data.text import SymbolTable

    utts = [
        Utterance(
            id=f"a_{i}",
            audio=f"wavs/a/a_{i}.wav",
            text="hi",
            normalized_text="hi",
            phonemes=["h", "aɪ"] * (i + 1),
            speaker="a",
            duration=1.0,
        )
        for i in range(3)
    ]
    write_manifest(tmp_path / "train.jsonl", utts)
    (tmp_path / "tokens" / "km").mkdir(parents=True)
    for i in range(3):
        np.save(tmp_path / "tokens" / "km" / f"a_{i}.npy", np.arange(10 * (i + 1), dtype=np.int32))
    table = SymbolTable.build([u.phonemes for u in utts])
    recs = load_lm_records(tmp_path, "train", "km", table)
    assert [r.id for r in recs] == ["a_0", "a_1", "a_2"]
    assert [r.speech.shape[0] for r in recs] == [10, 20, 30]
    assert list(recs[1].text_ids) == list(table.encode(["h", "aɪ", "h", "aɪ"]))
    with pytest.raises(DataError, match="a_5.*not found"):
        write_manifest(tmp_path / "dev.jsonl", [utts[0].replace(id="a_5")])
        load_lm_records(tmp_path, "dev", "km", table)
    with pytest.raises(DataError, match="'phonemes' is empty"):
        write_manifest(tmp_path / "test.jsonl", [utts[0].replace(phonemes=())])
        load_lm_records(tmp_path, "test", "km", table)
    mels = make_mel_records(utts, {u.id: np.ones((5, 4)) for u in utts}, table)
    assert mels[2].mel.shape == (5, 4) and mels[2].mel.dtype == np.float32


def test_from_config_and_default_shard(records):
    from configs.common import data_config

    cfg = data_config(
        batch_size=8,
        max_text_len=128,
        max_speech_len=300,
        bucket_step=128,
        prompt_seconds=2.0,
        seed=3,
    )
    loader = LMLoader.from_config(records, cfg, frame_rate=25.0)  # jax.process_index/count
    assert (loader.shard_index, loader.shard_count) == (0, 1)
    assert loader.buckets == {"speech": (128, 256, 300), "text": (128,)}
    assert loader.prompt_tokens == 50 and loader.seed == 3
    assert loader.num_dropped == sum(r.speech.shape[0] > 300 for r in records) > 10
    assert loader.get_batch(0)["speech"].shape[1] in (128, 256, 300)
