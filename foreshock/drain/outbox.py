"""Publishing: latest scores -> policy -> ``data/outbox/<timestamp>/``.

One publish writes a new directory (never rewrites an old one), all or nothing: it is
built in a hidden staging directory (``data/outbox/.staging-<name>-<pid>/``), renamed into
place once complete, and only then named in ``LATEST``.  The next publish diffs against,
and takes its policy state from, the newest *complete* directory (one with a manifest),
so a publish that fails or is killed half way leaves nothing the next run reads; its
staging directory is removed by the next publish (under the outbox lock)::

    data/outbox/20261202T151000Z/
        risk_list.parquet | .csv | .jsonl   the list, schema v1 (see risk_list.py)
        diff.csv | diff.jsonl               changes against the previous publish
        slurm_drain.sh                      Slurm drain script (dry run unless --apply)
        k8s_cordon.sh                       kubectl cordon + taint script
        slurm_resume.sh | k8s_uncordon.sh   undrain the nodes foreshock drained whose risk
                                            cleared (dry run unless --apply; release.py)
        npd_foreshock_check.sh              node-problem-detector custom plugin check
        npd_foreshock.json                  its plugin configuration
        rejected.csv                        score rows refused (bad id, bad risk), if any
        telemetry_health.csv | .jsonl       telemetry health findings ([health]; health_files.py)
        watch.csv | .jsonl                  units whose ECC errors or row remaps are rising
        policy_state.parquet                hysteresis / burn-in state for the next run
        manifest.json                       counts, model, files, notes (written last)
    data/outbox/LATEST                      name of the newest directory
    data/outbox/NOTIFIED                    name of the directory whose changes were last announced

The Prometheus textfile is written before the directory is renamed into place, and
notifications announce the changes since ``NOTIFIED`` (not only since the previous
publish), so a publish that fails after its directory is in place loses neither.

The folder's names (staging, ``LATEST``, the manifest) and its readers are
:mod:`foreshock.drain.outbox_files`'s; this module decides and writes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from foreshock.contract import is_valid_id
from foreshock.drain.actions import ACTIONS, format_hours
from foreshock.drain.diff import diff_risk_lists, summarize_diff
from foreshock.drain.health_files import health_gauges, publish_health, write_health_files
from foreshock.drain.kubernetes import (
    CORDON_SCRIPT,
    NPD_CONFIG,
    NPD_SCRIPT,
    UNCORDON_SCRIPT,
    cordon_script,
    npd_check_script,
    npd_plugin_config,
    uncordon_script,
)
from foreshock.drain.learned_history import learned_chooser
from foreshock.drain.lemons import lemons_at, node_map
from foreshock.drain.notify import Message, NotifySettings, drain_message, send
from foreshock.drain.outbox_files import (
    MANIFEST_FILE,
    new_name,
    newest_list_dir,
    point_latest,
    point_notified,
    read_notified,
    read_published_list,
    remove_staging_leftovers,
    staging_dir,
)
from foreshock.drain.policy import Decision, DrainPolicy
from foreshock.drain.release import nodes_to_release
from foreshock.drain.risk_list import SCHEMA_VERSION, build_risk_list, list_paths, write_risk_list
from foreshock.drain.risk_table import fleet_table, unit_risk_table
from foreshock.drain.settings import PolicySettings
from foreshock.drain.shell import one_line
from foreshock.drain.slurm import RESUME_SCRIPT, SCRIPT_NAME, resume_script, slurm_script
from foreshock.drain.state import STATE_FILE, PolicyState
from foreshock.drain.textfile import render, textfile_path, write_textfile
from foreshock.durations import format_duration, parse_duration
from foreshock.errors import UserError
from foreshock.lake.atomic import atomic_write_text
from foreshock.lake.layout import partition_files
from foreshock.lake.locks import directory_lock
from foreshock.lake.read import read_table
from foreshock.models.registry.score_files import latest_path


@dataclass
class PublishResult:
    """What a publish wrote."""

    directory: Path
    risk_list: pl.DataFrame
    diff: pl.DataFrame
    files: dict[str, Path]
    rejected: pl.DataFrame
    notes: list[str] = field(default_factory=list)
    textfile: Path | None = None
    notification: Message | None = None
    notified: bool | None = None  # None: nothing to send, or no [notify] urls

    @property
    def counts(self) -> dict[str, int]:
        return action_counts(self.risk_list)


def action_counts(risk_list: pl.DataFrame) -> dict[str, int]:
    """Units per action (every action present, zero when absent)."""
    found = dict(risk_list.group_by("action").len().iter_rows()) if risk_list.height else {}
    return {action: int(found.get(action, 0)) for action in ACTIONS}


def check_scores(scores: pl.DataFrame, source: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split score rows into usable rows and refused rows (with row, field and reason).

    Ids that are not :data:`~foreshock.contract.ID_PATTERN` ids never reach a script;
    risks must be numbers in [0, 1].
    """
    missing = [c for c in ("unit_id", "ts", "horizon", "risk") if c not in scores.columns]
    if missing:
        raise ValueError(f"{source}: missing column(s) {missing}")
    problems: list[dict[str, Any]] = []
    indexed = scores.with_row_index("_row")
    id_fields = [c for c in ("unit_id", "node", "rack") if c in scores.columns]
    for name in id_fields:
        values = indexed.select("_row", name)
        bad = [(r, v) for r, v in values.iter_rows() if not is_valid_id(v)]
        problems += [
            {"row": r, "field": name, "value": one_line(repr(v), 120), "reason": "not a valid id (ID_PATTERN)"}
            for r, v in bad
        ]
    bad_risk = indexed.filter(
        pl.col("risk").is_null() | pl.col("risk").is_nan() | (pl.col("risk") < 0) | (pl.col("risk") > 1)
    )
    problems += [
        {"row": r, "field": "risk", "value": repr(v), "reason": "risk must be a number in [0, 1]"}
        for r, v in bad_risk.select("_row", "risk").iter_rows()
    ]
    for horizon in scores.get_column("horizon").unique().to_list():
        try:
            parse_duration(horizon)
        except (ValueError, TypeError):
            rows = indexed.filter(pl.col("horizon") == horizon).get_column("_row").to_list()
            problems += [
                {"row": r, "field": "horizon", "value": one_line(repr(horizon), 60), "reason": "not a duration"}
                for r in rows
            ]
    rejected = pl.DataFrame(
        problems,
        schema={"row": pl.UInt32, "field": pl.String, "value": pl.String, "reason": pl.String},
    ).with_columns(pl.lit(source).alias("file"))
    bad_rows = set(rejected.get_column("row").to_list())
    # A unit with any refused row is dropped whole: half a unit's horizons would mislead.
    bad_units = set(indexed.filter(pl.col("_row").is_in(list(bad_rows))).get_column("unit_id").to_list())
    good = indexed.filter(~pl.col("_row").is_in(list(bad_rows)) & ~pl.col("unit_id").is_in(list(bad_units)))
    return good.drop("_row"), rejected.select("file", "row", "field", "value", "reason")


