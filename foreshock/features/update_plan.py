"""What a staged features run computes: :class:`UpdatePlan` (the spans of snapshots, in
blocks, chunks and days), the stored snapshots that late rows can change
(:func:`late_spans`), and the time arithmetic of snapshot boundaries.  Built by
:func:`foreshock.features.build.plan_update`; run by its ``apply_update`` or the flow."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from foreshock.features.day_rollups import days_between
from foreshock.features.spec import FeatureSpec


def floor_to(moment: datetime, every: timedelta) -> datetime:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return epoch + ((moment - epoch) // every) * every


def ceil_to(moment: datetime, every: timedelta) -> datetime:
    floor = floor_to(moment, every)
    return floor if floor == moment else floor + every


def as_utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


@dataclass(frozen=True)
class UpdatePlan:
    """Snapshots a run computes: one or more spans ``(first, last)``, in blocks of whole
    days, and how many entries of the lake's change log the run handles.

    Spans are the snapshots after the last stored one, plus, for rows that arrived late
    (older than snapshots already stored), the snapshots those rows can affect, plus what
    an interrupted run left to do (:mod:`features.resume`).  Every
    span is computed for every shard (the peer features of a snapshot need all of them).
    ``block`` and ``max_task_rows`` are ``[features] block_days`` and ``max_task_rows``:
    they bound what one first-pass task holds (:meth:`blocks`, :meth:`block_groups`).
    """

    spans: tuple[tuple[datetime, datetime], ...]
    shards: int
    block: timedelta
    max_task_rows: int
    changes: int = 0
    units: int = 0  # units in the inventory (0: unknown, one block per task)
    # features.resume.changes_digest of the handled entries; None for a run over part of
    # the snapshots (--start/--end), which handles no entry and records no progress
    digest: str | None = None

    @property
    def first(self) -> datetime:
        return self.spans[0][0]

    @property
    def last(self) -> datetime:
        return self.spans[-1][1]

    @property
    def days(self) -> list[date]:
        return [day for day, _, _ in self.day_spans()]

    def day_spans(self) -> list[tuple[date, datetime, datetime]]:
        """``(date, lo, hi)``: the snapshots of each date the plan computes."""
        out = []
        for lo, hi in self.spans:
            for day in days_between(lo, hi):
                start = datetime.combine(day, datetime.min.time(), tzinfo=UTC)
                out.append((day, max(lo, start), min(hi, start + timedelta(days=1) - timedelta(microseconds=1))))
        return out

    def blocks(self) -> list[tuple[datetime, datetime]]:
        # Blocks end at midnight so that a date's staged file comes from one block; a
        # remainder shorter than a day joins the block before it (a block of one snapshot
        # would cost a whole lookback of work).
        out = []
        for first, last in self.spans:
            lo = first
            while lo <= last:
                midnight = datetime.combine(lo.date(), datetime.min.time(), tzinfo=UTC) + self.block
                hi = min(last, midnight - timedelta(microseconds=1))
                if last - hi < timedelta(days=1):
                    hi = last
                out.append((lo, hi))
                lo = hi + timedelta(microseconds=1)
        return out

    def block_groups(self, spec: FeatureSpec) -> list[list[tuple[datetime, datetime]]]:
        """:meth:`blocks` in runs of consecutive blocks, one run per first-pass task: as
        many as fit ``max_task_rows`` grid rows of one shard (a small fleet's whole
        span in one task instead of a task per week, each rereading its lookback)."""
        per_shard = -(-self.units // self.shards)
        groups: list[list[tuple[datetime, datetime]]] = []
        rows = 0
        for lo, hi in self.blocks():
            cost = per_shard * ((hi - lo + spec.lookback) // spec.every + 1)
            touching = groups and lo == groups[-1][-1][1] + timedelta(microseconds=1)
            if per_shard and touching and rows + cost <= self.max_task_rows:
                groups[-1].append((lo, hi))
                rows += cost
            else:
                groups.append([(lo, hi)])
                rows = cost
        return groups

    def chunks(
        self, spec: FeatureSpec
    ) -> list[tuple[list[tuple[datetime, datetime]], list[tuple[date, datetime, datetime]]]]:
        """The run in time order, one chunk after the other: each chunk is one of
        :meth:`block_groups` (every shard's first pass) and the :meth:`day_spans` of the
        dates it covers (their peer pass and write).  A run that writes a chunk's dates
        before staging the next holds one chunk at a time, whatever the days it covers; a
        date's snapshots lie in one block (blocks end at midnight), so in one chunk."""
        days = self.day_spans()
        out = []
        for group in self.block_groups(spec):
            lo, hi = group[0][0], group[-1][1]
            out.append((group, [span for span in days if lo <= span[1] and span[2] <= hi]))
        return out

    def summary(self, rows: int, partitions: int) -> dict:
        """What a run of this plan did, as plain values (the flow's result, the command's line):
        the first and last snapshot, the rows written and the staged partitions."""
        return {
            "snapshots_from": self.first.isoformat(),
            "snapshots_to": self.last.isoformat(),
            "rows": rows,
            "partitions": partitions,
        }


def late_spans(changes: list[dict], spec: FeatureSpec, stored: datetime) -> list[tuple[datetime, datetime]]:
    """Stored snapshots that rows merged into the lake since the last run can change.

    A sample or event at ``t`` reaches the snapshots ``T`` with ``t <= T < t + lookback``
    (a window, the counter step it starts, the thermal baseline); a failure ticket changes
    the unit's lives, its lot's and cohort's rates from ``failed_at`` on.  Only snapshots
    up to ``stored`` are returned: later ones are new snapshots anyway.
    """
    spans = []
    for change in changes:
        lo = ceil_to(as_utc(datetime.fromisoformat(change["first"])), spec.every)
        if change["table"] == "failures":
            hi = stored
        else:
            reach = as_utc(datetime.fromisoformat(change["last"])) + spec.lookback - timedelta(microseconds=1)
            hi = min(stored, floor_to(reach, spec.every))
        if lo <= hi:
            spans.append((lo, hi))
    return spans


def merged_spans(spans: list[tuple[datetime, datetime]], every: timedelta) -> tuple[tuple[datetime, datetime], ...]:
    # Spans that touch, overlap or share a date become one (a date is staged once per run).
    out: list[tuple[datetime, datetime]] = []
    for lo, hi in sorted(spans):
        if out and (lo <= out[-1][1] + every or lo.date() == out[-1][1].date()):
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)
