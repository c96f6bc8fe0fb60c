"""The shared interfaces: layer subsets, embeddings apart from the stack, per-row dynamic chunks
through the generic driver, the lazy strategy registry, strict configs, decode options."""

import dataclasses
import os
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
from lm_reference import TINY, batch_of, init_params, random_rows, run

from jaxtts.decode import registry
from jaxtts.decode.driver import decode
from jaxtts.decode.options import DecodeOptions
from jaxtts.decode.sampling import SamplingConfig, row_keys
from jaxtts.errors import ConfigError
from jaxtts.methods.lm.model import TTSLM, LMConfig, with_bos
from jaxtts.methods.lm.strategies import ChunkedAR, chunk_step

GREEDY = SamplingConfig(greedy=True)
DEEP = dataclasses.replace(TINY, num_layers=4)


@pytest.fixture(scope="module")
def params():
    return init_params(eos_bias=0.9)


def test_layer_subset_equals_a_model_of_those_layers():
    """An SSD-style draft: layers (0, 3) of a 4-layer model == a 2-layer model holding copies
    of those two layers, for prefill + cached extend."""
    full = init_params(DEEP, seed=3)
    small_cfg = dataclasses.replace(DEEP, num_layers=2)
    small = dict(full)
    small["stack"] = {
        "layer_0": full["stack"]["layer_0"],
        "layer_1": full["stack"]["layer_3"],
        "final_norm": full["stack"]["final_norm"],
    }
    text = np.array([[3, 4, 5, 6, 0]], np.int32)
    speech = np.array([[DEEP.bos, 1, 2, 0]], np.int32)
    m, ms = TTSLM(DEEP), TTSLM(small_cfg)
    c = m.apply({"params": full}, 1, 5, 8, layers=(0, 3), method="init_cache")
    assert len(c.layers) == 2
    h, c = m.apply(
        {"params": full},
        text,
        np.array([4]),
        speech,
        np.array([3]),
        c,
        layers=(0, 3),
        method="prefill",
    )
    cs = ms.apply({"params": small}, 1, 5, 8, method="init_cache")
    hs, cs = ms.apply(
        {"params": small}, text, np.array([4]), speech, np.array([3]), cs, method="prefill"
    )
    np.testing.assert_allclose(h, hs, atol=1e-5)
    tok = jnp.array([[5, 7]])
    h2, _ = m.apply({"params": full}, tok, c, layers=(0, 3), method="extend")
    h2s, _ = ms.apply({"params": small}, tok, cs, method="extend")
    np.testing.assert_allclose(h2, h2s, atol=1e-5)
    with pytest.raises(ValueError, match=r"layers=\(0, 9\): expected indices in \[0, 4\)"):
        m.apply({"params": full}, 1, 5, 8, layers=(0, 9), method="init_cache")


def test_embeddings_apart_from_the_stack(params):
    """extend_embedded(embed_speech(t)) == extend(t): TLDR feeds its own vectors this way."""
    m = TTSLM(TINY)
    text = np.array([[3, 4, 5]], np.int32)
    cache = m.apply({"params": params}, 1, 3, 8, method="init_cache")
    _, cache = m.apply(
        {"params": params},
        text,
        np.array([3]),
        np.array([[TINY.bos]], np.int32),
        np.array([1]),
        cache,
        method="prefill",
    )
    tok = jnp.array([[2, 9, 4]])
    h_tok, _ = m.apply({"params": params}, tok, cache, method="extend")
    emb = m.apply({"params": params}, tok, method="embed_speech")  # [1, 3, D]
    assert emb.shape == (1, 3, TINY.d_model)
    h_emb, _ = m.apply({"params": params}, emb, cache, method="extend_embedded")
    np.testing.assert_array_equal(h_tok, h_emb)
    x, n = with_bos(np.array([[5, 6, 0]]), np.array([2]), TINY)
    assert x.tolist() == [[TINY.bos, 5, 6, TINY.pad]] and n.tolist() == [3]


@dataclasses.dataclass(frozen=True)
class RowChunks(ChunkedAR):
    """Test-only strategy: row b takes chunks[b % len(chunks)] tokens per step (a per-row
    dynamic chunk, as DCAR's policy will choose) through the shared `chunk_step`."""

    chunks: tuple = (1, 2, 3)

    @property
    def name(self):
        return f"rows:{self.chunks}"

    def max_steps(self, max_new_tokens):
        return max_new_tokens

    def init(self, models, params, batch, max_new_tokens):
        # room for max_steps * chunk speech slots, as car:<chunk> has
        return ChunkedAR(self.chunk).init(models, params, batch, max_new_tokens * self.chunk)

    def windows(self, models, batch, max_new_tokens):
        return (None,)

    def step(self, models, params, state, keys, sampling):
        b = state.length.shape[0]
        count = jnp.asarray([self.chunks[i % len(self.chunks)] for i in range(b)], jnp.int32)
        return chunk_step(
            models["target"],
            params["target"],
            state.carry,
            state,
            keys,
            sampling,
            self.chunk,
            count,
        )


