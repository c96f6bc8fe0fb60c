"""Bad input to every entry point, one case a line: (label, argv after `python`, a phrase the
one-line error must contain). tests/test_bad_inputs.py runs each: exit code 2, one line on
stderr, no traceback. `{file}` is an existing plain file, `{missing}` a path that does not exist."""

CAR = "pretrained/car_small"

CASES = [
    # train.py
    ("train: no --config", ["train.py", "--workdir", "{missing}"], "--config is required"),
    ("train: missing config file", ["train.py", "--config", "configs/nope.py:tiny",
                                    "--workdir", "{missing}"], "no such config file"),
    ("train: unknown variant", ["train.py", "--config", "configs/car.py:nope",
                                "--workdir", "{missing}"], "unknown variant 'nope'"),
    ("train: workdir is a file", ["train.py", "--config", "configs/car.py:tiny",
                                  "--workdir", "{file}"], "a file, expected a run folder"),
    ("train: unknown key", ["train.py", "--config", "configs/car.py:tiny", "--workdir",
                            "{missing}", "--config.train.nope=1"], "nope"),
    ("train: ssd.distill out of range", ["train.py", "--config", "configs/ssd.py:tiny",
                                         "--workdir", "{missing}", "--config.ssd.distill=1.5"],
     "ssd.distill=1.5: expected a weight in [0, 1]"),
    ("train: no --workdir", ["train.py", "--config", "configs/car.py:tiny"],
     "--workdir is required"),
    ("train: stray argument", ["train.py", "--config", "configs/car.py:tiny", "--workdir",
                               "{missing}", "extra"], "unexpected arguments"),
    # infer.py
    ("infer: no run folder", ["infer.py", "--workdir", "{missing}", "--text", "hi"],
     "{missing}"),
    ("infer: unknown strategy", ["infer.py", "--workdir", CAR, "--strategy", "bogus",
                                 "--text", "hi", "--out_dir", "{missing}"], "bogus"),
    ("infer: missing text file", ["infer.py", "--workdir", CAR, "--text_file", "{missing}",
                                  "--out_dir", "{missing}"], "{missing}"),
    ("infer: --strict and another script", ["infer.py", "--workdir", CAR, "--strict",
                                            "--text", "Привет", "--out_dir", "{missing}"],
     "line 1: 6 letters of another script (Cyrillic"),
    ("infer: --strict and markup", ["infer.py", "--workdir", CAR, "--strict", "--text",
                                    "say <b>this</b>", "--out_dir", "{missing}"], "markup"),
    ("infer: top_p out of range", ["infer.py", "--workdir", CAR, "--top_p", "1.5", "--text",
                                   "hi", "--out_dir", "{missing}"], "top_p"),
    # python -m jaxtts.evaluate
    ("evaluate: no run folder", ["-m", "jaxtts.evaluate", "--rows", "model:far@{missing}"],
     "{missing}"),
    ("evaluate: top_p out of range", ["-m", "jaxtts.evaluate", "--workdir", CAR,
                                      "--strategies", "far", "--top_p", "1.5"], "top_p=1.5"),
    # python -m jaxtts.methods.lm.expand
    ("expand: shallower", ["-m", "jaxtts.methods.lm.expand", CAR, "{missing}",
                           "--num_layers", "3"], "the new depth must be >= the old one"),
    ("expand: map not increasing", ["-m", "jaxtts.methods.lm.expand", CAR, "{missing}",
                                    "--num_layers", "12", "--layer_map", "0,9,9,11"],
     "strictly increasing"),
    ("expand: map not integers", ["-m", "jaxtts.methods.lm.expand", CAR, "{missing}",
                                  "--num_layers", "12", "--layer_map", "a,b"],
     "comma-separated integers"),
    ("expand: not an LM run", ["-m", "jaxtts.methods.lm.expand", "pretrained/mdm",
                               "{missing}", "--num_layers", "12"], "expected 'lm'"),
]  # fmt: skip
