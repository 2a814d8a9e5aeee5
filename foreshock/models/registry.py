"""MLflow tracking and model registry for risk bundles: log, register, alias, load.

Every training run logs its parameters (configuration, features used, data range), the
backtest metrics at each operating point, the review plots and the models: each LightGBM
booster with ``mlflow.lightgbm`` and the whole :class:`~models.bundle.RiskBundle` as a
pyfunc written as models-from-code (``models/mlflow_pyfunc.py``), so loading a version
never unpickles a class.  The bundle is registered under ``[models] name``; the new
version gets the alias ``challenger`` and, when the model has no champion yet, also
``champion``.  Scoring loads ``models:/<name>@champion``; rolling back is moving that
alias to an older version (:func:`set_champion`).

Where things are stored: ``MLFLOW_TRACKING_URI`` when set (a real ``mlflow server``),
else a SQLite store ``<data_dir>/mlflow/mlflow.db`` with artifacts beside it in
``<data_dir>/mlflow/artifacts`` (the experiment is created with that artifact location;
MLflow's own default would be ``./mlruns`` under whatever the working directory is).
"""

from __future__ import annotations

import getpass
import json
import math
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import polars as pl

from foreshock.models.trusted_bundle import SOURCE_TAG, check_version, load_trusted_bundle, version_tags

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities.model_registry import ModelVersion

    from foreshock.models.bundle import RiskBundle

CHAMPION = "champion"
CHALLENGER = "challenger"
DEFAULT_EXPERIMENT = "foreshock"
PYFUNC_FILE = Path(__file__).with_name("mlflow_pyfunc.py")
BUNDLE_MODEL_NAME = "risk-bundle"  # logged-model name of the pyfunc inside a run
TRUSTED_SOURCE = "foreshock train"  # the foreshock.source tag of training runs
# What a logged model needs to load.  Listing them skips MLflow's inference, which
# re-imports the model in a subprocess (seconds per model); versions are pinned to the
# ones installed, so a restored environment computes the same risks.
MODEL_PACKAGES = ("mlflow", "lightgbm", "lifelines", "polars", "pandas", "numpy", "scikit-learn", "pyarrow")


def pip_requirements() -> list[str]:
    """``package==version`` of :data:`MODEL_PACKAGES` as installed here."""
    from importlib.metadata import PackageNotFoundError, version

    pinned = []
    for package in MODEL_PACKAGES:
        try:
            pinned.append(f"{package}=={version(package)}")
        except PackageNotFoundError:
            pinned.append(package)
    return pinned


# --------------------------------------------------------------------------------------
# Where MLflow stores things
# --------------------------------------------------------------------------------------


def tracking_uri(data_dir: Path) -> str:
    """The tracking URI in use: ``MLFLOW_TRACKING_URI`` if set, else the embedded store.

    Sets the MLflow client to it (and creates ``<data_dir>/mlflow`` for the embedded
    store).  Mirrors ``pipelines.runtime.configure_mlflow``, which the CLI calls first;
    this copy lets notebooks and tests use the registry without the pipelines package.
    """
    import mlflow

    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        store = Path(data_dir).resolve() / "mlflow"
        store.mkdir(parents=True, exist_ok=True)
        uri = f"sqlite:///{store / 'mlflow.db'}"
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


def experiment_id(name: str = DEFAULT_EXPERIMENT, data_dir: Path | None = None) -> str:
    """Id of the experiment ``name``, created with its artifacts under the store's directory."""
    import mlflow

    uri = tracking_uri(data_dir) if data_dir is not None else mlflow.get_tracking_uri()
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
    return str(config.section("models").get("experiment", DEFAULT_EXPERIMENT))


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


