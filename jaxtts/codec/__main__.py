"""`python -m jaxtts.codec export RUN DEST [--dtype float16]`: ship a codec tokenizer run."""

import sys

from jaxtts.cli import export_main
from jaxtts.codec import export

if __name__ == "__main__":
    sys.exit(export_main("jaxtts.codec", __doc__, export, "the encoder and decoder alone"))
