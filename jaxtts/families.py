"""The model families jaxtts trains and loads, by `config.task`: one table, imported lazily.

Each family names its training function, its inference engine (if it synthesizes speech) and
the command that makes a run folder of it (quoted in errors). Nothing here imports a family's
code until it is asked for, so one family's dependencies never load for another.
"""

from __future__ import annotations

import dataclasses
import importlib

from jaxtts.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Family:
    task: str
    train: str  # "module:function(config, workdir)"
    engine: str | None  # "module:EngineClass" (None: not a speech synthesizer)
    how_to_train: str  # the command that makes a run folder of this family
    what: str  # one line for listings


FAMILIES: dict[str, Family] = {
    f.task: f
    for f in (
        Family(
            "lm",
            "jaxtts.methods.lm.task:train",
            "jaxtts.methods.lm.engine:LMEngine",
            "python train.py --config configs/car.py:small --workdir <dir>",
            "TTS LM with multi-token heads (FAR / CAR)",
        ),
        Family(
            "dcar",
            "jaxtts.methods.dcar.dcpo:train",
            "jaxtts.methods.dcar.engine:DCAREngine",
            "python train.py --config configs/dcar.py:small --workdir <dir>",
            "DCAR chunk-size policy (DCPO) on a frozen TTS LM",
        ),
        Family(
            "ssd",
            "jaxtts.methods.ssd.task:train",
            "jaxtts.methods.ssd.engine:SSDEngine",
            "python train.py --config configs/ssd.py:small --workdir <dir>",
            "SSD draft (the target's own layers) for speculative decoding",
        ),
        Family(
            "palle",
            "jaxtts.methods.palle.task:train",
            "jaxtts.methods.palle.engine:PALLEEngine",
            "python train.py --config configs/palle.py:small --workdir <dir>",
            "PALLE masked generative transformer (PAR stage one / NAR refine)",
        ),
        Family(
            "mdm",
            "jaxtts.methods.mdm.task:train",
            "jaxtts.methods.mdm.engine:MDMEngine",
            "python train.py --config configs/mdm.py:small --workdir <dir>",
            "MDM acoustic model + masked-diffusion mel decoder (decoding orders)",
        ),
        Family(
            "tldr",
            "jaxtts.methods.tldr.task:train",
            "jaxtts.methods.tldr.engine:TLDREngine",
            "python train.py --config configs/tldr.py:small --workdir <dir>",
            "TLDR patch compressor + extractor, LoRA on a frozen TTS LM",
        ),
        Family(
            "ctc_asr",
            "jaxtts.methods.ctc_asr:train",
            None,
            "python train.py --config configs/ctc_asr.py:small --workdir <dir>",
            "conformer CTC ASR (DCPO reward model)",
        ),
        Family(
            "vocoder",
            "jaxtts.methods.vocoder:train",
            None,
            "python train.py --config configs/vocoder.py:small --workdir <dir>",
            "Vocos-style neural vocoder (log-mel -> audio, GAN-trained)",
        ),
        Family(
            "codec",
            "jaxtts.methods.codec:train",
            None,
            "python train.py --config configs/codec.py:small --workdir <dir>",
            "learned speech tokenizer (mel autoencoder, FSQ codes, CTC phoneme head)",
        ),
        Family(
            "speaker_encoder",
            "jaxtts.methods.speaker_encoder:train",
            None,
            "python train.py --config configs/speaker_encoder.py:small --workdir <dir>",
            "speaker encoder (SIM fallback, speaker conditioning)",
        ),
    )
}


def family(task: str) -> Family:
    if task not in FAMILIES:
        raise ConfigError(f"config.task={task!r}: expected one of {sorted(FAMILIES)}")
    return FAMILIES[task]


def resolve(target: str):
    """'module:attr' -> the attribute (imports the module)."""
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)
