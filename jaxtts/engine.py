"""Engines: the one interface between synthesis / evaluation and any model family.

`jaxtts.synthesize` keeps only what every family shares (text splitting, prompts, bucketing,
per-row keys, timing, the vocoder, wav + JSONL writing) and talks to a model only through an
`Engine`:

    engine = load_engine("runs/car_small")           # the family from config.json's `task`
    plan = resolve(engine, "car:3", top_k=50)        # strategy + options, checked once
    ids, units = engine.encode_prompt(prompt)        # prompt transcript ids, prompt units
    out = engine.generate(batch, keys, plan)         # units [B, N, ...], lengths, steps, stats
    mel = engine.units_to_mel(out.units[0, :out.length[0]])

Units are whatever the family generates: speech tokens [N] (the token LM, PALLE, TLDR) or
mel frames [N, n_mels] (MDM). A family registers its engine class in `jaxtts.families`.

Axis letters: B batch, X text, P prompt units, N generated units, M mel bins.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from jaxtts.data.audio import log_mel, resample
from jaxtts.decode.driver import PromptBatch
from jaxtts.decode.options import DecodeOptions
from jaxtts.errors import CheckpointError, ConfigError, DataError
from jaxtts.families import family
from jaxtts.families import resolve as resolve_target
from jaxtts.run_folder import RunFolder

if TYPE_CHECKING:
    from jaxtts.data.audio import MelConfig
    from jaxtts.data.prompt import Prompt
    from jaxtts.data.text import TextFrontend
    from jaxtts.run_folder import RunFolder


@dataclasses.dataclass
class Generated:
    """An engine's output for a batch (host numpy arrays)."""

    units: np.ndarray  # [B, N] tokens or [B, N, M] frames; rows valid up to `length`
    length: np.ndarray  # int [B]
    steps: np.ndarray  # int [B] decoding steps (model forwards after the prefill) of the row
    hit_max: np.ndarray  # bool [B] stopped by the length cap
    stats: dict = dataclasses.field(default_factory=dict)  # strategy statistics of the batch


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a request decodes with, built and checked once by `resolve`: every layer after it
    (Synthesizer, stream, server, the engine's `generate`) takes the Plan and re-checks
    nothing."""

    strategy: Any  # the object the loop runs (e.g. `ChunkedAR(chunk=3)`), checked on the models
    options: DecodeOptions  # the run's decode options with the overrides; .strategy canonical

    @property
    def name(self) -> str:
        """The canonical spec ("car:3" for " car:03"): one compile key, one name in outputs."""
        return self.options.strategy


def resolve(engine: Engine, spec: str | None = None, **overrides) -> Plan:
    """The Plan of a request: `spec` (None: the run's default strategy) and option overrides
    (max_seconds, temperature, top_k, top_p, greedy, precision, ...; None keeps the run's),
    each a one-line ConfigError when this engine cannot run it."""
    options = engine.options(strategy=spec, **overrides)
    strategy = engine.parse_strategy(options.strategy)
    plan = Plan(strategy, dataclasses.replace(options, strategy=strategy.name))
    engine.check_plan(plan)
    return plan


class Engine(abc.ABC):
    """A trained model of one family, ready to synthesize (see the module docstring)."""

    family: str
    frontend: TextFrontend  # text -> symbol ids
    mel_cfg: MelConfig  # the mel the family's units decode to (and the vocoder inverts)
    frame_rate: float  # generated units per second of audio
    max_text_symbols: int  # longest target text (symbols) the model was trained on
    prompt_seconds: float  # prompt speech used, as in training
    prompt_text: str = "proportional"  # or "full": how much of the prompt transcript is kept
    decode_config: dict  # the run's config.decode (defaults of `options`)
    precisions: tuple[str, ...] = ("float32",)  # decode.precision values it runs
    # text widths: batches are compiled per multiple of `text_bucket` symbols; an engine that
    # runs the split prefill (`jaxtts.decode.driver.decode`) pads the text only to a multiple
    # of `prefill_bucket` and prefills at that width (fewer padded positions computed)
    text_bucket: int = 64
    prefill_bucket: int = 64

    # -- construction
    @classmethod
    @abc.abstractmethod
    def from_run(cls, run: RunFolder, step: int | None = None) -> Engine:
        """Load a run folder of this family (latest checkpoint, or `step`)."""

    # -- units
    @abc.abstractmethod
    def mel_to_units(self, mel: np.ndarray) -> np.ndarray:
        """log-mel [T, M] of prompt audio -> prompt units [P, ...]."""

    @abc.abstractmethod
    def units_to_mel(self, units: np.ndarray, ref: np.ndarray | None = None) -> np.ndarray:
        """Generated units [N, ...] -> log-mel [T, M] for the vocoder. `ref`: the prompt's
        log-mel [T', M] (`prompt_mel`), whose voice a decoder conditioned on one decodes in
        (`uses_voice_ref`); others ignore it."""

    @property
    def uses_voice_ref(self) -> bool:
        """Whether `units_to_mel` reads the prompt's voice (`ref`): a conditioned codec."""
        return False

    def prompt_mel(self, prompt: Prompt | None) -> np.ndarray | None:
        """The prompt's whole log-mel [T, M] (the voice `units_to_mel` decodes in), or None."""
        if prompt is None:
            return None
        wav = np.asarray(prompt.wav, np.float32)
        if prompt.sample_rate != self.mel_cfg.sample_rate:
            wav = resample(wav, prompt.sample_rate, self.mel_cfg.sample_rate)
        return log_mel(wav, self.mel_cfg) if wav.size and np.any(wav) else None

    # -- decoding
    @abc.abstractmethod
    def parse_strategy(self, spec: str):
        """The strategy object `spec` names (from `jaxtts.decode.registry`, with a canonical
        `.name`), checked against this model; ConfigError if it cannot run it. Called once per
        request, by `resolve`."""

    def check_plan(self, plan: Plan) -> None:  # noqa: B027 - optional hook
        """ConfigError if the options do not apply to the strategy (e.g. top_k on MDM)."""

    @abc.abstractmethod
    def generate(self, batch: PromptBatch, keys: jax.Array, plan: Plan) -> Generated:
        """Decode a padded batch (numpy arrays) as `plan` says; keys: [B] per-row PRNG keys."""

    def memory_bytes(
        self, text_len: int, prompt_len: int, length: int, strategy: str | None = None
    ) -> int:
        """Decoding-state bytes of one row (e.g. its KV cache) that decoded `length` units
        with `strategy`; 0 if not tracked."""
        return 0

    # -- shared
    def compile_key(self, options: DecodeOptions):
        """What a compiled decode of this engine depends on besides the batch shape (the
        Synthesizer times a shape's first call apart as compilation): every option, unless the
        family traces some of them."""
        return options

    def options(self, **overrides) -> DecodeOptions:
        """The run's decode options with overrides (None = keep)."""
        options = DecodeOptions.from_config(self.decode_config, **overrides)
        if options.precision not in self.precisions:
            raise ConfigError(
                f"precision={options.precision!r}: a {self.family} run decodes with "
                f"{list(self.precisions)}"
            )
        return options

    def max_new_units(self, options: DecodeOptions) -> int:
        return options.max_new_tokens(self.frame_rate)

    def encode_prompt(self, prompt: Prompt | None) -> tuple[np.ndarray, np.ndarray]:
        """(prompt transcript ids [Lp], prompt units [P, ...]) cut as in training: the first
        `prompt_seconds` of the prompt and (proportional) the matching share of its text."""
        if prompt is None:
            empty = np.asarray(self.mel_to_units(np.zeros((1, self.mel_cfg.n_mels), np.float32)))
            return np.zeros((0,), np.int32), empty[:0]
        wav = np.asarray(prompt.wav, np.float32)
        if prompt.sample_rate != self.mel_cfg.sample_rate:
            wav = resample(wav, prompt.sample_rate, self.mel_cfg.sample_rate)
        if wav.size == 0 or not np.any(wav):
            raise DataError(f"prompt {prompt.id or prompt.audio_path!r}: audio is empty or silent")
        units = np.asarray(self.mel_to_units(log_mel(wav, self.mel_cfg)))
        n_prompt = int(round(float(self.prompt_seconds) * self.frame_rate))
        used = min(n_prompt, units.shape[0])
        ids = self.frontend.encode(prompt.text)
        if self.prompt_text == "proportional":
            ids = ids[: int(np.rint(len(ids) * used / max(units.shape[0], 1)))]
        return ids.astype(np.int32), units[:used]


def load_engine(workdir, step: int | None = None) -> Engine:
    """The engine of any family's run folder (chosen by config.json's `task`)."""
    run = RunFolder(workdir)
    task = str(run.read_config().task)
    fam = family(task)
    if fam.engine is None:
        raise CheckpointError(
            f"{run.config_path}: a {task!r} run ({fam.what}) does not "
            "synthesize speech; pass the run folder of a TTS model"
        )
    return resolve_target(fam.engine).from_run(run, step)


__all__ = ["Engine", "Generated", "Plan", "PromptBatch", "load_engine", "resolve"]
