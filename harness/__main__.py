"""``python -m harness <command> ...`` (see harness/cli.py)."""

import sys

from harness.cli import main

if __name__ == "__main__":
    sys.exit(main())
