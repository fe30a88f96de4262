"""``python -m harness <command> ...`` (see harness/app/cli.py)."""

import faulthandler
import sys

from harness.app.cli import main

if __name__ == "__main__":
    faulthandler.enable()  # a native crash (an SR engine or llama.cpp) prints where it happened, not just a signal
    sys.exit(main())
