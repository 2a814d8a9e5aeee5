"""What every risk model shares: the estimator protocol, feature selection, output layout.

A risk model follows the scikit-learn / lifelines convention: hyperparameters go to the
constructor, ``fit`` learns state stored in attributes ending in ``_``, and the fitted
model answers :meth:`RiskModel.predict_risk` (P(fail within horizon) per snapshot) and
:meth:`RiskModel.explain` (the signals behind each risk).  Models are saved as plain JSON
plus the library's native model files, never as pickles of our classes.

Frames are Polars at every public boundary; lifelines and scikit-learn see pandas or
NumPy only inside a model.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
import polars as pl

from foreshock.contract import (
    SNAPSHOT_CONTEXT_COLUMNS,
    SNAPSHOT_KEY,
    UTC_TS,
    is_label_column,
)
from foreshock.durations import format_duration, parse_duration, spelled_as
from foreshock.features.labels import AT_FAILURE, CENSORED_AT

# Per-row training weight the training loader adds (models.dataset); never a model input.
SAMPLE_WEIGHT = "sample_weight"
# Columns the training loader may add to a feature frame; never model inputs.
TRAINING_COLUMNS = (SAMPLE_WEIGHT, CENSORED_AT, AT_FAILURE)

SCORE_SCHEMA = {
    "unit_id": pl.String(),
    "ts": UTC_TS,
    "model": pl.String(),
    "horizon": pl.String(),
    "risk": pl.Float64(),
}
RISK_SCHEMA = {k: v for k, v in SCORE_SCHEMA.items() if k != "model"}
EXPLANATION_SCHEMA = {
    "unit_id": pl.String(),
    "ts": UTC_TS,
    "horizon": pl.String(),
    "signal": pl.String(),
    "value": pl.Float64(),
    "contribution": pl.Float64(),
}


@runtime_checkable
class RiskModel(Protocol):
    """The estimator interface every foreshock risk model implements."""

    kind: str
    horizons: list[str]

    def fit(self, frame: pl.DataFrame, failures: pl.DataFrame, *, until: datetime | None = None) -> RiskModel:
        """Learn from feature snapshots and the failures known at ``until``."""
        ...

    def predict_risk(self, frame: pl.DataFrame) -> pl.DataFrame:
        """``unit_id, ts, horizon, risk`` for every row of ``frame`` and every horizon."""
        ...

    def explain(self, frame: pl.DataFrame, top: int = 3) -> pl.DataFrame:
        """``unit_id, ts, horizon, signal, value, contribution``: the ``top`` signals per row."""
        ...

    def save(self, path: Path) -> None:
        """Write the fitted state into the directory ``path``."""
        ...


def horizon_names(horizons: list[str | timedelta]) -> list[str]:
    """Horizon spellings as the user wrote them in ``[labels] horizons`` (``"24h"``,
    ``"72h"``, ``"14d"``), validated; timedeltas are spelled by ``format_duration``.

    Scores, reports and the drain policy use this spelling; label columns use
    :func:`foreshock.contract.label_column`.
    """
    names = []
    for h in horizons:
        parse_duration(h)  # raises a clear error on a bad spelling
        names.append(format_duration(h) if isinstance(h, timedelta) else str(h).strip())
    return names


def horizon_hours(horizon: str | timedelta) -> float:
    return parse_duration(horizon).total_seconds() / 3600.0


def frame_feature_columns(frame: pl.DataFrame) -> list[str]:
    """Every numeric column of a snapshot frame that is not a key, context, label, label
    weight or training column (architecture.md): what a model may learn from."""
    excluded = {*SNAPSHOT_KEY, *SNAPSHOT_CONTEXT_COLUMNS, *TRAINING_COLUMNS}
    return [
        name
        for name, dtype in frame.schema.items()
        if name not in excluded and not is_label_column(name) and dtype.is_numeric()
    ]


# A windowed feature's name: ``<metric>_<kind>_<window>`` (``ecc_sbe_volatile_total_increase_6h``).
_WINDOWED = re.compile(r"^(?P<metric>.+)_(?P<kind>increase|count|max)_(?P<window>\d+(?:\.\d+)?[smhdw])$")


def windowed_columns(names: list[str], kind: str) -> dict[str, dict[timedelta, str]]:
    """The windowed features of one ``kind`` (``increase``, ``count``, ``max``) among
    ``names``: metric -> window -> column name."""
    out: dict[str, dict[timedelta, str]] = {}
    for name in names:
        match = _WINDOWED.match(name)
        if match and match["kind"] == kind:
            out.setdefault(match["metric"], {})[parse_duration(match["window"])] = name
    return out


def ratio_columns(
    frame: pl.DataFrame,
    names: list[str],
    pattern: re.Pattern,
    inputs: Callable[[re.Match], tuple[str, str]],
    ratio: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> dict[str, np.ndarray]:
    """Derived columns computed from their names: each of ``names`` that ``pattern`` matches
    and whose two ``inputs`` (named from the match) ``frame`` holds, as ``ratio`` of their
    Float32 values (:mod:`.window_shares`, :mod:`.power_spread`)."""
    out: dict[str, np.ndarray] = {}
    for name in names:
        if not (m := pattern.match(name)):
            continue
        first, second = inputs(m)
        if first in frame.columns and second in frame.columns:
            num, den = (frame.get_column(c).cast(pl.Float32).to_numpy() for c in (first, second))
            out[name] = ratio(num, den).astype(np.float32)
    return out


def feature_matrix(frame: pl.DataFrame, names: list[str], dtype: type = np.float64) -> np.ndarray:
    """A matrix of ``names`` (missing columns are NaN, so old models keep working on a
    frame where a metric stopped being reported); ``np.float32`` halves the memory."""
    target = pl.Float32 if dtype == np.float32 else pl.Float64
    exprs = [pl.col(n).cast(target) if n in frame.columns else pl.lit(None, dtype=target).alias(n) for n in names]
    if not names:
        return np.zeros((frame.height, 0), dtype=dtype)
    return frame.select(exprs).to_numpy().astype(dtype, copy=False)


def monotone_in_horizon(risks: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Risk per horizon made non-decreasing in the horizon's length (a running maximum from
    the shortest horizon up): failing within 24 h implies failing within 72 h, so
    P(fail within 24 h) > P(fail within 72 h) is never reported."""
    out, running = {}, None
    for h in sorted(risks, key=horizon_hours):
        running = risks[h] if running is None else np.maximum(running, risks[h])
        out[h] = running
    return out


