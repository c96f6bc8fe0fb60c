"""The SSD engine: a draft run (`configs/ssd.py`) paired with the target it was made from.

`infer.py --workdir runs/ssd --strategy ssd:L=3,beta=0.4` decodes speculatively; `far`,
`car:c` and `vadusa:tau` run on the target, and `draft` runs FAR on the draft alone (the
quality floor speculative decoding starts from). A draft whose vocabulary, width or tokenizer
differs from its target's is a one-line error naming both runs.
"""

from __future__ import annotations

import jax
import numpy as np

from jaxtts.checkpoint import abstract_params
from jaxtts.codec import load_tokenizer
from jaxtts.decode.driver import decode
from jaxtts.decode.sampling import row_keys
from jaxtts.errors import CheckpointError
from jaxtts.methods.lm import TTSLM, LMConfig, LMEngine, sentence_batch
from jaxtts.methods.ssd.draft import draft_params
from jaxtts.methods.ssd.strategy import SSD, Draft
from jaxtts.run_folder import RunFolder, check_trained_on, resolve_run


class SSDEngine(LMEngine):
    family = "ssd"

    def __init__(self, base: LMEngine, draft: TTSLM, draft_params, target_path: str):
        args, kw = base._backbone_args()
        super().__init__(*args, **kw)
        self.draft, self.draft_params = draft, draft_params
        self.target_path = target_path
        self.decode_config = {**base.decode_config, "strategy": "ssd:L=3,beta=0.4"}

    @classmethod
    def from_run(cls, run: RunFolder, step: int | None = None) -> SSDEngine:
        config = run.read_config("ssd")
        target_run = resolve_run(str(config.ssd.target), f"{run.config_path}: ssd.target")
        base = LMEngine.from_run(target_run)
        check_trained_on(run, "target", target_run.path, {}, base.params)
        dcfg = LMConfig.from_config(config.model, saved=True)
        from_target = bool(config.ssd.get("from_target", False))
        dtok = base.tokenizer if from_target else load_tokenizer(run.tokenizer_dir)
        for key, mine, theirs in (
            ("num_speech_tokens", dcfg.num_speech_tokens, base.cfg.num_speech_tokens),
            ("num_text_symbols", dcfg.num_text_symbols, base.cfg.num_text_symbols),
            ("d_model", dcfg.d_model, base.cfg.d_model),
            ("tokenizer", dtok.name, base.tokenizer.name),
        ):
            if mine != theirs:
                raise CheckpointError(
                    f"draft {run.path} has {key}={mine!r} but its target "
                    f"{target_run.path} has {theirs!r}"
                )
        if from_target:  # the draft starts as the target's layers (`ssd.from_target`) ...
            dparams = draft_params(base.params, list(config.ssd.layers))
            if run.params_file.is_file():  # ... with its trained parts from this folder
                dparams = _with_trained(dparams, run)
            return cls(base, TTSLM(dcfg), dparams, str(target_run.path))
        one = np.ones((1, 4), np.int32)
        like = abstract_params(TTSLM(dcfg).init, one, np.array([4]), one, np.array([4]))
        dparams, _ = run.load_params(like, step)
        return cls(base, TTSLM(dcfg), dparams, str(target_run.path))

    def decode_models(self) -> dict:
        return {"target": self.model, "draft": self.draft}

    def decode_params(self) -> dict:
        return {"target": self.params, "draft": self.draft_params}

    def decode_models_for(self, batch, plan):
        if isinstance(plan.strategy, Draft):  # the draft alone decodes FAR (its own quality)
            return self.at_precision(
                {"target": self.draft}, {"target": self.draft_params}, plan.options
            )
        return super().decode_models_for(batch, plan)


def _with_trained(dparams: dict, run: RunFolder) -> dict:
    """The draft's parameters with every leaf of `run`'s params file (the trained parts only,
    `python -m jaxtts.methods.ssd.task ship`) put in; a leaf the draft lacks or of another
    shape is a one-line CheckpointError naming the file."""
    from jaxtts.checkpoint import read_params_tree
    from jaxtts.trees import tree_from_flat, tree_to_flat

    flat, trained = tree_to_flat(dparams), tree_to_flat(read_params_tree(run.params_file))
    for k, v in trained.items():
        if k not in flat or tuple(flat[k].shape) != tuple(v.shape):
            want = "no such leaf" if k not in flat else f"shape {tuple(flat[k].shape)}"
            raise CheckpointError(
                f"{run.params_file}: '{k}' of shape {tuple(v.shape)}; the draft has {want}"
            )
        flat[k] = np.asarray(v, np.float32)
    return tree_from_flat(flat)


def acceptance_schedule(
    engine: SSDEngine,
    text: str,
    prompt=None,
    *,
    draft_len: int = 3,
    beta: float = 0.4,
    seed: int = 0,
    max_seconds: float = 10.0,
    greedy: bool = False,
):
    """One sentence decoded with `ssd:L=<draft_len>,beta=<beta>` keeping each step's outcome:
    -> (tokens int32 [T], accepted int32 [S]: draft tokens accepted at each step; the step
    took accepted + 1 tokens, the last one drawn by the target)."""
    batch = sentence_batch(engine, text, prompt)
    opts = engine.options(max_seconds=max_seconds, greedy=greedy)
    out = jax.device_get(
        decode(
            SSD(draft_len, beta, record=True),
            engine.decode_models(),
            engine.decode_params(),
            batch,
            row_keys(seed, [0]),
            max_new_tokens=engine.max_new_units(opts),
            sampling=opts.sampling,
        )
    )
    n, s = int(out.length[0]), int(out.steps[0])
    return np.asarray(out.tokens[0, :n]), np.asarray(out.stats["accepted_per_step"][0, :s])
