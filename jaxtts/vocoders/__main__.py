"""`python -m jaxtts.vocoders export RUN DEST [--dtype float16]`: ship a vocoder run folder."""

import sys

from jaxtts.cli import export_main
from jaxtts.vocoders import export

if __name__ == "__main__":
    sys.exit(
        export_main("jaxtts.vocoders", __doc__, export, "the generator alone, one params file")
    )
