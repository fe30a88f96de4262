"""Make ``tests.doubles`` importable as one module (in this process and in the CLIs the tests start)."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
