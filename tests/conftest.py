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


@pytest.fixture(scope="session")
def tiny_natural_corpus(tmp_path_factory):
    """The tiny natural-voice corpus (`jaxtts.data.natural` config `tiny`: flite's slt, kal and
    the held-out rms beside two espeak voices, 42 utterances, ~10 s to build), once per test
    session; returns its folder (Path)."""
    import shutil

    from jaxtts.data import natural as nat

    if shutil.which("flite") is None or shutil.which("espeak-ng") is None:
        pytest.skip("flite / espeak-ng not installed (make setup installs them)")
    out = tmp_path_factory.mktemp("tiny_natural") / "natural"
    return nat.build_natural_corpus(out, nat.natural_config("tiny"), progress=False)


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


if os.environ.get("JAXTTS_TEST_COMPILE_LOG"):  # where the suite's time goes (RESULTS #test-time)

    @pytest.fixture(autouse=True)
    def _log_compile_time(request):
        """JAXTTS_TEST_COMPILE_LOG=<file>: append one JSON line per test with the seconds it spent
        tracing, lowering and compiling (jax.monitoring durations) and its persistent-cache hits
        and misses. A diagnostic, off by default."""
        import json
        import time

        import jax.monitoring as monitoring

        spent: dict[str, float] = {}

        def on_duration(event, seconds, **_):
            spent[event] = spent.get(event, 0.0) + seconds

        def on_event(event, **_):
            spent[event] = spent.get(event, 0.0) + 1

        monitoring.register_event_duration_secs_listener(on_duration)
        monitoring.register_event_listener(on_event)
        t0 = time.perf_counter()
        yield
        wall = time.perf_counter() - t0
        monitoring.unregister_event_duration_listener(on_duration)
        monitoring.unregister_event_listener(on_event)
        short = {
            k.rsplit("/", 1)[-1]: round(v, 2)
            for k, v in spent.items()
            if "compil" in k or "trace" in k
        }
        with open(os.environ["JAXTTS_TEST_COMPILE_LOG"], "a") as f:
            f.write(
                json.dumps(
                    {
                        "test": request.node.nodeid,
                        "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
                        "wall": round(wall, 2),
                        **short,
                    }
                )
                + "\n"
            )
