"""`python -m cogworker`: the same entry point as the `cogworker` command."""

import sys

from cogworker.cli.entry import main

sys.exit(main())
