"""What foreshock logs to MLflow, and where MLflow keeps it.

Every training run (:func:`log_training`) logs its parameters (configuration, features
used, data range), the backtest metrics at each operating point, the training plots
(:mod:`foreshock.models.registry.training_report`) and the models: each LightGBM booster with
``mlflow.lightgbm`` and the whole :class:`~foreshock.models.estimators.bundle.RiskBundle` as a pyfunc
written as models-from-code (``foreshock/models/registry/mlflow_pyfunc.py``), so loading a version
never unpickles a class.  Once everything is logged the bundle is registered as the new
``challenger`` (:func:`foreshock.models.registry.registry.register_version`).  A review logs its
report and the metrics of both versions (:func:`log_review`).

Where things are stored: ``MLFLOW_TRACKING_URI`` when set (a real ``mlflow server``),
else a SQLite store ``<data_dir>/mlflow/mlflow.db`` with artifacts beside it in
``<data_dir>/mlflow/artifacts`` (the experiment is created with that artifact location;
MLflow's own default would be ``./mlruns`` under whatever the working directory is).
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import polars as pl

from foreshock.config import mlflow_tracking_uri
from foreshock.models.estimators.base import decision_horizon
from foreshock.models.estimators.bundle import boosters_of
from foreshock.models.evaluation.backtest_report import render_markdown
from foreshock.models.evaluation.lead_times import lead_times_at_budget
from foreshock.models.registry.model_env import (
    WHEEL_ARTIFACT,
    bundle_requirements,
    foreshock_wheel,
    pinned_requirements,
)
from foreshock.models.registry.registry import register_version
from foreshock.models.registry.sqlite_store import create_sqlite_store
from foreshock.models.registry.training_report import training_figures
from foreshock.models.registry.trusted_bundle import SOURCE_TAG, TRUSTED_SOURCE, version_tags
from foreshock.redaction import redact_settings

if TYPE_CHECKING:
    from foreshock.models.estimators.bundle import RiskBundle
    from foreshock.models.registry.review import ReviewResult

DEFAULT_EXPERIMENT = "foreshock"
PYFUNC_FILE = Path(__file__).with_name("mlflow_pyfunc.py")
BUNDLE_MODEL_NAME = "risk-bundle"  # logged-model name of the pyfunc inside a run


# --------------------------------------------------------------------------------------
# Where MLflow stores things
# --------------------------------------------------------------------------------------


def tracking_uri(store: Path) -> str:
    """Point the MLflow client at the tracking store (:func:`foreshock.config.mlflow_tracking_uri`
    of ``store``, which is ``Config.mlflow_dir``) and return its URI.  The CLI's
    ``pipelines.runtime.configure_mlflow`` exports the same URI for its flows; this lets
    notebooks and tests use the registry without the pipelines package."""
    import mlflow

    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    uri = mlflow_tracking_uri(store)
    create_sqlite_store(uri, artifact_location(uri))
    mlflow.set_tracking_uri(uri)
    return uri


def artifact_location(uri: str) -> str | None:
    """Where a new experiment keeps its artifacts, for a given tracking URI.

    For a SQLite (or other file-based) store: an ``artifacts`` directory beside the
    database file.  For a tracking server: ``None``, so the server's own artifact root
    (``--artifacts-destination`` / ``--default-artifact-root``) decides.
    """
    parsed = urlparse(uri)
    if parsed.scheme == "sqlite":
        # sqlite:////abs/path.db -> /abs/path.db ; sqlite:///rel.db -> rel.db
        db_path = Path(unquote(uri[len("sqlite:///") :]))
        return (db_path.resolve().parent / "artifacts").as_uri()
    if parsed.scheme in ("", "file"):
        return (Path(unquote(parsed.path)).resolve() / "artifacts").as_uri()
    return None


def experiment_id(name: str = DEFAULT_EXPERIMENT, store: Path | None = None) -> str:
    """Id of the experiment ``name``, created with its artifacts under the store's directory."""
    import mlflow

    uri = tracking_uri(store) if store is not None else mlflow.get_tracking_uri()
    create_sqlite_store(uri, artifact_location(uri))
    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    try:
        return client.create_experiment(name, artifact_location=artifact_location(uri))
    except Exception:  # created meanwhile by another process: use theirs
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            raise
        return experiment.experiment_id


