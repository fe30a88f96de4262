"""Regenerate harness/data/default_harness.json from prompts/*.md (run after editing a prompt).

    python scripts/make_default_harness.py [--check]

``--check`` only compares: exit code 1 when the shipped file's prompts or settings differ from prompts/.
"""

from __future__ import annotations

import argparse
import sys

from harness.app.artifact import DEFAULT_HARNESS_FILE, ArtifactError, FrozenHarness


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only; do not write")
    args = parser.parse_args(argv)
    fresh = FrozenHarness.build_default()
    if args.check:
        try:
            shipped = FrozenHarness.load(DEFAULT_HARNESS_FILE)
        except ArtifactError as exc:
            print(f"stale: {exc}")
            return 1
        same = all(getattr(shipped, k) == getattr(fresh, k) for k in ("prompts", "workflow", "backend", "sr_settings", "llm"))
        print("up to date" if same else f"stale: {DEFAULT_HARNESS_FILE} differs from prompts/; rerun without --check")
        return 0 if same else 1
    path = fresh.save(DEFAULT_HARNESS_FILE)
    print(f"wrote {path} ({fresh.digest})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
