"""End to end through the real entry points: train.py (tiny, 2 steps, checkpoint, resume) and
infer.py (valid wavs, skipped lines reported, one-line errors)."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

pytestmark = pytest.mark.slow  # integration / trained models: `make test-fast` skips it

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(args, timeout=600):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.fixture(scope="module")
def trained(tiny_corpus, tmp_path_factory):
    wd = tmp_path_factory.mktemp("car_tiny")
    common = [
        "train.py",
        "--config",
        "configs/car.py:tiny",
        "--workdir",
        str(wd),
        f"--config.data.corpus_dir={tiny_corpus}",
        "--config.eval.num_samples=0",
        "--config.train.checkpoint_every=2",
        "--config.train.eval_every=0",
    ]
    first = _run(common + ["--config.train.steps=2"])
    assert first.returncode == 0, first.stderr[-3000:]
    return wd, common, first


def test_train_checkpoints_then_resumes(trained):
    wd, common, _ = trained
    ckpts = sorted(int(d) for d in os.listdir(wd / "checkpoints") if d.isdigit())
    assert ckpts == [2]
    assert (wd / "text_frontend" / "symbols.json").is_file()
    assert (wd / "tokenizer" / "tokenizer.json").is_file()
    cfg = json.loads((wd / "config.json").read_text())
    assert cfg["model"]["num_speech_tokens"] == 64 and cfg["model"]["num_text_symbols"] > 10
    second = _run(common + ["--config.train.steps=4"])
    assert second.returncode == 0, second.stderr[-3000:]
    steps = [
        json.loads(line)["step"] for line in open(wd / "metrics.jsonl") if "train/loss" in line
    ]
    assert steps == [1, 2, 3, 4]  # resumed at 3, nothing repeated
    assert 4 in [int(d) for d in os.listdir(wd / "checkpoints") if d.isdigit()]
    # a changed model config is refused with the field's name
    bad = _run(common + ["--config.train.steps=5", "--config.model.d_model=48"])
    assert bad.returncode == 2
    assert "model.d_model=32 in the run's config but 48 now" in bad.stderr.strip().splitlines()[-1]


def test_infer_writes_wavs_and_reports_skipped_lines(trained, tmp_path):
    from jaxtts.data.audio import load_audio

    wd, _, _ = trained
    lines = tmp_path / "lines.txt"
    lines.write_text("Hello world.\n\nThe dog ran home, and the cat slept.\n")
    out = tmp_path / "out"
    proc = _run(
        [
            "infer.py",
            "--workdir",
            str(wd),
            "--text_file",
            str(lines),
            "--speaker",
            "spk01",
            "--out_dir",
            str(out),
            "--max_seconds",
            "0.6",
            "--strategy",
            "car:2",
            "--batch_size",
            "2",
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["index"] for r in rows] == [0, 1, 2]
    assert rows[1]["skipped"] == "empty line" and rows[1]["wav"] is None
    for r in (rows[0], rows[2]):
        wav = load_audio(out / r["wav"], 16000, resample_to_rate=False)
        assert wav.size > 0 and np.all(np.isfinite(wav))
        assert r["duration"] == pytest.approx(wav.size / 16000, abs=1e-3)
        assert 1 <= r["num_tokens"] <= 30 and r["steps"] >= r["num_tokens"] / 2
        assert r["rtf"] > 0 and r["strategy"] == "car:2"
        assert r["compile_s"] > 0  # one batch of a new shape: compiled untimed, outside rtf


def test_infer_stream_writes_the_same_tokens_chunk_by_chunk(trained, tmp_path):
    from jaxtts.data.audio import load_audio

    wd, _, _ = trained
    args = ["--workdir", str(wd), "--speaker", "spk01", "--max_seconds", "0.6"]
    args += ["--strategy", "car:2", "--text", "Hello world.", "--text", ""]
    args += ["--text", "The dog ran home."]  # line 2: its key is (seed, 2), as offline
    proc = _run(["infer.py", *args, "--stream", "--out_dir", str(tmp_path / "s")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    off = _run(["infer.py", *args, "--batch_size", "1", "--out_dir", str(tmp_path / "o")])
    assert off.returncode == 0, off.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "s" / "results.jsonl").read_text().splitlines()]
    offline = [json.loads(x) for x in (tmp_path / "o" / "results.jsonl").read_text().splitlines()]
    assert rows[1]["skipped"] == "empty line"
    for r, want in ((rows[0], offline[0]), (rows[2], offline[2])):
        assert r["stream"] and r["num_tokens"] == want["num_tokens"] and r["chunks"] >= 1
        assert 0 < r["first_audio_s"] <= r["wall_s"]
        wav = load_audio(tmp_path / "s" / r["wav"], 16000, resample_to_rate=False)
        assert wav.size == round(want["duration"] * 16000) == round(r["duration"] * 16000)


@pytest.mark.parametrize(
    "args,expected",
    [
        (
            ["--workdir", "/nonexistent/run", "--text", "hi"],
            "/nonexistent/run/config.json: not found",
        ),
        (
            ["--checkpoint", "/tmp/x/checkpoints/abc", "--text", "hi"],
            "expected <workdir>/checkpoints/<step>",
        ),
    ],
    ids=["missing-workdir", "bad-checkpoint"],
)
def test_infer_bad_input_is_one_line(args, expected):
    proc = _run(["infer.py", *args], timeout=120)
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert err[-1].startswith("error: ") and expected in err[-1], proc.stderr


def test_infer_bad_strategy_and_speaker(trained):
    wd, _, _ = trained
    proc = _run(["infer.py", "--workdir", str(wd), "--text", "hi", "--strategy", "car:9"])
    assert proc.returncode == 2
    assert "chunk 9 needs 9 prediction heads, the model has 4" in proc.stderr.splitlines()[-1]
    proc = _run(["infer.py", "--workdir", str(wd), "--text", "hi", "--speaker", "nobody"])
    assert proc.returncode == 2 and "--speaker 'nobody'" in proc.stderr.splitlines()[-1]


def test_synthesizer_batch_invariance_and_long_text_split(trained, tiny_corpus):
    from jaxtts.data.manifest import read_split
    from jaxtts.synthesize import Prompt, Synthesizer

    wd, _, _ = trained
    synth = Synthesizer.from_workdir(wd)
    prompt = Prompt.from_utterance(read_split(tiny_corpus, "dev")[0])
    texts = ["Where did you put the keys?", "Hello.", "The old farmer sold three cows."]
    kw = dict(strategy="car:2", max_seconds=0.4, progress=False, temperature=1.0, seed=3)
    batched = synth.synthesize(texts, prompt, batch_size=3, **kw)
    single = synth.synthesize(texts, prompt, batch_size=1, **kw)
    for a, b in zip(batched, single, strict=True):
        np.testing.assert_array_equal(a.tokens, b.tokens)
        np.testing.assert_array_equal(a.wav, b.wav)
    synth.engine.max_text_symbols = 20  # force splitting of a long line
    long = "The cat sat on the mat. The dog ran to the park, and the bird sang all day long."
    (res,) = synth.synthesize([long], prompt, batch_size=4, **kw)
    assert res.info["pieces"] >= 3
    gap = int(synth.join_silence_s * synth.sample_rate)
    assert res.wav.size >= (res.info["pieces"] - 1) * gap


def test_export_to_one_params_file_synthesizes_the_same(trained, tiny_corpus, tmp_path):
    """A shipped-format run (one params.msgpack, no checkpoints/) loads through the same engine
    and gives the same audio; a truncated or mismatched parameter file is a one-line error."""
    from jaxtts.data.manifest import read_split
    from jaxtts.errors import CheckpointError
    from jaxtts.run_folder import RunFolder
    from jaxtts.synthesize import Prompt, Synthesizer

    wd, _, _ = trained
    proc = _run(
        ["-m", "jaxtts.run_folder", "export", str(wd), str(tmp_path / "ship"), "--dtype", "float32"]
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "MiB of parameters in params.msgpack" in proc.stdout
    ship = RunFolder(tmp_path / "ship")
    # the default float16 storage: half the bytes, the same tree within float16 rounding
    half = RunFolder(wd).export(tmp_path / "half")
    assert half.params_file.stat().st_size < 0.55 * ship.params_file.stat().st_size
    full16, full32 = half.saved_params(), ship.saved_params()
    for x, y in zip(jax.tree.leaves(full16), jax.tree.leaves(full32), strict=True):
        assert x.dtype == np.float16
        np.testing.assert_allclose(x.astype(np.float32), y, rtol=1e-3, atol=1e-4)
    # int8 storage (matrices with a scale per output channel, the rest float16): a quarter of
    # float32's bytes, every matrix within half a quantisation step, and it loads
    q8 = RunFolder(wd).export(tmp_path / "int8", dtype="int8")
    assert q8.params_file.stat().st_size < 0.3 * ship.params_file.stat().st_size
    for x, y in zip(jax.tree.leaves(q8.saved_params()), jax.tree.leaves(full32), strict=True):
        step = np.abs(y).max(axis=tuple(range(y.ndim - 1))) / 127 if y.ndim >= 2 else 1e-3
        assert np.all(np.abs(x.astype(np.float32) - y) <= 0.5 * step + 1e-3 * np.abs(y) + 1e-6)
    Synthesizer.from_workdir(q8.path)  # the engine loads it
    # float16z: the float16 values exactly, losslessly compressed (smaller than float16)
    z = RunFolder(wd).export(tmp_path / "f16z", dtype="float16z")
    assert z.params_file.stat().st_size < half.params_file.stat().st_size
    for x, y in zip(jax.tree.leaves(z.saved_params()), jax.tree.leaves(full16), strict=True):
        assert x.dtype == np.float16 and x.shape == y.shape
        np.testing.assert_array_equal(x, y)
    Synthesizer.from_workdir(z.path)
    # --decode: a sampling setting chosen after training lands in the copy's decode section
    # (the engine's default); an unknown key, a value of the wrong type or out of its range is
    # a one-line error that writes nothing
    proc = _run(
        ["-m", "jaxtts.run_folder", "export", str(wd), str(tmp_path / "p4"), "--decode=top_p=0.4"]
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    eng = Synthesizer.from_workdir(tmp_path / "p4").engine
    assert eng.decode_config["top_p"] == 0.4
    assert eng.options().sampling.top_p == pytest.approx(0.4)
    bad_values = (("top_q=0.4", "has no 'top_q'"), ("top_k=0.5", "expected int"))
    for bad, says in (*bad_values, ("top_p=1.5", "decode.top_p=1.5")):
        proc = _run(
            ["-m", "jaxtts.run_folder", "export", str(wd), str(tmp_path / "x"), "--decode", bad]
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert proc.stderr.count("\n") == 1 and says in proc.stderr, proc.stderr
        assert not (tmp_path / "x").exists()
    assert not ship.checkpoints_dir.exists() and ship.params_file.is_file()
    prompt = Prompt.from_utterance(read_split(tiny_corpus, "dev")[0])
    kw = dict(strategy="car:2", max_seconds=0.4, progress=False, seed=1)
    a = Synthesizer.from_workdir(wd).synthesize(["Hello."], prompt, **kw)[0]
    b = Synthesizer.from_workdir(ship.path).synthesize(["Hello."], prompt, **kw)[0]
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.wav, b.wav)
    data = ship.params_file.read_bytes()
    ship.params_file.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"params.msgpack: unreadable parameter file"):
        Synthesizer.from_workdir(ship.path)
    bad = _run(
        [
            "infer.py",
            "--workdir",
            str(ship.path),
            "--text",
            "Hello.",
            "--out_dir",
            str(tmp_path / "o"),
        ]
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "params.msgpack: unreadable parameter file" in bad.stderr


def test_run_folder_from_before_the_refactor_loads(trained, tmp_path):
    """Older run folders carry the never-read model.max_len / model.param_dtype: they load for
    inference, and resuming training rewrites config.json without them."""
    import shutil

    from jaxtts.methods.lm.task import _drop_retired_keys
    from jaxtts.run_folder import RunFolder
    from jaxtts.synthesize import Synthesizer

    wd, _, _ = trained
    old = tmp_path / "old"
    shutil.copytree(wd, old)
    cfg = json.loads((old / "config.json").read_text())
    cfg["model"].update(max_len=2048, param_dtype="float32")
    (old / "config.json").write_text(json.dumps(cfg))
    synth = Synthesizer.from_workdir(old)
    assert synth.engine.cfg.num_speech_tokens == 64
    _drop_retired_keys(RunFolder(old))
    model = json.loads((old / "config.json").read_text())["model"]
    assert "max_len" not in model and "param_dtype" not in model and model["d_model"] == 32


# ---------------------------------------------------------------- the command line as users meet it


def _noise(stderr: str) -> list[str]:
    """Lines a user should never see: tracebacks, source lines, absl-formatted or backend
    probing lines."""
    import re

    bad = []
    for line in stderr.splitlines():
        if (
            "Traceback" in line
            or "libtpu" in line
            or "Unable to initialize backend" in line
            or re.match(r"^[IWE]\d{4} ", line)
            or re.search(r"\.py:\d+: \w*Warning", line)
        ):
            bad.append(line)
    return bad


@pytest.mark.parametrize(
    "content,expected",
    [
        ("Caf\xe9 au lait.\n".encode("latin-1"), "not UTF-8 text (byte 0xe9 at offset 3)"),
        (bytes(range(128, 256)), "not UTF-8 text (byte 0x80 at offset 0)"),
        (None, "is a folder, expected a text file"),
    ],
    ids=["latin1", "random-bytes", "directory"],
)
def test_infer_bad_text_file_is_one_line(tmp_path, content, expected):
    path = tmp_path / "lines.txt"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    proc = _run(["infer.py", "--workdir", "/nonexistent", "--text_file", str(path)], timeout=120)
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --text_file") and expected in err[0]


def test_infer_bad_out_dir_fails_before_any_work(tmp_path):
    """The out_dir is checked before the model loads: with a missing --workdir too, the error
    is the out_dir's, so nothing was loaded or synthesized."""
    a_file = tmp_path / "taken"
    a_file.write_text("x")
    for out, expected in (
        (a_file, "exists and is not a folder"),
        (a_file / "sub", "cannot write there"),
    ):
        proc = _run(
            ["infer.py", "--workdir", "/nonexistent", "--text", "hi", "--out_dir", str(out)],
            timeout=120,
        )
        assert proc.returncode == 2
        err = proc.stderr.strip().splitlines()
        assert len(err) == 1 and f"--out_dir {out}: {expected}" in err[0], proc.stderr