def monotone_risk(risk: pl.DataFrame) -> pl.DataFrame:
    """Long-format risk (``unit_id, ts, horizon, risk``) made non-decreasing in the horizon
    for every unit and snapshot (:func:`monotone_in_horizon` for any model's output)."""
    horizons = risk.get_column("horizon").unique().to_list()
    if len(horizons) < 2:
        return risk
    order = {h: horizon_hours(h) for h in horizons}
    return (
        risk.with_row_index("_row")
        .with_columns(pl.col("horizon").replace_strict(order, return_dtype=pl.Float64).alias("_hours"))
        .sort("unit_id", "ts", "_hours")
        .with_columns(pl.col("risk").cum_max().over("unit_id", "ts"))
        .sort("_row")
        .drop("_row", "_hours")
    )


def sample_weights(frame: pl.DataFrame) -> np.ndarray:
    """Each row's training weight: ``SAMPLE_WEIGHT`` of a subsampled frame (a healthy row
    stands for the rows it was drawn from), 1 where the frame is not subsampled."""
    if SAMPLE_WEIGHT not in frame.columns:
        return np.ones(frame.height)
    return frame.get_column(SAMPLE_WEIGHT).cast(pl.Float64).fill_null(1.0).to_numpy()


def require_columns(frame: pl.DataFrame, columns: tuple[str, ...] | list[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what}: missing column(s) {missing}; have {frame.columns[:12]}...")


def risk_frame(frame: pl.DataFrame, horizon: str, risk: np.ndarray) -> pl.DataFrame:
    """Long-format risk rows for one horizon."""
    return pl.DataFrame(
        {
            "unit_id": frame.get_column("unit_id"),
            "ts": frame.get_column("ts").cast(UTC_TS),
            "horizon": pl.Series([horizon] * frame.height, dtype=pl.String),
            "risk": pl.Series(np.clip(risk, 0.0, 1.0), dtype=pl.Float64),
        },
        schema=RISK_SCHEMA,
    )


def top_contributions(
    frame: pl.DataFrame,
    horizon: str,
    names: list[str],
    values: np.ndarray,
    contributions: np.ndarray,
    top: int,
) -> pl.DataFrame:
    """The ``top`` largest contributions per row (largest first: what pushes risk *up*)."""
    n_rows, n_features = contributions.shape
    if n_rows == 0 or n_features == 0 or top <= 0:
        return pl.DataFrame(schema=EXPLANATION_SCHEMA)
    k = min(top, n_features)
    order = np.argsort(-contributions, axis=1, kind="stable")[:, :k]
    rows = np.repeat(np.arange(n_rows), k)
    cols = order.ravel()
    return pl.DataFrame(
        {
            "unit_id": frame.get_column("unit_id").gather(rows),
            "ts": frame.get_column("ts").cast(UTC_TS).gather(rows),
            "horizon": [horizon] * len(rows),
            "signal": np.asarray(names, dtype=object)[cols].tolist(),
            "value": values[rows, cols],
            "contribution": contributions[rows, cols],
        },
        schema=EXPLANATION_SCHEMA,
    )


def config_horizons(config) -> list[str]:
    """``[labels] horizons`` as written in the configuration (``["24h", "72h"]``)."""
    return horizon_names(list(config.settings["labels"]["horizons"]))


def decision_horizon(config) -> str:
    """``[models] horizon`` spelled as in ``[labels] horizons`` (and so in the scores).

    Raises
    ------
    ValueError
        When the decision horizon is not one of the label horizons.
    """
    wanted = config.section("models").get("horizon")
    horizons = config_horizons(config)
    if not wanted:
        return horizons[-1]
    if spelled := spelled_as(wanted, horizons):
        return spelled
    raise ValueError(f"[models] horizon = {wanted!r} is not one of [labels] horizons {horizons}")
