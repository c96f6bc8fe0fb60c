"""Training the SSD draft: the LM trainer on the target's data, tokenizer and symbol table,
with the draft initialised from the target's layers and only its first `ssd.first` layers and
its output head trained (`train.trainable`; everything else frozen). With `ssd.distill` = w > 0
(not in the paper) the loss is (1 - w) x next-token CE + w x KL(target || draft) on the base
head, the target scoring every training batch (`teacher_logits_fn`, `lm.task.TeacherSource`).

    python train.py --config configs/ssd.py:small --workdir runs/ssd

The untrained draft (the paper's split applied to the target as it is, `ssd.from_target`): a run
folder with the config and the target's fingerprint but no parameter file; the engine takes the
draft's layers from the target at load time (a few kB; `pretrained/ssd_deep` until 2026-12-03):

    python -m jaxtts.methods.ssd.task untrained --config configs/ssd.py:deep <dest>
    python -m jaxtts.methods.ssd.task untrained --config configs/ssd.py:deep \
        --config.ssd.target=runs/my_backbone <dest>      # any key, as train.py takes it

A trained draft ships as its trained parts only (the first layers and the head; float32 as
trained, or `--dtype float16`), the rest taken from the target at load as above; the shipped
`pretrained/ssd_deep` is the distilled draft, written by

    python -m jaxtts.methods.ssd.task ship runs/ssd_deep13_kd pretrained/ssd_deep --dtype float16

The run folder is an LM run of the draft (config.json: the target's config with the draft's
model, `task = "ssd"` and the `ssd` section naming the target), so the draft alone also loads
(`jaxtts.methods.ssd.engine.SSDEngine` pairs it with its target for `ssd:` decoding).
"""

from __future__ import annotations

import argparse
import logging
import sys

import ml_collections as mlc

from jaxtts import families
from jaxtts.checkpoint import write_params_file
from jaxtts.config_help import apply_overrides, load_config
from jaxtts.errors import ConfigError, JaxttsError
from jaxtts.methods.lm import LMConfig, LMEngine, start_on_backbone
from jaxtts.methods.ssd.draft import (
    draft_config,
    draft_layers,
    draft_params,
    forward_cost,
    teacher_logits_fn,
)
from jaxtts.run_folder import RunFolder, params_fingerprint, record_fingerprint

log = logging.getLogger("jaxtts.ssd")


def _check_distill(s) -> None:
    if not 0.0 <= float(s.distill) <= 1.0:
        raise ConfigError(f"ssd.distill={s.distill}: expected a weight in [0, 1]")


def draft_run_config(config, target: RunFolder) -> mlc.ConfigDict:
    """The LM config the draft trains with (see the module docstring)."""
    tcfg = target.read_config("lm").to_dict()
    s = config.ssd
    _check_distill(s)
    tm = LMConfig.from_config(tcfg["model"], saved=True)
    layers = draft_layers(tm.num_layers, int(s.first), int(s.last))
    dm = draft_config(tm, layers)
    out = dict(tcfg)
    out["model"] = {
        **tcfg["model"],
        "num_layers": dm.num_layers,
        "num_mtp_heads": 1,
        "dropout": 0.0,
    }
    # the draft reads the text anew; `ssd.distill` weighs the target's distribution as a
    # soft target against the next-token CE (0: the paper's recipe)
    out["loss"] = {**tcfg.get("loss", {}), "align_layers": [], "distill": float(s.distill)}
    out["data"] = dict(tcfg["data"], tokenizer_dir=str(target.tokenizer_dir.resolve()))
    if int(s.corpus_utterances) > 0:
        out["data"]["corpus_utterances"] = int(s.corpus_utterances)
    out["train"] = config.train.to_dict()
    out["mesh"] = config.mesh.to_dict()
    out["eval"] = dict(tcfg.get("eval", {}), **config.eval.to_dict())
    out["task"] = "ssd"
    out["variant"] = config.get("variant", "")
    out["ssd"] = dict(s.to_dict(), target=str(target.path), layers=list(layers))
    first = int(s.first)
    out["train"]["trainable"] = "prefix:" + ",".join(
        [f"stack/layer_{j}" for j in range(first)] + ["base_head"]
    )
    return mlc.ConfigDict(out)


def write_untrained(config, dest: str) -> RunFolder:
    """A draft folder of the target's own layers, untrained (see the module docstring)."""
    target = RunFolder(str(config.ssd.target))
    dconf = draft_run_config(config, target)
    dconf.ssd.from_target = True
    dconf.data.tokenizer_dir = ""  # the target's, at load
    dconf.train.steps = 0
    out = RunFolder(dest)
    if out.params_file.is_file() or out.checkpoints_dir.is_dir():
        raise ConfigError(f"{dest}: holds parameters already; an untrained draft has none")
    eng = LMEngine.from_run(target)
    out.write_config(dconf)
    out.write_data_info(
        {
            "target": str(config.ssd.target),
            "target_fingerprint": params_fingerprint(eng.params),
            "untrained": "the draft is the target's layers " + str(list(dconf.ssd.layers)),
        }
    )
    return out


