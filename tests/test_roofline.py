"""The roofline cost model (benchmarks/roofline.py): counts by hand for one step of the tiny LM,
step counts against a real decode, and the time formula with its fixed terms."""

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from lm_reference import TINY, batch_of, init_params, random_rows, run

from jaxtts.decode import registry
from jaxtts.decode.sampling import SamplingConfig, row_keys

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def roofline():
    from benchmarks import roofline

    return roofline


def test_tiny_lm_shape_counted_by_hand(roofline):
    lm = roofline.LMShape.from_config(TINY)
    d, nh, ff, v = 32, 2 * 16, 64, 128  # width, heads x head_dim, FFN, padded vocabulary
    layer = 4 * d * nh + 3 * d * ff + 2 * d  # q k v o, SwiGLU wi_gate wi_up wo, two norms
    assert lm.layer_w == layer == 10_304
    assert lm.base_head_w == d * v + v  # kernel + bias
    assert lm.mtp_head_w == 4 * (d * d + d) + d * v  # 4 residual blocks + bias-free out
    assert (lm.layers, lm.attn, lm.vocab, lm.num_heads) == (2, 32, 128, 4)


def test_far_step_flops_and_bytes_by_hand(roofline):
    lm = roofline.LMShape.from_config(TINY)
    (fw,) = roofline.step_forwards("far", lm, {}, context=100)
    b, t = 8, 100
    w = 2 * 10_304 + (32 * 128 + 128)  # two layers + the base head
    # matmuls 2 per weight per row; attention: scores and values, 2 x 2 FLOPs per cached
    # position per (head x dim) per layer
    assert fw.flops(b) == 2 * b * w + 4 * b * 2 * 32 * t
    # weights once (float32), K and V of every layer over T + 1 positions, logits written and read
    assert fw.bytes(b, 4, 4) == 4 * w + b * 2 * 2 * 32 * (t + 1) * 4 + 2 * b * 128 * 4
    (c3,) = roofline.step_forwards("car:3", lm, {}, context=100)
    assert c3.q == 3 and c3.head_w == (32 * 128 + 128) + 2 * lm.mtp_head_w


def test_step_time_formula_with_fixed_terms(roofline):
    dev = roofline.Device(
        "t", bw=1e9, o_f=0.0, o_l=0.0, peak=1e9, fixed_by_batch={1: [1e-3, 2e-4, 5e-4, 1e-4]}
    )
    f = roofline.Forward("target", layers=2, layer_w=1000, attn=8, q=3, context=10)
    st = dev.forward_time(f, 1)
    flops = 2 * 3 * 2000 + 4 * 3 * 2 * 8 * 10
    nbytes = 4 * 2000 + 2 * 2 * 8 * 13 * 4
    assert st["compute"] == pytest.approx(flops / 1e9)
    assert st["memory"] == pytest.approx(nbytes / 1e9)
    # per forward + per layer + per extra token slot (q - 1 = 2), per forward and per layer
    assert st["fixed"] == pytest.approx(1e-3 + 2 * 2e-4 + 2 * (5e-4 + 2 * 1e-4))
    old = dataclasses.replace(dev, fixed_by_batch={1: [1e-3, 2e-4]})  # a calibration without
    assert old.forward_time(f, 1)["fixed"] == pytest.approx(1e-3 + 2 * 2e-4)  # slot terms
    assert st["time"] == pytest.approx(max(flops, nbytes) / 1e9 + st["fixed"])
    # a full-sequence forward (PALLE, MDM) is one pass over its positions: no slot terms
    (pa,) = roofline.step_forwards(
        "palle", roofline.LMShape.from_config(TINY), {}, 100, {"seq": 40}
    )
    assert (pa.q, pa.context, pa.layers) == (40, 20, 2)
    assert dev.forward_time(pa, 1)["fixed"] == pytest.approx(1e-3 + 2 * 2e-4)
    # the chunk-choice term (DCAR's draw and switch) lands on the policy's forward only
    choice = dataclasses.replace(dev, fixed_by_batch={1: [1e-3, 2e-4, 5e-4, 1e-4, 3e-4]})
    assert choice.forward_time(f, 1)["fixed"] == pytest.approx(st["fixed"])
    pol = dataclasses.replace(f, name="policy", layers=1, q=1)
    assert choice.forward_time(pol, 1)["fixed"] == pytest.approx(1e-3 + 2e-4 + 3e-4)
    # a device that streams one large buffer 3x faster than it reads matrix after matrix (an
    # H200: 650 vs 227 GB/s): the weights at bw, the KV cache and the logits at bw_stream
    split = dataclasses.replace(dev, bw_stream=3e9)
    weights, streamed = f.bytes_split(1, 4, 4)
    assert (weights, streamed) == (4 * 2000, 2 * 2 * 8 * 13 * 4)
    assert split.forward_time(f, 1)["memory"] == pytest.approx(weights / 1e9 + streamed / 3e9)


