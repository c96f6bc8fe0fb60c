"""Manifests and the built-in espeak-ng corpus: splits, audio format, cache, resume."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from jaxtts.data import corpus as corpus_mod
from jaxtts.data import text as text_mod
from jaxtts.data.corpus import SPEAKERS, SPLITS, build_corpus, corpus_stats, load_corpus
from jaxtts.data.manifest import Utterance, read_manifest, write_manifest
from jaxtts.data.text import phonemize
from jaxtts.errors import ConfigError, DataError, MissingDependencyError

REPO = Path(__file__).resolve().parents[1]
MANIFESTS = [f"{s}.jsonl" for s in SPLITS] + ["speakers.json"]


def _read_bytes(folder: Path) -> dict[str, bytes]:
    return {name: (folder / name).read_bytes() for name in MANIFESTS}


# ----------------------------------------------------------------------------- manifests


def test_manifest_roundtrip_and_paths(tmp_path):
    (tmp_path / "wavs").mkdir()
    (tmp_path / "wavs" / "a.wav").write_bytes(b"x")
    u = Utterance("a", "wavs/a.wav", "Dr. Who?", phonemes=["d", "ɑː"], speaker="s", duration=1.5)
    assert u.normalized_text == "doctor who" and u.phonemes == ("d", "ɑː")
    write_manifest(tmp_path / "m.jsonl", [u])
    line = json.loads((tmp_path / "m.jsonl").read_text())
    assert list(line) == [
        "id",
        "audio",
        "text",
        "normalized_text",
        "phonemes",
        "speaker",
        "duration",
    ]
    assert line["audio"] == "wavs/a.wav" and line["phonemes"] == ["d", "ɑː"]
    (back,) = read_manifest(tmp_path / "m.jsonl")
    assert back == u and back.path == tmp_path / "wavs" / "a.wav"
    # Re-written into another folder, the audio path is re-expressed relative to it.
    write_manifest(tmp_path / "sub" / "m.jsonl", [back])
    (moved,) = read_manifest(tmp_path / "sub" / "m.jsonl")
    assert moved.audio == "../wavs/a.wav" and moved.path.resolve() == back.path.resolve()


def test_manifest_errors_name_line(tmp_path):
    ok = {"id": "a", "audio": "a.wav", "text": "hi", "speaker": "s", "duration": 1.0}
    (tmp_path / "a.wav").write_bytes(b"x")
    m = tmp_path / "m.jsonl"
    m.write_text(json.dumps(ok) + "\n\n" + json.dumps({**ok, "id": "b", "audio": "b.wav"}) + "\n")
    with pytest.raises(DataError, match=r"m\.jsonl:3: audio file .*b\.wav of 'b' does not exist"):
        read_manifest(m)
    assert [u.id for u in read_manifest(m, check_files=False)] == ["a", "b"]
    m.write_text(json.dumps(ok) + "\n" + '{"id": "b", "audio": \n')
    with pytest.raises(DataError, match=r"m\.jsonl:2: malformed JSON"):
        read_manifest(m)
    m.write_text(json.dumps({**ok, "duration": "long"}) + "\n")
    with pytest.raises(DataError, match=r"m\.jsonl:1: field 'duration' must be a number"):
        read_manifest(m)
    m.write_text(json.dumps(ok) + "\n" + json.dumps(ok) + "\n")
    with pytest.raises(DataError, match=r"m\.jsonl:2: duplicate id 'a'"):
        read_manifest(m)
    with pytest.raises(DataError, match="manifest not found"):
        read_manifest(tmp_path / "nope.jsonl")


# ----------------------------------------------------------------------------- corpus


def test_tiny_corpus_splits_audio_and_speakers(tiny_corpus):
    splits = load_corpus(tiny_corpus, check_files=True)
    assert {k: len(v) for k, v in splits.items()} == {"train": 34, "dev": 2, "test": 4}
    utts = [u for v in splits.values() for u in v]
    assert len({u.id for u in utts}) == 40
    for u in utts:
        info = sf.info(u.path)
        assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
        assert abs(info.frames / 16000 - u.duration) < 1e-3
        assert 1.0 <= u.duration <= 10.0
        assert u.path.parent.name == u.speaker and u.audio.startswith("wavs/")
    wav, sr = sf.read(utts[0].path, dtype="float32")
    assert sr == 16000 and wav.ndim == 1 and 0.05 < np.abs(wav).max() <= 1.0

    # held-out speaker: test only; seen speakers never in test-only role
    speakers = json.loads((tiny_corpus / "speakers.json").read_text())
    assert len(speakers) == 10 == len(SPEAKERS)
    assert len({(s["pitch"], s["rate"]) for s in speakers.values()}) == 10
    assert sum("klatt" in s["voice"] for s in speakers.values()) >= 8
    heldout = [k for k, s in speakers.items() if s["role"] == "heldout"]
    assert heldout == ["spk09"] and speakers["spk09"]["splits"] == ["test"]
    assert {u.speaker for u in splits["test"]} >= {"spk09"}
    assert "spk09" not in {u.speaker for s in ("train", "dev") for u in splits[s]}
    assert len({u.speaker for u in splits["train"]}) == 9

    # sentences: unique, test never seen in train/dev, 3..20 words
    norm = [u.normalized_text for u in utts]
    assert len(set(norm)) == 40
    seen = {u.normalized_text for s in ("train", "dev") for u in splits[s]}
    assert not seen & {u.normalized_text for u in splits["test"]}
    assert all(3 <= len(n.split()) <= 20 for n in norm)

    # phonemes are what the text front-end produces for the text (train == inference)
    assert [list(u.phonemes) for u in utts] == phonemize([u.text for u in utts])
    assert all(" " in u.phonemes for u in utts)

    stats = corpus_stats(tiny_corpus)
    assert stats["utterances"] == 40 and 40 / 3600 < stats["hours"] < 400 / 3600


def test_cache_hit_is_fast_and_config_change_errors(tiny_corpus):
    t0 = time.perf_counter()
    assert build_corpus(tiny_corpus, num_utterances=40, seed=0, progress=False) == tiny_corpus
    assert time.perf_counter() - t0 < 0.2
    before = _read_bytes(tiny_corpus)
    with pytest.raises(ConfigError, match=r"config\.json: .*num_utterances=40, seed=0.*seed=1"):
        build_corpus(tiny_corpus, num_utterances=40, seed=1, progress=False)
    with pytest.raises(ConfigError, match="num_utterances=41"):
        build_corpus(tiny_corpus, num_utterances=41, seed=0, progress=False)
    assert _read_bytes(tiny_corpus) == before  # untouched


def test_resume_after_damage_equals_uninterrupted(tiny_corpus, tmp_path):
    work = tmp_path / "c"
    shutil.copytree(tiny_corpus, work)
    reference = _read_bytes(tiny_corpus)
    wavs = sorted((work / "wavs").rglob("*.wav"))
    removed = wavs[::4]
    ref_audio = {p.name: p.read_bytes() for p in removed}
    for p in removed:
        p.unlink()
    (work / "done").unlink()
    (work / "test.jsonl").unlink()
    (work / "train.jsonl").write_text((work / "train.jsonl").read_text()[:300])  # partial
    (work / "wavs" / "spk00" / "spk00_00001.wav.tmp").write_bytes(b"partial")
    build_corpus(work, num_utterances=40, seed=0, progress=False)
    assert _read_bytes(work) == reference
    for p in removed:  # espeak-ng is deterministic: re-synthesised bytes are identical
        assert p.read_bytes() == ref_audio[p.name]
    assert not list((work / "wavs").rglob("*.tmp"))
    assert len(list((work / "wavs").rglob("*.wav"))) == 40


def test_concurrent_builders_share_one_build(tiny_corpus, tmp_path):
    with ThreadPoolExecutor(2) as pool:
        outs = list(
            pool.map(
                lambda _: build_corpus(tmp_path / "c", num_utterances=40, seed=0, progress=False),
                range(2),
            )
        )
    assert outs == [tmp_path / "c"] * 2
    assert _read_bytes(tmp_path / "c") == _read_bytes(tiny_corpus)
    assert len(list((tmp_path / "c").glob("wavs/*/*.wav"))) == 40


def test_kill_9_mid_build_then_resume(tmp_path):
    if not text_mod.espeak_available():
        pytest.skip("espeak-ng missing")
    n = 120
    ref = build_corpus(tmp_path / "ref", num_utterances=n, seed=3, progress=False)
    work = tmp_path / "killed"
    cmd = [
        sys.executable,
        "-m",
        "jaxtts.data.corpus",
        "--out",
        str(work),
        "--num_utterances",
        str(n),
        "--seed",
        "3",
        "--workers",
        "1",
        "--no_progress",
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    deadline = time.time() + 30
    while time.time() < deadline and len(list(work.glob("wavs/*/*.wav"))) < 10:
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    n_before = len(list(work.glob("wavs/*/*.wav")))
    assert 10 <= n_before < n and not (work / "done").exists()  # really interrupted
    build_corpus(work, num_utterances=n, seed=3, progress=False)
    assert _read_bytes(work) == _read_bytes(ref)
    assert len(list(work.glob("wavs/*/*.wav"))) == n


def test_default_dir_env_and_missing_espeak(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXTTS_DATA_DIR", str(tmp_path / "d"))
    assert corpus_mod.default_corpus_dir() == tmp_path / "d" / "builtin"
    monkeypatch.delenv("JAXTTS_DATA_DIR")
    assert corpus_mod.default_corpus_dir() == REPO / "data" / "builtin"
    monkeypatch.setattr(text_mod.shutil, "which", lambda name: None)
    with pytest.raises(MissingDependencyError, match=r"espeak-ng.*apt-get install espeak-ng"):
        build_corpus(tmp_path / "x", num_utterances=40, progress=False)
    with pytest.raises(DataError, match="no finished corpus"):
        load_corpus(tmp_path / "x")


def test_larger_corpus_keeps_the_default_eval_splits():
    """Every corpus larger than the default keeps its dev and test groups exactly (speaker,
    quota, candidate sentences in order): test numbers stay comparable whatever a model trained
    on. The extra utterances are train-only with sentences never seen in dev or test."""
    from jaxtts.data import corpus as C

    def eval_groups(groups, sentences):
        return [
            (g.split, g.speaker.name, g.quota, [sentences[i] for i in g.candidates])
            for g in groups
            if g.split != "train"
        ]

    base = C._plan(C.DEFAULT_UTTERANCES, 0, C.SPEAKERS)
    for n in (C.DEFAULT_UTTERANCES + 1, 3000, 20_000):
        groups, sentences = C._plan(n, 0, C.SPEAKERS)
        assert eval_groups(groups, sentences) == eval_groups(*base)
        assert sum(g.quota for g in groups) == n
        train = {sentences[i] for g in groups if g.split == "train" for i in g.candidates}
        held = {sentences[i] for g in groups if g.split != "train" for i in g.candidates}
        assert not train & held
    # the config (and so the build's identity) says which eval splits it kept
    assert C._config(3000, 0, C.SPEAKERS)["eval_splits_of"] == C.DEFAULT_UTTERANCES
    assert "eval_splits_of" not in C._config(C.DEFAULT_UTTERANCES, 0, C.SPEAKERS)
