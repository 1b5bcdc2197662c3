"""`python -m weave.cli`: the `weave` command."""

import sys

from weave.cli import main

sys.exit(main())