def test_lm_rtf_uses_the_steps_the_batches_ran(roofline):
    lm = roofline.LMShape.from_config(TINY)
    dev = roofline.Device("t", bw=1e9, o_f=1e-3, o_l=0.0, peak=1e12)
    one = roofline.lm_rtf(dev, "far", lm, {"steps_per_audio_s": 25.0}, 1, 100)
    step = dev.step_time(roofline.step_forwards("far", lm, {}, 100), 1)["time"]
    assert one["lm_rtf"] == pytest.approx(25.0 * step)
    step8 = dev.step_time(roofline.step_forwards("far", lm, {}, 100), 8)["time"]
    equal = roofline.lm_rtf(dev, "far", lm, {"steps_per_audio_s": 25.0}, 8, 100)
    assert equal["lm_rtf"] == pytest.approx(25.0 / 8 * step8)  # rows taken as equally long
    stats = {"steps_per_audio_s": 25.0, "batch_steps_per_audio_s": 5.0}
    padded = roofline.lm_rtf(dev, "far", lm, stats, 8, 100)
    assert padded["lm_rtf"] == pytest.approx(5.0 * step8)  # the batches' own step count


@pytest.mark.parametrize("strategy,chunk", [("far", 1), ("car:2", 2), ("car:3", 3)])
def test_step_counts_of_a_real_decode(roofline, strategy, chunk):
    """EOS suppressed: T tokens take ceil(T / c) steps, the count the model charges per token
    (tokens per step = c), and the batch's steps are its longest row's."""
    params = init_params()
    rows = random_rows(3, seed=1)
    batch = batch_of(rows)
    tokens = 10
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, min_tokens=tokens)
    out = run(
        registry.get(strategy),
        params,
        batch,
        row_keys(0, range(3)),
        max_new_tokens=tokens,
        sampling=sampling,
    )
    steps = np.asarray(out.steps)
    assert list(np.asarray(out.length)) == [tokens] * 3
    assert list(steps) == [math.ceil(tokens / chunk)] * 3
    lm = roofline.LMShape.from_config(TINY)
    (fw,) = roofline.step_forwards(strategy, lm, {"tokens_per_step": tokens / steps[0]}, 50)
    assert fw.q == chunk