def boosters_of(bundle: RiskBundle) -> dict[str, Any]:
    """The LightGBM boosters inside a bundle, named ``<model>-<horizon>``.

    Looks in each model's attributes for ``lightgbm.Booster`` objects, directly or in a
    dict keyed by horizon (scikit-learn wrappers are unwrapped through ``booster_``).
    """
    import lightgbm

    def as_booster(value: Any) -> Any:
        if isinstance(value, lightgbm.Booster):
            return value
        inner = getattr(value, "booster_", None)
        return inner if isinstance(inner, lightgbm.Booster) else None

    found: dict[str, Any] = {}
    for model_name, model in bundle.models.items():
        for attr, value in sorted(vars(model).items()):
            if (booster := as_booster(value)) is not None:
                found[f"{model_name}-{attr.strip('_')}"] = booster
            elif isinstance(value, Mapping):
                for key, item in value.items():
                    if (booster := as_booster(item)) is not None:
                        found[f"{model_name}-{key}"] = booster
    return found


def feature_importance(bundle: RiskBundle) -> dict[str, float]:
    """Total split gain of each feature, summed over the primary model's boosters."""
    total: dict[str, float] = {}
    for name, booster in boosters_of(bundle).items():
        if not name.startswith(f"{bundle.primary}-"):
            continue
        gains = booster.feature_importance(importance_type="gain")
        for feature, gain in zip(booster.feature_name(), gains):
            total[feature] = total.get(feature, 0.0) + float(gain)
    return total


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


def decision_horizon(config: Any) -> str:
    """``[models] horizon`` spelled as in ``[labels] horizons`` (and so in the scores).

    Raises
    ------
    ValueError
        When the decision horizon is not one of the label horizons.
    """
    from foreshock.durations import parse_duration
    from foreshock.models.base import config_horizons

    wanted = config.section("models").get("horizon")
    horizons = config_horizons(config)
    if not wanted:
        return horizons[-1]
    for horizon in horizons:
        if parse_duration(horizon) == parse_duration(wanted):
            return horizon
    raise ValueError(f"[models] horizon = {wanted!r} is not one of [labels] horizons {horizons}")