def test_infer_nothing_synthesized_exits_nonzero(trained, tmp_path):
    wd, _, _ = trained
    out = tmp_path / "o"
    proc = _run(
        ["infer.py", "--workdir", str(wd), "--text", "?!...", "--text", " ", "--out_dir", str(out)]
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    err = proc.stderr.strip().splitlines()
    assert err[-1].startswith("error: nothing synthesized: all 2 line(s) were skipped (line 1:")
    assert (
        "warning: line 1: skipped (" in proc.stderr
        and "warning: line 2: skipped (empty line)" in proc.stderr
    )
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["wav"] for r in rows] == [None, None]  # the reasons are kept on disk
    assert _noise(proc.stderr) == []


def test_infer_reports_length_cap_and_compile_time_once(trained, tmp_path):
    wd, _, _ = trained
    out = tmp_path / "o"
    proc = _run(
        [
            "infer.py",
            "--workdir",
            str(wd),
            "--text",
            "Hello there, how are you today?",
            "--text",
            "Hi.",
            "--text",
            "Where did you put the keys?",
            "--batch_size",
            "2",
            "--max_seconds",
            "0.1",
            "--greedy",
            "--out_dir",
            str(out),
        ]
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    capped = [r["index"] for r in rows if r["hit_max"]]
    assert capped  # 0.1 s = 5 tokens: lines run into the cap
    for i in capped:
        assert f"warning: line {i + 1}: 1 of 1 piece(s) reached the length cap" in proc.stderr
    summary = proc.stdout.strip().splitlines()[-1]
    assert summary.endswith(f"; {len(capped)} line(s) reached the length cap")
    # 3 lines at batch 2 = 2 batches; same text/prompt bucket -> ONE compiled shape, reported
    # once (the old summary added the batch's compile time once per row)
    assert "compilation of 1 shape(s))" in summary
    comp = float(summary.split("; + ")[1].split(" s compilation")[0])
    per_row = [r["compile_s"] for r in rows]
    assert comp == pytest.approx(max(per_row), abs=0.06) and comp < sum(per_row) - 0.05
    assert _noise(proc.stderr) == []


def test_compile_total_equals_per_shape_sum(trained, tiny_corpus):
    from jaxtts.data.manifest import read_split
    from jaxtts.synthesize import Prompt, Synthesizer, summary_line

    wd, _, _ = trained
    synth = Synthesizer.from_workdir(wd)
    prompt = Prompt.from_utterance(read_split(tiny_corpus, "dev")[0])
    texts = ["Hi.", "Where did you put the keys?", "Hello.", "The cat sat."]
    res = synth.synthesize(texts, prompt, batch_size=2, max_seconds=0.2, progress=False)
    res += synth.synthesize(texts, prompt, batch_size=3, max_seconds=0.2, progress=False)
    shapes = synth.compile_times
    # batch 2 and batch 3, one shape per prefill width (the split prefill: widths of 8)
    assert {k[1] for k in shapes} == {2, 3} and all(v > 0 for v in shapes.values())
    line = summary_line(res, synth, "out")
    assert f"+ {sum(shapes.values()):.1f} s compilation of {len(shapes)} shape(s))" in line
    # one text with the default batch_size (8) runs at batch 1, not padded to 8 rows; three at 4
    synth.synthesize(texts[:1], prompt, max_seconds=0.2, progress=False)
    synth.synthesize(texts[:3], prompt, max_seconds=0.2, progress=False)
    assert {k[1] for k in shapes} == {1, 2, 3, 4}


def test_reuse_wider_compiles_once_and_changes_no_token(trained, tiny_corpus):
    from jaxtts.data.manifest import read_split
    from jaxtts.synthesize import Prompt, Synthesizer

    wd, _, _ = trained
    prompt = Prompt.from_utterance(read_split(tiny_corpus, "dev")[0])
    long = "Where did you put the keys that were on the kitchen table this morning, and why?"
    short = "Hi."
    kw = dict(max_seconds=0.3, progress=False, vocode=False)
    plain = Synthesizer.from_workdir(wd)
    ref = plain.synthesize([short], prompt, **kw)[0]
    reuse = Synthesizer.from_workdir(wd)
    reuse.reuse_wider = True
    reuse.synthesize([long], prompt, **kw)
    (wide,) = reuse.compile_times
    got = reuse.synthesize([short], prompt, **kw)[0]
    (narrow,) = plain.compile_times
    assert narrow[2] < wide[2]  # the short text alone compiles a narrower width
    assert list(reuse.compile_times) == [wide]  # ... here it took the wide program
    assert got.info["compile_s"] == 0.0
    np.testing.assert_array_equal(got.tokens, ref.tokens)  # padding changes no token


def test_synthesizer_prefills_at_the_narrow_width_and_shares_one_loop(trained, tiny_corpus):
    """The token LM's split prefill in `Synthesizer`: texts of two widths in one 64-symbol
    bucket prefill at their own multiple of 8 and run one compiled loop; the tokens equal those
    of the text padded to 64 for the prefill too (`prefill_bucket = 64`, the layout before)."""
    from jaxtts.data.manifest import read_split
    from jaxtts.decode import driver
    from jaxtts.synthesize import Prompt, Synthesizer

    wd, _, _ = trained
    prompt = Prompt.from_utterance(read_split(tiny_corpus, "dev")[0])
    texts = ["Hi.", "Where did you put the keys?"]
    kw = dict(prompts=prompt, max_seconds=0.3, progress=False, vocode=False, batch_size=1)
    split = Synthesizer.from_workdir(wd)
    assert split.engine.prefill_bucket == 8 and split.engine.text_bucket == 64
    loops = driver._loop._cache_size()
    got = split.synthesize(texts, **kw)
    shapes = sorted(split.compile_times)  # (strategy, rows, loop width, prompt width, prefill)
    assert len(shapes) == 2 and shapes[0][2] == shapes[1][2] == 64
    assert shapes[0][4] != shapes[1][4] and max(s[4] for s in shapes) < 64
    assert driver._loop._cache_size() - loops <= 1  # both widths ran one compiled loop
    plain = Synthesizer.from_workdir(wd)
    plain.engine.prefill_bucket = 64
    want = plain.synthesize(texts, **kw)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g.tokens, w.tokens)
    assert all(s[4] == 64 for s in plain.compile_times)


