"""The risk bundle: every model of one training run, scored side by side.

A :class:`RiskBundle` holds the gradient-boosted model (primary: drains are decided on
it), the Cox survival model and the threshold baseline, trained on the same history.  It
is what ``foreshock train`` logs to MLflow and ``foreshock score`` loads back.

Saved form (a directory, no pickles of our classes)::

    bundle.json          primary, horizons, feature names, trained range, models, notes
    gbm/gbm.json         settings + Platt calibration; gbm/booster_<h>.txt LightGBM model text
    cox/cox.json         covariates, standardisation, log hazard ratios, baseline knots
    baseline/baseline.json  resolved rules + calibration
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl

from foreshock.config import Config
from foreshock.contract import UTC_TS
from foreshock.models.estimators.base import (
    EXPLANATION_SCHEMA,
    SCORE_SCHEMA,
    RiskModel,
    config_horizons,
    frame_feature_columns,
    monotone_risk,
    require_columns,
)
from foreshock.models.estimators.baseline import ThresholdBaseline, rule_settings
from foreshock.models.estimators.cox_time_varying import CoxTimeVaryingRisk
from foreshock.models.estimators.dataset import (
    FeatureSource,
    FrameSource,
    StoredSample,
    TrainingSample,
    as_source,
    training_sample,
)
from foreshock.models.estimators.gbm import GradientBoostedRisk
from foreshock.models.estimators.gbm_dask import dask_target
from foreshock.models.estimators.recipes import config_recipes_dir, load_recipe, merged
from foreshock.models.estimators.training import known_failures

BUNDLE_FORMAT = 1
MODEL_CLASSES: dict[str, type] = {
    "gbm": GradientBoostedRisk,
    "cox": CoxTimeVaryingRisk,
    "baseline": ThresholdBaseline,
}

log = logging.getLogger("foreshock.models")


@dataclass
class RiskBundle:
    """The models of one training run.

    Attributes
    ----------
    models
        ``{"gbm": ..., "cox": ..., "baseline": ...}`` (a model that could not be fitted
        is absent, with the reason in ``notes``).
    primary
        The model drain decisions use.
    horizons
        Horizon spellings, e.g. ``["24h", "72h"]``.
    feature_names
        The feature columns the bundle was trained on.
    trained_range
        First and last snapshot time of the training data.
    """

    models: dict[str, RiskModel]
    primary: str
    horizons: list[str]
    feature_names: list[str]
    trained_range: tuple[datetime, datetime]
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.primary not in self.models:
            raise ValueError(f"primary model {self.primary!r} not among {sorted(self.models)}")

    def score(self, frame: pl.DataFrame, models: list[str] | None = None) -> pl.DataFrame:
        """Risk of every model: ``unit_id, ts, model, horizon, risk``.

        Parameters
        ----------
        frame
            Feature snapshots (``unit_id, ts`` + feature columns).
        models
            Only these models (default: all of the bundle's).
        """
        require_columns(frame, ("unit_id", "ts"), "feature frame")
        parts = [
            monotone_risk(model.predict_risk(frame))
            .with_columns(pl.lit(name).alias("model"))
            .select(list(SCORE_SCHEMA))
            for name, model in self.models.items()
            if models is None or name in models
        ]
        if not parts:
            return pl.DataFrame(schema=SCORE_SCHEMA)
        return pl.concat(parts).sort("model", "horizon", "unit_id", "ts")

    def explain(self, frame: pl.DataFrame, top: int = 3) -> pl.DataFrame:
        """Top ``top`` signals of the primary model: ``unit_id, ts, horizon, signal, value, contribution``."""
        require_columns(frame, ("unit_id", "ts"), "feature frame")
        out = self.models[self.primary].explain(frame, top)
        return out.select(list(EXPLANATION_SCHEMA)) if out.height else pl.DataFrame(schema=EXPLANATION_SCHEMA)

    def save(self, path: Path) -> None:
        """Write the bundle directory (see module docstring)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        for name, model in self.models.items():
            model.save(path / name)
        meta = {
            "format": BUNDLE_FORMAT,
            "primary": self.primary,
            "horizons": self.horizons,
            "feature_names": self.feature_names,
            "trained_range": [t.isoformat() for t in self.trained_range],
            "models": {name: model.kind for name, model in self.models.items()},
            "notes": self.notes,
        }
        (path / "bundle.json").write_text(json.dumps(meta, indent=2))

    @classmethod
    def load(cls, path: Path) -> RiskBundle:
        """Read a directory written by :meth:`save`."""
        path = Path(path)
        meta_path = path / "bundle.json"
        if not meta_path.is_file():
            raise FileNotFoundError(f"not a risk bundle (no bundle.json): {path}")
        meta = json.loads(meta_path.read_text())
        if meta.get("format") != BUNDLE_FORMAT:
            raise ValueError(f"{meta_path}: unsupported bundle format {meta.get('format')!r}")
        models = {}
        for name, kind in meta["models"].items():
            if kind not in MODEL_CLASSES:
                raise ValueError(f"{meta_path}: unknown model kind {kind!r} for {name!r}")
            models[name] = MODEL_CLASSES[kind].load(path / name)
        start, stop = (datetime.fromisoformat(t) for t in meta["trained_range"])
        return cls(
            models=models,
            primary=meta["primary"],
            horizons=list(meta["horizons"]),
            feature_names=list(meta["feature_names"]),
            trained_range=(start, stop),
            notes=list(meta.get("notes", [])),
        )


def over_recipe(model: str, recipe: dict[str, Any], section: Mapping[str, Any]) -> dict[str, Any]:
    """``[models] <model> = {...}`` over the model's recipe, a table key by key; an argument of
    the model that no recipe sets (``params``, ``max_features``...) is accepted, anything else
    is an error naming the table."""
    arguments = [f.name for f in fields(MODEL_CLASSES[model]) if not f.name.endswith("_")]
    return merged(recipe, dict(section.get(model, {})), f"[models] {model}", also=arguments)


def model_factories(config: Config) -> dict[str, callable]:
    """Constructors of the bundle's models from configuration.

    Each model starts from its recipe (``models/*.toml``, or ``[models] recipes``:
    :mod:`foreshock.models.estimators.recipes`); ``[models]`` may hold ``gbm = {...}``
    and ``cox = {...}`` tables of constructor arguments over it (e.g. ``cox = {penalizer =
    1e-5, max_features = 8}``).  The gradient-boosted model gets the rules (``rules.toml``
    with ``[baseline]`` over it) as features unless its recipe or ``gbm = {rules = false}``
    says not.
    """
    horizons = config_horizons(config)
    section = config.section("models")
    recipes = config_recipes_dir(config)
    counters = [m.name for m in config.catalog.by(kind="counter", family="error")]
    rules = rule_settings(config)
    gbm_args = over_recipe("gbm", {**load_recipe("gbm", recipes), "error_counters": counters}, section)
    gbm_args["rules"] = rules if gbm_args["rules"] is True else gbm_args["rules"] or None
    if gbm_args.get("fleet_weighted"):  # the inventory's fleet_weight of a subsampled fleet
        gbm_args.setdefault("unit_weights", inventory_weights(config))
    runner = config.section("runner")
    if runner["kind"] == "dask":  # full fits of large samples on the cluster (gbm_dask)
        gbm_args.setdefault("dask_client", dask_target(runner))
        gbm_args.setdefault("dask_min_rows", int(section["dask_min_rows"]))
    cox_args = over_recipe("cox", load_recipe("cox", recipes), section)
    return {
        "gbm": lambda: GradientBoostedRisk(horizons=horizons, **gbm_args),
        "cox": lambda: CoxTimeVaryingRisk(horizons=horizons, **cox_args),
        "baseline": lambda: ThresholdBaseline.from_config(config),
    }


def inventory_weights(config: Config) -> pl.DataFrame | None:
    """``unit_id, fleet_weight`` of the lake's inventory, or None (no inventory, or no weights)."""
    from foreshock.budget import fleet_weights
    from foreshock.lake.read import read_table

    try:
        inventory = read_table(config.lake_dir, "inventory")
    except (FileNotFoundError, pl.exceptions.ComputeError):
        return None
    return fleet_weights(inventory) if inventory.height else None


def fit_models(
    features: pl.DataFrame | StoredSample,
    failures: pl.DataFrame,
    factories: dict,
    until: datetime | None = None,
) -> tuple[dict[str, RiskModel], list[str]]:
    """Fit each model; one that cannot be fitted (no failures yet, ...) is left out with a note.
    Each fit is a log line with its time (the long part of backtest, train and review).

    A sample left in the store (:class:`~foreshock.models.estimators.dataset.StoredSample`) goes as it
    is to the gradient-boosted model (on a Dask cluster its workers read the rows); the
    other models get it read once, when the first of them needs it."""
    fitted, notes = {}, []
    frame = features if isinstance(features, pl.DataFrame) else None
    for name, make in factories.items():
        started = time.monotonic()
        try:
            model = make()
            if frame is None and not isinstance(model, GradientBoostedRisk):
                frame = features.frame()
            fitted[name] = model.fit(
                features if isinstance(model, GradientBoostedRisk) else frame, failures, until=until
            )
        except ValueError as exc:
            notes.append(f"{name}: not fitted: {exc}")
            log.info("%s: not fitted: %s", name, exc)
            continue
        log.info("%s fitted on %s rows in %.0f s", name, f"{features.height:,}", time.monotonic() - started)
    return fitted, notes


def train_bundle(
    features: pl.DataFrame | FeatureSource | FrameSource,
    failures: pl.DataFrame,
    config: Config,
    *,
    until: datetime | None = None,
    drains: pl.DataFrame | None = None,
    primary_only: bool = False,
) -> RiskBundle:
    """Train every model on all labelled history.

    Parameters
    ----------
    features
        The feature store (:class:`~foreshock.models.estimators.dataset.FeatureSource`: only the
        training sample is read) or a feature frame in memory.
    failures
        Canonical failures table.
    config
        Horizons from ``[labels]``, model settings and the training sample from
        ``[models]``, rules from ``[baseline]``.
    until
        Training cutoff (default: the last snapshot); labels only use what is known then.
    drains
        Canonical drains: a drain censors the labels of the snapshots before it.
    primary_only
        Fit only the primary model (a review measures nothing else).

    Raises
    ------
    ValueError
        When the primary model cannot be trained (e.g. no failure in the history).
    """
    source = as_source(features)
    if source.empty:
        raise ValueError("no feature snapshots to train on")
    first, last = source.span()
    cutoff = until or last + source.step()  # the last snapshot is known when it is taken
    sample = TrainingSample.from_config(config, config_horizons(config))
    known = known_failures(failures.with_columns(pl.col("failed_at").cast(UTC_TS)), cutoff)
    stored = training_sample(source, known, cutoff, sample, drains=drains)
    # on a Dask cluster the gradient-boosted model's workers read the sample's rows
    # themselves (gbm_dask.StoreParts); otherwise it is read here, once
    on_dask = config.section("runner")["kind"] == "dask"
    frame = stored if on_dask else stored.frame()
    primary = str(config.section("models").get("primary", "gbm"))
    factories = model_factories(config)
    if primary_only:
        factories = {name: make for name, make in factories.items() if name == primary}
    models, notes = fit_models(frame, known, factories, cutoff)
    if primary not in models:
        reason = next((n for n in notes if n.startswith(f"{primary}:")), "")
        raise ValueError(f"primary model {primary!r} could not be trained: {reason}")
    return RiskBundle(
        models=models,
        primary=primary,
        horizons=config_horizons(config),
        feature_names=frame_feature_columns(stored.head() if on_dask else frame.head(0)),
        trained_range=(first, until or last),
        notes=notes + [f"{name}: {n}" for name, model in models.items() for n in getattr(model, "notes_", [])],
    )


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