def lead_times_at_budget(scores: pl.DataFrame, failures: pl.DataFrame, config: Any) -> pl.DataFrame:
    """Lead times of the failures each model caught at the drain-budget threshold.

    Parameters
    ----------
    scores
        ``unit_id, ts, model, risk`` of one horizon (several models allowed).
    failures
        Canonical failures table.
    config
        ``[backtest] drain_budget_per_day``, ``alert_window``, ``min_lead_time``.

    Returns
    -------
    pl.DataFrame
        ``model, lead_time_h``: one row per caught failure (definitions in ``docs/metrics.md``).
    """
    from foreshock.models import metrics

    window = metrics.AlertWindow.from_config(config)
    budget = float(config.section("backtest").get("drain_budget_per_day", 2))
    parts = [pl.DataFrame(schema={"model": pl.String, "lead_time_h": pl.Float64})]
    for (model,), series in scores.group_by(["model"], maintain_order=True):
        series = series.select("unit_id", "ts", "risk")
        threshold = metrics.threshold_for_budget(series, budget)
        alerts = metrics.alert_starts(series, threshold)
        matched = metrics.match_failures(alerts, metrics.failures_in_scope(series, failures), window)
        parts.append(
            matched.filter(pl.col("caught")).select(
                pl.lit(str(model)).alias("model"), pl.col("lead_time_h").cast(pl.Float64)
            )
        )
    return pl.concat(parts)


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
    from foreshock.models.training import labelled_until

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
        The trained :class:`~models.bundle.RiskBundle`.
    backtest
        The walk-forward result (``scores``, ``report``, ``markdown``) of the same
        configuration; its report becomes the run's metrics.
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
    import mlflow
    from mlflow.models import infer_signature

    from foreshock.models import plots

    name = config.model_name
    uri = tracking_uri(config.data_dir)
    client = mlflow.MlflowClient(uri)
    exp_id = experiment_id(experiment_name(config))
    horizon = decision_horizon(config)
    example = model_input(bundle, example).head(5)
    example_pd = _naive_utc(example).to_pandas()
    started = datetime.now(UTC)

    with mlflow.start_run(experiment_id=exp_id, run_name=f"train-{started:%Y%m%dT%H%M%SZ}") as run:
        mlflow.set_tags({"foreshock.kind": "training", "foreshock.model_name": name, SOURCE_TAG: TRUSTED_SOURCE})
        params = flatten_params(config.settings)
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
        requirements = pip_requirements()
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

        scores_example = _naive_utc(bundle.score(example))
        with tempfile.TemporaryDirectory(prefix="foreshock-bundle-") as tmp:
            bundle_dir = Path(tmp) / "bundle"
            bundle.save(bundle_dir)
            info = mlflow.pyfunc.log_model(
                name=BUNDLE_MODEL_NAME,
                python_model=str(PYFUNC_FILE),
                artifacts={"bundle": str(bundle_dir)},
                signature=infer_signature(example_pd, scores_example.to_pandas()),
                input_example=example_pd,
                pip_requirements=requirements,
            )

        report = getattr(backtest, "report", None) or {}
        mlflow.log_metrics(backtest_metrics(report))
        mlflow.log_dict(_jsonable(report), "backtest/report.json")
        if getattr(backtest, "markdown", None):
            mlflow.log_text(backtest.markdown, "backtest/report.md")

        figures = {}
        if labelled is not None and getattr(backtest, "scores", None) is not None:
            scored = plots.scores_with_labels(backtest.scores, labelled, horizon)
            figures["pr_curve"] = plots.pr_curve(scored, title=f"Precision-recall, backtest, {horizon}")
            figures["calibration"] = plots.calibration_curve(scored, title=f"Calibration, backtest, {horizon}")
            primary = scored.filter(pl.col("model") == bundle.primary)
            if primary.height and "time_to_failure_h" in primary.columns:
                figures["survival_by_risk_decile"] = plots.survival_by_risk_decile(
                    primary, title=f"Survival by {bundle.primary} risk decile ({horizon})"
                )
        if lead_times is not None:
            figures["lead_time_histogram"] = plots.lead_time_histogram(lead_times)
        importance = feature_importance(bundle)
        if importance:
            figures["feature_importance"] = plots.feature_importance(
                importance, title=f"Feature importance ({bundle.primary}, total gain)"
            )
        for fig_name, figure in figures.items():
            mlflow.log_figure(figure, f"plots/{fig_name}.png")

    # Registered only once everything is logged: a version never lacks its evidence.
    first = alias_version(name, CHAMPION, client=client) is None
    tags = {
        "foreshock.data_start": data_range[0].isoformat(),
        "foreshock.data_end": data_range[1].isoformat(),
        "foreshock.primary": bundle.primary,
        "foreshock.horizons": ",".join(bundle.horizons),
        "foreshock.registered_at": started.isoformat(),
        **version_tags(),
    }
    if first:
        tags.update(_promotion_tags("first version", by="foreshock train", reason="no champion yet"))
    version = str(mlflow.register_model(info.model_uri, name, tags=tags).version)
    client.set_registered_model_alias(name, CHALLENGER, version)
    if first:
        client.set_registered_model_alias(name, CHAMPION, version)
    return TrainingRecord(run_id=run.info.run_id, version=version, model_name=name)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


# --------------------------------------------------------------------------------------
# Aliases: challenger, champion, approval, rollback
# --------------------------------------------------------------------------------------


def _client(client: MlflowClient | None = None) -> MlflowClient:
    import mlflow

    return client or mlflow.MlflowClient()


def alias_version(name: str, alias: str, *, client: MlflowClient | None = None) -> ModelVersion | None:
    """The version an alias points at, or ``None`` (no such model or alias)."""
    from mlflow.exceptions import MlflowException

    try:
        return _client(client).get_model_version_by_alias(name, alias)
    except MlflowException:
        return None


