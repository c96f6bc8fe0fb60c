"""Block expansion of a trained TTS LM into a deeper one that computes the same function.

    python -m jaxtts.methods.lm.expand pretrained/car_small runs/car_deep_init \
        --num_layers 12 --layer_map 0,9,10,11

Old layer i becomes layer `layer_map[i]`; every other layer is a copy of the next old layer
above it with its output projections at zero (`jaxtts.nn.transformer.expand_layers`), so at
step 0 the deep model's logits equal the shallow one's exactly. Embeddings, heads and the final
norm are kept. The new folder is a run folder (config.json with the new depth and the alignment
layers moved with their layers, data.json, text_frontend/, tokenizer/, one params file) that
`train.init_from` fine-tunes:

    python train.py --config configs/car.py:deep --workdir runs/car_deep \
        --config.train.init_from=runs/car_deep_init

Why `0,9,10,11` for 4 -> 12 (the default): the SSD draft of the paper's split, first 1 + last 3
layers of 12 (its first 2 + last 6 of 24, scaled), is then exactly the trained 4-layer model,
and the other split the issue names (first 2 + last 2) holds three trained layers and one new
one. The eight new layers sit between the first and second old layers.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from jaxtts import checkpoint as ckpt_lib
from jaxtts.errors import ConfigError, JaxttsError
from jaxtts.nn.transformer import check_layer_map, expand_layers
from jaxtts.run_folder import CONFIG, TEXT_FRONTEND, TOKENIZER, RunFolder, params_fingerprint


def default_layer_map(src_layers: int, num_layers: int) -> tuple[int, ...]:
    """First old layer stays first, the others become the last `src_layers - 1` (see module
    docstring); a 1-layer model keeps its layer at 0."""
    return (0,) + tuple(range(num_layers - src_layers + 1, num_layers))


def expand_run(
    src: str | Path,
    dest: str | Path,
    num_layers: int,
    layer_map: Sequence[int] | None = None,
    dtype: str | None = "float16",
) -> RunFolder:
    """Write the expanded copy of the LM run folder `src` to `dest` (see module docstring)."""
    run = RunFolder(src)
    config = run.read_config("lm")
    old = int(config.model.num_layers)
    layer_map = tuple(layer_map) if layer_map else default_layer_map(old, num_layers)
    try:
        m = check_layer_map(layer_map, old, num_layers)
    except ValueError as e:
        raise ConfigError(f"{run.config_path}: model.num_layers={old}: {e}") from None
    params = run.saved_params()
    fingerprint = params_fingerprint(params)
    params = dict(params, stack=expand_layers(params["stack"], num_layers, m))
    out = RunFolder(dest)
    out.path.mkdir(parents=True, exist_ok=True)
    for name in (TEXT_FRONTEND, TOKENIZER):
        if (run.path / name).is_dir():
            shutil.copytree(run.path / name, out.path / name, dirs_exist_ok=True)
    info = run.read_data_info()
    info["expanded_from"] = dict(
        run=str(src), num_layers=old, layer_map=list(m), fingerprint=fingerprint
    )
    out.write_data_info(info)
    cfg = json.loads(run.config_path.read_text())
    cfg["model"]["num_layers"] = num_layers
    cfg["loss"]["align_layers"] = [m[i] for i in cfg["loss"].get("align_layers", [])]
    (out.path / CONFIG).write_text(json.dumps(cfg, indent=2))
    ckpt_lib.write_params_file(out.params_file, params, dtype)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m jaxtts.methods.lm.expand",
        description="Expand a trained TTS LM into a deeper one with the same function "
        "(zero-output new layers).",
    )
    ap.add_argument("src", help="LM run folder, e.g. pretrained/car_small")
    ap.add_argument("dest", help="output run folder, e.g. runs/car_deep_init")
    ap.add_argument("--num_layers", type=int, required=True, help="the new depth")
    ap.add_argument(
        "--layer_map",
        default="",
        help="new index of each old layer, comma-separated (default: 0 and the "
        "last L-1, e.g. 0,9,10,11 for 4 -> 12)",
    )
    args = ap.parse_args(argv)
    try:
        layer_map = [int(x) for x in args.layer_map.split(",") if x.strip()]
    except ValueError:
        print(
            f"error: --layer_map={args.layer_map!r}: expected comma-separated integers",
            file=sys.stderr,
        )
        return 2
    try:
        out = expand_run(args.src, args.dest, args.num_layers, layer_map or None)
    except JaxttsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(
        f"{out.path}: {args.num_layers} layers, {out.params_file.stat().st_size / 2**20:.1f} "
        "MiB of parameters"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
