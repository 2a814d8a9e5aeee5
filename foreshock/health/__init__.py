"""Telemetry health and degradation trends (no Prefect; at the level of features/).

Modules: ``settings`` (``[health]``), ``telemetry`` and ``values`` (findings: telemetry
that lies or stops), ``trends`` (correctable-error and row-remap trends, the watch list),
``report`` (both, read from a data directory for a publish).  Import from the module.  The
``health_*`` model columns behind ``[health] features`` are built with the other features
(``foreshock/features/health_features.py``: features come before this stage).
"""
