"""Notifications: one message per publish about new and escalated drains, through apprise.

``[notify] urls`` lists apprise URLs (Slack ``slack://...``, PagerDuty ``pagerduty://...``,
a generic JSON webhook ``json://host:port/path``, mail ``mailto://...``; see the apprise
documentation).  A publish sends one message when its diff has units that became, or
escalated to, at least ``[notify] min_action`` (a drain by default); nothing when nothing
changed.  Sending happens after the outbox directory is in place: a notification that
fails is logged and retried (``attempts``, ``retry_delay``, doubling) and never fails the
publish; its changes are announced again by the next publish (the outbox's ``NOTIFIED``
names the last list announced, see :mod:`foreshock.drain.outbox`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import timedelta

import polars as pl

from foreshock.drain.actions import SEVERITY, format_hours, signals_text
from foreshock.drain.shell import one_line
from foreshock.redaction import redact_url

log = logging.getLogger(__name__)

NOTIFIED_CHANGES = ("new", "escalated")


@dataclass(frozen=True)
class NotifySettings:
    """``[notify]``: where to send, from which action up, how hard to try."""

    urls: tuple[str, ...]
    min_action: str
    attempts: int
    retry_delay: timedelta

    @classmethod
    def from_config(cls, config) -> NotifySettings:
        section = config.section("notify")
        min_action = str(section["min_action"])
        if min_action not in SEVERITY or min_action == "none":
            raise ValueError(f"{config.source}: [notify] min_action must be one of {list(SEVERITY)[1:]}")
        attempts = int(section["attempts"])
        if attempts < 1:
            raise ValueError(f"{config.source}: [notify] attempts must be at least 1")
        return cls(
            urls=tuple(str(u) for u in section["urls"]),
            min_action=min_action,
            attempts=attempts,
            retry_delay=config.duration("notify", "retry_delay"),
        )


@dataclass(frozen=True)
class Message:
    title: str
    body: str
    units: list[str]


def drain_message(diff: pl.DataFrame, risk_list: pl.DataFrame, min_action: str, outbox: str) -> Message | None:
    """The message for one publish, or ``None`` when no unit became or escalated to
    ``min_action`` or above.

    One line per unit: unit, node, action, risk (horizon), expected lead time and the top
    signals; then the model version the list came from and the outbox directory.
    """
    floor = SEVERITY[min_action]
    changed = diff.filter(
        pl.col("change").is_in(NOTIFIED_CHANGES)
        & (pl.col("action").replace_strict(SEVERITY, return_dtype=pl.Int32) >= floor)
    )
    if changed.height == 0:
        return None
    rows = risk_list.join(changed.select("unit_id", "change"), on="unit_id", how="inner").sort(
        ["severity", "risk", "unit_id"], descending=[True, True, False]
    )
    lines = []
    for row in rows.iter_rows(named=True):
        signals = signals_text(row.get("top_signals")) or "-"
        lines.append(
            one_line(
                f"{row['change']}: {row['unit_id']} on {row['node'] or '?'}: {row['action']}, "
                f"P(fail<{row['horizon']})={row['risk']:.2f}, lead ~{format_hours(row['expected_lead_time_h'])}, "
                f"signals: {signals}",
                400,
            )
        )
    models = sorted({(r["model_uri"] or "?", r["run_id"] or "?") for r in rows.iter_rows(named=True)})
    lines.append("model: " + ", ".join(f"{uri} (run {run})" for uri, run in models))
    lines.append(f"outbox: {outbox}")
    counts = changed.group_by("action").len().sort("action")
    summary = ", ".join(f"{n} {action}" for action, n in counts.iter_rows())
    return Message(
        title=f"foreshock: {summary}",
        body="\n".join(lines),
        units=rows.get_column("unit_id").to_list(),
    )


def send(message: Message, settings: NotifySettings, *, sleep=time.sleep) -> bool:
    """Send ``message`` to every URL; retry failures with a doubling delay.

    Returns whether every URL accepted it.  Never raises: a failure is logged.
    """
    import apprise  # its plugins take most of a second to load: only when something is sent

    # apprise's own warnings can quote a URL whole (tokens and all); failures are logged here
    logging.getLogger("apprise").setLevel(logging.CRITICAL + 1)

    pending = list(settings.urls)
    delay = settings.retry_delay.total_seconds()
    for attempt in range(1, settings.attempts + 1):
        failed = []
        for url in pending:
            sender = apprise.Apprise()
            try:
                ok = sender.add(url) and sender.notify(title=message.title, body=message.body)
            except Exception as exc:  # noqa: BLE001 - a plugin error must not fail the publish
                # its text may quote the URL: the type only
                log.warning("notification to %s raised %s", redact_url(url), type(exc).__name__)
                ok = False
            if not ok:
                failed.append(url)
        if not failed:
            return True
        log.warning(
            "notification failed for %d of %d URL(s) (attempt %d of %d): %s",
            len(failed),
            len(settings.urls),
            attempt,
            settings.attempts,
            ", ".join(redact_url(u) for u in failed),
        )
        pending = failed
        if attempt < settings.attempts:
            sleep(delay)
            delay *= 2
    return False
