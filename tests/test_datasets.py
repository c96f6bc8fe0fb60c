"""Tests of jaxtts.data.datasets on generated mini LJSpeech / LibriTTS trees and on tfds
(`tfds.testing.mock_data` and a real array_record dataset prepared into a temp data_dir)."""

import importlib.resources
import importlib.util
import json
import os
import sys
from unittest import mock

import numpy as np
import pytest
import soundfile as sf

from jaxtts.data.datasets import (
    main,
    prepare_dataset,
    read_libritts,
    read_ljspeech,
    read_tfds,
    split_utterances,
)
from jaxtts.data.manifest import Utterance, read_manifest
from jaxtts.data.text import normalize_text
from jaxtts.errors import DataError, MissingDependencyError

LJ_ROWS = [  # id, text, normalized text, seconds
    ("LJ001-0001", "In 1839, it was new.", "In eighteen thirty-nine, it was new.", 0.5),
    ("LJ001-0002", "Dr. Smith paid $5.", "Doctor Smith paid five dollars.", 0.75),
    ("LJ002-0001", "The end", "The end", 1.0),
    ("LJ002-0002", "Another line; short.", "Another line; short.", 1.25),
]


def _wav(path, seconds, rate, kind="sine"):
    n = int(round(seconds * rate))
    t = np.arange(n) / rate
    x = (
        0.3 * np.sin(2 * np.pi * 220 * t)
        if kind == "sine"
        else 0.1 * np.random.default_rng(n).standard_normal(n)
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, x.astype(np.float32), rate, subtype="PCM_16")
    return n


@pytest.fixture
def lj(tmp_path):
    src = tmp_path / "LJSpeech-1.1"
    for i, (uid, _, _, sec) in enumerate(LJ_ROWS):
        _wav(src / "wavs" / f"{uid}.wav", sec, 22050, "sine" if i % 2 else "noise")
    (src / "metadata.csv").write_text(
        "".join(f"{u}|{t}|{n}\n" for u, t, n, _ in LJ_ROWS), encoding="utf-8"
    )
    return src


LIBRI = {  # (subset, speaker, chapter, index) -> seconds
    ("train-clean-100", "84", "121123", 0): 0.6,
    ("train-clean-100", "84", "121123", 1): 0.8,
    ("train-clean-100", "84", "121550", 0): 1.0,
    ("train-clean-100", "103", "1240", 0): 0.7,
    ("train-clean-100", "103", "1240", 1): 0.9,
    ("dev-clean", "1272", "128104", 0): 1.1,
}


@pytest.fixture
def libri(tmp_path):
    src = tmp_path / "LibriTTS"
    for (subset, spk, chap, i), sec in LIBRI.items():
        uid = f"{spk}_{chap}_{i:06d}_000000"
        folder = src / subset / spk / chap
        _wav(folder / f"{uid}.wav", sec, 24000)
        (folder / f"{uid}.original.txt").write_text(f"Chapter {i + 1}, said Mr. {spk}!")
        (folder / f"{uid}.normalized.txt").write_text(f"Chapter one, said Mister {spk}!")
    return src


def test_read_ljspeech(lj):
    utts = read_ljspeech(lj)
    assert [u.id for u in utts] == [r[0] for r in LJ_ROWS]
    assert [u.text for u in utts] == [r[1] for r in LJ_ROWS]
    assert utts[0].normalized_text == "in eighteen thirty nine it was new"
    assert utts[1].normalized_text == "doctor smith paid five dollars"
    assert {u.speaker for u in utts} == {"LJ"}
    assert [u.duration for u in utts] == [0.5, 0.75, 1.0, 1.25]
    assert utts[2].path == lj / "wavs" / "LJ002-0001.wav" and utts[2].path.is_file()


