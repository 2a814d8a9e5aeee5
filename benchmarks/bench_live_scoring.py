"""Live scoring under the policy's holds: ``foreshock score`` with one 6-hour hold against the
default's own 48-hour hold for the 72-hour risk.

The hourly cycle scores each unit's last snapshots so that the drain policy can read a held
risk (:mod:`foreshock.hold`).  With one hold of 6 hours that is each unit's last 6 hourly
snapshots; with the default (the 72-hour risk enters once it has held 0.6 for 48 hours,
``[policy] decision_enter_for``) it is the last 48.  This times the whole command, each run
its own process, in rounds (one run of each per round, the order turned each round): wall
time, CPU time and peak RSS, medians, and the paired ratios of the two.

It needs a registered champion and a feature store: a ``make demo`` data directory has both.
``--features`` scores another fleet's feature store with that champion (a 4,096-GPU fleet
of ``benchmarks/evaluate_models.py``, for the size the cycle meets at scale): it is linked
into a scratch data directory that reads the demo's MLflow store.

Usage::

    uv run python benchmarks/bench_live_scoring.py --data-dir data
    uv run python benchmarks/bench_live_scoring.py --data-dir /tmp/demo \\
        --features /tmp/foreshock-evaluate/gpu-real-rate/features --repeat 3
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from rounds import child_usage, in_rounds, paired, typical  # noqa: E402

CLI = [sys.executable, "-P", "-c", "import sys; from foreshock.pipelines.cli import main; sys.exit(main())"]
# The policy's environment overrides of each variant (FORESHOCK_<SECTION>_<KEY>).
VARIANTS = {
    "one 6 h hold": {"FORESHOCK_POLICY_SECOND_ONLY": "true"},
    "default (72 h held 48 h)": {},
}


def scratch_dir(data_dir: Path, features: Path, into: Path) -> tuple[Path, dict]:
    """A data directory whose feature store is ``features`` (linked) and whose registry is
    ``data_dir``'s MLflow store (through ``MLFLOW_TRACKING_URI``)."""
    (into / "features").symlink_to(features.resolve(), target_is_directory=True)
    return into, {"MLFLOW_TRACKING_URI": f"sqlite:///{(data_dir / 'mlflow' / 'mlflow.db').resolve()}"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, required=True, help="a data directory with a champion")
    parser.add_argument("--features", type=Path, help="another feature store to score with that champion")
    parser.add_argument("--config", type=Path, help="the configuration (default: built-in)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not (args.data_dir / "mlflow" / "mlflow.db").is_file():
        raise SystemExit(f"{args.data_dir}: no MLflow store (mlflow/mlflow.db): run `make demo` first")
    with tempfile.TemporaryDirectory(prefix="live-scoring-") as tmp:
        data_dir, extra = (
            (args.data_dir, {}) if args.features is None else scratch_dir(args.data_dir, args.features, Path(tmp))
        )
        config = ["--config", str(args.config)] if args.config else []
        base = {**os.environ, **extra, "PYTHONPATH": str(ROOT)}

        def run(kind: str) -> dict:
            result = child_usage(
                [*CLI, *config, "--data-dir", str(data_dir), "-q", "score"], {**base, **VARIANTS[kind]}
            )
            if result["returncode"] != 0:
                raise SystemExit(f"{kind}: foreshock score exited {result['returncode']}:\n{result['stderr'][-2000:]}")
            return result

        runs = in_rounds(list(VARIANTS), run, args.repeat)
    fleet = args.features or args.data_dir / "features"
    print(f"foreshock score on {fleet}, {args.repeat} rounds (medians; peak RSS the largest):\n")
    print("| policy | wall (s) | CPU (s) | peak RSS (MB) | wall range (s) |")
    print("|---|---|---|---|---|")
    for kind, results in runs.items():
        t = typical(results, "peak_rss_mb")
        print(
            f"| {kind} | {t['seconds']:.1f} | {t['cpu']:.1f} | {t['peak_rss_mb']:.0f} "
            f"| {t['runs'][1]:.1f}-{t['runs'][2]:.1f} |"
        )
    one, default = (runs[k] for k in VARIANTS)
    print(
        f"\nthe default against one hold, paired over rounds: wall {paired(default, one, 'seconds'):.2f}x, "
        f"CPU {paired(default, one, 'cpu'):.2f}x, peak RSS {paired(default, one, 'peak_rss_mb'):.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
