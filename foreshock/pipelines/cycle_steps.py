"""The steps of the hourly cycle that do a second of work (score, publish) as plain
functions of plain values (settings, paths as text).

The commands run them directly when no Prefect API is configured (no server, no Prefect
import: seconds saved on a small machine); :mod:`.score_flow` and :mod:`.publish_flow`
wrap them as Prefect tasks for runs a Prefect API records (``foreshock serve``, the demo).
"""

from __future__ import annotations

from pathlib import Path

from foreshock.config import Config
from foreshock.errors import missing
from foreshock.hold import hold_snapshots
from foreshock.pipelines import inputs
from foreshock.pipelines.runtime import stamp


def score_latest(settings: dict) -> str:
    """Score the newest snapshot of every unit with the champion (and the snapshots before
    it that the policy's longest hold spans, for its held risks); returns the path of
    ``scores/latest.parquet``."""
    from foreshock.drain.settings import PolicySettings
    from foreshock.models.registry.registry import load_champion
    from foreshock.models.registry.score_files import write_scores
    from foreshock.models.registry.scoring import live_scores

    config = Config.from_settings(settings)
    champion = load_champion(config.model_name, **trust_settings(config))
    policy = PolicySettings.from_config(config).for_model(champion.bundle.primary)  # the scoring model's entry
    hold, step = policy.enter_for, config.snapshot_every
    holds = policy.entry.holds(hold)  # the decision risk's own hold beside a second way in
    # the last days' partitions only
    snapshots = inputs.feature_source(config).latest(count=max(hold_snapshots(h, step) for h in holds.values()))
    if snapshots.height == 0:
        raise missing("no feature snapshots", config.features_dir, "features")
    scores = live_scores(champion, snapshots, hold=hold, step=step, holds=holds)
    return str(write_scores(scores, config.scores_dir, stamp()))


def trust_settings(config: Config) -> dict:
    """``[registry]`` settings for loading the champion (see models.registry.trusted_bundle)."""
    registry = config.section("registry")
    return {
        "trusted_runs_only": bool(registry["trusted_runs_only"]),
        "trusted_source": str(registry["trusted_source"]),
    }


def publish_outbox(
    settings: dict,
    scores_path: str | None,
    node_states_path: str | None,
    model: str | None = None,
    allow_stale: bool = False,
) -> str:
    """Run the policy on the latest scores and write a new outbox directory."""
    from foreshock.drain.outbox import publish
    from foreshock.drain.slurm import read_sinfo

    config = Config.from_settings(settings)
    node_states = read_sinfo(Path(node_states_path).read_text()) if node_states_path else None
    scores = Path(scores_path) if scores_path else None
    return str(publish(config, scores, node_states=node_states, model=model, allow_stale=allow_stale).directory)
