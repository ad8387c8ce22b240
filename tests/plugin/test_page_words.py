"""The plugin pages' words: a count of one is singular."""

from __future__ import annotations

from airflow_provider_skynomad.plugin.pages import dashboard_page

from .seed import empty_markets_page


def test_the_dashboard_says_1_day_not_1_days():
    html = dashboard_page([], days=1, job_href=lambda *a: "")
    assert "the last 1 day that you may read" in html
    assert ">1 day</a>" in html and ">7 days</a>" in html
    assert "1 days" not in html


def test_the_markets_page_says_1_day_not_1_days():
    html = empty_markets_page("sqlite://", days=1)
    assert "The last 1 day of the market table" in html
    assert "1 days" not in html
