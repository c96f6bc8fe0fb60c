#!/usr/bin/env python3
"""A recorded espeak-ng for a machine without it (the GPU image of benchmarks/gpu_check.sh has
no espeak-ng and cannot install one): answers `-q --ipa --sep=_ ... -v <voice> --stdin` from the
table the real espeak-ng produced here (`gpu_check.sh --prepare` records every test sentence of
the builtin corpus into gpu_bundle/espeak_table.json and installs this file as
gpu_bundle/bin/espeak-ng). A line that is not in the table is an error, never a guess."""

import json
import os
import sys

args = sys.argv[1:]
voice = args[args.index("-v") + 1] if "-v" in args else "en-us"
here = os.path.dirname(os.path.abspath(__file__))
table = json.load(open(os.path.join(here, "..", "espeak_table.json"), encoding="utf-8"))
out = []
for line in sys.stdin.read().rstrip("\n").split("\n"):
    key = f"{voice}\t{line}"
    if key not in table:
        sys.stderr.write(f"recorded espeak-ng: no recording of {line!r} (voice {voice})\n")
        sys.exit(3)
    out.append(table[key])
sys.stdout.write("\n".join(out) + "\n")