def test_per_row_dynamic_chunk_equals_fixed_chunks(params):
    """Rows of one batch take different chunk sizes (extend by the largest, roll back per row);
    each row equals `car:<its chunk>` decoded alone."""
    rows = random_rows(6, seed=11)
    strat = RowChunks(chunk=3, chunks=(1, 2, 3))
    out = run(
        strat,
        params,
        batch_of(rows, 12, 8),
        row_keys(0, range(6)),
        max_new_tokens=18,
        sampling=GREEDY,
    )
    for i, row in enumerate(rows):
        c = (1, 2, 3)[i % 3]
        one = run(
            registry.get("far" if c == 1 else f"car:{c}"),
            params,
            batch_of([row], 9, 6),
            row_keys(0, [i]),
            max_new_tokens=18,
            sampling=GREEDY,
        )
        n = int(one.length[0])
        assert int(out.length[i]) == n, i
        np.testing.assert_array_equal(out.tokens[i, :n], one.tokens[0, :n])
        assert int(out.steps[i]) == int(one.steps[0])
    # all rows at chunk 3 == car:3 exactly
    same = run(
        RowChunks(chunk=3, chunks=(3,)),
        params,
        batch_of(rows),
        row_keys(0, range(6)),
        max_new_tokens=18,
        sampling=GREEDY,
    )
    car3 = run(
        registry.get("car:3"),
        params,
        batch_of(rows),
        row_keys(0, range(6)),
        max_new_tokens=18,
        sampling=GREEDY,
    )
    np.testing.assert_array_equal(same.tokens, car3.tokens)
    np.testing.assert_array_equal(same.steps, car3.steps)


def test_driver_takes_named_models(params):
    """The driver passes a mapping of models and params; a strategy names what it needs."""
    rows = random_rows(2, seed=2)
    models = {"target": TTSLM(TINY), "draft": TTSLM(TINY)}  # an extra model is simply unused
    out = decode(
        registry.get("car:2"),
        models,
        {"target": params, "draft": params},
        batch_of(rows),
        row_keys(0, range(2)),
        max_new_tokens=8,
        sampling=GREEDY,
    )
    ref = run(
        registry.get("car:2"),
        params,
        batch_of(rows),
        row_keys(0, range(2)),
        max_new_tokens=8,
        sampling=GREEDY,
    )
    np.testing.assert_array_equal(out.tokens, ref.tokens)
    assert out.stats == {}


def test_registry_imports_only_what_it_uses():
    code = (
        "import sys; from jaxtts.decode import registry; "
        "assert 'jaxtts.methods.lm.strategies' not in sys.modules; "
        "registry.get('car:2'); assert 'jaxtts.methods.lm.strategies' in sys.modules; "
        "print('ok')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
        timeout=120,
    )
    assert out.stdout.strip() == "ok", out.stderr[-500:]
    with pytest.raises(ConfigError, match=r"unknown strategy 'pale', expected one of \['car', "):
        registry.get("pale:3")
    # one grammar for every family: MDM's orders and PALLE's settings parse in the registry
    assert registry.get("palle:refine=3").name.startswith("palle:steps=100,")
    assert registry.get("mdm:topk:4").name == "mdm:topk:4"
    assert registry.get("gradtts").name == "gradtts:100"
    assert registry.family_of("nar") == "palle" and registry.family_of("dcar") == "dcar"
    with pytest.raises(ConfigError, match="unknown setting 'refin=3'"):
        registry.get("palle:refin=3")
    with pytest.raises(ConfigError, match="decoding order 'zigzag'"):
        registry.get("mdm:zigzag")


def test_configs_reject_unknown_and_dead_keys():
    base = dict(num_text_symbols=10, num_speech_tokens=12)
    with pytest.raises(ConfigError, match=r"model\.max_len: unknown key"):
        LMConfig.from_config(dict(base, max_len=2048))
    with pytest.raises(ConfigError, match=r"model\.d_modle: unknown key"):
        LMConfig.from_config(dict(base, d_modle=64))
    # a saved run folder from before the cleanup still loads
    cfg = LMConfig.from_config(dict(base, max_len=2048, param_dtype="float32"), saved=True)
    assert cfg.num_speech_tokens == 12
    assert cfg.kv_bytes_per_token() == 2 * cfg.num_layers * cfg.num_heads * cfg.head_dim * 4
    with pytest.raises(ConfigError, match=r"decode\.temprature: unknown key"):
        DecodeOptions.from_config(dict(strategy="far", temprature=0.5))
    opt = DecodeOptions.from_config(
        dict(strategy="car:3", temperature=0.7, max_seconds=4.0), greedy=None, top_k=5
    )
    assert opt == DecodeOptions("car:3", SamplingConfig(temperature=0.7, top_k=5), 4.0)
    assert opt.max_new_tokens(25.0) == 100