def test_methods_speed_combine_joins_one_rows_batch_sizes(tmp_path, capsys):
    """gpu_check.sh times every row and batch size in its own process; `methods_speed.py
    --combine` makes one table row per (strategy, folder) with all its batch sizes, each
    against FAR's at the same batch size."""
    from benchmarks import methods_speed as ms

    def entry(strategy, b, rtf):
        m = dict(lm_rtf=rtf, steps_per_audio_s=25.0, kv_mb_per_audio_s=1.0)
        return dict(
            strategy=strategy, folder="m", backbone="m", wer=None, wer_source="", **{f"b{b}": m}
        )

    parts = {"far1": [entry("far", 1, 0.02)], "far8": [entry("far", 8, 0.004)]}
    parts |= {"car1": [entry("car:3", 1, 0.01)], "car8": [entry("car:3", 8, 0.001)]}
    paths = []
    for name, rows in parts.items():
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(rows))
    out = tmp_path / "all.json"
    assert ms.main(["--combine", ",".join(map(str, paths)), "--out", str(out)]) == 0
    table = json.loads(out.read_text())
    assert [e["strategy"] for e in table] == ["far", "car:3"]
    car = table[1]
    assert car["b1"]["speed_vs_far"] == pytest.approx(2.0)
    assert car["b8"]["speed_vs_far"] == pytest.approx(4.0)
    assert "| car:3 | m | m | — | 0.0100 | 2.00x | 0.0010 | 4.00x |" in capsys.readouterr().out
    # --eval fills the WER of rows timed without one (an evaluation's '<strategy> @<folder>'
    # row, or a plain '<strategy>' row of its --workdir); a key's seeds are averaged
    res = {"rows": [{"kind": "model", "name": "far precision=bfloat16", "wer_domain": 0.09},
                    {"kind": "model", "name": "far precision=bfloat16 seed=1", "wer_domain": 0.06},
                    {"kind": "model", "name": "car:3 @m", "wer_domain": 0.08}]}  # fmt: skip
    (tmp_path / "results.json").write_text(json.dumps(res))
    args = ["--combine", ",".join(map(str, paths)), "--out", str(out)]
    assert ms.main(args + ["--eval", str(tmp_path / "results.json")]) == 0
    far, car = json.loads(out.read_text())
    assert (far["wer"], far["wer_source"]) == (pytest.approx(7.5), "domain, 2 seeds")
    assert (car["wer"], car["wer_source"]) == (8.0, "domain")
    assert "| car:3 | m | m | 8.0 (domain) | 0.0100 | 2.00x" in capsys.readouterr().out


def test_methods_speed_reports_each_rounds_ratio_and_the_rounds_that_meet_the_target(
    tmp_path, capsys
):
    """Beside the median ratio, the table gives the lowest and highest of the interleaved
    rounds' own ratios (round r of the row against round r of FAR) and says in how many rounds
    the speed target (CAR c=3: 2.2x) was met."""
    from benchmarks import methods_speed as ms

    def rounds(*rtfs):
        return [dict(lm_rtf=r, steps_per_audio_s=25.0, kv_mb_per_audio_s=1.0) for r in rtfs]

    m = tmp_path / "m"  # an LM run folder: its own backbone
    m.mkdir()
    (m / "config.json").write_text("{}")
    m = str(m)
    rows = [("far", m), ("car:3", m)]
    meas = {("far", m, 1): rounds(0.10, 0.09, 0.12), ("car:3", m, 1): rounds(0.05, 0.045, 0.04)}
    out = tmp_path / "t.json"
    ms.report(rows, [1], meas, {("far", m): (8.0, "domain"), ("car:3", m): (8.5, "domain")},
              str(out), True)  # fmt: skip
    car = json.loads(out.read_text())[1]
    assert car["b1"]["lm_rtf"] == pytest.approx(0.045)  # the median
    assert car["b1"]["speed_vs_far"] == pytest.approx(0.10 / 0.045)
    assert car["b1"]["speed_vs_far_rounds"] == pytest.approx([2.0, 2.0, 3.0])
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("| car:3"))
    assert "| 0.0450 | 2.22x (2.00-3.00) |" in line
    assert line.endswith("| 2.2x | yes; speed in 1 of 3 rounds |")
    # the targets are batch 1's: a batch-8 table reports the ratios and judges none
    meas8 = {(s, f, 8): v for (s, f, _), v in meas.items()}
    assert [e["holds"] for e in ms.report(rows, [8], meas8, {}, str(out), True)] == ["—", "—"]


def test_dcar_batch_extends_by_the_expected_largest_chosen_size(roofline):
    """At batch b a DCAR step extends every row by the largest size any row chose: the
    expected largest of b draws from the measured sizes (2 or 3, half each: 2.75 at b = 2)."""
    assert roofline.expected_max([0, 1, 1, 0], 1) == pytest.approx(2.5)
    assert roofline.expected_max([0, 1, 1, 0], 2) == pytest.approx(2.75)
    assert roofline.expected_max([0, 0, 5, 0], 8) == pytest.approx(3.0)
    lm = roofline.LMShape.from_config(TINY)
    stats = {"tokens_per_step": 2.5, "chunk_hist": [0, 1, 1, 0]}
    (one, _) = roofline.step_forwards("dcar", lm, stats, 100, b=1)
    (two, _) = roofline.step_forwards("dcar", lm, stats, 100, b=2)
    assert (one.q, two.q) == (pytest.approx(2.5), pytest.approx(2.75))
    (old, _) = roofline.step_forwards("dcar", lm, {"tokens_per_step": 2.5}, 100, b=2)
    assert old.q == pytest.approx(2.5)  # without the sizes: the mean


