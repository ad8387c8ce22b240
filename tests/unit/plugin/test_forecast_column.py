"""The forecast lifetime column of the markets page and `skynomad market show`: each market's own fit.

Probes on a fast simulated clock are hours apart (every 5 cloud hours at 300x). The forecast must
still tell a market whose capacity lasts half an hour from one whose capacity lasts a day, and say
when a market has too few runs of its own to fit.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import numpy as np
import pandas as pd

from airflow_provider_skynomad.cli import main
from tests.support.plugin_seed import h100_rows, seed_market

PROBE_HOURS = 2.5  # coarser than the forecaster's 2 h cap
STEADY, SHORT, NEVER = "us-central1-a", "us-west1-a", "europe-west1-c"


def coarse_probe_frame() -> pd.DataFrame:
    """STEADY: capacity for three probes in four (runs of 7.5 h). SHORT: capacity at every probe, gone
    at a second look half an hour later (runs of 0.5 h). NEVER: no capacity at all (no run)."""
    end = pd.Timestamp(datetime.now(UTC)).floor("min") - pd.Timedelta(minutes=40)
    probes = pd.date_range(end=end, periods=18, freq=f"{int(PROBE_HOURS * 60)}min")
    steady = (np.arange(len(probes)) % 4 != 3).astype(int)
    again = probes + pd.Timedelta(minutes=30)
    short = pd.concat([h100_rows(SHORT, probes, 1), h100_rows(SHORT, again, 0)]).sort_values("observed_at")
    frame = pd.concat([h100_rows(STEADY, probes, steady), short, h100_rows(NEVER, probes, 0)], ignore_index=True)
    frame["observed_at"] = frame["observed_at"].astype("datetime64[us, UTC]")
    return frame


def test_markets_probed_hours_apart_get_their_own_forecasts_on_the_page_and_in_market_show(tmp_path, capsys):
    from airflow_provider_skynomad.market.store.table import MarketTable
    from airflow_provider_skynomad.plugin.markets import market_summary
    from airflow_provider_skynomad.plugin.pages import markets_page

    url = f"sqlite:///{tmp_path / 'market.db'}"
    seed_market(url, coarse_probe_frame())
    now = pd.Timestamp(datetime.now(UTC))
    table = MarketTable(url)
    try:
        heat, prices, page_rows = market_summary(table, now - pd.Timedelta(days=7), now, 10.0)
    finally:
        table.close()
    page = {r.zone: r for r in page_rows}
    assert page[SHORT].forecast_lifetime_hours < 1.5 < page[STEADY].forecast_lifetime_hours
    assert page[STEADY].forecast_text() == f"{page[STEADY].forecast_lifetime_hours:.2f} h"
    assert page[NEVER].forecast_runs == 0
    assert page[NEVER].forecast_text() == f"too few runs seen: prior {page[NEVER].forecast_lifetime_hours:.2f} h"

    html = markets_page(page_rows, heat, prices, [], days=7, max_age_hours=10.0, source="test", can_probe=False)
    assert "too few runs seen: prior" in html and page[SHORT].forecast_text() in html

    assert main(["market", "show", "--url", url, "--json", "--max-age-hours", "10"]) == 0
    shown = {r["zone"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    for zone, row in page.items():
        assert shown[zone]["forecast_lifetime_hours"] == row.forecast_lifetime_hours, zone
        assert shown[zone]["forecast_runs"] == row.forecast_runs, zone
    assert main(["market", "show", "--url", url, "--max-age-hours", "10"]) == 0
    assert "too few runs seen" in capsys.readouterr().out
