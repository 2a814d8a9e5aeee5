"""The Parquet lake under ``<data_dir>/lake/``: hive-partitioned canonical tables, merged
atomically and idempotently.  Import from the module that holds what you use:

* :mod:`~foreshock.lake.atomic`: files written whole or not at all, and a killed writer's
  temp files removed;
* :mod:`~foreshock.lake.locks`: writer locks (the lake's, a directory's) and their hand-over
  to threads and worker processes;
* :mod:`~foreshock.lake.layout`: where rows live (tables, partitions by date and shard, the
  shard count);
* :mod:`~foreshock.lake.columns`: column operations the lake and ingest share (runs of equal
  values, stable orders);
* :mod:`~foreshock.lake.split`: rows split into their partitions, in partition order;
* :mod:`~foreshock.lake.merge`: new rows merged in (append-only telemetry, upserted inventory);
* :mod:`~foreshock.lake.changes`: the change log of partitions that received rows;
* :mod:`~foreshock.lake.latest`: the latest reading of each series of the partition files
  this process wrote;
* :mod:`~foreshock.lake.read`: scans, reads and the tables' summary.
"""
