"""``python -m harness <command> ...`` (see harness/app/cli.py)."""

import sys

from harness.app.cli import main

if __name__ == "__main__":
    sys.exit(main())
