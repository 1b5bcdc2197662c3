"""`scripts/bench` runs this file. scripts/ takes the place of this folder at the head of the path,
so that the sections import each other as `benchmarks.*` (the package lives outside the installed
Weave) and none of their names hides a top-level module."""

import sys
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parent.parent)
from benchmarks.main import main  # noqa: E402

sys.exit(main())