def test_ljspeech_errors(lj, tmp_path):
    with pytest.raises(DataError, match="nowhere: LJSpeech folder not found"):
        read_ljspeech(tmp_path / "nowhere")
    meta = lj / "metadata.csv"
    good = meta.read_text()
    meta.write_text(good + "LJ009-0001 no separators\n")
    with pytest.raises(DataError, match=r"metadata.csv:5: expected 'id\|text\|normalized text'"):
        read_ljspeech(lj)
    meta.write_text(good + "LJ009-0001|Missing audio.|Missing audio.\n")
    with pytest.raises(DataError, match=r"wavs/LJ009-0001.wav: audio of metadata.csv:5"):
        read_ljspeech(lj)
    meta.write_text(good + good.splitlines()[0] + "\n")
    with pytest.raises(DataError, match="metadata.csv:5: duplicate id 'LJ001-0001'"):
        read_ljspeech(lj)
    meta.unlink()
    with pytest.raises(DataError, match="metadata.csv: not found"):
        read_ljspeech(lj)


def test_read_libritts(libri):
    utts = read_libritts(libri, subsets=["train-clean-100"])
    assert len(utts) == 5 and {u.speaker for u in utts} == {"84", "103"}
    u = next(u for u in utts if u.id == "84_121123_000001_000000")
    assert u.text == "Chapter 2, said Mr. 84!"
    assert u.normalized_text == "chapter one said mister eighty four"
    assert u.audio == "train-clean-100/84/121123/84_121123_000001_000000.wav" and u.path.is_file()
    assert u.duration == 0.8
    assert sorted(x.duration for x in utts) == [0.6, 0.7, 0.8, 0.9, 1.0]
    every = read_libritts(libri)  # default: every subset present
    assert len(every) == 6 and {u.speaker for u in every} == {"84", "103", "1272"}
    assert read_libritts(libri, "dev-clean")[0].duration == 1.1
    with pytest.raises(DataError, match="LibriTTS/test-clean: LibriTTS subset 'test-clean'"):
        read_libritts(libri, ["test-clean"])
    for f in (libri / "dev-clean").rglob("*.txt"):
        f.unlink()
    with pytest.raises(DataError, match=r"1272_128104_000000_000000.wav: no transcript"):
        read_libritts(libri, ["dev-clean"])


def _fake(n_speakers, per_speaker):
    return [
        Utterance(
            id=f"s{s}_{i:03d}",
            audio=f"w/{s}_{i}.wav",
            text="a b",
            normalized_text="a b",
            speaker=f"s{s}",
            duration=1.0,
        )
        for s in range(n_speakers)
        for i in range(per_speaker)
    ]


def test_split_utterances_deterministic():
    utts = _fake(5, 20)
    a = split_utterances(utts, 0.1, 0.05, heldout_speakers=1, seed=0)
    b = split_utterances(list(reversed(utts)), 0.1, 0.05, heldout_speakers=1, seed=0)
    assert {k: [u.id for u in v] for k, v in a.items()} == {
        k: [u.id for u in v] for k, v in b.items()
    }
    assert (len(a["train"]), len(a["dev"]), len(a["test"])) == (68, 8, 24)  # 20 held out + 4
    heldout = {u.speaker for u in a["test"]} - {u.speaker for u in a["train"] + a["dev"]}
    assert len(heldout) == 1
    ids = [u.id for v in a.values() for u in v]
    assert sorted(ids) == sorted(u.id for u in utts)  # disjoint and complete
    c = split_utterances(utts, 0.1, 0.05, heldout_speakers=1, seed=1)
    assert [u.id for u in c["dev"]] != [u.id for u in a["dev"]]
    single = split_utterances(_fake(1, 4), 0.02, 0.02)  # fractions round up to one each
    assert [len(single[k]) for k in ("train", "dev", "test")] == [2, 1, 1]


