"""`python -m jaxtts.codec export RUN DEST [--dtype float16]`: ship a codec tokenizer run."""

import argparse
import sys

from jaxtts.codec import export
from jaxtts.errors import JaxttsError


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m jaxtts.codec", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="the encoder and decoder alone, one params file")
    e.add_argument("src")
    e.add_argument("dest")
    e.add_argument("--dtype", default="float16")
    a = ap.parse_args()
    try:
        n = export(a.src, a.dest, a.dtype)
    except JaxttsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{a.dest}/params.msgpack: {n / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