def experiment_name(config: Any) -> str:
    return str(config.section("models")["experiment"])


# --------------------------------------------------------------------------------------
# What a training run logs
# --------------------------------------------------------------------------------------


def flatten_params(settings: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Configuration as MLflow parameters: ``{"features.windows": "1h,6h,24h,7d", ...}``."""
    params: dict[str, str] = {}
    for key, value in settings.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            params.update(flatten_params(value, f"{name}."))
        elif isinstance(value, (list, tuple)):
            params[name] = ",".join(str(v) for v in value)
        else:
            params[name] = str(value)
    return params


_METRIC_NAME = re.compile(r"[^A-Za-z0-9_\-./ ]+")
# Row fields that name a row of a metrics table rather than hold a measurement.
_ROW_KEYS = ("model", "horizon", "operating_point", "point", "mode", "group", "name")


def flatten_metrics(report: Any, prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a nested backtest report as MLflow metric names.

    Dicts add their key to the name; a list of table rows adds the values of the row's
    naming fields (``model``, ``horizon``, ``operating_point``, ...) so a row of the
    lead-time table becomes ``budget.gbm.72h.recall`` rather than ``3.recall``.
    Booleans, strings and non-finite numbers are not metrics and are skipped.
    """
    metrics: dict[str, float] = {}

    def join(*parts: Any) -> str:
        text = ".".join(str(p) for p in parts if p not in (None, ""))
        return _METRIC_NAME.sub("_", text)

    def walk(node: Any, name: str) -> None:
        if isinstance(node, bool) or node is None:
            return
        if isinstance(node, (int, float)):
            if math.isfinite(float(node)):
                metrics[name] = float(node)
            return
        if isinstance(node, Mapping):
            for key, value in node.items():
                walk(value, join(name, key))
            return
        if isinstance(node, (list, tuple)):
            for index, item in enumerate(node):
                if isinstance(item, Mapping):
                    label = [str(item[k]) for k in _ROW_KEYS if isinstance(item.get(k), str)]
                    rest = {k: v for k, v in item.items() if not (k in _ROW_KEYS and isinstance(v, str))}
                    walk(rest, join(name, *(label or [index])))
                else:
                    walk(item, join(name, index))

    walk(report, prefix)
    return metrics


def backtest_metrics(report: Mapping[str, Any]) -> dict[str, float]:
    """The backtest report as MLflow metrics, e.g. ``gbm.3d.budget.recall``.

    Names are ``<model>.<horizon>.<operating point>.<metric>`` for the lead-time table at
    each operating point and ``<model>.<horizon>.snapshot.<metric>`` for the
    threshold-free metrics (definitions in ``docs/metrics.md``).
    """
    models = report.get("models")
    if not isinstance(models, Mapping):
        return flatten_metrics(report)
    flat: dict[str, float] = {}
    for model, horizons in models.items():
        for horizon, judged in (horizons or {}).items():
            flat.update(flatten_metrics(judged.get("snapshot") or {}, f"{model}.{horizon}.snapshot"))
            for point, values in (judged.get("operating_points") or {}).items():
                flat.update(flatten_metrics(values or {}, f"{model}.{horizon}.{point}"))
    flat.update(flatten_metrics(report.get("scored") or {}, "scored"))
    return flat


def _naive_utc(frame: pl.DataFrame) -> pl.DataFrame:
    """MLflow signatures hold only timezone-naive datetimes: drop the (UTC) zone."""
    return frame.with_columns(
        pl.col(c).dt.replace_time_zone(None)
        for c, dtype in frame.schema.items()
        if isinstance(dtype, pl.Datetime) and dtype.time_zone is not None
    )


def model_input(bundle: RiskBundle, features: pl.DataFrame) -> pl.DataFrame:
    """The columns a bundle scores from: ``unit_id, ts`` and its feature columns."""
    missing = [c for c in ("unit_id", "ts", *bundle.feature_names) if c not in features.columns]
    if missing:
        raise ValueError(f"feature frame lacks columns the model was trained on: {missing[:10]}")
    return features.select("unit_id", "ts", *bundle.feature_names)


def training_inputs(
    bundle: RiskBundle,
    backtest: Any,
    features: pl.DataFrame,
    failures: pl.DataFrame,
    config: Any,
) -> dict[str, Any]:
    """The keyword arguments of :func:`log_training` derived from the training data.

    ``data_range`` (first and last snapshot), ``example`` (the latest five snapshots),
    ``labelled`` (labels known now, for the outcome plots) and ``lead_times`` (caught
    failures of the backtest scores at the drain budget, for the histogram).
    """
    from foreshock.models.estimators.training import labelled_until

    horizon = decision_horizon(config)
    ordered = features.sort("ts")
    scores = getattr(backtest, "scores", None)
    lead_times = None
    if scores is not None and scores.height:
        lead_times = lead_times_at_budget(scores.filter(pl.col("horizon") == horizon), failures, config)
    return {
        "data_range": (ordered["ts"].min(), ordered["ts"].max()),
        "example": ordered.tail(5),
        "labelled": labelled_until(features, failures, list(bundle.horizons)),  # null = outcome open
        "lead_times": lead_times,
    }


@dataclass(frozen=True)
class TrainingRecord:
    """What :func:`log_training` produced: the MLflow run and the registered version."""

    run_id: str
    version: str
    model_name: str

    @property
    def model_uri(self) -> str:
        return f"models:/{self.model_name}/{self.version}"


def log_training(
    bundle: RiskBundle,
    backtest: Any,
    config: Any,
    data_range: tuple[datetime, datetime],
    *,
    example: pl.DataFrame,
    labelled: pl.DataFrame | None = None,
    lead_times: pl.DataFrame | None = None,
) -> TrainingRecord:
    """Log one training run and register its bundle as the new ``challenger``.

    Parameters
    ----------
    bundle
        The trained :class:`~foreshock.models.estimators.bundle.RiskBundle`.
    backtest
        The walk-forward result (``scores``, ``report``, and ``markdown`` when read back
        from its directory) of the same configuration; its report becomes the run's
        metrics, and its Markdown (rendered here when absent) the run's ``report.md``.
    config
        :class:`~foreshock.config.Config`; every section is logged as parameters and
        ``[models] name`` is the registered model.
    data_range
        First and last snapshot time of the data used.
    example
        A few feature rows (``unit_id, ts`` + features): the models' input example, and
        the source of their signatures.
    labelled
        Labelled snapshots (``features.labels.add_labels``) for the outcome plots: PR,
        calibration and survival curves of the backtest scores.  Skipped when ``None``.
    lead_times
        One row per caught failure, ``model, lead_time_h``, for the lead-time histogram.

    Returns
    -------
    TrainingRecord
        The run id and the new version number (a string, as MLflow spells it).
    """
    # Over 80 lines for its docstring; the run's parts (models, evidence, registration) are
    # logged in the order MLflow needs them, the models by _log_boosters and _log_bundle.
    import mlflow

    name = config.model_name
    uri = tracking_uri(config.mlflow_dir)
    client = mlflow.MlflowClient(uri)
    exp_id = experiment_id(experiment_name(config))
    horizon = decision_horizon(config)
    example = model_input(bundle, example).head(5)
    example_pd = _naive_utc(example).to_pandas()
    started = datetime.now(UTC)

    with mlflow.start_run(experiment_id=exp_id, run_name=f"train-{started:%Y%m%dT%H%M%SZ}") as run:
        mlflow.set_tags({"foreshock.kind": "training", "foreshock.model_name": name, SOURCE_TAG: TRUSTED_SOURCE})
        params = flatten_params(redact_settings(config.settings))  # no secret in the tracking store
        params.update(
            {
                "data.start": data_range[0].isoformat(),
                "data.end": data_range[1].isoformat(),
                "bundle.primary": bundle.primary,
                "bundle.models": ",".join(bundle.models),
                "bundle.horizons": ",".join(bundle.horizons),
                "bundle.trained_start": bundle.trained_range[0].isoformat(),
                "bundle.trained_end": bundle.trained_range[1].isoformat(),
                "features.count": str(len(bundle.feature_names)),
            }
        )
        mlflow.log_params(params)
        mlflow.log_dict({"feature_names": list(bundle.feature_names)}, "features_used.json")

        # Models first: MLflow links every metric already logged in the run to each
        # model it logs, one query per metric and model (seconds with hundreds of metrics).
        _log_boosters(bundle, example_pd)
        info = _log_bundle(bundle, example, example_pd)

        report = getattr(backtest, "report", None) or {}
        mlflow.log_metrics(backtest_metrics(report))
        mlflow.log_dict(_jsonable(report), "backtest/report.json")
        if report:
            markdown = getattr(backtest, "markdown", None) or render_markdown(report)
            mlflow.log_text(markdown, "backtest/report.md")

        figures = training_figures(
            bundle, getattr(backtest, "scores", None), horizon, labelled=labelled, lead_times=lead_times
        )
        for fig_name, figure in figures.items():
            mlflow.log_figure(figure, f"plots/{fig_name}.png")

    # Registered only once everything is logged: a version never lacks its evidence.
    tags = {
        "foreshock.data_start": data_range[0].isoformat(),
        "foreshock.data_end": data_range[1].isoformat(),
        "foreshock.primary": bundle.primary,
        "foreshock.horizons": ",".join(bundle.horizons),
        "foreshock.registered_at": started.isoformat(),
        **version_tags(),
    }
    version = register_version(name, info.model_uri, tags, client=client)
    return TrainingRecord(run_id=run.info.run_id, version=version, model_name=name)


def _log_boosters(bundle: RiskBundle, example_pd: Any) -> None:
    """Each LightGBM booster of ``bundle`` as an MLflow LightGBM model, with the signature
    of the example rows it can read (none when the example lacks its columns)."""
    import mlflow
    from mlflow.models import infer_signature

    requirements = pinned_requirements()
    features_pd = example_pd[list(bundle.feature_names)].astype("float64")
    for booster_name, booster in boosters_of(bundle).items():
        columns = booster.feature_name()
        booster_input = features_pd[columns] if set(columns) <= set(features_pd.columns) else None
        signature = (
            infer_signature(booster_input, booster.predict(booster_input)) if booster_input is not None else None
        )
        mlflow.lightgbm.log_model(
            booster,
            name=booster_name,
            signature=signature,
            input_example=booster_input,
            pip_requirements=requirements,
        )


def _log_bundle(bundle: RiskBundle, example: pl.DataFrame, example_pd: Any) -> Any:
    """The whole bundle as a models-from-code pyfunc (:data:`PYFUNC_FILE`) with its saved
    directory, and the foreshock wheel it loads with; returns MLflow's model info."""
    import mlflow
    from mlflow.models import infer_signature

    scores_example = _naive_utc(bundle.score(example))
    with tempfile.TemporaryDirectory(prefix="foreshock-bundle-") as tmp:
        bundle_dir = Path(tmp) / "bundle"
        bundle.save(bundle_dir)
        # The pyfunc's code is foreshock: the model carries the wheel it loads with.
        wheel = foreshock_wheel()
        artifacts = {"bundle": str(bundle_dir)}
        if wheel is not None:
            artifacts[WHEEL_ARTIFACT] = str(wheel)
        return mlflow.pyfunc.log_model(
            name=BUNDLE_MODEL_NAME,
            python_model=str(PYFUNC_FILE),
            artifacts=artifacts,
            signature=infer_signature(example_pd, scores_example.to_pandas()),
            input_example=example_pd,
            pip_requirements=bundle_requirements(wheel),
        )


def _range_params(prefix: str, span: tuple[datetime, datetime] | None) -> dict[str, str]:
    return {f"{prefix}.start": span[0].isoformat(), f"{prefix}.end": span[1].isoformat()} if span else {}


def _metric_key(name: str) -> str:
    """A guardrail's name as an MLflow metric key (letters, digits, ``_``)."""
    return "".join(ch if ch.isalnum() else "_" for ch in name.lower()).strip("_")


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def log_review(result: ReviewResult, config: Any) -> str:
    """Log a written review to MLflow and return the run id.

    Both results of the review: the out-of-sample evidence (the challenger's refit before
    the window: its training range as params; both versions' window metrics; the bootstrap
    intervals as ``<role>.<metric>.{estimate,low,high}`` metrics; each guardrail as
    ``guardrail.<name>`` 1/0; ``review/intervals.json``) and the refit that a promotion
    makes champion (the registered challenger's run id and all-history training range),
    besides the decision tags, the window, the report files and plots.
    """
    import mlflow

    exp_id = experiment_id(experiment_name(config))
    champion = result.champion.version if result.champion else "none"
    with mlflow.start_run(experiment_id=exp_id, run_name=f"review-v{result.challenger.version}-vs-{champion}") as run:
        mlflow.set_tags(
            {
                "foreshock.kind": "review",
                "foreshock.model_name": result.model_name,
                "foreshock.challenger": result.challenger.version,
                "foreshock.champion": champion,
                "foreshock.decision": result.decision,
                "foreshock.promoted": str(result.promoted).lower(),
                "foreshock.refit_run_id": result.challenger.run_id,
            }
        )
        mlflow.log_params(
            {
                "window.start": result.window[0].isoformat(),
                "window.end": result.window[1].isoformat(),
                "horizon": result.horizon,
                **_range_params("challenger_fit", result.challenger.trained_range),
                **_range_params("refit", result.refit_range),
                **{f"review.{k}": str(v) for k, v in config.section("review").items()},
            }
        )
        bounds = {
            f"{role}.{metric}.{end}": value
            for role, metrics in result.intervals.items()
            for metric, interval in metrics.items()
            for end, value in interval.to_dict().items()
            if math.isfinite(value)
        }
        mlflow.log_metrics(bounds)
        mlflow.log_metrics({f"guardrail.{_metric_key(c.name)}": float(c.passed) for c in result.checks})
        mlflow.log_dict(
            {
                "intervals": {r: {m: i.to_dict() for m, i in ms.items()} for r, ms in result.intervals.items()},
                "checks": [
                    {
                        "name": c.name,
                        "rule": c.rule,
                        "challenger": c.challenger,
                        "champion": c.champion,
                        "interval": c.interval.to_dict() if c.interval else None,
                        "passed": c.passed,
                    }
                    for c in result.checks
                ],
            },
            "review/intervals.json",
        )
        for role, evaluation in (("challenger", result.challenger), ("champion", result.champion)):
            if evaluation is not None:
                mlflow.log_metrics({f"{role}.{k}": v for k, v in evaluation.metrics.items() if math.isfinite(v)})
        for path in (result.report_md, result.report_html):
            if path is not None:
                mlflow.log_artifact(str(path), "review")
        for path in result.figures.values():
            mlflow.log_artifact(str(path), "review/plots")
        return run.info.run_id
