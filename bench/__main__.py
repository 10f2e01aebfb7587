"""``python -m bench``: the benchmarks, from a checkout's root."""

import sys

from bench.cli import main

sys.exit(main())
