"""What every parser and check needs to know about the run: catalog, inventory, clock."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import polars as pl

from foreshock.catalog import Catalog
from foreshock.config import Config
from foreshock.lake.read import read_table

# Time units a source may declare for violation counters (DCGM < 3.3 reports µs, later ns).
TIME_UNIT_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def normalise_pci(value: str | None) -> str | None:
    """``00000000:3B:00.0`` / ``0000:3b:00`` / ``3b:00.0`` -> ``0000:3b:00`` (domain:bus:device)."""
    if value is None:
        return None
    match = re.match(r"^\s*(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.[0-7])?\s*$", value)
    if not match:
        return None
    domain = int(match.group(1) or "0", 16)
    return f"{domain:04x}:{int(match.group(2), 16):02x}:{int(match.group(3), 16):02x}"


def check_timezone(name: str | None) -> str | None:
    """``name`` if it is an IANA zone (or empty/None -> None), else ValueError."""
    if not name:
        return None
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown timezone {name!r} (use an IANA name such as 'UTC' or 'Europe/Berlin')") from None
    return name


def lake_compression_level(config: Config) -> int:
    """``[lake] compression_level``: the zstd level of every lake file ingest writes."""
    return int(config.section("lake")["compression_level"])


@dataclass
class IngestContext:
    """Settings and lookups shared by the parsers and the validation of one batch.

    Parameters
    ----------
    catalog
        Metric catalog used to map source names (aliases) to canonical metrics.
    inventory
        The lake's inventory (empty when none was ingested yet: unit checks are skipped).
    timezone
        Zone for naive timestamps, or None to reject them.
    now
        The run's clock; timestamps later than ``now + max_future`` are quarantined.
    """

    catalog: Catalog
    inventory: pl.DataFrame
    lake_dir: Path
    timezone: str | None = None
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    max_future: timedelta = timedelta(hours=1)
    scrape_time: datetime | None = None
    violation_unit: str = "us"
    shards: int = 8
    # Parsing ahead of the batch's turn: a parser that would read stored rows (other than
    # the inventory) says so (``ParsedFile.reads_lake``) instead, and is parsed again in it.
    ahead: bool = False
    _lookups: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_config(
        cls,
        config: Config,
        *,
        catalog: Catalog | None = None,
        timezone_name: str | None = None,
        scrape_time: datetime | None = None,
        now: datetime | None = None,
    ) -> IngestContext:
        section = config.section("ingest")
        tz = check_timezone(timezone_name or section.get("timezone") or None)
        unit = str(section["violation_unit"])
        if unit not in TIME_UNIT_SECONDS:
            raise ValueError(f"[ingest] violation_unit must be one of {sorted(TIME_UNIT_SECONDS)}, got {unit!r}")
        return cls(
            catalog=catalog or config.catalog,
            inventory=read_table(config.lake_dir, "inventory"),
            lake_dir=config.lake_dir,
            timezone=tz,
            now=now or datetime.now(UTC),
            max_future=config.duration("ingest", "max_future"),
            scrape_time=scrape_time,
            violation_unit=unit,
            shards=config.shards,
        )

    @property
    def has_inventory(self) -> bool:
        return self.inventory.height > 0

    def _column_map(self, column: str, normalise=None) -> dict[str, str]:
        key = f"map:{column}"
        if key not in self._lookups:
            mapping: dict[str, str] = {}
            if column in self.inventory.columns:
                for unit, value in self.inventory.select("unit_id", column).iter_rows():
                    if value is None:
                        continue
                    value = normalise(value) if normalise else value
                    if value is not None:
                        mapping[value] = unit
            self._lookups[key] = mapping
        return self._lookups[key]

    def unit_by_uuid(self) -> dict[str, str]:
        """Inventory ``uuid`` -> unit_id."""
        return self._column_map("uuid")

    def unit_by_host_pci(self) -> dict[str, str]:
        """``"<node>|<domain:bus:device>"`` -> unit_id, from the inventory's ``pci_bus_id``."""
        key = "map:host_pci"
        if key not in self._lookups:
            mapping = {}
            if {"pci_bus_id", "node"} <= set(self.inventory.columns):
                for unit, node, pci in self.inventory.select("unit_id", "node", "pci_bus_id").iter_rows():
                    norm = normalise_pci(pci)
                    if norm and node:
                        mapping[f"{node}|{norm}"] = unit
            self._lookups[key] = mapping
        return self._lookups[key]

    def known_units(self) -> pl.Series:
        return self.inventory.get_column("unit_id") if self.has_inventory else pl.Series([], dtype=pl.String)

    def known_nodes(self) -> pl.Series:
        return self.inventory.get_column("node").unique() if self.has_inventory else pl.Series([], dtype=pl.String)

    def known_node_names(self) -> set[str]:
        """The inventory's nodes, as a set (made once per context: a parser asks per file)."""
        if "set:nodes" not in self._lookups:
            self._lookups["set:nodes"] = set(self.known_nodes().to_list())
        return self._lookups["set:nodes"]
