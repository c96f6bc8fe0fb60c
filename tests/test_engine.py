"""A second, test-only model family plugs into synthesis through the `Engine` interface: the
shared batching, prompts, per-row keys, vocoder and writer run unchanged on a family that
outputs mel frames (as MDM will), not tokens."""

import json
import types

import jax
import numpy as np
import pytest

from jaxtts.data.audio import MelConfig, load_audio
from jaxtts.data.text import TextFrontend
from jaxtts.engine import Engine, Generated
from jaxtts.errors import CheckpointError, ConfigError
from jaxtts.synthesize import Prompt, Synthesizer


class FixedMelEngine(Engine):
    """Outputs 6 mel frames per text symbol: a fixed spectral shape whose level depends on the
    row's PRNG key (so per-row keys are visible in the output). Units are mel frames."""

    family = "fixed_mel"

    def __init__(self):
        self.frontend = TextFrontend.build([list("abcdefghijklmnopqrstuvwxyz .,?")], backend="char")
        self.mel_cfg = MelConfig()
        self.frame_rate = 50.0
        self.max_text_symbols = 40
        self.prompt_seconds = 1.0
        self.decode_config = {"strategy": "fixed", "max_seconds": 3.0}
        self.calls = []

    @classmethod
    def from_run(cls, run, step=None):
        return cls()

    def mel_to_units(self, mel):
        return np.asarray(mel, np.float32)  # [T, M]

    def units_to_mel(self, units, ref=None):
        return np.asarray(units, np.float32)

    def parse_strategy(self, spec):
        if spec != "fixed":
            raise ConfigError(f"--strategy {spec!r}: this engine has only 'fixed'")
        return types.SimpleNamespace(name="fixed")

    def generate(self, batch, keys, plan):
        self.calls.append((batch.text.shape, batch.prompt.shape))
        n_max = self.max_new_units(plan.options)
        b = batch.text.shape[0]
        length = np.minimum(6 * np.asarray(batch.text_len), n_max)
        level = np.asarray(jax.vmap(lambda k: jax.random.uniform(k))(keys))  # [B]
        shape = -6.0 + 3.0 * np.sin(np.linspace(0, 6, self.mel_cfg.n_mels))  # [M]
        mel = np.full((b, n_max, self.mel_cfg.n_mels), -11.5, np.float32)
        for i in range(b):
            mel[i, : length[i]] = shape + level[i]
        return Generated(
            units=mel, length=length, steps=np.ones(b, np.int32), hit_max=length >= n_max, stats={}
        )


@pytest.fixture(scope="module")
def engine():
    return FixedMelEngine()


def _prompt():
    t = np.arange(16000) / 16000
    return Prompt(
        "p0", "spk", "hello there", (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    )


def test_second_family_through_the_shared_synthesis(engine, tmp_path):
    synth = Synthesizer(engine)
    texts = ["abc de", "a much longer line of text here. and more of it, still going on", "", "fg"]
    results = synth.synthesize(texts, _prompt(), batch_size=2, seed=1, progress=False)
    assert [r.skipped for r in results] == [None, None, "empty line", None]
    # prompt: mel frames [P, 80] padded into [B, P, 80]; the first second of it (50 frames)
    assert all(p[1:] == (50, 80) for _, p in engine.calls)
    p_ids, p_units = engine.encode_prompt(_prompt())
    assert p_units.shape == (50, 80)
    assert 0 < len(p_ids) <= len(engine.frontend.encode("hello there"))
    # row text = the prompt's transcript ids + the line's ids
    n_sym = [len(p_ids) + len(engine.frontend.encode(t)) for t in ("abc de", "fg")]
    assert results[0].tokens.shape == (6 * n_sym[0], 80)
    assert results[3].tokens.shape == (6 * n_sym[1], 80)
    assert results[1].info["pieces"] >= 2  # split at the 40-symbol limit, audio joined
    out = synth.write(results, tmp_path)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["wav"] for r in rows] == ["0000.wav", "0001.wav", None, "0003.wav"]
    wav = load_audio(out / "0000.wav", 16000)
    assert wav.size == pytest.approx(6 * n_sym[0] * 320, abs=320)  # frames * hop
    assert float(np.abs(wav).max()) > 0.01  # the vocoder made sound of the engine's mel
    # batch-N == batch-1 per row (per-row keys)
    single = synth.synthesize(texts, _prompt(), batch_size=1, seed=1, progress=False)
    for a, b in zip(results, single, strict=True):
        np.testing.assert_array_equal(a.tokens, b.tokens)
        np.testing.assert_array_equal(a.wav, b.wav)
    with pytest.raises(ConfigError, match="this engine has only 'fixed'"):
        synth.synthesize(["abc"], None, strategy="car:3", progress=False)
    # a family that decodes in float32 only names what it runs
    with pytest.raises(
        ConfigError, match=r"precision='bfloat16': a fixed_mel run decodes with \['float32'\]"
    ):
        synth.synthesize(["abc"], None, precision="bfloat16", progress=False)


def test_load_engine_rejects_a_non_tts_run(tmp_path):
    from jaxtts.engine import load_engine

    (tmp_path / "config.json").write_text(json.dumps({"task": "ctc_asr"}))
    with pytest.raises(
        CheckpointError,
        match=r"a 'ctc_asr' run \(conformer CTC ASR.*does not "
        r"synthesize speech",
    ):
        load_engine(tmp_path)
