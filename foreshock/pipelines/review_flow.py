"""``foreshock review``: the challenger's recipe refitted before the review window vs the
champion, both scored on that window only; promote if the guardrails hold against the
bootstrap intervals.

``--approve VERSION`` promotes by hand, ``--rollback VERSION`` moves champion back. The
measuring and deciding live in :mod:`foreshock.models.registry.review`, acting on the decision in
:mod:`foreshock.models.registry.promotion`; this module only wires.
"""

from __future__ import annotations

import argparse

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from foreshock.config import Config
from foreshock.pipelines import inputs
from foreshock.pipelines.runtime import configure_mlflow, quiet_mlflow


@task(cache_policy=NO_CACHE)
def review_task(settings: dict, promote: bool) -> dict[str, object]:
    from foreshock.models.estimators.base import config_horizons
    from foreshock.models.registry.promotion import run_review
    from foreshock.models.registry.review import batch_rows
    from foreshock.models.registry.review_data import ReviewData

    config = Config.from_settings(settings)
    failures = inputs.failures(config)
    # the store read window by window: outcomes from the keys, the window scored in batches
    data = ReviewData.from_store(inputs.feature_source(config), failures, config_horizons(config), batch_rows(config))
    result = run_review(config, data, failures, promote=promote, drains=inputs.drains(config))
    return {
        "decision": result.decision,
        "promoted": result.promoted,
        "report_md": str(result.report_md),
        "report_html": str(result.report_html),
        "table": result.table().to_dicts(),
        "checks": [
            (c.name, c.passed, c.interval.low if c.interval else None, c.interval.high if c.interval else None)
            for c in result.checks
        ],
    }


@flow(name="review", log_prints=True, validate_parameters=False)
def review_flow(settings: dict, promote: bool = True) -> dict[str, object]:
    return review_task(settings, promote)


def _show(value: float | None) -> str:
    return "–" if value is None or value != value else f"{value:.4g}"  # NaN: not measured


def run_review_cmd(args: argparse.Namespace, config: Config) -> int:
    from foreshock.models.registry import promotion, registry

    configure_mlflow(config.mlflow_dir)
    quiet_mlflow()
    name = config.model_name
    if args.approve or args.rollback:
        version = args.approve or args.rollback
        move = promotion.approve if args.approve else promotion.rollback
        previous = move(config, version, by=args.by, reason=args.reason or "")
        print(f"{name}: champion is now version {version} (was {previous or 'none'})")
        return 0
    inputs.require_features(config)
    outcome = review_flow(config.to_settings(args.config), promote=not args.dry_run)
    print(f"  {'metric':<32} {'champion':>10} {'challenger':>10}")
    for row in outcome["table"]:
        print(f"  {row['metric']:<32} {_show(row['champion']):>10} {_show(row['challenger']):>10}")
    for check, passed, low, high in outcome["checks"]:
        interval = f" (interval {_show(low)} .. {_show(high)})" if low is not None else ""
        print(f"  guardrail {check}: {'pass' if passed else 'FAIL'}{interval}")
    print(outcome["decision"])
    print(f"report: {outcome['report_md']} and {outcome['report_html']}")
    print(f"aliases: {registry.aliases(name)}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    review = sub.add_parser(
        "review",
        help="challenger refitted before the review window vs champion on it; promote only if guardrails hold",
    )
    review.add_argument("--approve", metavar="VERSION", help="promote VERSION to champion by hand")
    review.add_argument("--rollback", metavar="VERSION", help="move champion back to an earlier VERSION")
    review.add_argument("--by", help="who approves or rolls back (default: $USER)")
    review.add_argument("--reason", help="why (recorded as a tag on the version)")
    review.add_argument("--dry-run", action="store_true", help="write the report but move no alias")
    review.set_defaults(func=run_review_cmd)