def ship(workdir: str, dest: str, step: int | None = None, dtype: str = "float32") -> RunFolder:
    """A trained draft as a shipped folder of its trained parts only (the first layers and the
    head; stored as `dtype`: "float32" as trained, "float16" half the size, loaded back as
    float32): `ssd.from_target` set, so the engine builds the draft from the target's layers
    at load and puts these in (`SSDEngine.from_run`)."""
    run = RunFolder(workdir)
    cfg = run.read_config("ssd")
    if cfg.ssd.get("from_target", False):
        raise ConfigError(f"{workdir}: ssd.from_target is set already; expected a training run")
    out = run.export(dest, step, dtype=dtype, trained_only=True)
    shipped = out.read_config().to_dict()
    shipped["ssd"]["from_target"] = True
    shipped["data"]["tokenizer_dir"] = ""  # the target's, at load
    out.write_config(mlc.ConfigDict(shipped))
    return out


def train(config, workdir: str, *, progress: bool = True, mesh=None):
    if config.ssd.get("from_target", False):
        raise ConfigError(
            "ssd.from_target=True: this draft is built from its target at load (a shipped "
            "folder), not trained; write one with `python -m jaxtts.methods.ssd.task "
            "untrained --config <config> <dest>` or `... ship <run> <dest>`"
        )
    _check_distill(config.ssd)  # before the run folder exists
    target, run, eng = start_on_backbone(config, "ssd", "target", workdir)
    dconf = draft_run_config(config, target)
    init_dir = run.path / "draft_init"  # the draft's initial parameters, from the target's
    fingerprint = record_fingerprint(run, "target", target.path, eng.params)
    if not (init_dir / "params.msgpack").is_file():
        init_dir.mkdir(exist_ok=True)
        write_params_file(
            init_dir / "params.msgpack", draft_params(eng.params, dconf.ssd.layers), None
        )
    tm = LMConfig.from_config(target.read_config("lm").model, saved=True)
    # distillation keeps the target to score every batch; otherwise it is not needed
    teacher = teacher_logits_fn(tm, eng.params) if float(config.ssd.distill) > 0 else None
    del eng
    dconf.train.init_from = str(init_dir)
    dm = LMConfig.from_config(dconf.model)
    log.info(
        "draft layers %s of %d: %.2f of a target forward (stack + base head)",
        list(dconf.ssd.layers),
        tm.num_layers,
        forward_cost(dm) / forward_cost(tm),
    )
    # the draft is a TTS LM: the LM family's trainer, through the families table
    lm_train = families.resolve(families.family("lm").train)
    return lm_train(
        dconf,
        workdir,
        progress=progress,
        mesh=mesh,
        task_name="ssd",
        data_info={"target": str(config.ssd.target), "target_fingerprint": fingerprint},
        teacher=teacher,
    )


def main(argv: list[str] | None = None) -> int:
    """python -m jaxtts.methods.ssd.task untrained --config configs/ssd.py:deep
        [--config.<section>.<key>=<value> ...] <dest>
    python -m jaxtts.methods.ssd.task ship <training run> <dest>"""
    ap = argparse.ArgumentParser(prog="python -m jaxtts.methods.ssd.task")
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser(
        "untrained",
        help="write a draft folder of the target's own layers",
        epilog="Any config key is set as train.py sets it: --config.<section>.<key>=<value> "
        "(e.g. --config.ssd.target=runs/my_backbone --config.ssd.first=2).",
    )
    u.add_argument("--config", required=True, help="e.g. configs/ssd.py:deep")
    u.add_argument("dest", help="e.g. pretrained/ssd_deep")
    s = sub.add_parser("ship", help="export a trained draft's trained parts for pretrained/")
    s.add_argument("workdir", help="the draft's training run, e.g. runs/ssd_deep13_kd")
    s.add_argument("dest", help="e.g. pretrained/ssd_deep")
    s.add_argument("--step", type=int, default=None, help="checkpoint step (default: latest)")
    s.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "float16"],
        help="storage type of the trained parts (loaded back as float32)",
    )
    argv = sys.argv[1:] if argv is None else list(argv)
    overrides = [a for a in argv if a.startswith("--config.")]
    args = ap.parse_args([a for a in argv if not a.startswith("--config.")])
    if overrides and args.cmd != "untrained":
        ap.error(f"{overrides[0]}: config overrides are for 'untrained' only")
    try:
        if args.cmd == "untrained":
            config = apply_overrides(load_config(args.config), overrides)
            out = write_untrained(config, args.dest)
        else:
            out = ship(args.workdir, args.dest, args.step, args.dtype)
    except JaxttsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cfg = out.read_config()
    what = "untrained" if args.cmd == "untrained" else f"trained parts in {out.params_file}"
    print(f"{out.path}: draft = layers {list(cfg.ssd.layers)} of {cfg.ssd.target}, {what}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