def _one_model(scores: pl.DataFrame, model: str | None, source: Path) -> pl.DataFrame:
    """The rows of one model: the policy decides on one model's risks, never a mix."""
    if "model" not in scores.columns:
        return scores
    models = sorted(str(m) for m in scores.get_column("model").unique().to_list())
    if model is not None:
        if model not in models:
            raise ValueError(f"{source}: no rows for model {model!r} (have {models})")
        return scores.filter(pl.col("model") == model)
    if len(models) > 1:
        raise ValueError(f"{source}: scores of several models {models}: choose one (--model)")
    return scores


def load_state(outbox_dir: Path, previous_dir: Path | None) -> PolicyState:
    """The policy state the newest complete publish left (empty on the first publish).

    Outboxes written before the state moved into each directory kept it at
    ``data/outbox/policy_state.parquet``: read there when no directory has one.
    """
    if previous_dir is not None and (previous_dir / STATE_FILE).is_file():
        return PolicyState.load(previous_dir / STATE_FILE)
    return PolicyState.load(Path(outbox_dir) / STATE_FILE)


def _write_script(path: Path, text: str) -> Path:
    atomic_write_text(path, text)
    os.chmod(path, 0o755)
    return path


class StaleScoresError(UserError):
    """The scores are older than ``[policy] max_score_age``."""


