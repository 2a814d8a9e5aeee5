"""What a review reads of the feature store: outcomes on keys, the window batch by batch.

A review (:mod:`foreshock.models.registry.review`) needs every snapshot's outcome as known
now (to place its window), the window's rows to score, the history before the window to
refit the challenger on and to bind the ranked rules to.  None of it needs the store as one
frame, which on a long history does not fit in memory:

* the outcomes are computed on the keys alone (``unit_id, ts, life, life_start``: a few
  bytes a row), by the training's rule (:func:`foreshock.models.estimators.training.labelled_until`);
* the window is scored in batches of ``[backtest] score_batch_rows`` rows, as the backtest
  scores its folds (:meth:`FeatureSource.batches
  <foreshock.models.estimators.dataset.FeatureSource.batches>`); only the scores are kept;
* the history is a view of the store that reads nothing from the window on
  (:meth:`~foreshock.models.estimators.dataset.FeatureSource.before`): the refit reads its
  training sample from it, the rules the few columns their limits are learnt from.

A labelled frame in memory (tests, notebooks) is read through the same interface.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import polars as pl

from foreshock.contract import UTC_TS, is_label_column, label_column
from foreshock.models.estimators.dataset import KEYS, FeatureSource, FrameSource
from foreshock.models.estimators.training import labelled_until

# The key-like columns the outcomes are computed from and the plots keep.
OUTCOME_KEYS = ("unit_id", "ts", "life", "life_start")


@dataclass
class ReviewWindow:
    """The review window's snapshots whose outcome is known.

    Attributes
    ----------
    source
        The unlabelled feature snapshots.
    labels
        ``unit_id, ts`` (+ ``life``), the labels and ``time_to_failure_h`` of the window's
        rows with a known outcome, sorted by unit and time.
    span
        First and last snapshot time of the window (both included).
    batch_rows
        Rows scored at a time.
    """

    source: FeatureSource | FrameSource
    labels: pl.DataFrame
    span: tuple[datetime, datetime]
    batch_rows: int

    def score(self, scorer: Callable[[pl.DataFrame], pl.DataFrame], order: list[str]) -> pl.DataFrame:
        """``scorer`` applied to the window's rows one batch at a time, the batches' results
        concatenated and sorted by ``order`` (the order of one call on the whole window)."""
        keys = self.labels.select(list(KEYS))
        parts = []
        end = self.span[1] + timedelta(microseconds=1)
        for batch in self.source.batches(self.span[0], end, self.batch_rows):
            rows = batch.join(keys, on=list(KEYS), how="semi")
            if rows.height:
                parts.append(scorer(rows))
        if not parts:
            raise ValueError("no scores to measure on the review window")
        return pl.concat(parts).sort(order)


@dataclass
class ReviewData:
    """The feature snapshots a review reads, and every snapshot's outcome known now.

    Attributes
    ----------
    source
        The feature store (or an unlabelled frame in memory).
    labels
        Per snapshot ``unit_id, ts`` (+ ``life``), ``fails_within_<h>`` per horizon (null
        while unresolved) and ``time_to_failure_h``, sorted by unit and time.
    batch_rows
        Window rows scored at a time (``[backtest] score_batch_rows``).
    """

    source: FeatureSource | FrameSource
    labels: pl.DataFrame
    batch_rows: int

    @classmethod
    def from_store(
        cls, source: FeatureSource | FrameSource, failures: pl.DataFrame, horizons: list[str], batch_rows: int
    ) -> ReviewData:
        """Outcomes of every stored snapshot from its keys (no feature is read here)."""
        wanted = [c for c in OUTCOME_KEYS if c in source.schema]
        keys = source.scan().select(wanted).collect(engine="streaming").sort(list(KEYS))
        return cls(source, labelled_until(keys, failures, horizons), batch_rows)

    @classmethod
    def from_labelled(cls, labelled: pl.DataFrame, batch_rows: int) -> ReviewData:
        """A frame labelled by ``labelled_until`` (held in memory: small fleets, tests)."""
        labels = [c for c in labelled.columns if c in OUTCOME_KEYS or is_label_column(c)]
        features = labelled.drop([c for c in labelled.columns if is_label_column(c)])
        return cls(FrameSource(features), labelled.select(labels), batch_rows)

    def window(self, span: tuple[datetime, datetime], horizon: str) -> ReviewWindow:
        """The snapshots of ``span`` (both ends included) whose ``horizon`` outcome is known."""
        label = label_column(horizon)
        start, end = (pl.lit(t).cast(UTC_TS) for t in span)
        labels = self.labels.filter(pl.col("ts").is_between(start, end) & pl.col(label).is_not_null())
        return ReviewWindow(self.source, labels.drop("life_start", strict=False), span, self.batch_rows)

    def history(self, cut: datetime) -> FeatureSource | FrameSource:
        """The snapshots taken before ``cut`` (nothing later is ever read from the view)."""
        return self.source.before(cut)
