"""The one-line reasons the drain policy gives operators for each unit's action.

Each reason says what the policy saw (the risk within the decision horizon, the expected
lead time, the top signals) and which rule decided: a threshold, the hold, the cost model.
"""

from __future__ import annotations

from foreshock.drain.actions import DIAGNOSTICS_COMMAND, format_hours, signals_text
from foreshock.drain.risk_table import entry_of, failure_risk, risk_column
from foreshock.drain.settings import LEVEL_DIAGNOSTICS, LEVEL_NONE, PolicySettings
from foreshock.durations import format_duration


def fmt_risk(value: float) -> str:
    return f"{value:.2f}"


class Reasons:
    """Reason texts under one policy's settings."""

    def __init__(self, settings: PolicySettings) -> None:
        self.settings = settings

    def risk_phrase(self, row: dict) -> str:
        second = self.settings.entry.second_horizon
        also = row.get(risk_column(second)) if second else None
        extra = f", P(fail<{second})={fmt_risk(also)}" if also is not None else ""
        return (
            f"P(fail<{self.settings.horizon})={fmt_risk(row['risk'])}{extra}, "
            f"lead ~{format_hours(row.get('lead_time_h'))}"
        )

    def threshold_phrase(self) -> str:
        """``0.50``, or ``0.50 (or 0.40 at 24h)`` with a second horizon (``0.40 at 24h`` when
        only the second horizon enters drain)."""
        entry = self.settings.entry
        if entry.second_only:
            return f"{fmt_risk(entry.second_enter_risk)} at {entry.second_horizon}"
        also = f" (or {fmt_risk(entry.second_enter_risk)} at {entry.second_horizon})" if entry.second_horizon else ""
        return f"{fmt_risk(entry.decision_threshold)}{also}"

    def with_signals(self, text: str, row: dict) -> str:
        signals = signals_text(row.get("top_signals"))
        return f"{text}; signals: {signals}" if signals else text

    def drain(self, row: dict, drain_action: str | None, continuing: bool, saving: float) -> str:
        """A drain: now or after the next checkpoint, with its expected saving."""
        interval = format_duration(self.settings.costs.checkpoint_interval)
        when = (
            f"expected before the next checkpoint (every {interval})"
            if drain_action == "drain_now"
            else f"after the next checkpoint (every {interval})"
        )
        lead = "continuing drain" if continuing else "drain"
        text = f"{lead} {when}: {self.risk_phrase(row)}, expected saving {saving:.0f} GPU-h"
        return self.with_signals(text, row)

    def level(self, row: dict, level: int, previous: int, held: bool) -> str:
        """A level below drain: why the unit is there (``held``: its risk has stayed at or
        above ``enter_risk`` for ``enter_for``)."""
        s = self.settings
        risk = row["risk"]
        entry = entry_of(row)
        if level == LEVEL_NONE:
            base = f"below watch ({fmt_risk(s.watch_risk)})"
            if previous > LEVEL_NONE:
                base = f"cleared: risk fell below {fmt_risk(s.exit_threshold(previous))}"
            return f"{base}: {self.risk_phrase(row)}" if risk is not None else "no risk score"
        if level == LEVEL_DIAGNOSTICS:
            costs = s.costs
            p = failure_risk(row, s.entry)
            if entry >= s.enter_risk and not held:
                if s.entry.holds(s.enter_for)[s.horizon] != s.enter_for:
                    # each way in has its own hold: name both, so "why not drained" reads as the rule
                    wait = f"but not yet held: drain once {s.entry.describe(s.enter_for)} "
                    wait += f"({s.entry_table} decision_enter_for, enter_for)"
                else:
                    wait = (
                        f"for less than {format_duration(s.enter_for)} ({s.entry_table} enter_for): drain once it holds"
                    )
                text = f"run `{DIAGNOSTICS_COMMAND}`: {self.risk_phrase(row)}, above {self.threshold_phrase()} {wait}"
            elif entry >= s.enter_risk and costs.expected_loss(p) <= costs.expected_drain_cost(p):
                text = (
                    f"run `{DIAGNOSTICS_COMMAND}`: a drain would cost more than it saves "
                    f"({costs.expected_drain_cost(p):.0f} vs {costs.expected_loss(p):.0f} GPU-h); "
                    f"{self.risk_phrase(row)}"
                )
            elif s.entry.second_only and risk is not None and risk >= s.enter_risk:
                # the decision risk alone never drains: say what would, so a high P(fail<72h)
                # on a unit that is not drained reads as the rule, not as a fault
                text = (
                    f"run `{DIAGNOSTICS_COMMAND}`: {self.risk_phrase(row)}; drains wait for "
                    f"P(fail<{s.entry.second_horizon}) >= {fmt_risk(s.entry.second_enter_risk)} held "
                    f"{format_duration(s.enter_for)} "
                    "([policy] second_only)"
                )
            else:
                text = f"run `{DIAGNOSTICS_COMMAND}`: {self.risk_phrase(row)} above {fmt_risk(s.diagnostics_risk)}"
        else:
            text = f"watch: {self.risk_phrase(row)} above {fmt_risk(s.watch_risk)}"
        if level < previous:
            text += " (lowered, hysteresis)"
        return self.with_signals(text, row)
