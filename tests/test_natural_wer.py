"""benchmarks/natural_wer.py: the natural retrain's WER table from evaluate results."""

import json

import pytest

from benchmarks import natural_wer

UTTS = [("awb_g1", "awb", 10), ("awb_t2", "awb", 10), ("rms_g3", "rms", 5), ("rms_t4", "rms", 5)]


def _row(name, errors):
    return {
        "name": name,
        "utterances": [
            {"id": i, "speaker": s, "errors_whisper": e, "words_whisper": w}
            for (i, s, w), e in zip(UTTS, errors, strict=True)
        ],
        "wer_whisper": sum(errors) / 30,
    }


def _results(tmp_path, rows, name="r.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"rows": rows, "asr": {"whisper": "whisper-test"}}))
    return str(path)


def test_record_by_part_and_against_far(tmp_path):
    rows = [
        _row("ground truth", [1, 0, 0, 0]),
        _row("far @car seed=0", [2, 2, 1, 1]),
        _row("far @car seed=1", [4, 2, 1, 3]),
        _row("car:3 @car seed=0", [3, 3, 3, 0]),
    ]
    res = natural_wer.record(
        [_results(tmp_path, rows)], [("FAR", "far @"), ("CAR", "car:3")], "FAR"
    )
    far, car = res["systems"]
    # FAR: seeds 6 / 30 and 10 / 30 -> mean 8 / 30
    assert far["seeds"] == [0.2, 0.3333]
    assert far["wer"]["all"] == pytest.approx(8 / 30)
    assert far["wer"]["grammar"] == pytest.approx((2 + 1 + 4 + 1) / 2 / 15)
    assert far["wer"]["held_out"] == pytest.approx((1 + 1 + 1 + 3) / 2 / 10)
    assert far["wer"]["seen"] == pytest.approx((2 + 2 + 4 + 2) / 2 / 20)
    assert car["wer"]["open"] == pytest.approx(3 / 15)
    assert car["vs_baseline"]["diff"] == pytest.approx(9 / 30 - 8 / 30)
    assert car["vs_baseline"]["lo"] <= car["vs_baseline"]["diff"] <= car["vs_baseline"]["hi"]
    assert "vs_baseline" not in far
    (gt,) = res["references"]
    assert gt["wer"]["all"] == pytest.approx(1 / 30)


def test_bad_systems_are_one_line_errors(tmp_path, capsys):
    path = _results(tmp_path, [_row("far seed=0", [0, 0, 0, 0])])
    for systems, expected in (("FAR", "not label|substring"), ("FAR|nope", "no row's name")):
        with pytest.raises(SystemExit):
            natural_wer.main([path, "--systems", systems, "--command", "x", "--out", "/dev/null"])
        err = capsys.readouterr().err.strip()
        assert expected in err and len(err.splitlines()) == 1, err
