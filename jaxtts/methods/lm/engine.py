"""The token LM's engine: text + prompt tokens -> speech tokens (FAR / CAR / later DCAR, SSD)."""

from __future__ import annotations

import shutil

import jax
import numpy as np

from jaxtts.checkpoint import abstract_params
from jaxtts.codec import load_tokenizer
from jaxtts.data.text import TextFrontend
from jaxtts.data.tokenizers import SpeechTokenizer
from jaxtts.decode import registry
from jaxtts.decode.driver import PromptBatch, Strategy, decode
from jaxtts.decode.options import PRECISIONS, DecodeOptions
from jaxtts.decode.precision import at_precision
from jaxtts.engine import Engine, Generated, Plan
from jaxtts.errors import CheckpointError, ConfigError
from jaxtts.methods.lm.model import TTSLM, LMConfig
from jaxtts.run_folder import RunFolder, check_vocab_files, resolve_run


class LMEngine(Engine):
    family = "lm"
    precisions = PRECISIONS
    prefill_bucket = 8  # the driver's split prefill: text padded to 8, the loop per 64

    def __init__(
        self,
        config,
        params,
        frontend: TextFrontend,
        tokenizer: SpeechTokenizer,
        max_text_symbols: int | None = None,
    ):
        self.config = config
        self.cfg = LMConfig.from_config(config.model, saved=True)
        if frontend.vocab_size != self.cfg.num_text_symbols:
            raise CheckpointError(
                f"text front-end has {frontend.vocab_size} symbols but "
                f"model.num_text_symbols={self.cfg.num_text_symbols}"
            )
        if tokenizer.vocab_size != self.cfg.num_speech_tokens:
            raise CheckpointError(
                f"tokenizer {tokenizer.name!r} has {tokenizer.vocab_size} "
                f"tokens but model.num_speech_tokens="
                f"{self.cfg.num_speech_tokens}"
            )
        self.model = TTSLM(self.cfg)
        self.params = params
        self.frontend = frontend
        self.tokenizer = tokenizer
        self.mel_cfg = tokenizer.mel_cfg
        self.frame_rate = float(tokenizer.frame_rate)
        self.max_text_symbols = int(max_text_symbols or config.data.max_text_len)
        self.prompt_seconds = float(config.data.prompt_seconds)
        self.prompt_text = str(config.data.get("prompt_text", "proportional"))
        self.decode_config = dict(config.decode)
        self._cast_key, self._cast = None, None  # `at_precision`'s last cast

    def _backbone_args(self) -> tuple[tuple, dict]:
        """The constructor arguments that rebuild this engine's backbone part (engines of the
        families built on a backbone call `LMEngine.__init__` with them)."""
        args = (self.config, self.params, self.frontend, self.tokenizer)
        return args, {"max_text_symbols": self.max_text_symbols}

    @classmethod
    def from_run(cls, run: RunFolder, step: int | None = None) -> LMEngine:
        config = run.read_config("lm")
        frontend = TextFrontend.load(run.text_frontend_dir)
        tokenizer = load_tokenizer(run.tokenizer_dir)
        cfg = LMConfig.from_config(config.model, saved=True)
        check_vocab_files(run, frontend, tokenizer, cfg.num_text_symbols, cfg.num_speech_tokens)
        rate = run.read_data_info().get("frame_rate")
        if rate is not None and abs(float(rate) - tokenizer.frame_rate) > 1e-6:
            raise CheckpointError(
                f"{run.tokenizer_dir}: a {tokenizer.frame_rate:g} Hz tokenizer "
                f"but the model was trained on {float(rate):g} Hz tokens "
                f"({run.data_path})"
            )
        one = np.ones((1, 4), np.int32)
        like = abstract_params(TTSLM(cfg).init, one, np.array([4]), one, np.array([4]))
        params, _ = run.load_params(like, step)
        max_text = run.read_data_info().get("max_target_text")
        return cls(config, params, frontend, tokenizer, max_text_symbols=max_text)

    def mel_to_units(self, mel):
        return np.asarray(self.tokenizer.encode(mel), np.int32)

    def units_to_mel(self, units, ref=None):
        units = np.asarray(units, np.int32)
        if ref is not None and self.uses_voice_ref:
            return self.tokenizer.decode(units, ref=ref)
        return self.tokenizer.decode(units)

    @property
    def uses_voice_ref(self) -> bool:
        return bool(getattr(self.tokenizer, "conditioned", False))

    def decode_models(self) -> dict:
        """The named models a strategy runs on (a DCAR engine adds its policy)."""
        return {"target": self.model}

    def decode_params(self) -> dict:
        return {"target": self.params}

    def compile_key(self, options: DecodeOptions):
        # the generic driver traces temperature and top_p (`SamplingConfig.traced`)
        return (
            options.strategy,
            options.sampling.static_key,
            options.max_seconds,
            options.precision,
        )

    def parse_strategy(self, spec: str) -> Strategy:
        models = self.decode_models()
        strategy = registry.get(spec)
        offered = registry.names("lm")
        if self.family != "lm":
            offered += registry.names(self.family)
        if not isinstance(strategy, Strategy):
            raise ConfigError(f"--strategy {spec!r}: a {self.family} run decodes with {offered}")
        strategy = strategy.bind(models)
        strategy.check(models)  # its own one-line reason first (e.g. "needs a draft model")
        if registry.family_of(spec) not in ("lm", self.family):
            raise ConfigError(f"--strategy {spec!r}: a {self.family} run decodes with {offered}")
        return strategy

    def decode_models_for(self, batch: PromptBatch | None, plan: Plan) -> tuple[dict, dict]:
        """(models, params) the loop runs `plan.strategy` on for `batch`, at the plan's
        precision: what `generate` decodes with in one call and `jaxtts.stream` / the server's
        slots segment by segment (SSD's `draft` swaps in the draft, TLDR checks the prompt)."""
        return self.at_precision(self.decode_models(), self.decode_params(), plan.options)

    def at_precision(self, models: dict, params: dict, options: DecodeOptions):
        """(models, params) with the models' matmuls at `options.precision`
        (`jaxtts.decode.precision`: also decoding's fused layout); the parameters are kept
        per precision."""
        # the key holds the source trees themselves, so their ids cannot be reused meanwhile
        key = (options.precision, tuple(sorted(params.items(), key=lambda kv: kv[0])))
        old = self._cast_key
        if (
            old is None
            or old[0] != key[0]
            or len(old[1]) != len(key[1])
            or any(a != c or u is not v for (a, u), (c, v) in zip(old[1], key[1], strict=True))
        ):
            self._cast = at_precision(models, params, options.precision)
            self._cast_key = key
        return self._cast

    def generate(self, batch: PromptBatch, keys: jax.Array, plan: Plan) -> Generated:
        models, params = self.decode_models_for(batch, plan)
        out = jax.device_get(
            decode(
                plan.strategy,
                models,
                params,
                batch,
                keys,
                max_new_tokens=self.max_new_units(plan.options),
                sampling=plan.options.sampling,
            )
        )
        return Generated(
            units=np.asarray(out.tokens),
            length=np.asarray(out.length),
            steps=np.asarray(out.steps),
            hit_max=np.asarray(out.hit_max),
            stats={k: np.asarray(v) for k, v in out.stats.items()},
        )

    def memory_bytes(
        self, text_len: int, prompt_len: int, length: int, strategy: str | None = None
    ) -> int:
        return self.cfg.kv_bytes_per_token() * (text_len + 1 + prompt_len + length)


