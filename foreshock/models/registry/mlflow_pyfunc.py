"""The MLflow pyfunc for a :class:`~foreshock.models.estimators.bundle.RiskBundle` (models-from-code).

MLflow logs this file itself, not a pickle of the class: loading the registered model
executes it and calls :meth:`RiskBundlePyfunc.load_context`, which reads the bundle back
from its saved directory (JSON + LightGBM model text).  So a registered version keeps
loading after the Python class changes, as long as the bundle's saved format does.
The code it runs is foreshock's, so the model is logged with the foreshock wheel and its
pinned requirements (:mod:`foreshock.models.registry.model_env`): a fresh environment that
installs the model's ``requirements.txt`` can load and score it.

``predict`` takes feature snapshots (``unit_id, ts`` + feature columns) and returns the
long risk table ``unit_id, ts, model, horizon, risk`` of every model in the bundle.
MLflow signatures only hold timezone-naive datetimes, so ``ts`` crosses this boundary as
naive UTC both ways; inside foreshock it is ``Datetime("us", "UTC")`` as everywhere.
"""

from __future__ import annotations

from pathlib import Path

import mlflow
import pandas as pd
import polars as pl
from mlflow.pyfunc import PythonModel


class RiskBundlePyfunc(PythonModel):
    """Serve a saved risk bundle: the ``bundle`` artifact is its directory."""

    bundle = None

    def load_context(self, context) -> None:
        from foreshock.models.estimators.bundle import RiskBundle

        self.bundle = RiskBundle.load(Path(context.artifacts["bundle"]))

    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        frame = pl.from_pandas(model_input) if isinstance(model_input, pd.DataFrame) else pl.DataFrame(model_input)
        if "ts" in frame.columns:
            # JSON input (REST serving, input examples) carries timestamps as text or naive.
            ts = frame["ts"]
            if ts.dtype == pl.String:
                frame = frame.with_columns(pl.col("ts").str.to_datetime(time_zone="UTC"))
            elif isinstance(ts.dtype, pl.Datetime) and ts.dtype.time_zone is None:
                frame = frame.with_columns(pl.col("ts").dt.replace_time_zone("UTC"))
            frame = frame.with_columns(pl.col("ts").dt.cast_time_unit("us"))
        scores = self.bundle.score(frame)
        return scores.with_columns(pl.col("ts").dt.replace_time_zone(None)).to_pandas()


mlflow.models.set_model(RiskBundlePyfunc())
