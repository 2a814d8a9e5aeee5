"""Row accounting of an ingest run: per file and in total, always adding up.

For every file ``rows_read == rows_stored + rows_updated + rows_quarantined + duplicates_dropped``:
``rows_stored`` counts rows with a key new to the lake, ``rows_updated`` inventory rows that
replaced the stored row of their unit (a changed export: the last ingested wins), and
``duplicates_dropped`` rows identical to (or, for telemetry, with the key of) a stored row.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from foreshock.lake.atomic import atomic_write_text

COUNTS = ("rows_read", "rows_stored", "rows_updated", "rows_quarantined", "duplicates_dropped")


@dataclass
class FileReport:
    """What happened to one file.

    ``status`` is ``ingested``, ``already ingested`` (manifest hit: nothing read),
    ``skipped`` (not telemetry) or ``rejected`` (could not be parsed; ``reason`` says why).
    """

    path: str
    format: str | None
    status: str
    rows_read: int = 0
    rows_stored: int = 0
    rows_quarantined: int = 0
    duplicates_dropped: int = 0
    reason: str | None = None
    rows_updated: int = 0

    @property
    def adds_up(self) -> bool:
        return self.rows_read == self.rows_stored + self.rows_updated + self.rows_quarantined + self.duplicates_dropped


@dataclass
class IngestReport:
    """The accounting of one ``foreshock ingest`` run."""

    run_id: str
    source: str
    path: str
    files: list[FileReport] = field(default_factory=list)
    quarantine_files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def total(self, name: str) -> int:
        return sum(getattr(f, name) for f in self.files)

    @property
    def totals(self) -> dict[str, int]:
        return {name: self.total(name) for name in COUNTS}

    @property
    def adds_up(self) -> bool:
        t = self.totals
        return (
            all(f.adds_up for f in self.files)
            and t["rows_read"] == t["rows_stored"] + t["rows_updated"] + t["rows_quarantined"] + t["duplicates_dropped"]
        )

    def by_status(self, status: str) -> list[FileReport]:
        return [f for f in self.files if f.status == status]

    def to_dict(self) -> dict:
        return {
            "run_id": self.run_id,
            "source": self.source,
            "path": self.path,
            "seconds": round(self.seconds, 3),
            "totals": self.totals,
            "files_by_status": {s: len(self.by_status(s)) for s in sorted({f.status for f in self.files})},
            "adds_up": self.adds_up,
            "quarantine_files": self.quarantine_files,
            "notes": self.notes,
            "files": [asdict(f) for f in self.files],
        }

    def write(self, runs_dir: Path) -> Path:
        path = Path(runs_dir) / f"{self.run_id}.json"
        atomic_write_text(path, json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    def render(self, max_files: int = 40) -> str:
        """Human summary: every file when few, else per format plus the files with problems."""
        lines = [f"ingest run {self.run_id}: {len(self.files)} file(s) under {self.path} in {self.seconds:.1f}s"]
        header = (
            "  "
            + " ".join(f"{name:>11}" for name in ("read", "stored", "updated", "quarantined", "duplicates"))
            + "  file"
        )
        shown = (
            self.files
            if len(self.files) <= max_files
            else [f for f in self.files if f.status == "rejected" or f.rows_quarantined]
        )
        if len(self.files) > max_files:
            lines.append("  by format:")
            lines.append(header)
            formats = sorted({f.format or "?" for f in self.files})
            for fmt in formats:
                group = [f for f in self.files if (f.format or "?") == fmt]
                sums = [sum(getattr(f, n) for f in group) for n in COUNTS]
                lines.append("  " + " ".join(f"{n:>11,}" for n in sums) + f"  {fmt} ({len(group)} files)")
            if shown:
                lines.append("  files with quarantined rows or rejected:")
        if shown:
            lines.append(header)
        for f in shown:
            tail = f"  [{f.status}{': ' + f.reason if f.reason else ''}]" if f.status != "ingested" or f.reason else ""
            lines.append("  " + " ".join(f"{getattr(f, n):>11,}" for n in COUNTS) + f"  {f.path}{tail}")
        t = self.totals
        lines.append(
            f"  total: read {t['rows_read']:,} = stored {t['rows_stored']:,} + updated {t['rows_updated']:,}"
            f" + quarantined {t['rows_quarantined']:,}"
            f" + duplicates {t['duplicates_dropped']:,}" + ("" if self.adds_up else "  (DOES NOT ADD UP)")
        )
        counts = {s: len(self.by_status(s)) for s in ("ingested", "already ingested", "skipped", "rejected")}
        lines.append("  files: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
        lines += [f"  note: {n}" for n in self.notes]
        if self.quarantine_files:
            lines.append(
                f"  quarantine: {', '.join(self.quarantine_files[:3])}{' ...' if len(self.quarantine_files) > 3 else ''}"
            )
        return "\n".join(lines)