def _import_graph(root):
    """Module -> jaxtts modules it imports (module level and inside functions; `if
    TYPE_CHECKING:` blocks excluded)."""
    import ast
    from pathlib import Path

    pkg = Path(root) / "jaxtts"
    mods = {}
    for p in pkg.rglob("*.py"):
        parts = list(p.relative_to(Path(root)).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p

    def resolve(name):
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for m, p in mods.items():
        tree = ast.parse(p.read_text())
        skip = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skip |= {id(n) for n in ast.walk(node)}
        out = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            out |= {r for r in map(resolve, names) if r and r.startswith("jaxtts")}
        graph[m] = out - {m}
    return graph


def test_families_use_each_other_through_public_names_only():
    """No model family imports another family's trainer (`task.py`) or a private (`_x`) name
    of another family; the LM backbone's API is `jaxtts.methods.lm` (its `__init__`)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "jaxtts" / "methods"
    bad = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).parts
        own = rel[0] if len(rel) > 1 else p.stem  # family folder, or a one-file family
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                mods, names = [node.module], [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                mods, names = [a.name for a in node.names], []
            else:
                continue
            for mod in mods:
                parts = mod.split(".")
                if parts[:2] != ["jaxtts", "methods"] or len(parts) < 3 or parts[2] == own:
                    continue
                if parts[-1] == "task":
                    bad.append(f"{p.relative_to(root)}: imports {mod}")
                bad += [f"{p.relative_to(root)}: {mod}.{n}" for n in names if n.startswith("_")]
    assert bad == [], bad


def test_no_import_cycles():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    graph = _import_graph(root)
    assert "jaxtts.engine" in graph and "jaxtts.methods.lm.task" in graph
    state, cycles = {}, []

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == [], [" -> ".join(c) for c in cycles]


@pytest.mark.parametrize("spec", ["far", "car:3", "vadusa:2", "dcar", "ssd:L=5,beta=0.4", "tldr"])
def test_every_step_wise_strategy_grows_its_caches(spec):
    """Every driver strategy with a KV cache starts it at the smallest window and grows it
    (`cache_windows`): a strategy that attended over the whole budget from the first step
    (SSD until 2026-12-06) paid for a 12 s cache at every step of a 2 s utterance."""
    from jaxtts.methods.lm.strategies import MIN_WINDOW

    strat = registry.get(spec)
    if spec == "tldr":  # its patch comes from the model (`bind`): the shipped P = 4
        strat = dataclasses.replace(strat, patch=4)
    windows = strat.windows({"target": TTSLM(TINY)}, batch_of(random_rows(2, seed=1)), 600)
    assert windows[0] == MIN_WINDOW and len(windows) >= 3, windows
    assert list(windows) == sorted(windows)


@dataclasses.dataclass(frozen=True)
class OneWindow(ChunkedAR):
    """car:<chunk> attending over the whole buffer at every step (no windows)."""

    def windows(self, models, batch, max_new_tokens):
        return (None,)


@pytest.mark.parametrize(
    "chunk,sampling",
    [(1, GREEDY), (3, SamplingConfig(top_k=8))],
    ids=["far-greedy", "car3-sampled"],
)
def test_attention_windows_change_nothing(chunk, sampling):
    """A cache grown window by window (64, 128, then the whole budget of 157 speech slots)
    gives the same tokens as the full-size cache from the first step."""
    from jaxtts.methods.lm.strategies import cache_windows

    params = init_params(eos_bias=-3.0)  # long rows: they cross both window boundaries
    rows = random_rows(4, seed=5)
    strat = ChunkedAR(chunk)
    assert strat.windows(None, batch_of(rows), 150) == (64, 128, 157)  # 1 + prompt 6 + 150
    out = run(
        strat, params, batch_of(rows), row_keys(0, range(4)), max_new_tokens=150, sampling=sampling
    )
    ref = run(
        OneWindow(chunk),
        params,
        batch_of(rows),
        row_keys(0, range(4)),
        max_new_tokens=150,
        sampling=sampling,
    )
    assert int(np.max(out.length)) > 128  # really past the second window
    np.testing.assert_array_equal(out.tokens, ref.tokens)
    np.testing.assert_array_equal(out.steps, ref.steps)
    assert cache_windows(101, 351, 1) == (128, 256, 351)
    assert cache_windows(7, 40, 4) == (40,)
