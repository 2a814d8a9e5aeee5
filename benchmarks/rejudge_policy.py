"""The policy point of a backtest at other policy settings, judged on its stored scores (no refits).

A backtest keeps every model's out-of-sample scores (``scores.parquet``).  This judges them
again, with the backtest's own judge, at each combination of ``[policy] enter_risk`` (the
exit level stays at the configured ``exit_risk / enter_risk`` of it), ``enter_for`` and, with
``--second-horizon`` (a horizon the backtest scored), ``second_enter_risk`` given (with
``--second-only``, only that horizon's risk enters drain; without ``--second-only`` either
risk enters, the decision risk on its own threshold and hold, ``--decision-enter-risk`` and
``--decision-enter-for``, when given; ``--second-horizon ""``: the decision risk alone; no
``--second-horizon``: the configuration's own entry), and prints
the policy point of each model: alerts, true alerts, precision per alert and per
unit, caught, recall of the failures with a precursor (with a ground truth), early alerts and
GPU-hours saved.  ``--model-entry MODEL KEY=VALUE ...`` gives a model an entry of its own
(``[policy.models.<name>]``: ``enter_risk``, ``enter_for``, ``second_enter_risk``,
``decision_enter_risk``, ``decision_enter_for``) over the settings above, the others keep
them: ``--models gbm cox --model-entry cox decision_enter_risk=0.5 decision_enter_for=6h``
judges each at its own in one run, and the entry column says which.

**Honesty.** Each row is out of sample for the models (nothing was refitted), but a setting
*picked* because its row looks best here was chosen on the test period: its figures are an
upper bound, not an operating result.  Use it to see how far an operating point alone can
go, or to judge a setting fixed in advance on a fleet that has not seen it.

Usage::

    uv run python benchmarks/rejudge_policy.py --backtest DIR/backtest --data-dir DIR \\
        [--config DIR/evaluate.toml] [--ground-truth DIR/raw/sim/ground_truth.parquet] \\
        [--models gbm cox] [--enter-risk 0.4 0.5 0.6] [--enter-for 1h 6h] \\
        [--second-horizon 24h|"" --second-enter-risk 0.4 0.5 [--second-only]
         [--decision-enter-risk 0.6 --decision-enter-for 48h]] [--alert-window 72h]
        [--model-entry cox second_enter_risk=0.5 decision_enter_risk=0.5 decision_enter_for=6h]
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from functools import cache
from pathlib import Path

import polars as pl


@cache
def stored(backtest: Path, config_file: Path | None, data_dir: Path, ground_truth: Path | None) -> tuple:
    """What every judgement of one backtest reads (once): its folds' test periods, the
    lake's failures and the ground truth."""
    from foreshock.config import load_config
    from foreshock.contract import UTC_TS
    from foreshock.models.evaluation.alert_replay import Period
    from foreshock.models.evaluation.backtest import read_ground_truth
    from foreshock.models.evaluation.backtest_folds import Fold
    from foreshock.models.evaluation.backtest_report import read_report
    from foreshock.pipelines import inputs

    report = read_report(backtest)
    if report is None:
        raise SystemExit(f"{backtest}: no backtest report (report.json) there")
    periods = [Period(fold.cutoff, fold.test_end) for fold in map(Fold.from_dict, report["folds"])]
    config = load_config(config_file, data_dir=data_dir)
    failures = inputs.failures(config).with_columns(pl.col("failed_at").cast(UTC_TS))
    truth = read_ground_truth(str(ground_truth)) if ground_truth else None
    return periods, failures, truth


def judge(args: argparse.Namespace, enter_risk: float, enter_for: str, second_risk: float | None = None) -> dict:
    """The backtest's judge on its stored scores with the policy settings replaced."""
    from foreshock.config import load_config
    from foreshock.models.evaluation.backtest_report import scores_path
    from foreshock.models.evaluation.judging import judge_scores

    periods, failures, truth = stored(args.backtest, args.config, args.data_dir, args.ground_truth)
    config = load_config(args.config, data_dir=args.data_dir)
    policy = config.settings["policy"]
    ratio = float(policy["exit_risk"]) / float(policy["enter_risk"])
    policy.update(enter_risk=enter_risk, exit_risk=ratio * enter_risk, enter_for=enter_for)
    if second_risk is not None:
        policy.update(second_horizon=args.second_horizon, second_enter_risk=second_risk, second_only=args.second_only)
        if args.decision_enter_risk is not None:
            policy.update(decision_enter_risk=args.decision_enter_risk)
        if args.decision_enter_for is not None:
            policy.update(decision_enter_for=args.decision_enter_for)
    elif args.second_horizon is not None:  # "": the decision horizon's risk alone
        policy.update(second_horizon="", second_only=False)
    if args.model_entry:  # [policy.models.<name>]: a model's own entry over the settings above
        policy["models"] = model_entries(args.model_entry)
    if args.alert_window:  # W: how long before a failure an alert still catches it
        config.settings["backtest"]["alert_window"] = args.alert_window
    scores = pl.scan_parquet(scores_path(args.backtest)).filter(pl.col("model").is_in(args.models))
    return judge_scores(scores, failures, config, ground_truth=truth, periods=periods)