def test_shipped_dcar_policy_is_linear_in_the_model(roofline):
    """The shipped DCAR policy has no causal layer (policy.num_layers 0): the model counts
    its forward without one (the paper's one-layer policy: one layer)."""
    lm, extra = roofline.row_model(str(ROOT / "pretrained" / "dcar_deep"))
    assert (extra["policy_layers"], extra["layer_w"]) == (0, 0)
    stats = {"tokens_per_step": 3.0}
    (_, linear) = roofline.step_forwards("dcar", lm, stats, 100, extra)
    (_, one) = roofline.step_forwards("dcar", lm, stats, 100, {**extra, "policy_layers": 1})
    assert (linear.layers, one.layers) == (0, 1)
    assert linear.flops(1) == 2 * lm.d_model * lm.num_heads


def test_methods_speed_bad_rows_are_one_line_errors(capsys):
    """A row's sampling setting that is not one, or a strategy the folder does not know: one
    line naming the row, exit 2 (the first before any model loads)."""
    from benchmarks import methods_speed as ms

    folder = str(ROOT / "pretrained" / "car_deep")
    assert ms.main(["--rows", f"far+bogus@{folder}", "--batch", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "far+bogus" in err and "'+bogus' is not a sampling setting" in err
    assert len(err.splitlines()) == 1
    assert ms.main(["--rows", f"farx+top_p=1.0@{folder}", "--batch", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown strategy 'farx'" in err and len(err.splitlines()) == 1


def test_check_refuses_a_calibration_of_another_precision(roofline):
    """`roofline check` compares a calibration with speed rows of its own precision only: a
    float32 curve against bfloat16 rows (or mixed rows) is a one-line error naming both files."""
    bf16 = [
        {"strategy": "far", "precision": "bfloat16"},
        {"strategy": "car:3", "precision": "bfloat16"},
    ]
    roofline.check_precisions({"dtype": "bfloat16"}, bf16, "cal.json", "speed.json")
    roofline.check_precisions({}, [{"strategy": "far"}], "cal.json", "speed.json")  # old files
    want = "cal.json: dtype='float32', but the rows of speed.json ran at precision bfloat16: "
    with pytest.raises(SystemExit, match=want + "calibrate with --dtype bfloat16$"):
        roofline.check_precisions({"dtype": "float32"}, bf16, "cal.json", "speed.json")
    mixed = [*bf16, {"strategy": "far"}]
    with pytest.raises(SystemExit, match=r"precision bfloat16, float32: .*split the rows"):
        roofline.check_precisions({"dtype": "bfloat16"}, mixed, "cal.json", "speed.json")


def test_calibration_matmul_is_the_decodes(roofline, monkeypatch):
    """The calibration times `jaxtts.nn.layers.matmul` at its dtype (the decode's bf16 weights
    with float32 sums), not a plain `x @ w`: every chain matmul goes through it."""
    import jaxtts.nn.layers as layers

    seen = []
    real = layers.matmul

    def spy(eq, x, kernel, dtype):
        seen.append((eq, str(x.dtype), str(kernel.dtype), dtype))
        return real(eq, x, kernel, dtype)

    monkeypatch.setattr(layers, "matmul", spy)
    monkeypatch.setattr(roofline, "fit_fixed_costs", lambda *a, **k: {})
    monkeypatch.setattr(roofline, "_timeit", lambda fn, *a, reps=20: (fn(*a), 1e-3)[1])
    cal = roofline.calibrate(d_model=16, d_ff=32, weights_mb=0.01, dtype="bfloat16")
    assert cal["dtype"] == "bfloat16" and len(cal["curve"]) == 10
    assert seen and all(s == ("...d,df->...f", "float32", "bfloat16", "bfloat16") for s in seen)
