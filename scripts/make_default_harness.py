"""Regenerate harness/data/default_harness.json from the one definition, ``workflows.harness.shipped_harness()``.

    python scripts/make_default_harness.py [--check]
    python scripts/make_default_harness.py --from outputs/optimize/<run>/harness.json

Plain: freeze the definition (our prompts/*.md, SHIPPED_WORKFLOW, SRSettings' defaults, the embedded model) as it
is; run after editing a prompt. ``--check`` only compares (exit 1 when the file differs from the definition).
``--from``: make an optimizer output the shipped default - its prompts are written to workflows/prompts/*.md
(so the definition and the file stay one), its provenance is kept; refused when its workflow, engine, engine
settings, role agents or model differ from the definition's (change those in workflows/harness.py and
workflows/params.py first, with the figure in docs/decisions.md).
"""

from __future__ import annotations

import argparse
import sys

from harness.app.artifact import DEFAULT_HARNESS_FILE, ArtifactError, FrozenHarness
from workflows.harness import shipped_harness
from workflows.roles import PROMPTS_DIR

FIELDS = ("prompts", "workflow", "backend", "sr_settings", "llm", "role_agents")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only; do not write")
    parser.add_argument("--from", dest="source", help="an optimizer's harness.json to ship as the default")
    args = parser.parse_args(argv)
    if args.source:
        trained = FrozenHarness.load(args.source)
        definition = shipped_harness()
        differ = [k for k in FIELDS if k != "prompts" and getattr(trained, k) != getattr(definition, k)]
        if differ:
            print(f"refused: {args.source} differs from the shipped definition in {differ}; change the definition "
                  "(workflows/harness.py, workflows/params.py) first, with the figure in docs/decisions.md")
            return 1
        for role, text in trained.prompts.items():
            (PROMPTS_DIR / f"{role}.md").write_text(text.strip() + "\n", encoding="utf-8")
        path = trained.save(DEFAULT_HARNESS_FILE)
        print(f"wrote {path} ({trained.digest}) and its prompts to {PROMPTS_DIR}")
        return 0
    fresh = FrozenHarness.build_default()
    if args.check:
        try:
            shipped = FrozenHarness.load(DEFAULT_HARNESS_FILE)
        except ArtifactError as exc:
            print(f"stale: {exc}")
            return 1
        same = all(getattr(shipped, k) == getattr(fresh, k) for k in FIELDS)
        print("up to date" if same else f"stale: {DEFAULT_HARNESS_FILE} differs from the definition; rerun without "
              "--check")
        return 0 if same else 1
    path = fresh.save(DEFAULT_HARNESS_FILE)
    print(f"wrote {path} ({fresh.digest})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
