"""The MDM engine: text -> log-mel frames with the acoustic model and a decoding order.

    python infer.py --workdir runs/mdm --strategy mdm:top1* --text "..." --speaker spk03
    python -m jaxtts.evaluate --workdir runs/mdm --strategies random,l2r,r2l,top1*,duration

Strategies are the decoding orders (`orders.py`), bare or as `mdm:<order>`: random, l2r, r2l,
swap:<lambda>, top1, top1*, topk:<k>, duration; and, for a run trained with the Grad-TTS
baseline decoder (`model.score_layers > 0`), `gradtts:<steps>` (100 by default) and
`gradtts:length` (`gradtts.py`; its temperature tau is `mdm.gradtts_tau`, 1.5 as the paper,
not decode.temperature; top_k / top_p are one-line errors: nothing here uses them).
Units are mel frames [N, 80]: the prompt's log-mel gives the speaker embedding (the shipped
JAX speaker encoder's; no prompt = zeros) and its transcript is not synthesised (MDM is not a
continuation model). Two jitted calls per batch: the encoder's durations (a row whose duration
predictor gives zero frames is a one-line error), then the decoding loop on a frame buffer
bucketed to the longest row.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxtts.data.audio import MelConfig
from jaxtts.data.text import TextFrontend
from jaxtts.decode import registry
from jaxtts.decode.driver import PromptBatch
from jaxtts.engine import Engine, Generated, Plan
from jaxtts.errors import CheckpointError, ConfigError, DataError
from jaxtts.methods.mdm.decode import mdm_decode, num_steps, predicted_durations
from jaxtts.methods.mdm.gradtts import GradTTS, gradtts_decode
from jaxtts.methods.mdm.model import AcousticModel, MDMConfig
from jaxtts.methods.mdm.orders import MDMOrder
from jaxtts.methods.mdm.task import init_params, load_speaker_encoder, model_config
from jaxtts.run_folder import RunFolder

FRAME_BUCKET = 64


def resolve(spec: str) -> MDMOrder | GradTTS:
    """An MDM run's strategy: 'mdm:<order>' or 'gradtts[:...]' through the registry; a bare
    order ('top1*', 'swap:0.01') is short for 'mdm:<order>'."""
    spec = str(spec).strip()
    if registry.family_of(spec) is None:
        spec = f"mdm:{spec}"
    registry.check_family(spec, "mdm", "mdm:<order> (or a bare order) or gradtts[:<steps>]")
    return registry.get(spec)


class MDMEngine(Engine):
    family = "mdm"

    def __init__(self, config, params, frontend: TextFrontend, speaker=None):
        self.config = config
        self.cfg = model_config(config.model)
        self.model = AcousticModel(self.cfg)
        self.params = params
        self.frontend = frontend
        self.mel_cfg = MelConfig()
        self.frame_rate = float(self.mel_cfg.frame_rate)
        self.max_text_symbols = int(config.data.max_text_len)
        self.prompt_seconds = float(config.data.get("prompt_seconds", 3.0))
        self.decode_config = dict(config.decode)
        self.mdm = dict(config.get("mdm", {}))
        self.speaker = speaker  # JaxSpeakerEncoder or None
        self._encode = jax.jit(
            lambda p, t, n, s: self.model.apply({"params": p}, t, n, s, method="encode")[2]
        )

    @classmethod
    def from_run(cls, run: RunFolder, step: int | None = None) -> MDMEngine:
        config = run.read_config("mdm")
        frontend = TextFrontend.load(run.text_frontend_dir)
        cfg = MDMConfig(**dict(config.model))
        if frontend.vocab_size != cfg.num_text_symbols:
            raise CheckpointError(
                f"{run.text_frontend_dir}: {frontend.vocab_size} symbols but "
                f"model.num_text_symbols={cfg.num_text_symbols}"
            )
        like = jax.eval_shape(lambda: init_params(cfg))
        params, _ = run.load_params(like, step)
        speaker = load_speaker_encoder(config, run.path) if cfg.speaker_dim else None
        return cls(config, params, frontend, speaker)

    # -- units: log-mel frames
    def mel_to_units(self, mel):
        return np.asarray(mel, np.float32)

    def units_to_mel(self, units, ref=None):
        return np.asarray(units, np.float32)

    def encode_prompt(self, prompt):
        """(no transcript ids, the prompt's log-mel): only the voice is used."""
        ids, mel = super().encode_prompt(prompt)
        return np.zeros((0,), np.int32), mel

    # -- decoding
    def parse_strategy(self, spec: str) -> MDMOrder | GradTTS:
        st = resolve(spec)
        if isinstance(st, GradTTS) and not self.cfg.score_layers:
            raise ConfigError(
                f"strategy {spec!r}: this run has no Grad-TTS decoder "
                "(trained with model.score_layers=0)"
            )
        return st

    def check_plan(self, plan: Plan) -> None:
        s = plan.options.sampling
        if s.top_k or s.top_p < 1.0:
            raise ConfigError(
                f"{plan.name}: top_k / top_p do not apply to MDM's mixture sampling or "
                "Grad-TTS (decode.temperature is MDM's tau_2; Grad-TTS's tau is "
                "mdm.gradtts_tau)"
            )

    def speaker_embeddings(self, batch: PromptBatch) -> jax.Array | None:
        if not self.cfg.speaker_dim:
            return None
        p_len = np.asarray(batch.prompt_len)
        b = p_len.shape[0]
        if self.speaker is None or not p_len.any():
            return jnp.zeros((b, self.cfg.speaker_dim))
        prompt = np.asarray(batch.prompt, np.float32)  # [B, P, M]
        emb = np.asarray(self.speaker.embed_mels(prompt, np.maximum(p_len, 1)))
        return jnp.asarray(np.where(p_len[:, None] > 0, emb, 0.0), jnp.float32)

    def generate(self, batch: PromptBatch, keys: jax.Array, plan: Plan) -> Generated:
        st, options = plan.strategy, plan.options
        text, text_len = jnp.asarray(batch.text), jnp.asarray(batch.text_len)
        spk = self.speaker_embeddings(batch)
        scale = float(self.mdm.get("length_scale", 1.0))
        logw = self._encode(self.params, text, text_len, spk)
        dur = np.asarray(predicted_durations(logw, text_len, scale))
        frames = dur.sum(1)
        real = np.asarray(batch.text_len) > 0
        if (real & (frames == 0)).any():
            raise DataError(
                "mdm: the duration predictor gave zero frames for a text with "
                "phonemes; check the run (a trained model never does)"
            )
        cap = self.max_new_units(options)
        hit = frames > cap
        width = int(min(cap, max(int(frames.max()), 1)))
        width = -(-width // FRAME_BUCKET) * FRAME_BUCKET
        if isinstance(st, GradTTS):
            n = st.steps
            out = jax.device_get(
                gradtts_decode(
                    self.model,
                    self.params,
                    text,
                    text_len,
                    spk,
                    keys,
                    steps=n,
                    frames=width,
                    greedy=options.sampling.greedy,
                    temperature=float(self.mdm.get("gradtts_tau", 1.5)),
                    length_scale=scale,
                )
            )
            budget = n or width
        else:
            order = st.order
            out = jax.device_get(
                mdm_decode(
                    self.model,
                    self.params,
                    text,
                    text_len,
                    spk,
                    keys,
                    order=order,
                    frames=width,
                    greedy=options.sampling.greedy,
                    tau1=float(self.mdm.get("tau1", 1.0)),
                    tau2=float(options.sampling.temperature),
                    length_scale=scale,
                )
            )
            budget = num_steps(order, width)
        length = np.minimum(np.asarray(out.frames), cap)
        return Generated(
            units=np.asarray(out.mel),
            length=length,
            steps=np.asarray(out.steps),
            hit_max=hit,
            stats={"steps_budget": np.full(length.shape, budget)},
        )

    def memory_bytes(self, text_len, prompt_len, length, strategy=None) -> int:
        return 0


__all__ = ["MDMEngine", "resolve", "ConfigError"]
