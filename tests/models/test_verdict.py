"""The backtest report says plainly when no model beats the ranked rules at the budget."""

from __future__ import annotations

from foreshock.models.evaluation.verdict import against_rules, verdict_lines


def point(caught: int, precision: float | None, failures: int = 22) -> dict:
    return {"operating_points": {"budget": {"caught": caught, "precision": precision, "failures": failures}}}


def report(**models: tuple[int, float | None]) -> dict:
    judged = {"models": {name: {"72h": point(*values)} for name, values in models.items()}}
    judged["against_rules"] = against_rules(judged)
    return judged


def test_rules_that_catch_more_are_named_as_the_better_choice():
    judged = report(baseline=(6, 0.30), gbm=(5, 0.24), cox=(3, 0.50), rules=(9, 0.05))
    verdict = judged["against_rules"]["72h"]
    assert (verdict["best"], verdict["beats_rules"]) == ("gbm", False)  # the binary rules are not a model
    (line,) = [text for text in verdict_lines(judged, "72h") if text]
    assert line.startswith("**No model beats the ranked rules at this budget.**")
    assert "gbm, catches 5 / 22 at precision 0.24" in line and "catch 6 / 22 at precision 0.30" in line


def test_as_many_catches_at_a_higher_precision_beats_the_rules_and_says_nothing():
    judged = report(baseline=(6, 0.30), gbm=(6, 0.39))
    assert judged["against_rules"]["72h"]["beats_rules"] is True
    assert verdict_lines(judged, "72h") == []


def test_a_tie_does_not_beat_the_rules():
    judged = report(baseline=(6, 0.30), gbm=(6, 0.30))
    assert judged["against_rules"]["72h"]["beats_rules"] is False
    assert verdict_lines(judged, "72h")


def test_no_ranked_rules_no_verdict():
    assert report(gbm=(6, 0.3))["against_rules"] == {}
