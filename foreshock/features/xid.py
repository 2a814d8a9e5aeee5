"""Known NVIDIA XID codes and the failure class each one points at.

Source: NVIDIA, "XID Errors" (docs.nvidia.com/deploy/xid-errors), the catalog of XID codes
with their causes (hardware, driver, application, thermal, bus).  The classes below group
the codes the way a GPU fleet operator triages them:

- ``memory``: 48 (double-bit ECC error), 63 (ECC page retirement / row-remapping
  recording event), 64 (page retirement / row-remapping failure), 92 (high single-bit ECC
  rate), 94 (contained ECC error), 95 (uncontained ECC error).
- ``bus``: 79 (GPU has fallen off the bus), 74 (NVLink error), 119 and 120 (GSP RPC
  timeout / GSP error, reported when the GPU's system processor stops answering the host:
  in practice a link or firmware hang that ends like a bus drop).
- ``thermal``: no XID code is a thermal report in NVIDIA's catalog; thermal trouble shows
  up as clock-event reasons and violation counters (gauge/counter metrics) instead.  The
  class is kept so the feature set has the same columns on every catalog.
- ``other``: every other code, known or not (mostly application or driver faults such as
  13, 31, 43, 45).
"""

from __future__ import annotations

XID_CLASSES: dict[str, tuple[int, ...]] = {
    "memory": (48, 63, 64, 92, 94, 95),
    "bus": (79, 74, 119, 120),
    "thermal": (),
}
XID_CLASS_NAMES: tuple[str, ...] = ("memory", "bus", "thermal", "other")

# Codes that get their own count column: the classified ones plus the frequent
# application/driver codes that operators look at when a node misbehaves.
KNOWN_XID_CODES: tuple[int, ...] = (13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120)

# Event sources that carry XID codes: kernel log lines and dcgm-exporter's XID gauge
# turned into events by ingest.
XID_SOURCES: tuple[str, ...] = ("xid", "dcgm-xid")


def xid_class(code: int) -> str:
    """Failure class of an XID code: ``memory``, ``bus``, ``thermal`` or ``other``."""
    for name, codes in XID_CLASSES.items():
        if code in codes:
            return name
    return "other"