def model_entries(given: list[list[str]]) -> dict[str, dict]:
    """``--model-entry MODEL KEY=VALUE ...`` as ``[policy.models]`` tables, checked by the
    configuration's schema (values read as TOML, else as text: ``0.5``, ``6h``)."""
    from foreshock.config_schema import ModelEntryTable

    tables: dict[str, dict] = {}
    for model, *pairs in given:
        table = tables.setdefault(model, {})
        for pair in pairs:
            key, _, text = pair.partition("=")
            try:
                table[key.strip()] = tomllib.loads(f"v = {text}")["v"]
            except tomllib.TOMLDecodeError:
                table[key.strip()] = text.strip()
        try:
            ModelEntryTable.model_validate(table)
        except ValueError as exc:
            raise SystemExit(f"--model-entry {model}: {exc}") from None
    return tables


def row(model: str, horizon: str, enter_risk: float, enter_for: str, entry: str, point: dict) -> str:
    def num(key: str, digits: int = 2) -> str:
        value = point.get(key)
        return "-" if value is None else f"{value:.{digits}f}"

    return (
        f"| {model} | {horizon} | {enter_risk:g} | {enter_for} | {entry} | {point['alerts']} | {point['true_alerts']} "
        f"| {num('precision')} | {num('precision_per_unit')} | {point['caught']} of {point['failures']} "
        f"| {num('recall_with_precursor')} | {point.get('early_alerts', '-')} | {num('gpu_hours_saved', 0)} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backtest", type=Path, required=True, help="a backtest's output directory")
    parser.add_argument("--data-dir", type=Path, required=True, help="the data directory it ran on")
    parser.add_argument("--config", type=Path, help="the configuration it ran with (default: built-in)")
    parser.add_argument("--ground-truth", type=Path, help="the simulator's ground_truth.parquet")
    parser.add_argument("--models", nargs="+", default=["gbm"])
    parser.add_argument("--enter-risk", nargs="+", type=float, default=[0.5])
    parser.add_argument("--enter-for", nargs="+", default=["1h", "6h"])
    parser.add_argument(
        "--second-horizon",
        help='[policy] second_horizon (a horizon the backtest scored; "": none; default: the configuration\'s)',
    )
    parser.add_argument("--second-enter-risk", nargs="+", type=float, default=[0.5])
    parser.add_argument(
        "--second-only", action="store_true", help="[policy] second_only: only the second horizon's risk enters"
    )
    parser.add_argument(
        "--decision-enter-risk",
        type=float,
        help="[policy] decision_enter_risk: beside a second way in, the decision risk's own threshold",
    )
    parser.add_argument(
        "--decision-enter-for", help="[policy] decision_enter_for: beside a second way in, its own hold"
    )
    parser.add_argument(
        "--alert-window",
        help="[backtest] alert_window W (default: the configuration's); the horizon itself counts a catch "
        "only where the alert is also true",
    )
    parser.add_argument(
        "--model-entry",
        nargs="+",
        action="append",
        metavar="MODEL KEY=VALUE",
        help="a model's own entry ([policy.models.<name>]), e.g. cox decision_enter_risk=0.5 decision_enter_for=6h "
        "second_enter_risk=0.5; repeat for more models",
    )
    parser.add_argument("--json", type=Path, help="also write the points printed, as a JSON list")
    args = parser.parse_args()
    written = []
    seconds = args.second_enter_risk if args.second_horizon else [None]
    print(
        "| model | horizon | enter_risk | enter_for | entry | alerts | true | precision | per unit | caught "
        "| recall (precursor) | early | GPU-hours saved |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for enter_for in args.enter_for:
        for enter_risk in args.enter_risk:
            for second_risk in seconds:
                judged = judge(args, enter_risk, enter_for, second_risk)
                own = judged["settings"].get("model_entries", {})  # models at an entry of their own
                for model, horizons in judged["models"].items():
                    for horizon, metrics in horizons.items():
                        point = metrics["operating_points"].get("policy")
                        if point:
                            entry = point.get("entry", "-")
                            if model in own:  # its own entry (the decision horizon's two ways in, if any)
                                entry = f"own: {own[model]}" if "entry" in point else f"{entry} (own)"
                            print(row(model, horizon, enter_risk, enter_for, entry, point), flush=True)
                            settings = {"enter_risk": enter_risk, "enter_for": enter_for, "second": second_risk}
                            settings["own_entry"] = own.get(model)
                            written.append({"model": model, "horizon": horizon, **settings, "point": point})
    if args.json:
        args.json.write_text(json.dumps(written, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
