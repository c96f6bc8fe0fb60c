"""benchmarks/diagnostics/step_ablation.py's variants time what they claim: FAR with the extra
heads, and FAR with several draws, decode FAR's own tokens (the added part changes nothing else);
CAR forwarding one of its tokens takes CAR's steps."""

from pathlib import Path

import numpy as np
import pytest
from lm_reference import batch_of, init_params, random_rows, run

from jaxtts.decode import registry
from jaxtts.decode.sampling import SamplingConfig, row_keys

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ablation():
    from benchmarks.diagnostics import step_ablation

    return step_ablation


def test_ablated_steps_keep_the_parent_tokens_and_steps(ablation):
    params = init_params()
    batch = batch_of(random_rows(2, seed=3))
    keys = row_keys(0, range(2))
    n, chunk = 7, 3
    sampling = SamplingConfig(temperature=1.0, top_p=0.6, min_tokens=n)
    outs = {}
    for name, (spec, replacement) in ablation.variants(chunk).items():
        strategy = replacement or registry.get(spec)
        outs[name] = run(strategy, params, batch, keys, max_new_tokens=n, sampling=sampling)
    assert list(outs) == ["far", "far+heads 2..3", "far+draws x3", "car:3", "car:3/1-row"]
    far = np.asarray(outs["far"].tokens)
    for name, out in outs.items():
        np.testing.assert_array_equal(out.length, [n, n], err_msg=name)
        steps = n if name.startswith("far") else -(-n // chunk)
        np.testing.assert_array_equal(out.steps, [steps, steps], err_msg=name)
    np.testing.assert_array_equal(outs["far+heads 2..3"].tokens, far)
    np.testing.assert_array_equal(outs["far+draws x3"].tokens, far)
