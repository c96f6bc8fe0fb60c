"""The DCAR engine: the frozen TTS backbone + a trained chunk-size policy (a DCPO run folder).

`infer.py --workdir runs/dcar` (or `pretrained/dcar_deep`) loads the backbone named in the run's
`data.json` (`backbone`, a run folder path, relative to the working directory or the
repository) and checks that the policy was trained on a backbone of the same width, heads and
tokenizer; every LM strategy (far, car:c, vadusa:tau) runs too, and `dcar` (or `dcar:sample`,
the run's `policy.pick`) is the default.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxtts.checkpoint import abstract_params
from jaxtts.decode import registry
from jaxtts.decode.driver import decode
from jaxtts.decode.sampling import row_keys
from jaxtts.errors import CheckpointError, ConfigError
from jaxtts.methods.dcar.dcpo import config_policy
from jaxtts.methods.dcar.policy import ChunkPolicy, head_confidence
from jaxtts.methods.dcar.strategies import DCAR
from jaxtts.methods.lm import LMEngine, sentence_batch
from jaxtts.methods.lm.model import with_bos
from jaxtts.run_folder import RunFolder, check_trained_on, resolve_run


class DCAREngine(LMEngine):
    family = "dcar"

    def __init__(
        self, base: LMEngine, policy, policy_params, backbone_path: str, pick: str = "argmax"
    ):
        args, kw = base._backbone_args()
        super().__init__(*args, **kw)
        self.policy, self.policy_params = policy, policy_params
        self.backbone_path = backbone_path
        # the default strategy: the policy's argmax, or a draw from it (`policy.pick`), over
        # every size or those of `,sizes=<lo>-<hi>`
        strategy = registry.get(f"dcar:{pick}").name
        self.decode_config = {**base.decode_config, "strategy": strategy}

    @classmethod
    def from_run(cls, run: RunFolder, step: int | None = None) -> DCAREngine:
        config = run.read_config("dcar")
        info = run.read_data_info()
        if "backbone" not in info:
            raise CheckpointError(
                f"{run.data_path}: no 'backbone' entry; expected the data.json a DCPO run writes"
            )
        bpath = resolve_run(str(info["backbone"]), f"{run.data_path}: backbone", run.path).path
        base = LMEngine.from_run(RunFolder(bpath))
        check_trained_on(
            run,
            "backbone",
            bpath,
            {
                "d_model": base.cfg.d_model,
                "num_mtp_heads": base.cfg.num_mtp_heads,
                "num_heads": base.cfg.num_heads,
                "tokenizer": base.tokenizer.name,
            },
            base.params,
        )
        pcfg = config_policy(config, base)
        policy = ChunkPolicy(pcfg)
        like = abstract_params(
            lambda r, x, n: {
                "params": {
                    "policy": policy.init(r, x, n)["params"],
                    "ref": policy.init(r, x, n)["params"],
                }
            },
            jnp.zeros((1, 2, pcfg.d_in)),
            jnp.array([2]),
        )
        params, _ = run.load_params(like, step)
        pick = str(config.policy.get("pick", "argmax"))
        try:
            registry.get(f"dcar:{pick}")
        except ConfigError:
            raise CheckpointError(
                f"{run.config_path}: policy.pick is '{pick}', expected 'argmax' or 'sample', "
                "optionally ',sizes=<lo>-<hi>'"
            ) from None
        return cls(base, policy, params["policy"], str(bpath), pick)

    def decode_models(self) -> dict:
        return {"target": self.model, "policy": self.policy}

    def decode_params(self) -> dict:
        return {"target": self.params, "policy": self.policy_params}


def chunk_schedule(
    engine: DCAREngine,
    text: str,
    prompt=None,
    *,
    seed: int = 0,
    max_seconds: float = 10.0,
    sample: bool = False,
):
    """One sentence decoded with `dcar` keeping the policy's decisions: -> (tokens int32 [T],
    chunks int32 [S] (the size chosen at each step; their sum is T up to an EOS cut),
    probs float32 [S, K] (the policy's distribution at each step))."""
    batch = sentence_batch(engine, text, prompt)
    opts = engine.options(max_seconds=max_seconds)
    out = jax.device_get(
        decode(
            DCAR(sample=sample, record=True),
            engine.decode_models(),
            engine.decode_params(),
            batch,
            row_keys(seed, [0]),
            max_new_tokens=engine.max_new_units(opts),
            sampling=opts.sampling,
        )
    )
    n, s = int(out.length[0]), int(out.steps[0])
    logits = ChunkPolicy(engine.policy.cfg).apply(
        {"params": engine.policy_params}, out.stats["policy_inputs"][:, :s], out.steps
    )
    probs = np.asarray(jax.nn.softmax(logits[0], axis=-1))
    return np.asarray(out.tokens[0, :n]), np.asarray(out.stats["actions"][0, :s]), probs


def teacher_forced_choices(engine: DCAREngine, utts, chunk: int = 3, batch_size: int = 16):
    """The policy's distribution along the ground-truth tokens of `utts` (teacher forcing, no
    decode loop): each utterance's tokens as if decoded with fixed chunks of `chunk` after its
    prompt (another utterance of its speaker, as in training); decision j reads the backbone's
    hidden state of position P + j * chunk (P: the prompt's length), as it does when decoding.
    -> probs float32 [S, K] over every decision of every utterance."""
    # imported here: 100 ms of start-up that only this diagnostic needs
    from jaxtts.methods.lm.diagnostics import teacher_forcing_loader

    loader = teacher_forcing_loader(engine, utts, None, batch_size)
    cfg, model, policy = engine.cfg, engine.model, engine.policy

    @jax.jit
    def choices(params, batch):
        x, x_len = with_bos(batch["speech"], batch["speech_len"], cfg)
        _, hidden = model.apply(
            {"params": params["target"]}, batch["text"], batch["text_len"], x, x_len
        )  # [B, T, D]
        p = batch["prompt_len"][:, None]  # [B, 1]
        j = jnp.arange(hidden.shape[1] // chunk + 1)[None]  # [1, S] decisions
        pos = p + j * chunk  # [B, S] positions whose hidden state decision j reads
        n = jnp.sum(pos < batch["speech_len"][:, None], 1)  # [B] decisions before the end
        h = jnp.take_along_axis(hidden, jnp.minimum(pos, hidden.shape[1] - 1)[..., None], 1)
        if policy.cfg.num_features:  # [h ; the heads' confidence], as decoding feeds it
            heads = model.apply({"params": params["target"]}, h, method="heads")  # [B, S, K, V]
            h = jnp.concatenate([h, head_confidence(heads)], -1)
        logits = policy.apply({"params": params["policy"]}, h, n)  # [B, S, K]
        return jax.nn.softmax(logits, -1), n

    out = []
    for s in range(len(loader)):
        b = {k: jnp.asarray(v) for k, v in loader.get_batch(s).items()}
        probs, n = jax.device_get(choices(engine.decode_params(), b))
        real = np.asarray(b["text_len"]) > 0
        out += [probs[r, : n[r]] for r in range(len(n)) if real[r]]
    return np.concatenate(out).astype(np.float32)