def sentence_batch(engine: LMEngine, text: str, prompt=None, bucket: int = 64) -> PromptBatch:
    """One sentence (+ its optional prompt) as a batch of one, widths bucketed to `bucket` so
    that sentences share compiled shapes (the per-sentence schedule helpers of DCAR and SSD)."""
    p_ids, p_units = engine.encode_prompt(prompt)
    ids = np.concatenate([p_ids, engine.frontend.encode(text)]).astype(np.int32)
    units = np.asarray(p_units, np.int32).reshape(-1)

    def padded(a, step=bucket):
        out = np.zeros((1, max(step, -(-a.size // step) * step)), np.int32)
        out[0, : a.size] = a
        return out

    return PromptBatch(
        padded(ids), np.array([ids.size], np.int32), padded(units), np.array([units.size], np.int32)
    )


def start_on_backbone(config, task: str, key: str, workdir: str):
    """The common start of a run trained on a frozen LM (SSD's draft, TLDR): checks
    `config.task`, resolves the backbone run named by `config.<task>.<key>`, creates the run
    folder with the backbone's symbol table (`prepare_data` keeps a run's own) and loads the
    backbone. -> (backbone RunFolder, the run's RunFolder, backbone LMEngine)."""
    if config.get("task") != task:
        raise ConfigError(f"config.task={config.get('task')!r}: expected {task!r}")
    backbone = resolve_run(str(config[task][key]), f"{task}.{key}")
    run = RunFolder(workdir)
    run.path.mkdir(parents=True, exist_ok=True)
    if not (run.text_frontend_dir / "text_frontend.json").is_file():
        shutil.copytree(backbone.text_frontend_dir, run.text_frontend_dir, dirs_exist_ok=True)
    return backbone, run, LMEngine.from_run(backbone)