def check_fresh(scores_at: datetime | None, now: datetime, max_age: timedelta) -> None:
    """Refuse scores whose newest snapshot is older than ``max_age`` at ``now``.

    Raises
    ------
    StaleScoresError
        With one line that says how old, the limit, and what to run.
    """
    if scores_at is None or now - scores_at <= max_age:
        return
    raise StaleScoresError(
        f"scores are {format_duration(now - scores_at)} old (newest snapshot {scores_at:%Y-%m-%d %H:%M} UTC, "
        f"[policy] max_score_age = {format_duration(max_age)}): run `foreshock score` first, "
        "or publish them anyway with --allow-stale"
    )


def _lake_table(lake_dir: Path, table: str) -> pl.DataFrame | None:
    return read_table(lake_dir, table) if partition_files(lake_dir, table) else None


@dataclass
class Draft:
    """A publish before anything is written: the decision on the scores and its risk list."""

    generated_at: datetime
    scores_path: Path
    settings: PolicySettings
    decision: Decision
    risk_list: pl.DataFrame
    rejected: pl.DataFrame
    decision_time: datetime | None
    release: list[tuple[str, str]]
    health: Any = None  # drain.health_files: telemetry health and trends ([health])


def build_list(
    config: Any,
    scores_path: Path,
    generated_at: datetime,
    state: PolicyState,
    *,
    node_states: pl.DataFrame | None = None,
    model: str | None = None,
) -> Draft:
    """Step 1: read and check the scores, run the policy, shape the risk list."""
    settings = PolicySettings.from_config(config)
    chosen = _one_model(pl.read_parquet(scores_path), model, scores_path)
    if "model" in chosen.columns and chosen.height:  # drains follow the scoring model's own entry
        settings = settings.for_model(str(chosen.get_column("model")[0]))
    scores, rejected = check_scores(chosen, str(scores_path))
    risks = unit_risk_table(scores, settings.horizon, entry=settings.entry)
    decision_time = risks.get_column("ts").max() if risks.height else None
    now = decision_time or generated_at
    inventory, failures = _lake_table(config.lake_dir, "inventory"), _lake_table(config.lake_dir, "failures")
    drains = _lake_table(config.lake_dir, "drains")
    chooser, chooser_notes = learned_chooser(config, settings, now, failures, drains)
    decision = DrainPolicy(settings, chooser).decide(
        risks,
        now,
        state,
        inventory=inventory,
        failures=failures,
        node_states=node_states,
        lemons=lemons_at(now, failures, drains, node_map(fleet_table(risks, inventory)), settings.lemons),
    )
    decision.notes += chooser_notes
    risk_list = build_risk_list(decision.recommendations, generated_at)
    release = nodes_to_release(risk_list, decision.released, settings.exit_risk, node_states)
    return Draft(generated_at, scores_path, settings, decision, risk_list, rejected, decision_time, release)


