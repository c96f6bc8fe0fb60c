"""Test setup: 8 simulated CPU devices for the sharding tests, set before JAX is imported."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Subprocess tests (train.py/infer.py, the SIGKILL run) import this checkout's jaxtts, whatever
# another checkout's editable install points at.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_ROOT, os.environ.get("PYTHONPATH")]))

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory):
    """A 40-utterance built-in corpus (train 34 / dev 2 / test 4, held-out speaker spk09 in
    test only), built once per test session into a temp dir; returns its folder (Path)."""
    from jaxtts.data.corpus import build_corpus
    from jaxtts.data.text import espeak_available

    if not espeak_available():
        pytest.skip("espeak-ng not installed (apt-get install espeak-ng, or make setup)")
    out = tmp_path_factory.mktemp("tiny_corpus") / "builtin"
    return build_corpus(out, num_utterances=40, seed=0, progress=False)


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
    """Drop JAX's compiled programs after each test module: the suite compiles hundreds of
    programs in one process, and a long run once segfaulted inside XLA's CPU compiler late in
    the suite (not reproducible alone); holding less keeps the process small."""
    yield
    import gc

    import jax

    jax.clear_caches()
    gc.collect()
