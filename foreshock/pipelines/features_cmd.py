"""``foreshock features``: feature snapshots from the lake (incremental).

The work lives in :mod:`foreshock.features.build`. A run that is recorded (under ``foreshock
serve``, the demo, a configured Prefect API) or that runs on Dask goes through
:mod:`foreshock.pipelines.features_flow`; otherwise the command runs the same plan directly
on ``[runner] local_workers`` threads (:func:`features.build.apply_update`) and neither
imports Prefect nor starts its temporary server: about 10 CPU-seconds saved whatever the
fleet, a fifth of the whole command on a 1,024-GPU fortnight (docs/scale.md).
"""

from __future__ import annotations

import argparse
from datetime import date

from foreshock.config import Config
from foreshock.pipelines.inputs import lake_metrics_in_catalog
from foreshock.pipelines.runtime import runs_as_flow


def run(args: argparse.Namespace, config: Config) -> int:
    lake_metrics_in_catalog(config, "features")  # one line and exit 2 before a flow run
    if runs_as_flow(config):
        from foreshock.pipelines.features_flow import features_flow
        from foreshock.pipelines.runtime import task_runner

        flow_run = features_flow.with_options(task_runner=task_runner(config))
        result = flow_run(config.to_settings(args.config), start=args.start, end=args.end, full=args.full)
    else:
        from foreshock.features.build import apply_update, locked_update
        from foreshock.pipelines.progress import track

        result = locked_update(
            config,
            date.fromisoformat(args.start) if args.start else None,
            date.fromisoformat(args.end) if args.end else None,
            args.full,
            lambda plan: apply_update(config, plan, track),
        )
    if not result["rows"]:
        print("features: up to date, nothing to compute")
        return 0
    print(
        f"features: {result['rows']} unit snapshots from {result['snapshots_from']} to "
        f"{result['snapshots_to']} ({result['partitions']} partitions) under {config.features_dir}"
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "features",
        help="compute feature snapshots from the lake (incremental)",
        description="Compute point-in-time feature snapshots per unit from the lake into "
        "data/features/. Only snapshots after the last stored one are computed unless --full.",
    )
    parser.add_argument("--start", type=_iso_date, help="first snapshot date (YYYY-MM-DD)")
    parser.add_argument("--end", type=_iso_date, help="last snapshot date (YYYY-MM-DD, inclusive)")
    parser.add_argument("--full", action="store_true", help="recompute every snapshot in range, not only new ones")
    parser.set_defaults(func=run)


def _iso_date(text: str) -> str:
    try:
        return date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {text!r}") from None
