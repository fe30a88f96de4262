"""The report's first line names what stage 2 chose, also where the freeze scored no stage-2 row (quick)."""

from __future__ import annotations

from optimize.summary import _stage2


def test_stage_2_names_the_sr_choices_it_chose_without_a_stage_2_row() -> None:
    s2 = {"confirmation": [{"verdict": "accepted", "wins": 8, "ties": 1, "losses": 1}],
          "chosen": {"trial": 2, "unguided_run": True, "combine_terms": True, "operators": "basic",
                     "sparse_regression": False, "workflow": [0, 1, 0, 0, 0]}}
    freeze = {"rows": {"baseline": {"sr_choices": {}}, "refine": {"sr_choices": {"unguided_run": True}}}}
    line = _stage2(s2, freeze)
    assert line == "stage 2 chose unguided_run=True, combine_terms=True (accepted, 8 W / 1 T / 1 L)"
    with_pow = {**s2, "chosen": {**s2["chosen"], "operators": "basic+pow"}}
    assert "operators=add+sub+mul+div+sin+cos+exp+log+sqrt+square+pow" in _stage2(with_pow, freeze)
