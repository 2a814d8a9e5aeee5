"""The fleet page says how a unit enters drain as the policy does: the primary model's entry,
each way in with its hold, and its risk chart's lines at the decision risk's own levels."""

from __future__ import annotations

from datetime import timedelta

from foreshock.config import load_config
from foreshock.reporting.fleet_status import fleet_status
from foreshock.reporting.fleet_status_report import render_fleet_page
from tests.reporting.test_freshness import NEWEST, _half_filled


def test_the_page_names_the_primary_models_entry_and_draws_its_levels(tmp_path, mlflow_uri, monkeypatch):
    monkeypatch.setenv("FORESHOCK_MODELS_NAME", "entry-never-registered")
    data = tmp_path / "data"
    _half_filled(data)
    now = NEWEST + timedelta(hours=1)

    status = fleet_status(load_config(data_dir=data), now=now)
    # the default: the 72-hour risk enters at 0.6 (not [policy] enter_risk 0.5) and leaves below 0.36
    assert (status.enter_risk, round(status.exit_risk, 9)) == (0.6, 0.36)
    assert "a unit enters drain once risk_72h &gt;= 0.6 held 2d or risk_24h &gt;= 0.4 held 6h." in render_fleet_page(
        status
    )

    own = tmp_path / "cox.toml"
    own.write_text(
        '[models]\nprimary = "cox"\n\n[policy.models.cox]\ndecision_enter_risk = 0.5\ndecision_enter_for = "6h"\n'
    )
    status = fleet_status(load_config(own, data_dir=data), now=now)
    assert (status.enter_risk, round(status.exit_risk, 9)) == (0.5, 0.3)
    assert "once risk_72h &gt;= 0.5 held 6h or risk_24h &gt;= 0.4 held 6h." in render_fleet_page(status)
