"""Training throughput of the TTS LM on the available devices: tokens/s per step, step time,
achieved FLOP/s and (on accelerators) model FLOPs utilisation against a measured matmul rate.

    python -m benchmarks.diagnostics.train_throughput --config configs/car.py:small
    python -m benchmarks.diagnostics.train_throughput --config configs/car.py:paper --batch 64 \
        --mesh fsdp=-1 --dtype bfloat16                     # on a GPU / TPU host

Batches are synthetic with the shapes of real ones (`--text` text ids + `--speech` prompt and
target tokens per row, all valid), so the numbers do not depend on the corpus. FLOPs per step
come from XLA's cost analysis of the compiled train step (forward + backward + optimizer); the
reference rate is a timed [4096 x 4096] @ [4096 x 4096] matmul in the same dtype on one device
(times the device count). Tokens = batch x (text + speech) positions.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time

from benchmarks.timing_lock import exclusive

# dense bf16 FLOP/s by the vendors' datasheets (SXM parts), matched against device_kind
DATASHEET_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "TPU v5 lite": 197e12}


def _config(spec: str):
    path, _, arg = spec.partition(":")
    s = importlib.util.spec_from_file_location("cfgmod", path)
    mod = importlib.util.module_from_spec(s)
    s.loader.exec_module(mod)
    return mod.get_config(arg or None)


def matmul_rate(dtype: str, n: int = 4096, reps: int = 5) -> float:
    """Measured FLOP/s of an n x n x n matmul on device 0."""
    import jax
    import jax.numpy as jnp

    a = jnp.ones((n, n), dtype)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    t0 = time.perf_counter()
    for _ in range(reps):
        f(a).block_until_ready()
    return 2 * n**3 * reps / (time.perf_counter() - t0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/car.py:small")
    ap.add_argument("--batch", type=int, default=None, help="default: config.data.batch_size")
    ap.add_argument("--text", type=int, default=128)
    ap.add_argument("--speech", type=int, default=384)
    ap.add_argument("--mesh", default="data=-1", help="e.g. fsdp=-1 or data=2,fsdp=2,tensor=2")
    ap.add_argument("--dtype", default=None, help="compute dtype override (bfloat16, float32)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--out", default="out/bench_train.json")
    a = ap.parse_args(argv)

    import jax
    import numpy as np

    from jaxtts.methods.lm.model import LMConfig
    from jaxtts.methods.lm.task import LMTask
    from jaxtts.train import loop

    config = _config(a.config)
    config.model.num_text_symbols = 64
    config.model.num_speech_tokens = a.vocab
    if a.dtype:
        config.model.dtype = a.dtype
    config.mesh.shape = {k: int(v) for k, v in (kv.split("=") for kv in a.mesh.split(","))}
    b = a.batch or int(config.data.batch_size)
    cfg = LMConfig.from_config(config.model)
    trainer = loop.Trainer(LMTask(cfg), config)
    rng = np.random.default_rng(0)
    batch = {
        "text": rng.integers(2, 64, (b, a.text)).astype(np.int32),
        "text_len": np.full((b,), a.text, np.int32),
        "speech": rng.integers(0, a.vocab, (b, a.speech)).astype(np.int32),
        "speech_len": np.full((b,), a.speech, np.int32),
        "prompt_len": np.full((b,), a.speech // 4, np.int32),
    }
    state = trainer.init_state(jax.random.key(0), batch)
    n_params = sum(x.size for x in jax.tree.leaves(state.params))
    dev_batch = trainer.put_batch(batch)
    key = jax.random.key(1)
    t0 = time.perf_counter()
    state, m = trainer.train_step(state, dev_batch, key)
    jax.block_until_ready(m)
    compile_s = time.perf_counter() - t0
    flops = None
    try:
        with jax.set_mesh(trainer.mesh):
            cost = trainer._train_step.lower(state, dev_batch, key).compile().cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        flops = float(cost.get("flops", 0.0)) or None
    except Exception as e:  # noqa: BLE001 - cost analysis is best effort per backend
        print(f"(no XLA cost analysis: {e})")
    times = []
    with exclusive("train"):  # gpu_check.sh: one process times at a time
        for _ in range(a.steps):
            t0 = time.perf_counter()
            state, m = trainer.train_step(state, dev_batch, key)
            jax.block_until_ready(m)
            times.append(time.perf_counter() - t0)
        n_dev = jax.device_count()
        peak = matmul_rate("bfloat16" if cfg.dtype == "bfloat16" else "float32") * n_dev
    step_s = float(np.median(times))
    positions = a.text + a.speech + 1
    tokens = b * positions
    # model FLOPs per step (PaLM's MFU count): 6 N per token for the matmuls forward and
    # backward, plus 12 L d T for attention's scores and values over T positions. XLA's own
    # cost analysis (kept as xla_flops_per_step) leaves out GEMMs that run as library calls
    # (cuBLAS on a GPU): it read 1.2e11 for a 2.3e13 step on an H200.
    model_flops = tokens * (6 * n_params + 12 * cfg.num_layers * cfg.d_model * positions)
    res = {
        "config": a.config,
        "device": jax.devices()[0].device_kind,
        "devices": n_dev,
        "mesh": dict(trainer.mesh.shape),
        "dtype": cfg.dtype,
        "params": int(n_params),
        "batch": b,
        "positions_per_row": a.text + a.speech + 1,
        "step_s": step_s,
        "compile_s": compile_s - step_s,
        "tokens_per_s": tokens / step_s,
        "flops_per_step": model_flops,
        "xla_flops_per_step": flops,
        "achieved_flops": model_flops / step_s,
        "matmul_peak_flops": peak,
        "mfu": model_flops / step_s / peak,
    }
    kind = str(jax.devices()[0].device_kind)
    sheet = next((v for k, v in DATASHEET_BF16.items() if k in kind), None)
    if sheet:  # against the vendor's dense bf16 peak (the usual MFU denominator)
        res["datasheet_peak_flops"] = sheet * n_dev
        res["mfu_datasheet"] = model_flops / step_s / (sheet * n_dev)
    print(json.dumps(res, indent=1))
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
