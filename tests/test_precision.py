"""bfloat16 decoding (`jaxtts.decode.precision`, `jaxtts.nn.layers.matmul`): exact values of
the matmul, what is cast and what is not, batch-N == batch-1 per row, option errors."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from lm_reference import TINY, batch_of, init_params, random_rows, run

from jaxtts.decode import registry
from jaxtts.decode.options import DecodeOptions
from jaxtts.decode.precision import at_precision, cast_kernels
from jaxtts.decode.sampling import SamplingConfig, row_keys
from jaxtts.errors import ConfigError
from jaxtts.methods.lm.model import TTSLM
from jaxtts.nn.layers import matmul

GREEDY = SamplingConfig(greedy=True)


def test_bfloat16_matmul_exact_values():
    """Operands rounded to bfloat16, products summed in float32, a float32 result; one row
    (padded to two on the CPU) gives the same numbers as the same row among several."""
    x = np.array([[1.0 + 2.0**-9, 3.0], [0.5, -1.0]], np.float32)  # 1 + 2^-9 rounds to 1
    w = np.array([[2.0, 1.0 + 2.0**-10], [0.25, 4.0]], np.float32)  # 1 + 2^-10 rounds to 1
    y = matmul("...a,ax->...x", jnp.asarray(x), jnp.asarray(w), "bfloat16")
    assert y.dtype == jnp.float32
    np.testing.assert_array_equal(y, [[2.75, 13.0], [0.75, -3.5]])
    one = matmul("...a,ax->...x", jnp.asarray(x[None, :1]), jnp.asarray(w), "bfloat16")
    assert one.shape == (1, 1, 2)
    np.testing.assert_array_equal(one[0], y[:1])
    # float32 keeps every bit: 1 + 2^-9 and 1 + 2^-10 survive
    y32 = matmul("...a,ax->...x", jnp.asarray(x), jnp.asarray(w), "float32")
    np.testing.assert_allclose(y32[0, 0], (1 + 2.0**-9) * 2 + 0.75, rtol=0, atol=1e-6)
    # several contracted axes (the attention output projection: [B, T, N, H] x [N, H, D])
    rng = np.random.default_rng(0)
    a = rng.normal(size=(1, 1, 2, 3)).astype(np.float32)
    k = rng.normal(size=(2, 3, 4)).astype(np.float32)
    got = matmul("...ab,abw->...w", jnp.asarray(a), jnp.asarray(k), "bfloat16")
    ab = np.asarray(jnp.asarray(a, jnp.bfloat16), np.float32)
    kb = np.asarray(jnp.asarray(k, jnp.bfloat16), np.float32)
    np.testing.assert_allclose(got, np.einsum("...ab,abw->...w", ab, kb), rtol=1e-6)


def test_at_precision_casts_the_matmul_kernels_only():
    params = init_params()
    models, cast = at_precision({"target": TTSLM(TINY)}, {"target": params}, "bfloat16")
    assert models["target"].cfg.dtype == "bfloat16" and TINY.dtype == "float32"
    leaves = jax.tree_util.tree_leaves_with_path(cast["target"])
    for path, leaf in leaves:
        name = path[-1].key
        want = jnp.bfloat16 if name == "kernel" else jnp.float32
        assert leaf.dtype == want, (jax.tree_util.keystr(path), leaf.dtype)
    assert any(p[-1].key == "bias" for p, _ in leaves)  # biases, norms, embeddings: float32
    _, same = at_precision({"target": TTSLM(TINY)}, {"target": params}, "float32", fused=False)
    assert same["target"] is params  # the training layout at float32: nothing to change
    fused_models, fused = at_precision({"target": TTSLM(TINY)}, {"target": params}, "float32")
    assert fused_models["target"].cfg.fused_projections and not TINY.fused_projections
    assert fused["target"]["stack"]["layer_0"]["attn"]["qkv"]["kernel"].dtype == jnp.float32
    with pytest.raises(ConfigError, match="decode.precision='fp8'"):
        at_precision({"target": TTSLM(TINY)}, {"target": params}, "fp8")


def test_at_precision_of_a_nested_config_casts_that_subtree():
    """A config holding the backbone's config (TLDR's `backbone`): that field gets the dtype
    and only params['backbone'] is cast; the other parts stay float32."""

    @dataclasses.dataclass(frozen=True)
    class Outer:
        backbone: object
        width: int = 4

    class Model:
        def __init__(self, cfg):
            self.cfg = cfg

        def clone(self, cfg):
            return Model(cfg)

    p = {"backbone": {"kernel": np.ones(2, np.float32)}, "head": {"kernel": np.ones(2)}}
    models, params = at_precision({"m": Model(Outer(TINY))}, {"m": p}, "bfloat16")
    assert models["m"].cfg.backbone.dtype == "bfloat16" and models["m"].cfg.width == 4
    assert params["m"]["backbone"]["kernel"].dtype == jnp.bfloat16
    assert params["m"]["head"]["kernel"].dtype == np.float64
    # a model without a dtype anywhere (a DCAR policy) is left as it is
    plain = {"kernel": np.ones(2, np.float32)}
    models, params = at_precision({"m": Model(None)}, {"m": plain}, "bfloat16")
    assert params["m"] is plain
    assert cast_kernels({"lora_a": np.ones(1)}, "bfloat16")["lora_a"].dtype == jnp.bfloat16


def test_bfloat16_batch_n_equals_batch_1():
    """At bfloat16 a one-row batch runs the padded matmul, a batch the plain one: the same
    tokens per row (greedy CAR c=3 and FAR)."""
    params = init_params(eos_bias=0.9)
    models, cast = at_precision({"target": TTSLM(TINY)}, {"target": params}, "bfloat16")
    rows = random_rows(4, seed=5)
    for spec in ("far", "car:3"):
        kw = dict(max_new_tokens=16, sampling=GREEDY, cfg=models["target"].cfg)
        strat = registry.get(spec)
        big = run(strat, cast["target"], batch_of(rows, 12, 8), row_keys(4, range(4)), **kw)
        for i, row in enumerate(rows):
            one = run(strat, cast["target"], batch_of([row]), row_keys(4, [i]), **kw)
            n = int(one.length[0])
            assert int(big.length[i]) == n, (spec, i)
            np.testing.assert_array_equal(big.tokens[i, :n], one.tokens[0, :n])


def test_bfloat16_cached_forward_close_to_float32():
    """The cached forward at bfloat16 stays within bfloat16 rounding of float32 (the KV cache
    stays float32 whatever the model's dtype)."""
    params = init_params()
    models, cast = at_precision({"target": TTSLM(TINY)}, {"target": params}, "bfloat16")
    text = np.array([[3, 4, 5, 6]], np.int32)
    speech = np.array([[TINY.bos, 1, 2, 3]], np.int32)
    out = {}
    for name, m, p in (("f32", TTSLM(TINY), params), ("bf16", models["target"], cast["target"])):
        cache = m.apply({"params": p}, 1, 4, 8, method="init_cache")
        assert cache.layers[0].k.dtype == jnp.float32
        _, cache = m.apply(
            {"params": p}, text, np.array([4]), speech, np.array([4]), cache, method="prefill"
        )
        h, _ = m.apply({"params": p}, np.array([[5, 6, 7]], np.int32), cache, method="extend")
        out[name] = np.asarray(h)
    scale = np.abs(out["f32"]).max()
    err = np.abs(out["bf16"] - out["f32"]).max() / scale
    assert 0 < err < 0.03, err  # bfloat16 has 8 significant bits: ~0.4 % per rounding


def test_precision_option_errors():
    with pytest.raises(ConfigError, match=r"decode.precision='half': expected one of"):
        DecodeOptions.from_config({}, precision="half")
    assert DecodeOptions.from_config({"precision": "bfloat16"}).precision == "bfloat16"
    assert DecodeOptions.from_config({}).precision == "float32"


def test_engine_casts_once_per_precision():
    """`LMEngine.decode_models_for` casts the parameters once and reuses them; float32 decodes the
    loaded parameters in the fused layout, also built once; a run of another family names
    what it runs."""
    from pathlib import Path

    from jaxtts.engine import load_engine, resolve

    run = Path(__file__).resolve().parents[1] / "pretrained" / "car_small"
    engine = load_engine(run)
    bf16 = resolve(engine, "car:3", precision="bfloat16")
    models, params = engine.decode_models_for(None, bf16)
    _, again = engine.decode_models_for(None, bf16)
    assert again["target"] is params["target"]
    assert models["target"].cfg.dtype == "bfloat16"
    assert engine.model.cfg.dtype == "float32"
    kernel = params["target"]["stack"]["layer_0"]["mlp"]["wo"]["kernel"]
    assert kernel.dtype == jnp.bfloat16
    f32_opts = resolve(engine, "car:3")
    m32, f32 = engine.decode_models_for(None, f32_opts)
    assert m32["target"].cfg.fused_projections and not engine.model.cfg.fused_projections
    assert f32["target"]["stack"]["layer_0"]["attn"]["qkv"]["kernel"].dtype == jnp.float32
    assert engine.decode_models_for(None, f32_opts)[1]["target"] is f32["target"]
