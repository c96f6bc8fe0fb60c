"""A training run folder: the one object that owns its layout, for every model family.

    run = RunFolder("runs/car_small")
    config = run.read_config("lm")              # one-line errors: missing, wrong task
    params, meta = run.load_params(like)        # latest checkpoint (or step=...)
    run.tokenizer_dir, run.text_frontend_dir, run.samples_dir(step), ...

Layout (nothing else in jaxtts spells these names):
  config.json            the resolved ml-collections config (`task` names the family)
  data.json              what the data preparation found (corpus, tokenizer, sizes)
  checkpoints/<step>/    orbax: params, opt_state, frozen (trainer-managed), meta
  params.msgpack         shipped runs (`pretrained/`): parameters in one compact file
  text_frontend/         symbol table (token families)
  tokenizer/             speech tokenizer (token families)
  metrics.jsonl, tb/     training metrics, TensorBoard events
  samples/step_<n>/      dev sentences synthesised at each evaluation
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import ml_collections as mlc

from jaxtts.errors import CheckpointError, ConfigError, JaxttsError
from jaxtts.families import FAMILIES
from jaxtts.trees import tree_to_flat

CONFIG = "config.json"
DATA = "data.json"
CHECKPOINTS = "checkpoints"
PARAMS_FILE = "params.msgpack"
TEXT_FRONTEND = "text_frontend"
TOKENIZER = "tokenizer"
METRICS = "metrics.jsonl"
TENSORBOARD = "tb"
SAMPLES = "samples"


REPO = Path(__file__).resolve().parents[1]


def find_run(path: str | os.PathLike, *bases: str | os.PathLike) -> Path | None:
    """The run folder a config names (`path` as given, else under the repository, else under
    each of `bases`), or None: callers raise their own one-line error."""
    p = Path(path)
    for cand in (p, REPO / p, *(Path(b) / p for b in bases)):
        if (cand / "config.json").is_file():
            return cand
    return None


def resolve_run(path: str, where: str, *bases: str | os.PathLike) -> RunFolder:
    """The run folder a config entry names (`find_run`), or a one-line ConfigError naming
    `where` (e.g. 'runs/tldr/config.json: tldr.backbone')."""
    found = find_run(path, *bases)
    if found is not None:
        return RunFolder(found)
    raise ConfigError(
        f"{where}={path!r}: no run folder there (config.json missing); expected "
        "e.g. pretrained/car_small or pretrained/speaker_encoder"
    )


def params_fingerprint(params: Any) -> str:
    """16 hex digits of SHA-256 over the parameter names and values rounded to float16: the
    same for a float32 checkpoint and its float16 export, different for any retrained model.
    A run built on another run's model (DCAR, SSD, TLDR on the backbone) records it."""
    import numpy as np  # start-up: numpy 140 ms; run_folder is numpy-free

    h = hashlib.sha256()
    for name, leaf in sorted(tree_to_flat(params).items()):
        h.update(name.encode())
        h.update(np.asarray(leaf, np.float32).astype(np.float16).tobytes())
    return h.hexdigest()[:16]


def record_fingerprint(run: RunFolder, role: str, base_path: str | os.PathLike, params: Any) -> str:
    """The `<role>_fingerprint` a run built on `base_path` writes to its data.json; a resumed
    run whose data.json already records a different one is a one-line CheckpointError (its
    checkpoints were trained on the other model)."""
    check_trained_on(run, role, base_path, {}, params)
    return params_fingerprint(params)


def check_trained_on(
    run: RunFolder, role: str, base_path: str | os.PathLike, have: dict, params: Any = None
) -> None:
    """A run trained on another run's model must be loaded with that model: every size its
    data.json records (`have` keys) must match, and so must `<role>_fingerprint`, when
    recorded (`params_fingerprint` of `params`). One-line CheckpointErrors."""
    info = run.read_data_info()
    for key, val in have.items():
        if key in info and info[key] != val:
            raise CheckpointError(
                f"{run.data_path}: trained on a {role} with {key}="
                f"{info[key]!r} but {role} {base_path} has {val!r}"
            )
    want = info.get(f"{role}_fingerprint")
    if want and params is not None:
        got = params_fingerprint(params)
        if got != want:
            raise CheckpointError(
                f"{run.data_path}: trained on {role} parameters {want} but "
                f"{base_path} holds {got} (a different or retrained model); "
                f"point it at the {role} it was trained on, its model card "
                "names it"
            )


def check_vocab_files(run: RunFolder, frontend, tokenizer, num_text: int, num_speech: int) -> None:
    """A run folder assembled from pieces of different runs: name the file that disagrees
    with config.json's model sizes."""
    for what, have, want, key in (
        (run.text_frontend_dir, frontend.vocab_size, num_text, "num_text_symbols"),
        (run.tokenizer_dir, tokenizer.vocab_size, num_speech, "num_speech_tokens"),
    ):
        if have != want:
            raise CheckpointError(
                f"{what}: holds {have} symbols/tokens but {run.config_path} "
                f"says model.{key}={want}; copy the folder from the same "
                "run as the parameters"
            )


