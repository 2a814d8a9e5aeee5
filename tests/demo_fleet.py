"""One small demo fleet run through the whole pipeline, shared by the tests that read a
finished data directory (the notebooks, the fleet report page).

The same steps as ``foreshock demo`` (simulate, ingest, features, backtest, train, review,
score, publish, replay), on 64 GPUs for 14 days with the failure rate raised so a short
history still holds about twenty failures.  Built once per test session: about a minute
or two on 2 cores.
"""

from __future__ import annotations

from pathlib import Path

DEMO_UNITS = 64
DEMO_DAYS = 14
DEMO_SEED = 11
DEMO_FAILURE_RATE = 20.0  # per 1,000 unit-days
# Its own registered model name: the session's MLflow store is shared with other tests.
DEMO_CONFIG = '[models]\nname = "foreshock-demo-fleet"\n'


def demo_config_file(data_dir: Path) -> Path:
    """The configuration the demo data was built with (``foreshock.toml`` beside ``data_dir``):
    run a notebook or a command from that directory, or pass it as ``--config``."""
    return Path(data_dir).parent / "foreshock.toml"


def build_demo_data(data_dir: Path) -> Path:
    """Run the pipeline into ``data_dir``; returns it (raises if a step fails)."""
    from foreshock.pipelines.cli import main
    from foreshock.simulate import simulate_fleet

    data_dir = Path(data_dir)
    config_file = demo_config_file(data_dir)
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(DEMO_CONFIG)
    sim = data_dir / "raw" / "sim"
    simulate_fleet(sim, units=DEMO_UNITS, days=DEMO_DAYS, seed=DEMO_SEED, failures_per_1000_unit_days=DEMO_FAILURE_RATE)
    truth = str(sim / "ground_truth.parquet")
    base = ["--config", str(config_file), "--data-dir", str(data_dir)]
    steps = [
        ["ingest", "--path", str(sim), "--timezone", "UTC"],
        ["features"],
        ["backtest", "--ground-truth", truth],
        ["train", "--ground-truth", truth, "--backtest", str(data_dir / "backtest")],
        ["review"],
        ["score"],
        ["publish", "--allow-stale"],  # the simulated fleet ended days ago
        ["replay", "--ground-truth", truth],
    ]
    for argv in steps:
        rc = main([*base, *argv])
        if rc != 0:
            raise RuntimeError(f"demo data: foreshock {' '.join(argv)} exited with {rc}")
    return data_dir
