"""Does the best model beat the ranked rules at the drain budget?  Said plainly.

Operators already run the threshold rules; a model is worth serving only if, at the budget
they act on, it catches more failures than the same rules ranked by severity (model
``baseline``), or as many with a higher precision.  :func:`against_rules` answers that per
horizon from a judged report (:func:`foreshock.models.evaluation.judging.judge_scores`);
:func:`verdict_lines` writes the sentence the backtest report shows when no model does.
The review's own guardrail against the rules is in :mod:`foreshock.models.registry.review`.
"""

from __future__ import annotations

from foreshock.models.evaluation.metrics import REWEIGHTED
from foreshock.models.evaluation.operating_points import RULES_MODEL

# The severity-ranked threshold rules: the bar every model must clear at the budget.
RANKED_RULES = "baseline"


def beats(model: dict, rules: dict) -> bool:
    """More failures caught at the budget, or as many at a higher precision per alert."""
    if model["caught"] != rules["caught"]:
        return model["caught"] > rules["caught"]
    return (model["precision"] or 0.0) > (rules["precision"] or 0.0)


def against_rules(report: dict, point: str = "budget") -> dict[str, dict]:
    """Per horizon: the best model at the budget (most caught, then precision) and whether
    it beats the ranked rules; empty when the report has no ranked rules or no model.
    ``point``: another capped operating point judged the same way (``budget_floor``: each
    model and the ranked rules with the same entry floor)."""
    out: dict[str, dict] = {}
    models = report["models"]
    horizons = {h for per_h in models.values() for h in per_h}
    for horizon in sorted(horizons):
        rules = ((models.get(RANKED_RULES) or {}).get(horizon) or {}).get("operating_points", {}).get(point)
        candidates = {
            name: per_h[horizon]["operating_points"].get(point)
            for name, per_h in models.items()
            if name not in (RANKED_RULES, RULES_MODEL) and horizon in per_h
        }
        candidates = {k: v for k, v in candidates.items() if v}
        if not rules or not candidates:
            continue
        best = max(candidates, key=lambda k: (candidates[k]["caught"], candidates[k]["precision"] or 0.0))
        out[horizon] = {
            "best": best,
            "beats_rules": beats(candidates[best], rules),
            "best_caught": candidates[best]["caught"],
            "best_precision": candidates[best]["precision"],
            "rules_caught": rules["caught"],
            "rules_precision": rules["precision"],
            "failures": rules["failures"],
        }
    return out


def _precision(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def verdict_lines(report: dict, horizon: str, key: str = "against_rules") -> list[str]:
    """The sentence under the budget table when no model beats the ranked rules (none
    otherwise); ``key``: the report's verdicts of another point (``against_rules_at_floor``)."""
    verdict = (report.get(key) or {}).get(horizon)
    if not verdict or verdict["beats_rules"]:
        return []
    return [
        "",
        f"**No model beats the ranked rules at this budget.** The best, {verdict['best']}, catches "
        f"{verdict['best_caught']} / {verdict['failures']} at precision {_precision(verdict['best_precision'])}; "
        f"the ranked rules ({RANKED_RULES}) catch {verdict['rules_caught']} / {verdict['failures']} at precision "
        f"{_precision(verdict['rules_precision'])}.",
    ]


def budget_title(settings: dict) -> str:
    """The budget table's title when the budget is a share, or the fleet is weighted."""
    return (
        f"drain budget, prospective: new alerts at most {settings['budget']}, the day's highest risks first "
        "(no threshold fitted to any period)"
    )


def reweighted_line(settings: dict) -> str:
    """Which figures count units by their fleet_weight."""
    return (
        f"Units are counted {settings['reweighted']} in the budget and in: {', '.join(REWEIGHTED)}. "
        "Failures, caught, recall, lead times and the alert counts are not reweighted."
    )
