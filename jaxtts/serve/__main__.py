"""`python -m jaxtts.serve`: see `jaxtts.serve.cli`."""

import sys

from jaxtts.serve.cli import main

sys.exit(main())
