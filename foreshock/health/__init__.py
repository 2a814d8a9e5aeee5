"""Telemetry health and degradation trends (no Prefect; at the level of features/).

Modules: ``settings`` (``[health]``), ``telemetry`` (findings: telemetry that lies or
stops), ``trends`` (correctable-error and row-remap trends, the watch list), ``features``
(the ``health_*`` model columns behind ``[health] features``), ``report`` (both, read from
a data directory for a publish).  Import from the module.
"""