def write_exports(draft: Draft, diff: pl.DataFrame, directory: Path, npd_max_age: timedelta) -> dict[str, Path]:
    """Step 2: the list, the diff, the scripts and the refused rows into ``directory``."""
    risk_list, generated_at = draft.risk_list, draft.generated_at
    files = {f"risk_list.{k}": v for k, v in write_risk_list(risk_list, directory).items()}
    files["diff.csv"] = directory / "diff.csv"
    atomic_write_text(files["diff.csv"], diff.write_csv())
    files["diff.jsonl"] = directory / "diff.jsonl"
    atomic_write_text(files["diff.jsonl"], diff.write_ndjson())
    files[SCRIPT_NAME] = _write_script(directory / SCRIPT_NAME, slurm_script(risk_list, generated_at))
    files[CORDON_SCRIPT] = _write_script(directory / CORDON_SCRIPT, cordon_script(risk_list, generated_at))
    files[RESUME_SCRIPT] = _write_script(directory / RESUME_SCRIPT, resume_script(draft.release, generated_at))
    files[UNCORDON_SCRIPT] = _write_script(directory / UNCORDON_SCRIPT, uncordon_script(draft.release, generated_at))
    npd = npd_check_script(risk_list, generated_at, draft.decision_time or generated_at, npd_max_age)
    files[NPD_SCRIPT] = _write_script(directory / NPD_SCRIPT, npd)
    files[NPD_CONFIG] = directory / NPD_CONFIG
    atomic_write_text(files[NPD_CONFIG], npd_plugin_config(f"/etc/node-problem-detector/plugin/{NPD_SCRIPT}"))
    if draft.health is not None:
        files.update(write_health_files(draft.health, risk_list, directory))
    if draft.rejected.height:
        files["rejected.csv"] = directory / "rejected.csv"
        atomic_write_text(files["rejected.csv"], draft.rejected.write_csv())
    return files