def test_prepare_ljspeech_and_cli(lj, tmp_path):
    out = prepare_dataset(
        "ljspeech",
        lj,
        tmp_path / "out",
        dev_fraction=0.25,
        test_fraction=0.25,
        phonemize=False,
        progress=False,
    )
    splits = {
        s: read_manifest(out / f"{s}.jsonl", check_files=True) for s in ("train", "dev", "test")
    }
    assert [len(v) for v in splits.values()] == [2, 1, 1]
    every = sorted((u for v in splits.values() for u in v), key=lambda u: u.id)
    assert [u.id for u in every] == [r[0] for r in LJ_ROWS]
    assert every[1].path.resolve() == (lj / "wavs" / "LJ001-0002.wav").resolve()
    assert json.loads((out / "config.json").read_text())["kind"] == "ljspeech"
    from jaxtts.data.corpus import load_corpus

    assert sum(len(v) for v in load_corpus(out).values()) == 4
    mtime = (out / "train.jsonl").stat().st_mtime_ns
    prepare_dataset(
        "ljspeech", lj, out, dev_fraction=0.25, test_fraction=0.25, phonemize=False, progress=False
    )
    assert (out / "train.jsonl").stat().st_mtime_ns == mtime  # cache hit: nothing rewritten
    cli = main(
        [
            "--kind",
            "ljspeech",
            "--src",
            str(lj),
            "--out",
            str(tmp_path / "cli"),
            "--no_phonemize",
            "--quiet",
            "--max_duration",
            "1.0",
            "--dev_fraction",
            "0",
            "--test_fraction",
            "0.3",
        ]
    )
    train, test = read_manifest(cli / "train.jsonl"), read_manifest(cli / "test.jsonl")
    assert (len(train), len(test)) == (2, 1)  # 1.25 s utterance dropped


def test_prepare_libritts_phonemes_heldout(libri, tmp_path):
    from jaxtts.data.text import espeak_available, phonemize

    if not espeak_available():
        pytest.skip("espeak-ng not installed")
    out = prepare_dataset(
        "libritts",
        libri,
        tmp_path / "lt",
        heldout_speakers=1,
        dev_fraction=0.2,
        test_fraction=0.0,
        progress=False,
    )
    splits = {s: read_manifest(out / f"{s}.jsonl") for s in ("train", "dev", "test")}
    assert sum(len(v) for v in splits.values()) == 6
    test_spk = {u.speaker for u in splits["test"]}
    assert len(test_spk) == 1 and not test_spk & {u.speaker for u in splits["train"]}
    u = next(u for v in splits.values() for u in v if u.id == "84_121123_000000_000000")
    assert u.phonemes == tuple(phonemize(["chapter one said mister eighty four"])[0])
    assert u.phonemes[:3] == ("tʃ", "ˈ", "æ") and u.phonemes.count(" ") == 5


def test_prepare_copy_audio_resamples(lj, tmp_path):
    pytest.importorskip("jaxtts.data.audio")
    out = prepare_dataset(
        "ljspeech",
        lj,
        tmp_path / "copy",
        dev_fraction=0.25,
        test_fraction=0.25,
        phonemize=False,
        copy_audio=True,
        progress=False,
    )
    utts = read_manifest(out / "train.jsonl") + read_manifest(out / "dev.jsonl")
    for u in utts:
        info = sf.info(u.path)
        assert u.audio == f"wavs/LJ/{u.id}.wav" and info.samplerate == 16000
        assert info.subtype == "PCM_16" and abs(info.frames - 16000 * u.duration) <= 1


# ----------------------------------------------------------------------------- tfds


def test_tfds_missing_is_one_line_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)  # import -> ImportError
    with pytest.raises(MissingDependencyError, match="pip install tensorflow-datasets"):
        read_tfds("ljspeech", tmp_path, tmp_path / "cache")


@pytest.fixture(scope="module")
def tfds():
    return pytest.importorskip("tensorflow_datasets")


