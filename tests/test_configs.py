"""Configs load, overrides apply, and bad keys fail with the key's name."""

import glob
import importlib.util
import os
import subprocess
import sys

import pytest

from configs import common
from jaxtts import config_help

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load(path):
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# experiment configs = the files with variants (not common.py / help.py), as --list_configs
CONFIG_FILES = sorted(
    p for p in glob.glob(os.path.join(ROOT, "configs", "*.py")) if config_help.variants(p)
)


@pytest.mark.parametrize("path", CONFIG_FILES, ids=os.path.basename)
def test_config_variants_load(path):
    mod = _load(path)
    for variant in ("tiny", "small"):
        cfg = mod.get_config(variant)
        assert cfg.train.steps > 0
        assert "mesh" in cfg and "train" in cfg
        # every key but the mesh rules can be set with --config.<key>=: ml_collections cannot
        # override a list from the command line (tuples it can: '(1, 2)', '()')
        lists = [
            k
            for k, v in config_help.flatten(cfg.to_dict()).items()
            if isinstance(v, list) and k != "mesh.rules"
        ]
        assert not lists, f"{os.path.basename(path)}:{variant}: list-valued keys {lists}"


def test_tuple_override_from_the_command_line():
    """The documented ablation switch: --config.loss.align_layers='()' turns alignment off."""
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "train.py"),
            "--config",
            os.path.join(ROOT, "configs", "car.py") + ":small",
            "--print_config",
            "--config.loss.align_layers=()",
            "--config.loss.align_heads=(0, 2)",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "loss.align_layers = ()" in out.stdout
    assert "loss.align_heads = (0, 2)" in out.stdout


def test_parse_arg():
    a = common.parse_arg("tiny,steps=7", variant="small", steps=1)
    assert (a.variant, a.steps) == ("tiny", 7)
    with pytest.raises(KeyError, match="unknown key 'stepz'"):
        common.parse_arg("tiny,stepz=7", steps=1)


def test_car_sizes():
    car = _load(os.path.join(ROOT, "configs", "car.py"))
    paper = car.get_config("paper").model
    assert (paper.num_layers, paper.d_model, paper.d_ff, paper.num_heads, paper.num_mtp_heads) == (
        12,
        1024,
        4096,
        8,
        7,
    )


@pytest.mark.parametrize(
    "override,expected",
    [
        (
            "--config.train.stepz=3",
            "unknown config key --config.train.stepz (did you mean 'steps'?)",
        ),
        ("--config.nonsense=3", "unknown config key --config.nonsense"),
        ("--config.train.steps=abc", "--config.train.steps=abc"),
    ],
)
def test_train_cli_bad_config_is_one_line(override, expected, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "train.py",
            "--config",
            "configs/car.py:tiny",
            "--workdir",
            str(tmp_path),
            override,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and expected in err[0], proc.stderr


def test_task_help_lists_every_family():
    from configs.help import HELP
    from jaxtts.families import FAMILIES

    listed = {t.strip() for t in HELP["task"].split(":", 1)[1].split("|")}
    assert listed == set(FAMILIES), listed ^ set(FAMILIES)
