"""A rule beside the trees for a precursor too rare to learn: the spike guard.

Some failures announce themselves with a signal no healthy unit shows, yet are too few in a
training period for the trees to give them a risk that drains: a GPU whose power supply is
failing spreads its power at a steady load (``power_w_jitter_max_1d``, the largest hourly
power jitter of the last day) far beyond any healthy GPU, but a fold of a fleet failing at a
real rate holds 7 to 13 such failures among some 400,000 rows, and their 24-hour risk stays
at 0.03 to 0.5 (docs/gpu_real_rate.md, *The spike guard*).

The guard learns, per listed feature, one limit from the training rows: the largest value of
any row whose unit did not fail within ``quiet`` after it (failures known at the cutoff; a
row less than ``quiet`` before the cutoff has an open outlook and is left out).  A scored
row above a feature's limit is past anything a unit that stayed healthy showed, so its risk
for horizon ``h`` is raised to at least the share of the training rows above the limit that
failed within ``h`` (rows whose ``h`` outlook is closed; smoothed ``(k + 1) / (n + 2)``).
The model's risk is kept wherever it is higher.  A feature with no training row above its
limit (or no healthy one) guards nothing.

An explanation of a raised row names the guarded feature first (its value, and the log-odds
the guard added over the model's risk as its contribution).  The limits and risks are plain
numbers saved with the model (``gbm.json``); nothing is fitted at scoring time.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

import numpy as np
import polars as pl

from foreshock.contract import TIME_TO_FAILURE, UTC_TS
from foreshock.durations import parse_duration
from foreshock.models.estimators.base import EXPLANATION_SCHEMA
from foreshock.models.estimators.calibration import logit

logger = logging.getLogger(__name__)


@dataclass
class Limit:
    """One guarded feature: its limit and the risk per horizon of a row above it."""

    feature: str
    limit: float
    risks: dict[str, float]
    rows_above: int

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, state: dict) -> Limit:
        risks = {str(h): float(r) for h, r in state["risks"].items()}
        return cls(str(state["feature"]), float(state["limit"]), risks, int(state["rows_above"]))


@dataclass
class SpikeGuard:
    """The limits of the guarded features (see the module docstring)."""

    limits: list[Limit] = field(default_factory=list)

    @classmethod
    def fit(
        cls, rows: pl.DataFrame, features: list[str], horizons: list[str], until: datetime, quiet: str
    ) -> tuple[SpikeGuard, list[str]]:
        """The guard of ``features`` from training ``rows`` (``ts``, :data:`TIME_TO_FAILURE` and
        the features) labelled at ``until``, and notes on what it guards."""
        quiet_h = parse_duration(quiet) / timedelta(hours=1)

        def fails_within(hours: float) -> pl.Expr:
            ttf = pl.col(TIME_TO_FAILURE)
            return ttf.is_not_null() & (ttf >= 0) & (ttf <= hours)

        def closed(hours: float) -> pl.Expr:  # the row's outlook over ``hours`` is known at ``until``
            return pl.col("ts") <= pl.lit(until) - pl.duration(hours=hours)

        healthy = rows.filter(closed(quiet_h) & ~fails_within(quiet_h))
        limits, notes = [], []
        for name in features:
            highest = healthy.get_column(name).drop_nulls().drop_nans().max()
            if highest is None:
                notes.append(f"spike guard: {name} has no healthy training row: not guarded")
                continue
            above = rows.filter(pl.col(name) > highest)
            if above.height == 0:  # no training row past it: nothing says what a row above means
                notes.append(f"spike guard: no training row of {name} above {highest:.4g}: not guarded")
                continue
            risks = {}
            for h in horizons:
                hours = parse_duration(h) / timedelta(hours=1)
                known = above.filter(closed(hours))
                failed = known.filter(fails_within(hours)).height
                risks[h] = (failed + 1) / (known.height + 2)
            limits.append(Limit(name, float(highest), risks, above.height))
            shown = ", ".join(f"{h} {r:.2f}" for h, r in risks.items())
            notes.append(
                f"spike guard: {name} above {highest:.4g} (the most any unit not failing within {quiet} showed in "
                f"training; {above.height} training rows above it) raises the risk to at least {shown}"
            )
        for note in notes:
            logger.info("gbm %s", note)
        return cls(limits), notes

    def raise_risks(self, frame: pl.DataFrame, risks: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``risks`` (per horizon, one per row of ``frame``) raised where a guarded feature is
        above its limit."""
        for above, limit in self.above(frame):
            if above.any():
                for h, floor in limit.risks.items():
                    if h in risks:
                        risks[h] = np.where(above, np.maximum(risks[h], floor), risks[h])
        return risks

    def explanations(self, frame: pl.DataFrame, horizon: str, model_risk: np.ndarray) -> pl.DataFrame:
        """Where the guard raised ``horizon``'s risk above the model's: the guarded feature as a
        signal (``EXPLANATION_SCHEMA``), its contribution the log-odds the guard added."""
        parts = []
        for above, limit in self.above(frame):
            floor = limit.risks.get(horizon)
            raised = above & (model_risk < floor) if floor is not None else np.zeros(frame.height, dtype=bool)
            if raised.any():
                lift = logit(floor) - logit(model_risk[raised])
                rows = frame.filter(pl.Series(raised))
                parts.append(
                    pl.DataFrame(
                        {
                            "unit_id": rows.get_column("unit_id"),
                            "ts": rows.get_column("ts").cast(UTC_TS),
                            "horizon": [horizon] * rows.height,
                            "signal": [limit.feature] * rows.height,
                            "value": rows.get_column(limit.feature).cast(pl.Float64),
                            "contribution": lift,
                        },
                        schema=EXPLANATION_SCHEMA,
                    )
                )
        return pl.concat(parts) if parts else pl.DataFrame(schema=EXPLANATION_SCHEMA)

    def above(self, frame: pl.DataFrame) -> list[tuple[np.ndarray, Limit]]:
        """For each limit whose feature ``frame`` has: which rows are above it."""
        found = []
        for limit in self.limits:
            if limit.feature in frame.columns:
                values = frame.get_column(limit.feature).cast(pl.Float64).fill_nan(None).to_numpy()
                found.append((np.nan_to_num(values, nan=-np.inf) > limit.limit, limit))
        return found

    def state(self) -> list[dict]:
        return [limit.to_dict() for limit in self.limits]

    @classmethod
    def from_state(cls, state: list[dict] | None) -> SpikeGuard:
        return cls([Limit.from_dict(item) for item in state or []])