@pytest.mark.parametrize(
    "name,split,rate", [("ljspeech", "train", 22050), ("libritts", "dev_clean", 24000)]
)
def test_tfds_mock_data_source(tfds, tmp_path, name, split, rate):
    cache = tmp_path / "cache"
    with tfds.testing.mock_data(num_examples=5):
        source = tfds.data_source(name, split=split, data_dir=os.fspath(tmp_path))
        examples = [source[i] for i in range(5)]
        utts = read_tfds(name, tmp_path, cache, split=split)
        mtimes = sorted(p.stat().st_mtime_ns for p in cache.rglob("*.wav"))
        again = read_tfds(name, tmp_path, cache, split=split)  # cached: no wav rewritten
    assert len(utts) == 5 and [u.id for u in again] == [u.id for u in utts]
    assert sorted(p.stat().st_mtime_ns for p in cache.rglob("*.wav")) == mtimes
    by_len = sorted(examples, key=lambda e: (len(e["speech"]), str(e["id"])))
    for u in utts:
        x, r = sf.read(u.path, dtype="int16")
        assert r == rate and u.duration == round(len(x) / rate, 4)
        match = [
            e
            for e in by_len
            if len(e["speech"]) == len(x) and np.array_equal(np.clip(e["speech"], -32768, 32767), x)
        ]
        assert match, u.id
        if name == "ljspeech":
            assert u.speaker == "LJ"
        else:
            assert u.speaker == str(int(match[0]["speaker_id"]))


def _prepare_real_ljspeech(tfds, data_dir, rows, monkeypatch):
    """A genuine tfds `ljspeech` 1.1.1 dataset in array_record format, generated from arrays.

    Only the builder's download/extraction is replaced (its generator hands wav paths to the
    Audio feature, which needs pydub); tfds 4.9.10 on Python >= 3.9 also imports the
    undeclared `importlib_resources` while preparing, served here by `importlib.resources`.
    """
    if importlib.util.find_spec("importlib_resources") is None:
        monkeypatch.setitem(sys.modules, "importlib_resources", importlib.resources)
    builder = tfds.builder("ljspeech", data_dir=os.fspath(data_dir), file_format="array_record")

    def split_generators(self, dl_manager):
        return [tfds.core.SplitGenerator(name="train", gen_kwargs={"directory": ""})]

    def generate_examples(self, directory):
        for uid, text, norm, speech in rows:
            yield uid, {"id": uid, "speech": speech, "text": text, "text_normalized": norm}

    cls = type(builder)
    with (
        mock.patch.object(cls, "_split_generators", split_generators),
        mock.patch.object(cls, "_generate_examples", generate_examples),
    ):
        builder.download_and_prepare(
            download_config=tfds.download.DownloadConfig(try_download_gcs=False)
        )


def test_tfds_real_prepared_ljspeech(tfds, tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    rows = [
        (uid, text, norm, rng.integers(-3000, 3000, int(sec * 22050)).astype(np.int16))
        for uid, text, norm, sec in LJ_ROWS
    ]
    data_dir = tmp_path / "tfds"
    with pytest.raises(DataError, match="no prepared tfds dataset 'ljspeech' split 'train'"):
        read_tfds("ljspeech", data_dir, tmp_path / "cache")
    _prepare_real_ljspeech(tfds, data_dir, rows, monkeypatch)
    assert len(list(data_dir.glob("ljspeech/1.1.1/ljspeech-train.array_record-*"))) == 1
    utts = read_tfds("ljspeech", data_dir, tmp_path / "cache")
    assert [u.id for u in utts] == [r[0] for r in LJ_ROWS]
    assert [u.text for u in utts] == [r[1] for r in LJ_ROWS]
    assert [u.normalized_text for u in utts] == [normalize_text(r[2]) for r in LJ_ROWS]
    assert [u.duration for u in utts] == [0.5, 0.75, 1.0, 1.25]
    for u, row in zip(utts, rows, strict=True):
        x, rate = sf.read(u.path, dtype="int16")
        assert rate == 22050 and np.array_equal(x, row[3])
    out = prepare_dataset(
        "tfds_ljspeech",
        data_dir,
        tmp_path / "prepared",
        dev_fraction=0.25,
        test_fraction=0.25,
        phonemize=False,
        progress=False,
    )
    train = read_manifest(out / "train.jsonl", check_files=True)
    assert len(train) == 2 and train[0].audio.startswith("tfds/ljspeech/LJ/")
