"""The PALLE engine: a PALLE run folder (stage one, stage two or NAR) ready to synthesize.

Strategies (`infer.py --strategy`, `evaluate --strategies`), each with optional `k=v` settings:

  par     stage one only            par:steps=100,ratio=0.01
  palle   stage one + refinement    palle:steps=100,ratio=0.01,refine=7,gamma=0.05
  nar     MaskGCT-style decoding    nar:steps=50
  every one also takes scale=<duration multiplier> (default 1.0)

A stage-two run (`palle.stage='refine'`) names its stage-one run in `config.palle.par_run`
(a run folder path, relative to the working directory or the repository); `palle` runs stage
one there and refines here, `par` runs stage one alone. A stage-one run offers `par` and `nar`
(decoding order only: its weights were trained for PAR), a NAR run `nar`.

Length: the generated length is G = round(scale * P * L_gen / L_ref) from the prompt's P tokens
and its transcript's L_ref symbols (the paper's T_gen = T_ref (1 + L_gen / L_ref), total
T = P + G), or the training data's mean tokens per text symbol without a prompt; at least the
number of text symbols not covered by the prompt (the text must fit the speech positions),
at most the length cap (`decode.max_seconds`, flagged hit_max) and the model's longest
training row. Explicit lengths: `generate(..., total_len=...)`.

Axis letters: B batch, T positions, X text.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import jax
import numpy as np

from jaxtts.codec import load_tokenizer
from jaxtts.data.text import TextFrontend
from jaxtts.decode import registry
from jaxtts.decode.driver import PromptBatch
from jaxtts.engine import Engine, Generated, Plan
from jaxtts.errors import CheckpointError, ConfigError, DataError
from jaxtts.methods.palle import decode as dec
from jaxtts.methods.palle.model import MaskedGenTransformer, PALLEConfig, init_params
from jaxtts.run_folder import REPO, RunFolder, check_vocab_files, find_run

DEFAULTS = {
    "par": dict(steps=100, ratio=0.01, scale=1.0),
    "palle": dict(steps=100, ratio=0.01, refine=7, gamma=0.05, scale=1.0),
    "nar": dict(steps=50, scale=1.0),
}
_INT = ("steps", "refine")
WIDTH_STEP = 32  # buffer widths are multiples of this (one compile per width)


@dataclasses.dataclass(frozen=True)
class PalleStrategy:
    """`par` / `palle` / `nar` with their settings (`jaxtts.decode.registry`)."""

    kind: str
    settings: tuple  # ((key, value), ...) in DEFAULTS order

    @property
    def name(self) -> str:
        s = dict(self.settings)
        return self.kind + ":" + ",".join(f"{k}={s[k]:g}" for k in DEFAULTS[self.kind])


def strategy(name: str, arg: str | None) -> PalleStrategy:
    """Registry factory: 'palle:refine=3,steps=50' -> PalleStrategy; one-line errors."""
    spec = f"{name}:{arg}" if arg else name
    if name not in DEFAULTS:
        raise ConfigError(f"strategy {spec!r}: a PALLE run decodes with one of {list(DEFAULTS)}")
    out = dict(DEFAULTS[name])
    for part in (p for p in (arg or "").split(",") if p):
        k, eq, v = part.partition("=")
        if not eq or k not in out:
            raise ConfigError(
                f"strategy {spec!r}: unknown setting {part!r}, expected k=v with k in {list(out)}"
            )
        try:
            out[k] = int(v) if k in _INT else float(v)
        except ValueError:
            raise ConfigError(f"strategy {spec!r}: {k}={v!r} is not a number") from None
    if out["steps"] < 1 or out.get("refine", 0) < 0 or out["scale"] <= 0:
        raise ConfigError(f"strategy {spec!r}: expected steps >= 1, refine >= 0, scale > 0")
    if not 0 < out.get("ratio", 0.5) < 1 or not 0 < out.get("gamma", 0.5) < 1:
        raise ConfigError(f"strategy {spec!r}: expected ratio and gamma in (0, 1)")
    return PalleStrategy(name, tuple((k, out[k]) for k in DEFAULTS[name]))


def parse_spec(spec: str) -> tuple[str, dict]:
    """'palle:refine=3,steps=50' -> ('palle', {... defaults updated}), through the registry
    (one grammar for every family); a strategy of another family is a one-line error."""
    registry.check_family(spec, "palle", str(list(DEFAULTS)))
    st = registry.get(spec)
    return st.kind, dict(st.settings)


def _resolve(path: str, run: RunFolder) -> Path:
    found = find_run(path, run.path)
    if found is not None:
        return found
    raise CheckpointError(
        f"{run.config_path}: palle.par_run {path!r} not found (looked in the "
        f"working directory and {REPO})"
    )


class PALLEEngine(Engine):
    family = "palle"

    def __init__(
        self,
        config,
        params,
        frontend: TextFrontend,
        tokenizer,
        info: dict,
        par: tuple[MaskedGenTransformer, dict] | None = None,
    ):
        self.config = config
        self.cfg = PALLEConfig.from_config(config.model)
        self.stage = str(config.palle.stage)
        self.model, self.params = MaskedGenTransformer(self.cfg), params
        self.par = (
            par if par is not None else ((self.model, params) if self.stage == "par" else None)
        )
        self.frontend, self.tokenizer = frontend, tokenizer
        self.mel_cfg = tokenizer.mel_cfg
        self.frame_rate = float(tokenizer.frame_rate)
        self.max_text_symbols = int(info.get("max_target_text") or config.data.max_text_len)
        self.prompt_seconds = float(config.data.prompt_seconds)
        self.prompt_text = str(config.data.get("prompt_text", "proportional"))
        self.max_positions = int(config.data.max_speech_len)  # longest training row
        self.tokens_per_symbol = float(info.get("tokens_per_symbol", 2.0))
        self.decode_config = dict(config.decode)

    # -- construction
    @classmethod
    def load_params(cls, run: RunFolder, step: int | None = None):
        config = run.read_config("palle")
        cfg = PALLEConfig.from_config(config.model)
        frontend = TextFrontend.load(run.text_frontend_dir)
        tokenizer = load_tokenizer(run.tokenizer_dir)
        check_vocab_files(run, frontend, tokenizer, cfg.num_text_symbols, cfg.num_speech_tokens)
        like = jax.eval_shape(lambda: init_params(cfg))
        params, _ = run.load_params(like, step)
        return config, params, frontend, tokenizer

    @classmethod
    def from_run(cls, run: RunFolder, step: int | None = None) -> PALLEEngine:
        config, params, frontend, tokenizer = cls.load_params(run, step)
        par = None
        if str(config.palle.stage) == "refine" and config.palle.get("par_run"):
            ppath = _resolve(str(config.palle.par_run), run)
            pconf, pparams, pfront, ptok = cls.load_params(RunFolder(ppath))
            if str(pconf.palle.stage) != "par":
                raise CheckpointError(
                    f"{run.config_path}: palle.par_run={ppath} is a "
                    f"{pconf.palle.stage!r} run, expected stage one ('par')"
                )
            if (
                pfront.symbols != frontend.symbols
                or ptok.name != tokenizer.name
                or ptok.vocab_size != tokenizer.vocab_size
            ):
                raise CheckpointError(
                    f"stage two {run.path} and stage one {ppath} use different "
                    "text symbols or speech tokens; train stage two from that "
                    "stage-one run (train.init_from)"
                )
            par = (MaskedGenTransformer(PALLEConfig.from_config(pconf.model)), pparams)
        return cls(config, params, frontend, tokenizer, run.read_data_info(), par)

    # -- units
    def mel_to_units(self, mel):
        return np.asarray(self.tokenizer.encode(mel), np.int32)

    def units_to_mel(self, units, ref=None):
        return self.tokenizer.decode(np.asarray(units, np.int32))

    # -- decoding
    def parse_strategy(self, spec: str):
        name, _ = parse_spec(spec)
        if name in ("par", "palle") and self.par is None:
            raise ConfigError(
                f"strategy {name!r}: this {self.stage!r} run has no stage-one model "
                "(a refine run names it in palle.par_run)"
            )
        if name == "palle" and self.stage != "refine":
            raise ConfigError(
                f"strategy 'palle' needs a stage-two run (palle.stage='refine'); "
                f"this is a {self.stage!r} run: use 'par' or 'nar'"
            )
        return registry.get(spec)

    def lengths(self, batch: PromptBatch, scale: float, cap: int) -> tuple[np.ndarray, np.ndarray]:
        """(generated lengths G [B], capped [B]) estimated from the prompts' speaking rate."""
        text_len = np.asarray(batch.text_len)
        p = np.asarray(batch.prompt_len)
        l_ref = (
            np.zeros_like(p) if batch.prompt_text_len is None else np.asarray(batch.prompt_text_len)
        )
        l_gen = text_len - l_ref
        rate = np.where((l_ref > 0) & (p > 0), p / np.maximum(l_ref, 1), self.tokens_per_symbol)
        g = np.rint(scale * rate * l_gen).astype(np.int64)
        g = np.maximum(g, np.maximum(text_len - p, 1))  # the text must fit the positions
        limit = np.minimum(cap, np.maximum(self.max_positions - p, 1))
        return np.minimum(g, limit).astype(np.int32), g > limit

    def generate(
        self,
        batch: PromptBatch,
        keys: jax.Array,
        plan: Plan,
        total_len: np.ndarray | None = None,
    ) -> Generated:
        name, s, options = plan.strategy.kind, dict(plan.strategy.settings), plan.options
        p = np.asarray(batch.prompt_len).astype(np.int32)
        text_len = np.asarray(batch.text_len)
        if total_len is None:
            gen, capped = self.lengths(batch, s["scale"], self.max_new_units(options))
        else:
            total = np.asarray(total_len).astype(np.int64)
            for b in range(total.shape[0]):
                if total[b] <= p[b] or total[b] > self.max_positions:
                    raise DataError(
                        f"row {b}: total length {total[b]} must exceed its prompt "
                        f"({p[b]} tokens) and be <= {self.max_positions} (the "
                        "model's longest training row)"
                    )
                if total[b] < text_len[b]:
                    raise DataError(
                        f"row {b}: total length {total[b]} is shorter than its text "
                        f"({text_len[b]} symbols)"
                    )
            gen, capped = (total - p).astype(np.int32), np.zeros(total.shape, bool)
        total = (p + gen).astype(np.int32)
        width = int(math.ceil(int(total.max()) / WIDTH_STEP) * WIDTH_STEP)
        speech = np.zeros((p.shape[0], width), np.int32)
        prompt = np.asarray(batch.prompt)
        n = min(prompt.shape[1], width)
        speech[:, :n] = prompt[:, :n]
        args = (np.asarray(batch.text), text_len.astype(np.int32), speech)
        stats = {}
        sampling = options.sampling
        if name == "nar":
            tokens, unmasked = dec.nar_decode(
                self.model, self.params, *args, p, total, keys, steps=s["steps"], sampling=sampling
            )
            steps = s["steps"]
            stats["unmasked"] = np.asarray(unmasked)
        else:
            pm, pp = self.par
            tokens, conf, commits = dec.par_decode(
                pm, pp, *args, p, total, keys, steps=s["steps"], ratio=s["ratio"], sampling=sampling
            )
            steps = s["steps"]
            stats["commits"] = np.asarray(commits)
            if name == "palle" and s["refine"] > 0:
                tokens, updated, remasked = dec.refine(
                    self.model,
                    self.params,
                    args[0],
                    args[1],
                    tokens,
                    conf,
                    p,
                    total,
                    keys,
                    steps=s["refine"],
                    gamma=s["gamma"],
                    sampling=sampling,
                )
                steps += s["refine"]
                stats["remasked"] = np.asarray(remasked)
                stats["updated"] = np.asarray(updated)
        tokens = np.asarray(jax.device_get(tokens))
        gmax = int(gen.max())
        units = np.full((p.shape[0], gmax), -1, np.int32)
        for b in range(p.shape[0]):
            units[b, : gen[b]] = tokens[b, p[b] : p[b] + gen[b]]
        return Generated(
            units=units,
            length=gen.astype(np.int32),
            steps=np.full(p.shape, steps, np.int32),
            hit_max=capped,
            stats=stats,
        )
