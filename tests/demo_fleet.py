"""One small demo fleet run through the whole pipeline, shared by the tests that read a
finished data directory (the notebooks, the fleet report page, serve, the short soak, the
kill tests).

``foreshock demo`` itself (simulate, ingest, lake, features, backtest, train, review, score,
publish, replay), on 64 GPUs for 14 days with the failure rate raised so a short history
still holds about twenty failures.  Built once per test session: about a minute or two on
2 cores.  It is the suite's run of the demo command.
"""

from __future__ import annotations

from pathlib import Path

DEMO_UNITS = 64
DEMO_DAYS = 14
DEMO_SEED = 11
DEMO_FAILURE_RATE = 20.0  # per 1,000 unit-days in service
# Its own registered model name: the session's MLflow store is shared with other tests.
DEMO_CONFIG = '[models]\nname = "foreshock-demo-fleet"\n'


def demo_config_file(data_dir: Path) -> Path:
    """The configuration the demo data was built with (``foreshock.toml`` beside ``data_dir``):
    run a notebook or a command from that directory, or pass it as ``--config``."""
    return Path(data_dir).parent / "foreshock.toml"


def build_demo_data(data_dir: Path) -> Path:
    """Run ``foreshock demo`` into ``data_dir``; returns it (raises if a step fails)."""
    from foreshock.pipelines.cli import main

    data_dir = Path(data_dir)
    config_file = demo_config_file(data_dir)
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(DEMO_CONFIG)
    fleet = ["--units", str(DEMO_UNITS), "--days", str(DEMO_DAYS), "--seed", str(DEMO_SEED)]
    argv = ["--config", str(config_file), "--data-dir", str(data_dir), "demo", *fleet]
    rc = main([*argv, "--failure-rate", str(DEMO_FAILURE_RATE)])
    if rc != 0:
        raise RuntimeError(f"demo data: foreshock {' '.join(argv)} exited with {rc}")
    sim = data_dir / "raw" / "sim"
    assert (sim / "ground_truth.parquet").is_file() and (data_dir / "outbox" / "LATEST").is_file()
    assert (data_dir / "reports" / "replay" / "replay.json").is_file()
    return data_dir