class RunFolder:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    # -- paths
    @property
    def config_path(self) -> Path:
        return self.path / CONFIG

    @property
    def data_path(self) -> Path:
        return self.path / DATA

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / CHECKPOINTS

    @property
    def params_file(self) -> Path:
        return self.path / PARAMS_FILE

    @property
    def text_frontend_dir(self) -> Path:
        return self.path / TEXT_FRONTEND

    @property
    def tokenizer_dir(self) -> Path:
        return self.path / TOKENIZER

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS

    @property
    def tensorboard_dir(self) -> Path:
        return self.path / TENSORBOARD

    def samples_dir(self, step: int) -> Path:
        return self.path / SAMPLES / f"step_{int(step)}"

    # -- config.json / data.json
    def read_config(self, task: str | None = None) -> mlc.ConfigDict:
        """config.json as a ConfigDict; with `task`, checked to be a run of that family.

        Missing file: a CheckpointError naming it and the command that makes such a folder.
        """
        path = self.config_path
        if not path.is_file():
            hint = FAMILIES[task].how_to_train if task in FAMILIES else "python train.py ..."
            what = f"a training run of task {task!r}" if task else "a training run"
            raise CheckpointError(f"{path}: not found; the folder must be {what} ({hint})")
        try:
            config = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise CheckpointError(f"{path}: not valid JSON ({e})") from None
        if not isinstance(config, dict) or "task" not in config:
            raise CheckpointError(f"{path}: no 'task' key; not a jaxtts run config")
        if task is not None and config.get("task") != task:
            raise CheckpointError(f"{path}: task={config.get('task')!r}, expected {task!r}")
        return mlc.ConfigDict(config)

    @property
    def task(self) -> str:
        return str(self.read_config().task)

    def write_config(self, config) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(config.to_json_best_effort(indent=2))

    def read_data_info(self) -> dict:
        """data.json ({} when absent: e.g. a run converted from elsewhere)."""
        if not self.data_path.is_file():
            return {}
        return json.loads(self.data_path.read_text())

    def write_data_info(self, info: dict) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self.data_path.write_text(json.dumps(info, indent=1))

    # -- parameters
    def checkpointer(self, *, read_only: bool = True, **kw):
        from jaxtts.checkpoint import Checkpointer  # start-up: jax+orbax 1.2 s

        return Checkpointer(self.checkpoints_dir, read_only=read_only, **kw)

    def load_params(self, like: Any, step: int | None = None) -> tuple[Any, dict]:
        """Parameters for inference in the layout of `like` (abstract or real arrays): from
        `params.msgpack` (a shipped run) or the latest / `step` checkpoint, the trainer's
        frozen tree merged in. Returns (params, meta)."""
        from jaxtts import checkpoint as ckpt_lib  # start-up: jax+orbax 1.2 s

        if step is None and self.params_file.is_file() and not self.checkpoints_dir.is_dir():
            return ckpt_lib.read_params_file(self.params_file, like), {}
        ckpt = self.checkpointer(read_only=True)
        return ckpt.restore_inference_params(like, step)

    def saved_params(self, step: int | None = None) -> Any:
        """The full parameter tree as saved (params file or checkpoint, trained and frozen
        merged), without a target layout: what `train.init_from` and `export` read."""
        if step is None and self.params_file.is_file() and not self.checkpoints_dir.is_dir():
            from jaxtts import checkpoint as ckpt_lib  # start-up: jax+orbax 1.2 s

            return ckpt_lib.read_params_tree(self.params_file)
        return self.checkpointer(read_only=True).restore_full_as_saved(step)

    def trained_params(self, step: int | None = None) -> Any:
        """The trained parameters only, as saved: a shipped run's params file (exported with
        `trained_only`), else the checkpoint's `params` item (TLDR: the adapters and new
        modules, its frozen backbone comes from the backbone's own run)."""
        if step is None and self.params_file.is_file() and not self.checkpoints_dir.is_dir():
            from jaxtts import checkpoint as ckpt_lib  # start-up: jax+orbax 1.2 s

            return ckpt_lib.read_params_tree(self.params_file)
        return self.checkpointer(read_only=True).restore_as_saved("params", step)

    # -- shipping
    def export(
        self,
        dest: str | os.PathLike,
        step: int | None = None,
        dtype: str | None = "float16",
        trained_only: bool = False,
        decode: dict[str, str] | None = None,
    ) -> RunFolder:
        """A self-contained copy for inference (e.g. `pretrained/<name>`): config.json,
        data.json, text_frontend/, tokenizer/ and the parameters of the latest (or `step`)
        checkpoint, trained and frozen merged, as ONE `params.msgpack` file, stored as
        `dtype` (float16 by default: half the size; loaded back as float32; None = as
        trained). `trained_only`: the trained parameters alone, and no tokenizer/ or
        text_frontend/ copy (runs whose frozen part is another shipped run, e.g. TLDR: they
        load the tokenizer and front-end of that run, whose fingerprint they check).
        `decode`: {key: value} set in the copy's `decode` section, e.g. a top_p chosen on
        the dev split after training; only keys the section has, values of their type (a
        one-line ConfigError otherwise, before anything is written). Numbers of a shipped
        model are measured on the exported file."""
        from jaxtts import checkpoint as ckpt_lib  # start-up: jax+orbax 1.2 s

        self.read_config()  # a one-line error if this is not a run folder
        cfg = json.loads((self.path / CONFIG).read_text())
        if decode:
            cfg["decode"] = _decode_overrides(cfg.get("decode", {}), decode)
        params = self.trained_params(step) if trained_only else self.saved_params(step)
        out = RunFolder(dest)
        out.path.mkdir(parents=True, exist_ok=True)
        for name in (CONFIG, DATA):
            if (self.path / name).is_file():
                shutil.copy2(self.path / name, out.path / name)
        for name in () if trained_only else (TEXT_FRONTEND, TOKENIZER):
            if (self.path / name).is_dir():
                shutil.copytree(self.path / name, out.path / name, dirs_exist_ok=True)
        changed = bool(decode)
        carries = (out.path / TOKENIZER).is_dir()
        if cfg.get("data", {}).get("tokenizer_dir") and (carries or trained_only):
            # drop the training machine's path to the tokenizer (SSD and TLDR runs record
            # their target's absolute tokenizer folder): the copy carries its own, or (trained
            # only) loads the one of the run it is built on
            cfg["data"]["tokenizer_dir"] = ""
            changed = True
        if changed:
            (out.path / CONFIG).write_text(json.dumps(cfg, indent=2))
        ckpt_lib.write_params_file(out.params_file, params, dtype)
        return out


