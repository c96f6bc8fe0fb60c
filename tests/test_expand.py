"""Block expansion (`jaxtts.nn.transformer.expand_layers`, `jaxtts.methods.lm.expand`): the
deeper model computes exactly what the shallow one did, and bad maps are one-line errors."""

import dataclasses
import json

import jax
import numpy as np
import pytest
from lm_reference import TINY, batch_of, init_params, random_rows, run

from jaxtts import checkpoint as ckpt_lib
from jaxtts.decode import registry
from jaxtts.decode.sampling import SamplingConfig, row_keys
from jaxtts.errors import ConfigError
from jaxtts.methods.lm.expand import default_layer_map, expand_run
from jaxtts.methods.lm.model import TTSLM
from jaxtts.nn.transformer import expand_layers
from jaxtts.run_folder import RunFolder

DEEP = dataclasses.replace(TINY, num_layers=6)


def _forward(cfg, params, seed=0):
    rng = np.random.default_rng(seed)
    text = rng.integers(1, cfg.num_text_symbols, (3, 7)).astype(np.int32)
    speech = rng.integers(0, cfg.num_speech_tokens, (3, 9)).astype(np.int32)
    logits, _ = TTSLM(cfg).apply(
        {"params": params}, text, np.array([7, 5, 3]), speech, np.array([9, 4, 6])
    )
    return np.asarray(logits)


@pytest.mark.parametrize("layer_map", [(0, 5), (2, 3), (0, 1)])
def test_expanded_stack_computes_the_same_logits_and_tokens(layer_map):
    params = init_params(eos_bias=0.9)
    deep = dict(params, stack=expand_layers(params["stack"], 6, layer_map))
    assert sorted(k for k in deep["stack"] if k.startswith("layer_")) == [
        f"layer_{i}" for i in range(6)
    ]
    np.testing.assert_array_equal(_forward(DEEP, deep), _forward(TINY, params))
    # the cached decode loop too (prefill + extend through every layer)
    rows, keys = random_rows(3, seed=4), row_keys(0, range(3))
    for spec in ("far", "car:3"):
        a = run(
            registry.get(spec),
            params,
            batch_of(rows),
            keys,
            max_new_tokens=16,
            sampling=SamplingConfig(top_k=4),
        )
        b = run(
            registry.get(spec),
            deep,
            batch_of(rows),
            keys,
            max_new_tokens=16,
            sampling=SamplingConfig(top_k=4),
            cfg=DEEP,
        )
        np.testing.assert_array_equal(b.tokens, a.tokens)


def test_new_layers_copy_the_next_old_layer_with_zero_outputs():
    params = init_params()
    stack = expand_layers(params["stack"], 6, (0, 4))  # new 1, 2, 3 below old 1; 5 above it
    old1 = params["stack"]["layer_1"]
    for new in (1, 2, 3, 5):
        layer = stack[f"layer_{new}"]
        assert not np.any(layer["attn"]["o"]["kernel"]) and not np.any(layer["mlp"]["wo"]["kernel"])
        np.testing.assert_array_equal(layer["attn"]["q"]["kernel"], old1["attn"]["q"]["kernel"])
        up = layer["mlp"]["wi_up"]["kernel"]
        np.testing.assert_array_equal(up, old1["mlp"]["wi_up"]["kernel"])
    assert np.any(stack["layer_4"]["attn"]["o"]["kernel"])  # the old layers are untouched
    np.testing.assert_array_equal(
        stack["layer_0"]["mlp"]["wo"]["kernel"], params["stack"]["layer_0"]["mlp"]["wo"]["kernel"]
    )


def test_default_layer_map_keeps_the_paper_split_draft_trained():
    assert default_layer_map(4, 12) == (0, 9, 10, 11)  # first 1 + last 3 = the old model
    assert default_layer_map(2, 6) == (0, 5)


def _tiny_run(path, params, cfg=TINY):
    from configs import car

    config = car.get_config("tiny")
    config.model.update(
        num_text_symbols=cfg.num_text_symbols, num_speech_tokens=cfg.num_speech_tokens
    )
    config.loss.align_layers = (1,)
    run = RunFolder(path)
    run.write_config(config)
    run.write_data_info({"frame_rate": 25.0})
    ckpt_lib.write_params_file(run.params_file, params, None)
    return run


def test_expand_run_writes_a_loadable_deeper_folder(tmp_path):
    params = init_params()
    _tiny_run(tmp_path / "src", params)
    out = expand_run(tmp_path / "src", tmp_path / "deep", 6, (0, 5), dtype=None)
    cfg = json.loads(out.config_path.read_text())
    assert cfg["model"]["num_layers"] == 6 and cfg["loss"]["align_layers"] == [5]
    info = out.read_data_info()
    assert info["expanded_from"]["layer_map"] == [0, 5] and info["frame_rate"] == 25.0
    deep = ckpt_lib.read_params_tree(out.params_file)
    deep = jax.tree.map(np.asarray, deep)
    np.testing.assert_array_equal(_forward(DEEP, deep), _forward(TINY, params))


@pytest.mark.parametrize(
    "num_layers,layer_map,words",
    [
        (6, (0, 0), "strictly increasing"),
        (6, (0, 6), "strictly increasing"),
        (6, (0, 2, 4), "one new index per old layer"),
        (1, None, "the new depth must be >= the old one"),
    ],
)
def test_bad_layer_map_is_a_one_line_error_naming_both_depths(
    tmp_path, num_layers, layer_map, words
):
    _tiny_run(tmp_path / "src", init_params())
    with pytest.raises(ConfigError) as e:
        expand_run(tmp_path / "src", tmp_path / "deep", num_layers, layer_map)
    msg = str(e.value)
    assert "\n" not in msg and words in msg
    assert "model.num_layers=2" in msg and f"into {num_layers}" in msg
