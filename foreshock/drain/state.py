"""What the drain policy remembers between runs (hysteresis, burn-in), persisted as Parquet.

The state is small (one row per unit that is, or recently was, above the watch level) and
is written into each outbox directory, ``data/outbox/<timestamp>/policy_state.parquet``,
which appears complete or not at all (see :mod:`foreshock.drain.outbox`), so a crashed
publish never leaves a state the next run would read.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path

import polars as pl

from foreshock.contract import UTC_TS
from foreshock.lake.atomic import atomic_write_parquet

STATE_FILE = "policy_state.parquet"

STATE_SCHEMA: dict[str, pl.DataType] = {
    "unit_id": pl.String(),
    "level": pl.Int32(),
    "drain_action": pl.String(),
    "drain_since": UTC_TS,
    "returned_after": UTC_TS,
    "returned_at": UTC_TS,
    "last_risk": pl.Float64(),
    "last_seen": UTC_TS,
    "explored": pl.Boolean(),
}
# Columns added after the first release: a state file without them reads them as null.
ADDED_COLUMNS = ("explored",)


@dataclass
class UnitState:
    """One unit's remembered status.

    Attributes
    ----------
    level
        The action level the unit held at the last run (0 none, 1 watch, 2 diagnostics,
        3 drain); hysteresis lowers it only when risk falls below that level's exit
        threshold.
    drain_action
        ``drain_now`` or ``drain_at_checkpoint`` while ``level == 3``; never de-escalates
        from ``drain_now`` while the drain lasts.
    drain_since
        When the current drain was first recommended.
    returned_after, returned_at
        The failure a repaired unit came back from, and when it was first seen back
        (its burn-in runs from then).
    explored
        The current drain is an exploratory one of the learned chooser (counts against
        ``[policy] explore_per_day``).
    """

    unit_id: str
    level: int = 0
    drain_action: str | None = None
    drain_since: datetime | None = None
    returned_after: datetime | None = None
    returned_at: datetime | None = None
    last_risk: float | None = None
    last_seen: datetime | None = None
    explored: bool | None = None


@dataclass
class PolicyState:
    """All units' remembered status, keyed by unit id."""

    units: dict[str, UnitState] = field(default_factory=dict)

    def get(self, unit_id: str) -> UnitState:
        return self.units.get(unit_id) or UnitState(unit_id=unit_id)

    def to_frame(self) -> pl.DataFrame:
        names = [f.name for f in fields(UnitState)]
        rows = {name: [getattr(u, name) for u in self.units.values()] for name in names}
        return pl.DataFrame(rows, schema=STATE_SCHEMA)

    @classmethod
    def from_frame(cls, frame: pl.DataFrame) -> PolicyState:
        missing = [c for c in STATE_SCHEMA if c not in frame.columns and c not in ADDED_COLUMNS]
        if missing:
            raise ValueError(f"policy state: missing column(s) {missing}")
        frame = frame.with_columns(
            pl.lit(None, dtype=STATE_SCHEMA[c]).alias(c) for c in ADDED_COLUMNS if c not in frame.columns
        )
        units = {row["unit_id"]: UnitState(**row) for row in frame.select(list(STATE_SCHEMA)).to_dicts()}
        return cls(units=units)

    def save(self, path: Path) -> None:
        atomic_write_parquet(self.to_frame(), Path(path))

    @classmethod
    def load(cls, path: Path) -> PolicyState:
        """Load the state file; an absent file is an empty state (first run)."""
        path = Path(path)
        if not path.exists():
            return cls()
        try:
            frame = pl.read_parquet(path)
        except (OSError, pl.exceptions.PolarsError) as exc:  # stop the run; never reset hysteresis
            raise ValueError(f"{path}: cannot read policy state: {exc}") from None
        try:
            return cls.from_frame(frame)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
