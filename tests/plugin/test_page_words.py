"""The plugin pages' words: a count of one is singular."""

from __future__ import annotations

import pandas as pd

from airflow_provider_skynomad.market.overview import heatmap_from_buckets
from airflow_provider_skynomad.plugin.pages import dashboard_page, markets_page


def test_the_dashboard_says_1_day_not_1_days():
    html = dashboard_page([], days=1, job_href=lambda *a: "")
    assert "the last 1 day that you may read" in html
    assert ">1 day</a>" in html and ">7 days</a>" in html
    assert "1 days" not in html


def test_the_markets_page_says_1_day_not_1_days():
    html = markets_page(
        [],
        heatmap_from_buckets(pd.DataFrame(), pd.Timestamp.now(tz="UTC"), 0.0, 0),
        pd.DataFrame(),
        None,
        days=1,
        max_age_hours=2,
        source="sqlite://",
        can_probe=False,
    )
    assert "The last 1 day of the market table" in html
    assert "1 days" not in html
