"""The threshold rules operators run today, ranked by severity.

Rules (thresholds from config ``[baseline]``), each on a feature snapshot:

* any double-bit ECC error in the rule window (``ecc_dbe_*_increase_<w>`` > 0);
* retired pages over N (``retired_pages_sbe_last + retired_pages_dbe_last`` > N);
* remapped rows over N (``remapped_rows_*correctable_last`` summed > N);
* a remap or page retirement pending (``*_pending`` gauge at 1);
* single-bit ECC errors growing faster than X per day;
* any XID of the listed codes (48, 63, 64, 79, 92 by default) in the rule window;
* (any catalog) any other error-family counter growing faster than its usual rate, the
  99.5th percentile of its daily growth over the training period.

Each rule gives a ratio ``(value + 1) / (limit + 1)``: above 1 the rule fires, and the
larger, the further past its threshold.  The severity of a snapshot is the largest ratio,
raised by up to 2x when the single-bit error rate is accelerating (short-window rate over
long-window rate), so the rules can be ranked at any alert budget.  ``predict_risk`` maps
the severity to a probability per horizon with Platt scaling fitted on the training period;
the map is increasing, so the ranking is the rules' own.

On real fleets such severity-ranked rules are strong (docs/design.md): every report scores them
next to the learned models.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl

from foreshock.config import default_settings
from foreshock.contract import label_column
from foreshock.durations import parse_duration
from foreshock.models.estimators.base import (
    EXPLANATION_SCHEMA,
    RISK_SCHEMA,
    config_horizons,
    feature_matrix,
    frame_feature_columns,
    horizon_names,
    risk_frame,
    sample_weights,
    top_contributions,
    windowed_columns,
)
from foreshock.models.estimators.calibration import PlattCalibrator
from foreshock.models.estimators.recipes import builtin_recipe, config_recipes_dir, load_recipe
from foreshock.models.estimators.training import labelled_until


def default_rules() -> dict:
    """The rules' settings a model built without any takes: the recipe (``models/rules.toml``:
    which metrics each rule reads, the growth quantile) with the operators' thresholds of
    the built-in ``[baseline]`` over it."""
    return {**builtin_recipe("baseline"), **default_settings()["baseline"]}


def rule_settings(config) -> dict:
    """The rules' settings of a configuration: its recipe (``[models] recipes``, else the
    built-in ``models/rules.toml``) with its ``[baseline]`` thresholds over it."""
    return {**load_recipe("baseline", config_recipes_dir(config)), **config.section("baseline")}


def _usual_growth(daily: np.ndarray, weight: np.ndarray, q: float) -> float:
    """The ``q`` quantile of the daily growth over the fleet's rows; a subsampled frame
    counts each row by its weight (the healthy rows it stands for)."""
    if daily.size == 0:
        return 0.0
    if np.all(weight == 1.0):  # not subsampled: the plain quantile, as before weights existed
        return float(np.quantile(daily, q))
    return float(np.quantile(daily, q, weights=weight, method="inverted_cdf"))


@dataclass
class Rule:
    """One threshold rule: fires when the sum of ``columns`` exceeds ``limit``.

    ``per_day`` rescales a windowed increase to a daily rate before comparing.
    """

    name: str
    columns: list[str]
    limit: float
    per_day: float = 1.0

    def ratio(self, frame: pl.DataFrame) -> np.ndarray:
        values = np.nan_to_num(feature_matrix(frame, self.columns), nan=0.0).sum(axis=1) * self.per_day
        return (np.maximum(values, 0.0) + 1.0) / (self.limit + 1.0)

    def to_dict(self) -> dict:
        return {"name": self.name, "columns": self.columns, "limit": self.limit, "per_day": self.per_day}


def _window_columns(names: list[str], metric: str, kind: str) -> dict[timedelta, str]:
    return windowed_columns(names, kind).get(metric, {})


def _closest(windows: dict[timedelta, str], target: timedelta) -> tuple[timedelta, str] | None:
    if not windows:
        return None
    best = min(windows, key=lambda w: (abs(w - target), w))
    return best, windows[best]


@dataclass
class ThresholdBaseline:
    """Severity-ranked threshold rules (see module docstring).

    Parameters
    ----------
    horizons
        Horizons to give probabilities for, e.g. ``["24h", "72h"]``.
    rules
        ``[baseline]`` settings; missing keys take :func:`default_rules`.
    error_counters
        Error-family counter metrics of the catalog, for the generic growth rule.
    """

    horizons: list[str]
    rules: dict = field(default_factory=dict)
    error_counters: list[str] = field(default_factory=list)
    kind: str = "baseline"
    rules_: list[Rule] = field(default_factory=list)
    accel_column_: str | None = None
    calibrators_: dict[str, PlattCalibrator] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.horizons = horizon_names(self.horizons)
        self.rules = {**default_rules(), **self.rules}

    # -- rules -------------------------------------------------------------------------
    def _build_rules(self, frame: pl.DataFrame) -> list[Rule]:
        names = frame_feature_columns(frame)
        cfg = self.rules
        window = parse_duration(cfg["rule_window"])
        rules: list[Rule] = []

        def increase(metric: str) -> tuple[timedelta, str] | None:
            return _closest(_window_columns(names, metric, "increase"), window)

        dbe = [c for m in cfg["dbe_metrics"] if (c := increase(m))]
        if dbe:
            rules.append(Rule("dbe_increase", [c for _, c in dbe[:1]], 0.0))
        sbe = next((c for m in cfg["sbe_metrics"] if (c := increase(m))), None)
        if sbe:
            w, col = sbe
            rules.append(
                Rule("sbe_increase_per_day", [col], float(cfg["sbe_increase_per_day"]), 86400 / w.total_seconds())
            )
        for rule_name, key in (("retired_pages", "retired_pages_metrics"), ("remapped_rows", "remapped_rows_metrics")):
            cols = [f"{m}_last" for m in cfg[key] if f"{m}_last" in names]
            if cols:
                rules.append(Rule(rule_name, cols, float(cfg[rule_name])))
        for metric in cfg["pending_metrics"]:
            pending = _closest(_window_columns(names, metric, "max"), window)
            col = pending[1] if pending else (f"{metric}_last" if f"{metric}_last" in names else None)
            if col:
                rules.append(Rule(f"{metric}", [col], 0.0))
        for code in cfg["xid_codes"]:
            xid = _closest(_window_columns(names, f"xid_{int(code)}", "count"), window)
            if xid:
                rules.append(Rule(f"xid_{int(code)}", [xid[1]], 0.0))
        covered = set(cfg["dbe_metrics"]) | set(cfg["sbe_metrics"]) | set(cfg["retired_pages_metrics"])
        covered |= set(cfg["remapped_rows_metrics"])
        for metric in self.error_counters:
            if metric in covered or not (found := increase(metric)):
                continue
            w, col = found
            per_day = 86400 / w.total_seconds()
            daily = np.nan_to_num(feature_matrix(frame, [col])[:, 0], nan=0.0) * per_day
            usual = _usual_growth(daily, sample_weights(frame), float(cfg["growth_quantile"]))
            rules.append(Rule(f"{metric}_growth", [col], max(usual, 1.0), per_day))
        return rules

    def _acceleration(self, frame: pl.DataFrame) -> np.ndarray:
        if self.accel_column_ is None:
            return np.zeros(frame.height)
        accel = np.nan_to_num(feature_matrix(frame, [self.accel_column_])[:, 0], nan=1.0)
        return np.tanh(np.maximum(accel - 1.0, 0.0) / 2.0)

    def _narrow(self, frame: pl.DataFrame) -> pl.DataFrame:
        """Only the columns the rules read: each rule selects its columns, and a select on a
        wide frame (hundreds of features, chunked) costs far more than on these few."""
        wanted = {c for r in self.rules_ for c in r.columns} | {self.accel_column_}
        columns = [c for c in frame.columns if c in wanted]
        return frame.select(columns) if columns else frame  # (no column would lose the height)

    def rule_ratios(self, frame: pl.DataFrame) -> np.ndarray:
        """Matrix (rows x rules) of ``(value + 1) / (limit + 1)``; > 1 where a rule fires."""
        if not self.rules_:
            return np.zeros((frame.height, 0))
        frame = self._narrow(frame)
        return np.column_stack([r.ratio(frame) for r in self.rules_])

    def severity(self, frame: pl.DataFrame, ratios: np.ndarray | None = None) -> np.ndarray:
        """How far past its thresholds each snapshot is (> 1: at least one rule fires);
        ``ratios``: the frame's :meth:`rule_ratios`, when already computed."""
        ratios = self.rule_ratios(frame) if ratios is None else ratios
        worst = ratios.max(axis=1) if ratios.shape[1] else np.zeros(frame.height)
        return worst * (1.0 + self._acceleration(frame))

    def fires(self, frame: pl.DataFrame) -> np.ndarray:
        """True where at least one rule is past its threshold (today's alert)."""
        ratios = self.rule_ratios(frame)
        return (ratios > 1.0).any(axis=1) if ratios.shape[1] else np.zeros(frame.height, dtype=bool)

    # -- estimator ---------------------------------------------------------------------
    def resolve(self, frame: pl.DataFrame) -> ThresholdBaseline:
        """Bind the rules to the frame's feature columns (no labels needed)."""
        self.rules_ = self._build_rules(frame)
        names = frame_feature_columns(frame)
        self.accel_column_ = None
        for metric in self.rules["sbe_metrics"]:
            accel = sorted(n for n in names if n.startswith(f"{metric}_accel_"))
            if accel:
                self.accel_column_ = accel[0]
                break
        return self

    def growth_columns(self, frame: pl.DataFrame) -> list[str]:
        """The columns whose values set a rule's limit (the generic growth rules': a
        quantile over the rows), for rules bound to ``frame``'s columns; the other rules
        need the names only (``frame`` may have no rows)."""
        rules = self._fresh().resolve(frame).rules_
        return sorted({c for r in rules if r.name.endswith("_growth") for c in r.columns})

    def resolve_on(self, names: pl.DataFrame, data: pl.DataFrame) -> ThresholdBaseline:
        """:meth:`resolve` bound to the columns of ``names``, the growth rules' limits taken
        on ``data``: rows with at least the :meth:`growth_columns` (``names`` itself when
        it holds the rows), so a long history is read for those columns only."""
        self.resolve(names)
        if data is not names:
            learnt = {r.name: r for r in self._fresh().resolve(data).rules_ if r.name.endswith("_growth")}
            self.rules_ = [learnt.get(r.name, r) for r in self.rules_]
        return self

    def fixed_rules(self, names: pl.DataFrame) -> ThresholdBaseline:
        """These rules bound to the columns of ``names`` (which may have no rows), only those
        whose limits need no data: all but the generic growth rules, whose limit is a
        quantile over a training period."""
        bound = self._fresh().resolve(names)
        bound.rules_ = [r for r in bound.rules_ if not r.name.endswith("_growth")]
        return bound

    def _fresh(self) -> ThresholdBaseline:
        return ThresholdBaseline(self.horizons, dict(self.rules), list(self.error_counters))

    def rule_features(self, frame: pl.DataFrame) -> dict[str, np.ndarray]:
        """``rule_<name>`` log ratios and ``rule_severity`` (log): the rules as model inputs."""
        frame = self._narrow(frame)
        ratios = self.rule_ratios(frame)
        out = {f"rule_{r.name}": np.log(ratios[:, i]) for i, r in enumerate(self.rules_)}
        out["rule_severity"] = np.log(np.maximum(self.severity(frame, ratios), 1e-12))
        return out

    def state(self) -> dict:
        """The resolved rules as JSON-ready data (see :meth:`from_state`)."""
        return {
            "horizons": self.horizons,
            "rules": self.rules,
            "error_counters": self.error_counters,
            "rules_": [r.to_dict() for r in self.rules_],
            "accel_column_": self.accel_column_,
        }

    @classmethod
    def from_state(cls, state: dict) -> ThresholdBaseline:
        model = cls(horizons=state["horizons"], rules=state["rules"], error_counters=state["error_counters"])
        model.rules_ = [Rule(**r) for r in state["rules_"]]
        model.accel_column_ = state["accel_column_"]
        return model

    def fit(self, frame: pl.DataFrame, failures: pl.DataFrame, *, until: datetime | None = None) -> ThresholdBaseline:
        """Resolve the rules against the frame's columns and calibrate severity per horizon."""
        self.resolve(frame)
        labelled = labelled_until(frame, failures, self.horizons, until)
        score = self.severity(labelled)
        self.calibrators_ = {}
        # a subsampled training frame weights its healthy rows by the inverse sampling rate
        weight = sample_weights(labelled)
        for h in self.horizons:
            y = labelled.get_column(label_column(h))
            known = y.is_not_null().to_numpy()
            self.calibrators_[h] = PlattCalibrator(link="log").fit(
                score[known], y.to_numpy()[known].astype(float), weight[known]
            )
        return self

    def predict_risk(self, frame: pl.DataFrame) -> pl.DataFrame:
        if not self.calibrators_:
            raise RuntimeError("ThresholdBaseline is not fitted: call fit() or load()")
        score = self.severity(frame)
        parts = [risk_frame(frame, h, self.calibrators_[h].predict(score)) for h in self.horizons]
        return pl.concat(parts) if parts else pl.DataFrame(schema=RISK_SCHEMA)

    def predict_fires(self, frame: pl.DataFrame) -> pl.DataFrame:
        """The binary rules as operators run them, in the risk layout: risk 1.0 where
        :meth:`fires`, else 0.0, for every horizon (the same alert whatever the horizon)."""
        if not self.calibrators_ and not self.rules_:
            raise RuntimeError("ThresholdBaseline is not fitted: call fit() or load()")
        fired = self.fires(frame).astype(np.float64)
        parts = [risk_frame(frame, h, fired) for h in self.horizons]
        return pl.concat(parts) if parts else pl.DataFrame(schema=RISK_SCHEMA)

    def explain(self, frame: pl.DataFrame, top: int = 3) -> pl.DataFrame:
        """The rules nearest to (or furthest past) their thresholds; contribution = log ratio."""
        if not self.rules_:
            return pl.DataFrame(schema=EXPLANATION_SCHEMA)
        ratios = self.rule_ratios(frame)
        values = np.column_stack([r.ratio(frame) * (r.limit + 1.0) - 1.0 for r in self.rules_])
        names = [r.name for r in self.rules_]
        parts = [top_contributions(frame, h, names, values, np.log(ratios), top) for h in self.horizons]
        return pl.concat(parts)

    def save(self, path: Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state = {
            "kind": self.kind,
            **self.state(),
            "calibrators_": {h: c.to_dict() for h, c in self.calibrators_.items()},
        }
        (path / "baseline.json").write_text(json.dumps(state, indent=2))

    @classmethod
    def load(cls, path: Path) -> ThresholdBaseline:
        state = json.loads((Path(path) / "baseline.json").read_text())
        model = cls.from_state(state)
        model.calibrators_ = {h: PlattCalibrator.from_dict(c) for h, c in state["calibrators_"].items()}
        return model

    @classmethod
    def from_config(cls, config) -> ThresholdBaseline:
        """Rules from the recipe and ``[baseline]`` (:func:`rule_settings`), horizons from
        ``[labels]``, error counters from the catalog."""
        counters = [m.name for m in config.catalog.by(kind="counter", family="error")]
        return cls(horizons=config_horizons(config), rules=rule_settings(config), error_counters=counters)
