"""The SSD engine: a draft run (`configs/ssd.py`) paired with the target it was made from.

`infer.py --workdir runs/ssd --strategy ssd:L=3,beta=0.4` decodes speculatively; `far`,
`car:c` and `vadusa:tau` run on the target. A draft whose vocabulary, width or tokenizer
differs from its target's is a one-line error naming both runs.
"""

from __future__ import annotations

import numpy as np

from jaxtts.data.tokenizers import load_tokenizer
from jaxtts.errors import CheckpointError
from jaxtts.methods.lm.engine import LMEngine
from jaxtts.methods.lm.model import TTSLM, LMConfig
from jaxtts.run_folder import RunFolder


class SSDEngine(LMEngine):
    family = "ssd"

    @classmethod
    def from_run(cls, run: RunFolder, step: int | None = None) -> SSDEngine:
        from jaxtts.methods.ssd.task import resolve_run
        from jaxtts.train.checkpoint import abstract_params

        config = run.read_config("ssd")
        target_run = resolve_run(str(config.ssd.target), f"{run.config_path}: ssd.target")
        base = LMEngine.from_run(target_run)
        dcfg = LMConfig.from_config(config.model, saved=True)
        dtok = load_tokenizer(run.tokenizer_dir)
        for key, mine, theirs in (
            ("num_speech_tokens", dcfg.num_speech_tokens, base.cfg.num_speech_tokens),
            ("num_text_symbols", dcfg.num_text_symbols, base.cfg.num_text_symbols),
            ("d_model", dcfg.d_model, base.cfg.d_model),
            ("tokenizer", dtok.name, base.tokenizer.name),
        ):  # fmt: skip
            if mine != theirs:
                raise CheckpointError(f"draft {run.path} has {key}={mine!r} but its target "
                                      f"{target_run.path} has {theirs!r}")  # fmt: skip
        one = np.ones((1, 4), np.int32)
        like = abstract_params(TTSLM(dcfg).init, one, np.array([4]), one, np.array([4]))
        dparams, _ = run.load_params(like, step)
        eng = cls(base.config, base.params, base.frontend, base.tokenizer,
                  max_text_symbols=base.max_text_symbols)  # fmt: skip
        eng.draft, eng.draft_params = TTSLM(dcfg), dparams
        eng.decode_config = {**base.decode_config, "strategy": "ssd:L=3,beta=0.4"}
        eng.target_path = str(target_run.path)
        return eng

    def decode_models(self) -> dict:
        return {"target": self.model, "draft": self.draft}

    def decode_params(self) -> dict:
        return {"target": self.params, "draft": self.draft_params}
