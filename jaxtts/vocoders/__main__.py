"""`python -m jaxtts.vocoders export RUN DEST [--dtype float16]`: ship a vocoder run folder."""

import argparse
import sys

from jaxtts.errors import JaxttsError
from jaxtts.vocoders import export


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m jaxtts.vocoders", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="the generator alone, one params file")
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