def manifest(draft: Draft, diff: pl.DataFrame, files: dict[str, Path], previous_dir: Path | None) -> dict[str, Any]:
    """Step 3: what the directory holds (counts, model, files, notes)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "generated_at": draft.generated_at.isoformat(),
        "decision_time": draft.decision_time.isoformat() if draft.decision_time else None,
        "scores": str(draft.scores_path),
        "previous": previous_dir.name if previous_dir else None,
        "horizon": draft.settings.horizon,
        "actions": action_counts(draft.risk_list),
        "new_drains": draft.decision.new_drains,
        "released_units": draft.decision.released,
        "released_nodes": [node for node, _ in draft.release],
        "diff": summarize_diff(diff),
        "rejected_rows": draft.rejected.height,
        "notes": draft.decision.notes,
        "files": sorted(p.name for p in files.values()) + [MANIFEST_FILE],
    }


def write_directory(
    draft: Draft, diff: pl.DataFrame, previous_dir: Path | None, staging: Path, npd_max_age: timedelta
) -> dict[str, Path]:
    """Steps 2-3 into a fresh staging directory: exports, policy state, then the manifest."""
    staging.mkdir(parents=True)
    files = write_exports(draft, diff, staging, npd_max_age)
    draft.decision.state.save(staging / STATE_FILE)
    files[STATE_FILE] = staging / STATE_FILE
    files[MANIFEST_FILE] = staging / MANIFEST_FILE
    atomic_write_text(files[MANIFEST_FILE], json.dumps(manifest(draft, diff, files, previous_dir), indent=2) + "\n")
    return files


def publish(
    config: Any,
    scores_path: Path | None = None,
    *,
    generated_at: datetime | None = None,
    node_states: pl.DataFrame | None = None,
    npd_max_age: timedelta | None = None,
    model: str | None = None,
    allow_stale: bool = False,
) -> PublishResult:
    """Run the policy on the latest scores and write a new outbox directory.

    Parameters
    ----------
    config
        The loaded :class:`~foreshock.config.Config`.
    scores_path
        Live scores (default ``data/scores/latest.parquet``).
    generated_at
        The publish time (default: now, UTC); names the directory.
    node_states
        Scheduler node states (``node, state, reason``) so nodes another tool holds are
        left alone (see :func:`foreshock.drain.slurm.read_sinfo`).
    npd_max_age
        How old the NPD check's embedded list may get before it answers "unknown"
        (default ``[policy] export_max_age``).
    model
        Which model's rows to use when the scores hold several (``model`` column).
    allow_stale
        Publish scores older than ``[policy] max_score_age`` anyway.

    Raises
    ------
    StaleScoresError
        When the newest scores are older than ``[policy] max_score_age`` (and not
        ``allow_stale``); nothing is written.
    """
    # Over 80 lines for its docstring (27 lines): the body itself is 52 lines.
    scores_path = Path(scores_path or latest_path(config.scores_dir))
    if not scores_path.is_file():
        raise FileNotFoundError(f"no scores to publish: {scores_path} (run scoring first)")
    generated_at = (generated_at or datetime.now(UTC)).astimezone(UTC)
    notify = NotifySettings.from_config(config)  # a bad [notify] section stops before anything is written
    outbox_dir = Path(config.outbox_dir)
    with directory_lock(outbox_dir):  # one publish at a time: the previous list must not move
        remove_staging_leftovers(outbox_dir)
        previous_dir = newest_list_dir(outbox_dir)
        draft = build_list(
            config,
            scores_path,
            generated_at,
            load_state(outbox_dir, previous_dir),
            node_states=node_states,
            model=model,
        )
        if not allow_stale:
            check_fresh(draft.decision_time, generated_at, config.duration("policy", "max_score_age"))
        draft.health, draft.risk_list = publish_health(config, draft.risk_list)
        previous = read_published_list(previous_dir) if previous_dir else None
        diff = diff_risk_lists(previous, draft.risk_list)
        name = new_name(outbox_dir, generated_at)
        staging = staging_dir(outbox_dir, name)
        max_age = npd_max_age or config.duration("policy", "export_max_age")
        files = write_directory(draft, diff, previous_dir, staging, max_age)
        # The textfile before the directory is in place: if it cannot be written, the
        # publish fails whole and the next one finds (and announces) the same changes.
        metrics = write_textfile(
            textfile_path(config),
            render(
                draft.risk_list,
                generated_at=generated_at,
                scores_at=draft.decision_time,
                new_drains=len(draft.decision.new_drains),
            )
            + health_gauges(draft.health),
        )
        if read_notified(outbox_dir) is None:  # the first publish to announce: from the list before it
            point_notified(outbox_dir, previous_dir.name if previous_dir else "")
        directory = outbox_dir / name
        os.rename(staging, directory)  # the directory appears complete or not at all
        point_latest(outbox_dir, name)
        result = PublishResult(
            directory=directory,
            risk_list=draft.risk_list,
            diff=diff,
            files={key: directory / path.name for key, path in files.items()},
            rejected=draft.rejected,
            notes=draft.decision.notes,
            textfile=metrics,
        )
        result.notification = _notify(notify, result, outbox_dir, previous_dir)
    return result


def _notify(
    settings: NotifySettings, result: PublishResult, outbox_dir: Path, previous_dir: Path | None
) -> Message | None:
    """Tell ``[notify] urls`` about new and escalated drains since the last list whose
    changes were announced (``NOTIFIED``), not only since the previous publish: a publish
    that stopped after its directory was in place (killed, a receiver down) leaves its
    changes to the next one.  ``NOTIFIED`` moves on once every URL took the message (or
    there was nothing to send)."""
    announced = read_notified(outbox_dir)
    diff = result.diff
    if announced == "":
        diff = diff_risk_lists(None, result.risk_list)
    elif announced and announced != (previous_dir.name if previous_dir else None):
        base = outbox_dir / announced
        if list_paths(base)["parquet"].is_file():  # else removed since: the publish's own changes
            diff = diff_risk_lists(read_published_list(base), result.risk_list)
    message = drain_message(diff, result.risk_list, settings.min_action, str(result.directory))
    if message is not None and settings.urls:
        result.notified = send(message, settings)
    if result.notified is not False:
        point_notified(outbox_dir, result.directory.name)
    return message


def format_top(risk_list: pl.DataFrame, limit: int = 10) -> str:
    """A short text table of the most severe recommendations (for the terminal)."""
    top = risk_list.filter(pl.col("action") != "none").head(limit)
    if top.height == 0:
        return "no unit above the watch level"
    lines = [f"{'unit':<24} {'node':<16} {'action':<20} {'risk':>5} {'lead':>6}  reason"]
    for row in top.iter_rows(named=True):
        lead = row.get("expected_lead_time_h")
        lead_text = format_hours(lead) if lead is not None else "-"
        lines.append(
            f"{row['unit_id']:<24} {row['node'] or '-':<16} {row['action']:<20} "
            f"{row['risk']:>5.2f} {lead_text:>6}  {one_line(row['reason'], 90)}"
        )
    return "\n".join(lines)
