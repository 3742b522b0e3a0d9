import sys

from cogworker.cli.main import main

sys.exit(main())
