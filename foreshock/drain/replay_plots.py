"""Plots of a policy replay (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

if TYPE_CHECKING:
    from foreshock.drain.replay import ReplayReport


def plot_replay(report: ReplayReport, directory: Path) -> dict[str, Path]:
    """Write the replay's figures; returns their paths by name.

    - ``replay_outcomes.png``: failures drained ahead, healthy drains and drains per day
      per policy variant;
    - ``replay_gpu_hours.png``: GPU-hours saved and effective training time per variant;
    - ``replay_cumulative.png``: cumulative drains over time per variant.
    """
    directory = Path(directory)
    names = [o.variant for o in report.outcomes]
    paths: dict[str, Path] = {}

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    panels = (
        ("failures drained ahead", [o.drained_ahead for o in report.outcomes]),
        ("drains of healthy units", [o.healthy_drains for o in report.outcomes]),
        ("drains per day", [o.drains_per_day for o in report.outcomes]),
    )
    for ax, (title, values) in zip(axes, panels):
        ax.bar(names, values, color="tab:blue")
        ax.set_title(title)
        ax.tick_params(axis="x", rotation=30)
    axes[0].axhline(report.outcomes[0].failures, color="tab:red", linestyle="--", label="failures")
    axes[0].legend()
    fig.tight_layout()
    paths["outcomes"] = directory / "replay_outcomes.png"
    fig.savefig(paths["outcomes"], dpi=100)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    saved = [o.gpu_hours_saved for o in report.outcomes]
    axes[0].bar(names, saved, color=["tab:green" if v >= 0 else "tab:red" for v in saved])
    axes[0].axhline(0, color="black", linewidth=0.8)
    axes[0].set_title("GPU-hours saved vs no prediction")
    ett = [100 * o.effective_training_time for o in report.outcomes]
    axes[1].bar(names, ett, color="tab:purple")
    low = min(ett) if ett else 0
    axes[1].set_ylim(max(0.0, low - 2.0), 100.0)
    axes[1].set_title("effective training time (%)")
    for ax in axes:
        ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    paths["gpu_hours"] = directory / "replay_gpu_hours.png"
    fig.savefig(paths["gpu_hours"], dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4))
    for variant, log in report.drains.sort("decided_at").group_by("variant", maintain_order=True):
        # From 0 at the start of the replay to the total at its end.
        times = [report.start, *log.get_column("decided_at").to_list(), report.end]
        counts = [0, *range(1, log.height + 1), log.height]
        ax.step(times, counts, where="post", label=str(variant[0]))
    ax.set_title("cumulative drains")
    ax.set_ylabel("drains")
    if report.drains.height:
        ax.legend()
    fig.autofmt_xdate()
    fig.tight_layout()
    paths["cumulative"] = directory / "replay_cumulative.png"
    fig.savefig(paths["cumulative"], dpi=100)
    plt.close(fig)
    return paths


__all__ = ["plot_replay"]
