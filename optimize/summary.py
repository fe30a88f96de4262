"""What a run learned, how sure it is and what it cost, in a few lines: the first lines of ``report.md`` and of the
closing summary ``python -m optimize`` prints. Read from the stage result files only."""

from __future__ import annotations

from typing import Any

from optimize.report_format import stage_title
from optimize.search_space import sr_settings_of
from workflows.harness import INITIAL_SR_CHOICES


def _race(paired: dict[str, Any] | None) -> str:
    if not paired:
        return "no race"
    wtl = f"{paired.get('wins', 0)} W / {paired.get('ties', 0)} T / {paired.get('losses', 0)} L"
    return f"{paired.get('verdict', '?')}, {wtl}"


def _choices(freeze: dict[str, Any], stage: str) -> dict[str, Any]:
    return ((freeze.get("rows") or {}).get(stage) or {}).get("sr_choices") or {}


def _stage1(s1: dict[str, Any] | None) -> str:
    if not s1:
        return "stage 1 did not run"
    kept = []
    for group in s1.get("groups", []):
        first = (group.get("candidates") or [{}])[0]
        paired = (first.get("rewrite") or {}).get("paired")
        if first.get("origin", "seed") != "seed" and paired:
            kept.append(f"a {'+'.join(group.get('roles', []))} rewrite ({_race(paired)})")
    tried = [c for g in s1.get("groups", []) for c in g.get("candidates", []) if c.get("origin") != "seed"]
    if kept:
        return "stage 1 kept " + "; ".join(kept)
    return f"stage 1 kept the seed prompts ({len(tried)} rewrite(s) did not win their race)"


def _stage2(s2: dict[str, Any] | None, freeze: dict[str, Any]) -> str:
    if not s2:
        return "stage 2 did not run"
    won = [c for c in s2.get("confirmation") or [] if c.get("verdict") == "accepted"]
    if not won:
        raced = len(s2.get("confirmation") or [])
        return (f"stage 2 kept its start ({s2.get('n_trials_complete', 0)} trial(s), {raced} raced, none accepted"
                + (f": {_race((s2.get('confirmation') or [None])[-1])}" if raced else "") + ")")
    before, after = _choices(freeze, "init") or _choices(freeze, "baseline"), _choices(freeze, "search")
    if not after:  # no stage-2 row in the freeze (freeze.heldout: false): the chosen trial's SR choices themselves
        chosen = sr_settings_of({k: v for k, v in (s2.get("chosen") or {}).items() if k in INITIAL_SR_CHOICES})
        after = {k: v for k, v in chosen.items() if v != INITIAL_SR_CHOICES[k]}
    changed = {k: v for k, v in after.items() if before.get(k) != v}
    what = ", ".join(f"{k}={'+'.join(v) if isinstance(v, list) else v}" for k, v in changed.items()) or \
        "another workflow or prompt"
    return f"stage 2 chose {what} ({_race(won[-1])})"


def _stage3(s3: dict[str, Any] | None) -> str:
    if not s3:
        return "stage 3 did not run"
    steps = s3.get("steps") or []
    kept = [st for st in steps if st.get("accepted")]
    if kept:
        return f"stage 3 kept {len(kept)} of {len(steps)} rewrite(s) ({_race(kept[-1].get('paired'))})"
    return f"stage 3 kept none of {len(steps)} rewrite(s)"


def learned(freeze: dict[str, Any], s1: dict[str, Any] | None, s2: dict[str, Any] | None,
            s3: dict[str, Any] | None, costs: list[dict[str, Any]]) -> list[str]:
    """Three lines: what the stages kept and the gate froze; how sure (the races' rule and the held-out climb);
    what it cost (wall time, solver executions, model calls, steps that seconds stopped)."""
    if not freeze:
        return []
    gate = freeze.get("gate") or {}
    frozen = stage_title(freeze.get("selected_stage", ""), freeze)
    what = (f"**Learned:** {_stage1(s1)}; {_stage2(s2, freeze)}; {_stage3(s3)}; the gate froze {frozen} "
            f"({_race(gate.get('paired'))}).")
    rule = (gate.get("rule") or "") if isinstance(gate.get("rule"), str) else ""
    rows = freeze.get("rows") or {}
    start, picked = ((rows.get(s) or {}).get("heldout") or {} for s in ("baseline", freeze.get("picked_stage")))
    climb = ""
    if start.get("acc_0.01_mean") is not None and picked.get("acc_0.01_mean") is not None:
        n = len(start.get("tasks") or {})
        climb = (f" On {n} held-out law(s), acc_0.01 (mean of ID and OOD) {start['acc_0.01_mean']:.3f} -> "
                 f"{picked['acc_0.01_mean']:.3f} from the start to the trained harness.")
    sure = ("**How sure:** every change was kept only by winning a race on shared (task, seed) pairs"
            + (f", {rule}" if rule else "") + "; a verdict of too thin is no evidence either way." + climb)
    wall = sum(float(c.get("wall_seconds") or 0.0) for c in costs)
    runs = sum(int(c.get("solver_runs") or 0) for c in costs)
    calls = sum(int(c.get("llm_calls_paid") or 0) for c in costs)
    hits = freeze.get("guard_hits")
    cost = (f"**Cost:** {wall / 60:.1f} min of stage wall time, {runs} solver executions, {calls} paid model calls"
            + (f"; {hits} step(s) stopped by seconds (their outcome depends on the machine)" if hits else "")
            + ".")
    return [what, sure, cost]