def _decode_overrides(section: dict, overrides: dict[str, str]) -> dict:
    """`section` (a run's decode config) with `overrides`' string values parsed as the types
    the section holds; an unknown key or a bad value is a one-line ConfigError."""
    out = dict(section)
    for key, raw in overrides.items():
        if key not in section:
            raise ConfigError(
                f"--decode {key}={raw}: the run's decode section has no {key!r} "
                f"(expected one of {', '.join(sorted(section))})"
            )
        old = section[key]
        try:
            if isinstance(old, bool):
                if str(raw).lower() not in ("true", "false"):
                    raise ValueError
                out[key] = str(raw).lower() == "true"
            elif isinstance(old, (int, float)):
                out[key] = type(old)(raw)
            else:
                out[key] = str(raw)
        except ValueError:
            raise ConfigError(
                f"--decode {key}={raw}: expected {type(old).__name__} (the run's value is {old!r})"
            ) from None
    from jaxtts.decode.options import DecodeOptions

    try:
        DecodeOptions.from_config(out)  # the ranges (0 < top_p <= 1, ...)
    except ConfigError as e:
        raise ConfigError(
            f"--decode {', '.join(f'{k}={v}' for k, v in overrides.items())}: {e}"
        ) from None
    return out


def main(argv: list[str] | None = None) -> int:
    """python -m jaxtts.run_folder export <run folder> <dest> [--step N]"""
    ap = argparse.ArgumentParser(
        prog="python -m jaxtts.run_folder",
        description="Export a training run as a self-contained folder "
        "with one params.msgpack (for pretrained/).",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("export", help="copy config, front-end, tokenizer + one params file")
    ex.add_argument("workdir", help="training run folder")
    ex.add_argument("dest", help="output folder, e.g. pretrained/car_small")
    ex.add_argument("--step", type=int, default=None, help="checkpoint step (default: latest)")
    ex.add_argument(
        "--dtype",
        default="float16",
        choices=["float16", "float16z", "float32", "int8"],
        help="storage type of the parameters (loaded back as float32; float16z: the "
        "float16 values, losslessly compressed; int8: "
        "matrices with a scale per output channel, the rest float16)",
    )
    ex.add_argument(
        "--trained_only",
        action="store_true",
        help="only the trained parameters, no tokenizer/ or text_frontend/ copy (TLDR: its "
        "frozen backbone ships apart and supplies them)",
    )
    ex.add_argument(
        "--decode",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a key of the copy's decode section, e.g. top_p=0.4 chosen on the dev "
        "split (repeatable)",
    )
    args = ap.parse_args(argv)
    try:
        decode = {}
        for item in args.decode:
            key, eq, val = item.partition("=")
            if not eq or not key:
                raise ConfigError(f"--decode {item}: expected KEY=VALUE, e.g. top_p=0.4")
            decode[key.strip()] = val.strip()
        out = RunFolder(args.workdir).export(
            args.dest, args.step, args.dtype, args.trained_only, decode
        )
    except JaxttsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    size = out.params_file.stat().st_size
    print(f"{out.path}: {size / 2**20:.1f} MiB of parameters in {PARAMS_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
