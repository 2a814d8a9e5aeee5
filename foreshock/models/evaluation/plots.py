"""Review plots: PR curve, lead-time histogram, calibration, survival by risk decile,
feature importance.

Every function takes plain frames (the backtest ``scores`` table, a labelled feature
frame, the failures table) and returns a :class:`matplotlib.figure.Figure`.  Figures are
built without ``pyplot`` so no global state or GUI backend is involved: they render with
Agg, are safe in worker threads, and are freed when they go out of scope.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import polars as pl
from matplotlib import colormaps
from matplotlib.figure import Figure

from foreshock.contract import SNAPSHOT_KEY, TIME_TO_FAILURE, label_column

KEY = list(SNAPSHOT_KEY)
# One colour per model, stable across plots so a reader can match them by eye.
MODEL_COLOURS = {"gbm": "tab:blue", "cox": "tab:orange", "baseline": "tab:grey"}


def _colour(model: str, index: int) -> str:
    return MODEL_COLOURS.get(model, f"C{index % 10}")


def scores_with_labels(scores: pl.DataFrame, labelled: pl.DataFrame, horizon: str) -> pl.DataFrame:
    """Scores for one horizon joined to their outcome.

    Parameters
    ----------
    scores
        ``unit_id, ts, model, horizon, risk`` (the backtest scores table).
    labelled
        Feature snapshots with labels (``features.labels.add_labels``): needs ``unit_id, ts``
        and the horizon's label (``foreshock.contract.label_column``); ``time_to_failure_h`` and ``life`` are kept if present.
    horizon
        Horizon spelled as in the scores table, e.g. ``"72h"``.

    Returns
    -------
    pl.DataFrame
        ``unit_id, ts, model, risk, label`` (+ ``time_to_failure_h``, ``life``), only rows
        whose outcome is known, sorted by model, unit and time.
    """
    label = label_column(horizon)
    if label not in labelled.columns:
        raise ValueError(f"labelled frame has no column {label!r} (labels for horizon {horizon})")
    extra = [c for c in (TIME_TO_FAILURE, "life") if c in labelled.columns]
    outcome = labelled.select(*KEY, pl.col(label).alias("label"), *extra)
    return (
        scores.filter(pl.col("horizon") == horizon)
        .select(*KEY, "model", "risk")
        .join(outcome, on=KEY, how="inner")
        .drop_nulls(["risk", "label"])
        .sort("model", *KEY)
    )


def pr_curve(scored: pl.DataFrame, title: str = "Precision-recall") -> Figure:
    """Precision against recall of every model, per snapshot.

    ``scored`` is the output of :func:`scores_with_labels` (columns ``model, risk, label``).
    """
    from sklearn.metrics import precision_recall_curve

    fig = Figure(figsize=(6, 4.5))
    ax = fig.add_subplot()
    for i, (model,) in enumerate(scored.select("model").unique().sort("model").iter_rows()):
        rows = scored.filter(pl.col("model") == model)
        labels = rows["label"].cast(pl.Int8).to_numpy()
        if labels.sum() == 0:
            continue  # no positives: precision is undefined everywhere
        precision, recall, _ = precision_recall_curve(labels, rows["risk"].to_numpy())
        ax.step(recall, precision, where="post", label=model, color=_colour(model, i))
    base_rate = float(scored["label"].cast(pl.Float64).mean() or 0.0)
    ax.axhline(base_rate, linestyle=":", color="black", linewidth=0.8, label=f"base rate {base_rate:.3f}")
    ax.set(xlabel="recall (snapshots)", ylabel="precision", xlim=(0, 1), ylim=(0, 1.02), title=title)
    ax.legend(loc="upper right", fontsize="small")
    return fig


def calibration_curve(scored: pl.DataFrame, bins: int = 10, title: str = "Calibration") -> Figure:
    """Observed failure frequency against mean predicted risk, in equal-count risk bins,
    on log–log axes.

    Equal-count bins keep every point backed by the same number of snapshots; with rare
    failures most of the mass sits near zero risk, so on linear axes every bin would sit
    in the bottom-left corner.  Log axes spread them out; bins with no failure at all are
    drawn as triangles on the floor of the axis.
    """
    table = (
        calibration_table(scored, bins)
        if scored.height
        else pl.DataFrame(schema={"model": pl.String, "mean_risk": pl.Float64, "observed": pl.Float64})
    )
    fig = Figure(figsize=(6, 4.5))
    ax = fig.add_subplot()
    values = [v for v in [*table["mean_risk"].to_list(), *table["observed"].to_list()] if v and v > 0]
    floor = 10 ** np.floor(np.log10(max(min(values, default=1e-4), 1e-6)) - 0.3)
    ax.plot([floor, 1], [floor, 1], linestyle=":", color="black", linewidth=0.8, label="perfect")
    for i, part in enumerate(table.partition_by("model", maintain_order=True) if table.height else []):
        model = part["model"][0]
        x = np.clip(part["mean_risk"].to_numpy(), floor, 1)
        y = np.clip(part["observed"].to_numpy(), floor, 1)
        ax.plot(x, y, marker="o", label=model, color=_colour(model, i))
        none = part["observed"].to_numpy() == 0
        ax.plot(x[none], y[none], "v", markersize=8, color=_colour(model, i))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set(xlabel="mean predicted risk (bin)", ylabel="observed failure frequency", title=title)
    ax.set_xlim(floor, 1.2)
    ax.set_ylim(floor, 1.2)
    ax.text(0.98, 0.02, "▼ bin with no failure", transform=ax.transAxes, ha="right", fontsize=8, color="#555")
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="upper left", fontsize="small")
    return fig


def calibration_table(scored: pl.DataFrame, bins: int = 10) -> pl.DataFrame:
    """``model, bin, mean_risk, observed, snapshots`` for a reliability diagram."""
    ranked = scored.with_columns(
        ((pl.col("risk").rank("ordinal").over("model") - 1) * bins // pl.len().over("model")).alias("bin")
    )
    return (
        ranked.group_by("model", "bin")
        .agg(
            pl.col("risk").mean().alias("mean_risk"),
            pl.col("label").cast(pl.Float64).mean().alias("observed"),
            pl.len().alias("snapshots"),
        )
        .sort("model", "bin")
    )


def lead_time_histogram(lead_times: pl.DataFrame, title: str = "Lead time of caught failures") -> Figure:
    """Histogram of lead times (hours) of the failures each model caught.

    Parameters
    ----------
    lead_times
        One row per caught failure: ``model`` and ``lead_time_h`` (failure time minus the
        start of the first alert in the window, hours).
    """
    fig = Figure(figsize=(6, 4.5))
    ax = fig.add_subplot()
    caught = lead_times.drop_nulls("lead_time_h")
    if caught.height:
        top = max(float(caught["lead_time_h"].max()), 1.0)
        edges = np.linspace(0.0, top, 25)
        for i, (model,) in enumerate(caught.select("model").unique().sort("model").iter_rows()):
            hours = caught.filter(pl.col("model") == model)["lead_time_h"].to_numpy()
            median = float(np.median(hours))
            ax.hist(
                hours,
                bins=edges,
                histtype="step",
                linewidth=1.5,
                color=_colour(model, i),
                label=f"{model} (n={hours.size}, median {median:.0f} h)",
            )
        ax.legend(loc="upper right", fontsize="small")
    else:
        ax.text(0.5, 0.5, "no failure was caught", ha="center", va="center", transform=ax.transAxes)
    ax.set(xlabel="lead time (hours)", ylabel="failures", title=title)
    return fig


def survival_by_risk_decile(
    scored: pl.DataFrame,
    end: object | None = None,
    groups: int = 10,
    title: str = "Survival by risk decile",
) -> Figure:
    """Kaplan-Meier survival of units grouped by the risk given at their first scored snapshot.

    Each unit life contributes once (its first snapshot in ``scored``), so correlated
    hourly rows of the same unit do not inflate the curves.  Follow-up runs from that
    snapshot to the failure (``time_to_failure_h``) or, for units that did not fail, to
    ``end`` (default: the last snapshot in ``scored``), where the unit is censored.  A
    model that ranks well shows the top deciles dropping fastest.

    Parameters
    ----------
    scored
        Scores of ONE model with ``unit_id, ts, risk, time_to_failure_h`` (and ``life``
        when units were replaced), e.g. from :func:`scores_with_labels`.
    end
        End of observation (datetime) for censoring.
    groups
        Number of risk groups; reduced when there are too few units to fill them.
    """
    from lifelines import KaplanMeierFitter

    if "time_to_failure_h" not in scored.columns:
        raise ValueError("survival curves need time_to_failure_h (from foreshock.features.labels.add_labels)")
    end = end if end is not None else scored["ts"].max()
    lives = ["unit_id", "life"] if "life" in scored.columns else ["unit_id"]
    first = (
        scored.sort("ts")
        .group_by(lives, maintain_order=True)
        .first()
        .with_columns(pl.col("time_to_failure_h").cast(pl.Float64).fill_nan(None))
        .with_columns(
            pl.col("time_to_failure_h").is_not_null().alias("event"),
            pl.coalesce(
                "time_to_failure_h",
                (pl.lit(end) - pl.col("ts")).dt.total_seconds() / 3600.0,
            ).alias("duration_h"),
        )
    )
    fig = Figure(figsize=(6, 4.5))
    ax = fig.add_subplot()
    groups = max(1, min(groups, first.height // 5))
    first = first.with_columns(((pl.col("risk").rank("ordinal") - 1) * groups // pl.len()).alias("group"))
    colours = colormaps["viridis"](np.linspace(0.0, 0.9, groups))
    for group in range(groups):
        rows = first.filter(pl.col("group") == group)
        if rows.height == 0:
            continue
        kmf = KaplanMeierFitter()
        kmf.fit(
            rows["duration_h"].to_numpy(),
            event_observed=rows["event"].to_numpy(),
            label=f"risk group {group + 1}/{groups} (n={rows.height}, failed {int(rows['event'].sum())})",
        )
        kmf.plot_survival_function(ax=ax, ci_show=False, color=colours[group])
    ax.set(xlabel="hours after snapshot", ylabel="share of units still working", ylim=(0, 1.02), title=title)
    ax.legend(loc="lower left", fontsize="x-small")
    return fig


def feature_importance(importance: Mapping[str, float], top: int = 20, title: str = "Feature importance") -> Figure:
    """Horizontal bars of the ``top`` features by importance (e.g. LightGBM total gain)."""
    ranked = sorted(importance.items(), key=lambda item: item[1], reverse=True)[:top]
    fig = Figure(figsize=(7, max(2.5, 0.3 * len(ranked) + 1)))
    ax = fig.add_subplot()
    names = [name for name, _ in reversed(ranked)]
    values = [value for _, value in reversed(ranked)]
    ax.barh(names, values, color="tab:blue")
    ax.set(xlabel="importance", title=title)
    ax.tick_params(axis="y", labelsize="small")
    fig.tight_layout()
    return fig


def save_figures(figures: Mapping[str, Figure], directory: Path, dpi: int = 100) -> dict[str, Path]:
    """Write each figure as ``<directory>/<name>.png``; returns the paths by name."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, figure in figures.items():
        path = directory / f"{name}.png"
        figure.savefig(path, dpi=dpi, bbox_inches="tight")
        paths[name] = path
    return paths
