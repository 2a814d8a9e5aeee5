"""The feature dictionary: every feature column's name pattern, meaning, unit and window.

The columns come from the build itself (:func:`~foreshock.features.build.spec_feature_columns`
and :func:`~foreshock.features.build.output_schema`); this module only says what each one
means.  Each column is matched against the name patterns below (``<counter>_increase_<w>``
...), whose placeholders stand for the catalog's metrics of one kind, the configured
windows, the XID codes and classes.  A column that matches no pattern, or more than one, is
an error: a feature added to the build without a line here fails
``foreshock dictionary`` and the test that regenerates ``features/dictionary.md``.

``foreshock dictionary`` prints the dictionary of the configuration in effect (your
catalog, your windows); ``--builtin`` gives the built-in configuration's, the one
committed as ``features/dictionary.md``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from foreshock.catalog import load_catalog
from foreshock.config import Config, default_settings
from foreshock.features.build import output_schema, spec_feature_columns
from foreshock.features.spec import FeatureSpec, feature_spec
from foreshock.features.xid import KNOWN_XID_CODES, XID_CLASS_NAMES, XID_SOURCES

# What each metric placeholder stands for: a metric of the catalog with this property.
METRIC_PLACEHOLDERS = {
    "metric": "any metric of the catalog",
    "counter": "a counter metric (cumulative; may reset)",
    "error_counter": "a counter metric of family error",
    "error_metric": "a metric of family error, a counter or a gauge that is not a 0/1 flag",
    "gauge": "a gauge metric (instantaneous)",
    "power_gauge": "a power gauge (family power, not a 0/1 flag)",
    "temperature_gauge": "a temperature gauge (family thermal, not a 0/1 flag)",
}


@dataclass(frozen=True)
class Pattern:
    """One family of feature columns.

    Attributes
    ----------
    name : str
        The column names, with placeholders in braces: ``{counter}_increase_{w}``.
        ``{w}`` is a window, ``{s}`` a window shorter than the longest, ``{L}`` the longest,
        ``{code}`` an XID code, ``{cls}`` an XID class; the others are metrics
        (:data:`METRIC_PLACEHOLDERS`).
    meaning : str
        What the value is.
    unit : str
        Its unit; ``{unit}`` is the metric's unit in the catalog.
    window : str
        The span of data it summarises, with the same placeholders plus ``{baseline}``.
    """

    name: str
    meaning: str
    unit: str
    window: str

    @property
    def shown(self) -> str:
        """The pattern as the dictionary prints it: ``<counter>_increase_<w>``."""
        return re.sub(r"\{(\w+)\}", lambda m: f"<{m.group(1).replace('_', ' ')}>", self.name)


PATTERNS: tuple[Pattern, ...] = (
    Pattern(
        "{counter}_increase_{w}",
        "Sum of the counter's steps whose later sample is in the window; a drop (driver reload, reboot) counts "
        "as the new value, as Prometheus increase() without extrapolation. Null when the window has no sample.",
        "{unit}",
        "{w}",
    ),
    Pattern(
        "{counter}_accel_{s}_{L}",
        "Rate of increase over the shorter window divided by the rate over the longest: 1 steady, "
        "above 1 accelerating, 0 when nothing increased in the longest window.",
        "ratio",
        "{s} over {L}",
    ),
    Pattern(
        "{metric}_last",
        "Latest raw value within the longest window (cumulative for counters).",
        "{unit}",
        "latest in {L}",
    ),
    Pattern(
        "{error_counter}_rising_share_{w}",
        "Share of the window's snapshot intervals with a sample in which the counter rose: a burst of a "
        "few hours gives a small share, errors rising day after day a large one, for the same increase. "
        "Only with [features] rising_share = true, windows longer than one interval; null when the window "
        "has no sample.",
        "share",
        "{w}",
    ),
    Pattern(
        "{error_counter}_hours_since_first_increase",
        "Hours from the first step up within the longest window to the snapshot; null if none.",
        "h",
        "{L}",
    ),
    Pattern(
        "{error_counter}_hours_since_last_increase",
        "Hours from the last step up within the longest window to the snapshot; null if none.",
        "h",
        "{L}",
    ),
    Pattern("{gauge}_mean_{w}", "Mean of the window's samples (of a 0/1 flag: share of time set).", "{unit}", "{w}"),
    Pattern("{gauge}_max_{w}", "Largest sample of the window.", "{unit}", "{w}"),
    Pattern("{gauge}_std_{w}", "Sample standard deviation of the window (null below 2 samples).", "{unit}", "{w}"),
    Pattern(
        "{power_gauge}_excursion_{w}",
        "Window maximum minus window mean: how far the draw spiked above its level.",
        "{unit}",
        "{w}",
    ),
    Pattern(
        "{power_gauge}_jitter_max_{w}",
        "Largest jitter of one snapshot interval in the window: the power's standard deviation "
        "over the interval divided by that of gpu_util_pct plus 1 (the draw's swings its load does "
        "not explain: a failing power supply at a steady load). Only windows longer than one "
        "interval; none without gpu_util_pct.",
        "{unit} per percentage point",
        "{w}",
    ),
    Pattern(
        "{temperature_gauge}_drift_c_{w}",
        "Window mean minus the unit's own mean over the baseline window (same life); only windows "
        "shorter than the baseline.",
        "{unit}",
        "{w} against {baseline}",
    ),
    Pattern(
        "xid_{code}_count_{w}",
        f"XID events with this code (event sources {', '.join(XID_SOURCES)}).",
        "events",
        "{w}",
    ),
    Pattern(
        "xid_class_{cls}_count_{w}",
        "XID events of this failure class (memory, bus, thermal, other: foreshock.features.xid).",
        "events",
        "{w}",
    ),
    Pattern("events_total_count_{w}", "Events of any source (XID, MCE, AER, ...).", "events", "{w}"),
    Pattern(
        "telemetry_gap_hours",
        "Hours since the unit's last sample (a unit silent for the longest window drops out).",
        "h",
        "up to {L}",
    ),
    Pattern(
        "telemetry_missing_frac_{w}",
        "1 - distinct sample times / (window / [features] expected_sample_every), clipped to [0, 1]; "
        "a window reaching back before the life started counts only the part since.",
        "fraction",
        "{w}",
    ),
    Pattern("age_days", "Days since the unit's current life started (installation or last replacement).", "d", "-"),
    Pattern(
        "rack_error_rate_{w}",
        "Share of the other in-service units of the rack with an error in the window "
        "(an error counter increase or any event).",
        "fraction of units",
        "{w}",
    ),
    Pattern(
        "lot_failure_rate_{w}",
        "Failures of the lot's units in the window per unit of the lot; null when the lot is unknown.",
        "failures per unit",
        "{w}",
    ),
    Pattern(
        "temp_residual_c_{w}",
        "The unit's mean temperature minus what its mean power draw predicts (OLS line per GPU model "
        "over the in-service units at the same snapshot, at least 3 units).",
        "celsius",
        "{w}",
    ),
    Pattern(
        "cohort_cum_hazard",
        "Nelson-Aalen cumulative hazard of the unit's cohort (model, lot) at the unit's age, from "
        "failures before the snapshot's UTC day.",
        "expected failures",
        "since installation",
    ),
    Pattern(
        "{error_counter}_increase_{w}_model_pct",
        "Only with [features] peer_relative = true: the increase's percentile among the in-service units of "
        "the same model at the same snapshot (mid-rank: peers below plus half the peers equal, over all peers "
        "with a value; each peer counted by its inventory fleet_weight, 1 without one).",
        "fraction of units",
        "{w}",
    ),
    Pattern(
        "{error_metric}_last_model_pct",
        "Only with [features] peer_relative = true: the last value's percentile among the in-service units of "
        "the same model at the same snapshot (as above).",
        "fraction of units",
        "up to {L}",
    ),
    Pattern(
        "health_vanished_metrics",
        "Only with [health] features = true: catalog metrics with a sample in the longest window but none in "
        "the shortest while the unit still reports in it (null when it does not).",
        "metrics",
        "shortest and longest window",
    ),
    Pattern(
        "health_frozen_gauges_{w}",
        "Only with [health] features = true: gauges (not 0/1 flags) that held one value over the window.",
        "metrics",
        "{w}",
    ),
)

# Columns that are not model features: the key and the unit's context.
CONTEXT_COLUMNS: dict[str, str] = {
    "unit_id": "the unit (GPU, disk, ...) the row describes",
    "ts": "the snapshot time T (UTC; a multiple of snapshot_every); nothing after T is read",
    "node": "the unit's node (inventory)",
    "rack": "the unit's rack (inventory)",
    "model": "the unit's hardware model (inventory)",
    "lot": "the unit's manufacturing lot (inventory)",
    "life": "failures of the unit strictly before T (0 for the original part)",
    "life_start": "when the current life started: installation or the last failure",
}


@dataclass(frozen=True)
class Column:
    """One feature column with what the dictionary says of it."""

    name: str
    pattern: Pattern
    unit: str
    window: str
    metric: str | None


def _alternation(names: list[str]) -> str:
    # longest first: a metric named like another's prefix must not win by being shorter
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) or r"(?!)"


def _placeholder_regexes(spec: FeatureSpec) -> dict[str, str]:
    windows = [spec.name(w) for w in spec.windows]
    metrics = {
        "metric": list(spec.catalog),
        "counter": spec.counters(),
        "error_counter": [m for m in spec.counters() if m.family == "error"],
        "error_metric": [m for m in spec.catalog if m.family == "error" and (m.is_counter or m.unit != "bool")],
        "gauge": spec.gauges(),
        "power_gauge": spec.power_levels(),
        "temperature_gauge": spec.thermal_levels(),
    }
    out = {key: f"(?P<metric>{_alternation([m.name for m in found])})" for key, found in metrics.items()}
    out["w"] = f"(?P<w>{_alternation(windows)})"
    out["s"] = f"(?P<s>{_alternation(windows[:-1])})"
    out["L"] = f"(?P<L>{re.escape(windows[-1])})"
    out["code"] = f"(?P<code>{_alternation([str(c) for c in KNOWN_XID_CODES])})"
    out["cls"] = f"(?P<cls>{_alternation(list(XID_CLASS_NAMES))})"
    return out


def _regex(pattern: Pattern, placeholders: dict[str, str]) -> re.Pattern[str]:
    parts = re.split(r"\{(\w+)\}", pattern.name)
    body = "".join(placeholders[p] if i % 2 else re.escape(p) for i, p in enumerate(parts))
    return re.compile(f"^{body}$")


def describe_columns(spec: FeatureSpec, columns: list[str] | None = None) -> list[Column]:
    """Each feature column of ``spec`` (or the given ones) with its pattern, unit and window.

    Raises
    ------
    ValueError
        When a column matches no pattern or several (the dictionary no longer describes
        what the build writes).
    """
    placeholders = _placeholder_regexes(spec)
    regexes = [(p, _regex(p, placeholders)) for p in PATTERNS]
    longest = spec.name(spec.longest)
    out = []
    for name in spec_feature_columns(spec) if columns is None else columns:
        found = [(p, m) for p, r in regexes if (m := r.match(name))]
        if len(found) != 1:
            which = ", ".join(p.shown for p, _ in found) or "no pattern"
            raise ValueError(f"feature column {name!r} matches {which}: foreshock/features/dictionary.py needs a line")
        pattern, match = found[0]
        groups = match.groupdict()
        metric = groups.get("metric")
        values = {"L": longest, "baseline": spec.name(spec.baseline), **{k: v for k, v in groups.items() if v}}
        unit = pattern.unit.format(unit=spec.catalog[metric].unit if metric else "")
        out.append(Column(name, pattern, unit, pattern.window.format(**values), metric))
    return out


def builtin_config() -> Config:
    """The built-in configuration and catalog, untouched by files, variables or a lake."""
    return Config(settings=default_settings(), data_dir=Path("data"), catalog=load_catalog(None))


def builtin_dictionary() -> str:
    """The dictionary of the built-in configuration: what ``features/dictionary.md`` holds."""
    return render_dictionary(builtin_config(), "the built-in configuration (`foreshock/foreshock.toml`)")


def _durations(spans: tuple[timedelta, ...] | list[timedelta], spec: FeatureSpec) -> str:
    return ", ".join(spec.name(s) for s in spans)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_dictionary(config: Config, source: str) -> str:
    """The dictionary of a configuration as Markdown (what ``features/dictionary.md`` holds).

    Parameters
    ----------
    config : Config
        Its feature spec and catalog are described.
    source : str
        Where the configuration came from, printed in the header.
    """
    spec = feature_spec(config)
    columns = describe_columns(spec)
    context = [c for c in output_schema(spec) if c not in {col.name for col in columns}]
    missing = [c for c in context if c not in CONTEXT_COLUMNS]
    if missing:
        raise ValueError(f"context columns {missing} have no line in foreshock/features/dictionary.py")
    lines = [
        "# Feature dictionary",
        "",
        f"Generated by `foreshock dictionary` from {source}: snapshots every {spec.name(spec.every)}, windows "
        f"{_durations(spec.windows, spec)} (`<w>`; the longest, `<L>`, is {spec.name(spec.longest)}), thermal "
        f"baseline {spec.name(spec.baseline)}, catalog `{Path(spec.catalog.source).name}` "
        f"({len(spec.catalog.metrics)} metrics). {len(columns)} feature columns, all Float64, one row per unit and "
        "snapshot. Written by `foreshock dictionary --builtin --out features/dictionary.md` (do not edit by hand); "
        "`foreshock dictionary` prints the dictionary of your own configuration and catalog.",
        "",
        "## Keys and context",
        "",
        "| column | meaning |",
        "|---|---|",
        *[f"| `{c}` | {_cell(CONTEXT_COLUMNS[c])} |" for c in context],
        "",
        "## Patterns",
        "",
        "Placeholders: "
        + "; ".join(f"`<{k.replace('_', ' ')}>` {v}" for k, v in METRIC_PLACEHOLDERS.items())
        + f"; `<s>` a window shorter than `<L>`; `<code>` an XID code ({', '.join(map(str, KNOWN_XID_CODES))}); "
        f'`<cls>` an XID class ({", ".join(XID_CLASS_NAMES)}). A unit "of metric" is the metric\'s unit in the '
        "catalog (below).",
        "",
        "| pattern | meaning | unit | window | columns |",
        "|---|---|---|---|---:|",
    ]
    shown = {"w": "`<w>`", "s": "`<s>`", "L": "`<L>`", "baseline": spec.name(spec.baseline)}
    for pattern in PATTERNS:
        count = sum(c.pattern is pattern for c in columns)
        unit = pattern.unit.format(unit="of metric")
        lines.append(
            f"| `{pattern.shown}` | {_cell(pattern.meaning)} | {unit} | {pattern.window.format(**shown)} | {count} |"
        )
    lines += [
        "",
        "## Metrics of the catalog",
        "",
        "| metric | kind | family | unit | description | columns |",
        "|---|---|---|---|---|---:|",
    ]
    for metric in spec.catalog:
        count = sum(c.metric == metric.name for c in columns)
        lines.append(
            f"| `{metric.name}` | {metric.kind} | {metric.family} | {metric.unit} | {_cell(metric.description)} | {count} |"
        )
    lines += ["", "## Every column", "", "| column | pattern | unit | window |", "|---|---|---|---|"]
    lines += [f"| `{c.name}` | `{c.pattern.shown}` | {c.unit} | {c.window} |" for c in columns]
    return "\n".join(lines) + "\n"