@pytest.mark.parametrize("entry", [["train.py"], ["infer.py"], ["-m", "jaxtts.evaluate"]])
def test_help_exits_zero(entry):
    proc = _run([*entry, "--help"], timeout=120)
    assert proc.returncode == 0, proc.stderr[-1000:]
    assert "--" in proc.stdout and proc.stderr.strip() == ""


def test_print_config_describes_every_key_of_every_variant():
    from jaxtts import config_help

    listing = config_help.list_configs()
    car = "tiny,demo,small,deep,deep_ft,natural,natural_deep,natural_boot,natural_xfer,paper"
    assert f"configs/car.py:{{{car}}}" in listing
    assert "configs/ctc_asr.py:{tiny,small}" in listing
    for name in ("dcar", "ssd", "mdm", "tldr"):  # VARIANTS files (dcar/ssd were missing)
        assert f"configs/{name}.py:{{tiny,small" in listing
    assert "configs/palle.py:{tiny,tiny_refine,small,small_refine,small_nar,paper}" in listing
    table = config_help.help_table()
    import importlib.util

    for path in sorted(config_help.CONFIGS_DIR.glob("*.py")):
        for v in config_help.variants(path):
            spec = importlib.util.spec_from_file_location(f"c_{path.stem}", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            keys = config_help.flatten(mod.get_config(v).to_dict())
            missing = sorted(set(keys) - set(table))
            assert missing == [], f"{path.name}:{v} keys without a description: {missing}"
    proc = _run(["train.py", "--config", "configs/car.py:small", "--print_config"], timeout=120)
    assert proc.returncode == 0 and "(no description)" not in proc.stdout
    assert "model.num_mtp_heads = 4" in proc.stdout and "# prediction heads K" in proc.stdout
    listed = "variants of configs/car.py: " + car.replace(",", ", ")
    assert listed in proc.stdout


def test_speaker_of_a_run_built_on_another_comes_from_that_runs_corpus(tiny_corpus, tmp_path):
    """`--speaker` needs a corpus: a DCAR policy or SSD draft folder records none of its own
    (its data.json names the `backbone` / `target` run), so the prompt comes from that run's
    corpus, as `infer.py --workdir pretrained/dcar_deep --speaker spk03` in the README. A
    data.json with neither is one DataError naming it."""
    from jaxtts.data.manifest import read_split
    from jaxtts.errors import DataError
    from jaxtts.synthesize import resolve_prompt, run_corpus_dir

    runs = {"lm": {"corpus_dir": str(tiny_corpus)}, "ssd": {"target": "../lm"}}
    runs |= {"dcar": {"backbone": str(tmp_path / "lm")}, "lost": {"tokenizer": "kmeans"}}
    for name, info in runs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
        (tmp_path / name / "data.json").write_text(json.dumps(info))
    first = read_split(tiny_corpus, "test")[0]
    for name in ("lm", "ssd", "dcar"):
        assert run_corpus_dir(tmp_path / name) == str(tiny_corpus), name
        prompt = resolve_prompt(tmp_path / name, speaker=first.speaker)
        assert (prompt.id, prompt.speaker) == (first.id, first.speaker), name
    with pytest.raises(DataError, match=r"lost/data.json: no corpus_dir entry; --speaker needs"):
        resolve_prompt(tmp_path / "lost", speaker=first.speaker)
    with pytest.raises(DataError, match=r"none/data.json: not found; --speaker needs"):
        resolve_prompt(tmp_path / "none", speaker=first.speaker)
