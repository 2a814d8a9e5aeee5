"""The fleet page shows a unit's expected lead time as the terminal does."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import polars as pl

from foreshock.drain.outbox import format_top
from foreshock.reporting.fleet_status import FleetStatus
from foreshock.reporting.fleet_status_report import render_fleet_page


def _risk_list() -> pl.DataFrame:
    # a unit whose hazard says "not within a year" (no failure expected in any horizon),
    # one due in about a day and a half, one without an estimate
    return pl.DataFrame(
        {
            "unit_id": ["gpu-node001-gpu0", "gpu-node002-gpu1", "gpu-node003-gpu2"],
            "node": ["gpu-node001", "gpu-node002", "gpu-node003"],
            "action": ["watch", "drain_now", "watch"],
            "severity": [1, 4, 1],
            "risk": [0.12, 0.81, 0.11],
            "expected_lead_time_h": [17712.0, 36.0, None],
            "reason": ["r", "r", "r"],
        }
    )


def _page_leads(risk_list: pl.DataFrame) -> dict[str, str]:
    status = FleetStatus(
        generated_at=datetime(2026, 12, 5, tzinfo=UTC),
        summary={"units": 3, "nodes": 3, "racks": 1, "failures": 0},
        top_units=risk_list.select("unit_id", "node", "action", "risk", "expected_lead_time_h").with_columns(
            pl.lit("").alias("signals")
        ),
        risk_history=None,
        top_failures=None,
        enter_risk=0.5,
        exit_risk=0.3,
        horizon="72h",
        backtest=None,
        calibration=None,
        replay=None,
        champion=None,
    )
    page = render_fleet_page(status)
    section = page[page.index('id="top-units"') :]
    rows = re.findall(r"<tr><td[^>]*>([^<]+)</td>((?:<td[^>]*>.*?</td>)+)</tr>", section)
    # the expected lead is the fifth cell: unit, node, action, risk, lead, signals
    return {unit: re.findall(r"<td[^>]*>(.*?)</td>", cells)[3] for unit, cells in rows}


def _terminal_leads(risk_list: pl.DataFrame) -> dict[str, str]:
    lines = format_top(risk_list).splitlines()[1:]
    return {line.split()[0]: line.split()[4] for line in lines}


def test_page_shows_the_lead_as_the_terminal_does():
    risk_list = _risk_list()
    page, terminal = _page_leads(risk_list), _terminal_leads(risk_list)
    assert page["gpu-node001-gpu0"] == terminal["gpu-node001-gpu0"] == ">1y"
    assert page["gpu-node002-gpu1"] == terminal["gpu-node002-gpu1"] == "36h"
    assert page["gpu-node003-gpu2"] == "–" and "17712" not in "".join(page.values())
