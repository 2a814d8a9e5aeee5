"""Hazard-rate features and labels: pure Polars, no Prefect.

- :mod:`features.build`: ``build_features(lake_dir, config, start, end, shards)`` (in
  memory) and the staged passes the flow runs (``stage_shard``, ``finalize_day``,
  ``update_features``).
- :mod:`features.store`: ``scan_features(config)``, ``write_features(...)``.
- :mod:`features.labels`: ``add_labels(frame, failures, horizons)``,
  ``survival_intervals(frame, failures, snapshot_every)``.
- :mod:`features.rollups`, :mod:`features.windows`, :mod:`features.context`,
  :mod:`features.peers`, :mod:`features.xid`, :mod:`features.spec`: the pieces.

See ``features/README.md`` for every feature's definition.
"""