def versions(name: str, *, client: MlflowClient | None = None) -> list[ModelVersion]:
    """Every version of a registered model, oldest first."""
    found = _client(client).search_model_versions(f"name = '{name}'")
    return sorted(found, key=lambda v: int(v.version))


def aliases(name: str, *, client: MlflowClient | None = None) -> dict[str, str]:
    """``{alias: version}`` of a registered model (empty if it does not exist)."""
    from mlflow.exceptions import MlflowException

    try:
        return {alias: str(v) for alias, v in _client(client).get_registered_model(name).aliases.items()}
    except MlflowException:
        return {}


def _promotion_tags(action: str, *, by: str, reason: str) -> dict[str, str]:
    """Version tags recording who moved ``champion`` to a version, how and why."""
    return {
        "foreshock.promotion": action,
        "foreshock.promoted_by": by,
        "foreshock.promotion_reason": reason,
        "foreshock.promoted_at": datetime.now(UTC).isoformat(),
    }


def _tag_promotion(client: MlflowClient, name: str, version: str, *, action: str, by: str, reason: str) -> None:
    for key, value in _promotion_tags(action, by=by, reason=reason).items():
        client.set_model_version_tag(name, version, key, value)


def set_champion(
    name: str,
    version: str | int,
    *,
    action: str,
    by: str | None = None,
    reason: str = "",
    client: MlflowClient | None = None,
) -> str | None:
    """Point ``champion`` at ``version``, recording who did it and why as version tags.

    Used for promotion by review, for promotion by hand (``action="approved"``) and for
    rollback (``action="rollback"``): in the registry they are all the same move of one
    alias.  Returns the version that was champion before (``None`` if there was none).

    Raises
    ------
    ValueError
        When the model or the version does not exist.
    """
    from mlflow.exceptions import MlflowException

    client = _client(client)
    version = str(version)
    try:
        client.get_model_version(name, version)
    except MlflowException:
        known = ", ".join(str(v.version) for v in versions(name, client=client)) or "none"
        raise ValueError(f"model {name!r} has no version {version} (versions: {known})") from None
    previous = alias_version(name, CHAMPION, client=client)
    client.set_registered_model_alias(name, CHAMPION, version)
    by = by or getpass.getuser()
    _tag_promotion(client, name, version, action=action, by=by, reason=reason)
    if previous is not None and str(previous.version) != version:
        client.set_model_version_tag(name, version, "foreshock.previous_champion", str(previous.version))
    return str(previous.version) if previous is not None else None


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedBundle:
    """A bundle loaded from the registry and where it came from."""

    bundle: RiskBundle
    model_name: str
    version: str
    run_id: str

    def __iter__(self) -> Iterator[Any]:  # (bundle, version, run_id), as load_champion returns
        return iter((self.bundle, self.version, self.run_id))


def load_version(
    name: str, version: str | int, *, trusted_runs_only: bool = False, trusted_source: str = TRUSTED_SOURCE
) -> LoadedBundle:
    """Load a registered version's bundle as data, never running its pyfunc
    (:mod:`foreshock.models.trusted_bundle`: a version foreshock did not log is refused)."""
    client = _client()
    model_version = client.get_model_version(name, str(version))
    bundle = load_trusted_bundle(
        client, name, model_version.version, trusted_runs_only=trusted_runs_only, trusted_source=trusted_source
    )
    return LoadedBundle(bundle, name, str(model_version.version), model_version.run_id or "")


def load_alias(name: str, alias: str, **trust) -> LoadedBundle:
    """Load the version an alias points at.

    The alias is resolved once and that exact version is loaded, so a promotion that
    happens meanwhile cannot give a bundle of one version labelled with another.

    Raises
    ------
    LookupError
        When the model has no such alias (e.g. nothing trained yet).
    """
    model_version = alias_version(name, alias)
    if model_version is None:
        raise LookupError(f"registered model {name!r} has no version with alias {alias!r}: run `foreshock train` first")
    return load_version(name, model_version.version, **trust)


def check_champion(name: str, *, trusted_runs_only: bool = False, trusted_source: str = TRUSTED_SOURCE) -> str:
    """The champion's version after the cheap checks (alias, tags, run tag), without
    downloading it: a CLI calls this before a flow run so a user error stays one line.

    Raises
    ------
    MissingInputError
        No champion yet.
    UntrustedModelError
        The champion was not registered by foreshock (see :mod:`.trusted_bundle`).
    """
    from foreshock.errors import MissingInputError

    client = _client()
    model_version = alias_version(name, CHAMPION, client=client)
    if model_version is None:
        raise MissingInputError(f"registered model {name!r} has no champion: run `foreshock train` first")
    run_tags = client.get_run(model_version.run_id).data.tags if model_version.run_id else {}
    check_version(model_version, run_tags, trusted_runs_only=trusted_runs_only, trusted_source=trusted_source)
    return str(model_version.version)


def load_champion(name: str, **trust) -> LoadedBundle:
    """Load ``models:/<name>@champion``: unpack as ``bundle, version, run_id``.

    ``trust``: ``trusted_runs_only`` and ``trusted_source`` (``[registry]``), see
    :func:`load_version`."""
    return load_alias(name, CHAMPION, **trust)


# --------------------------------------------------------------------------------------
# Scoring with a registered version
# --------------------------------------------------------------------------------------

LIVE_CONTEXT = ("node", "rack")


def latest_snapshots(features: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """The most recent snapshot of every unit."""
    lazy = features.lazy() if isinstance(features, pl.DataFrame) else features
    return (
        lazy.filter(pl.col("ts") == pl.col("ts").max().over("unit_id"))
        .unique(["unit_id"], keep="last")
        .sort("unit_id")
        .collect()
    )


def live_scores(loaded: LoadedBundle, snapshots: pl.DataFrame, top: int = 3) -> pl.DataFrame:
    """Risk of the primary model per unit and horizon, with its top signals and provenance.

    Parameters
    ----------
    loaded
        A registered version (:func:`load_champion`).
    snapshots
        Feature snapshots to score (usually :func:`latest_snapshots`).
    top
        How many signals to keep per unit and horizon.

    Returns
    -------
    pl.DataFrame
        ``unit_id, ts, node, rack, model, horizon, risk, top_signals, model_name,
        model_version, run_id``; ``top_signals`` is a list of
        ``{signal, value, contribution}`` structs, largest contribution first.  Sorted by
        horizon, then risk (highest first).
    """
    bundle = loaded.bundle
    risk = bundle.score(snapshots).filter(pl.col("model") == bundle.primary)
    reasons = (
        bundle.explain(snapshots, top=top)
        .sort("contribution", descending=True)
        .group_by("unit_id", "ts", "horizon", maintain_order=True)
        .agg(pl.struct("signal", "value", "contribution").alias("top_signals"))
    )
    context = [c for c in LIVE_CONTEXT if c in snapshots.columns]
    places = snapshots.select("unit_id", *context).unique("unit_id", keep="last")
    out = (
        risk.join(reasons, on=["unit_id", "ts", "horizon"], how="left")
        .join(places, on="unit_id", how="left")
        .with_columns(
            pl.lit(loaded.model_name).alias("model_name"),
            pl.lit(loaded.version).alias("model_version"),
            pl.lit(loaded.run_id).alias("run_id"),
            *(pl.lit(None, dtype=pl.String).alias(c) for c in LIVE_CONTEXT if c not in context),
        )
    )
    return out.select(
        "unit_id",
        "ts",
        *LIVE_CONTEXT,
        "model",
        "horizon",
        "risk",
        "top_signals",
        "model_name",
        "model_version",
        "run_id",
    ).sort(["horizon", "risk", "unit_id"], descending=[False, True, False])
