"""The free-signal and probe-spend tables beside the market table."""

from __future__ import annotations

import pandas as pd
import pytest

from airflow_provider_skynomad.clouds.base import Signal
from airflow_provider_skynomad.market.store.signals import ProbeSpend, SignalTable
from airflow_provider_skynomad.market.store.table import MarketTable

T0 = pd.Timestamp("2025-10-04T23:50:00Z")


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path / 'market.db'}"


def _signal(minutes=0.0, kind="placement_score", value=7.0, zone="us-east-1a"):
    return Signal(T0 + pd.Timedelta(minutes=minutes), "aws", "us-east-1", zone, "p3.2xlarge", kind, value, 1)


def test_signals_land_once_and_read_back(url):
    with SignalTable(url) as table:
        assert table.append_signals([_signal(), _signal(kind="spot_price", value=0.918)]) == 2
        assert table.append_signals([_signal()]) == 0  # a retried task: the first write wins
        rows = table.read_signals()
    assert list(rows["kind"]) == ["placement_score", "spot_price"]
    assert rows["observed_at"].iloc[0] == T0 and rows["value"].tolist() == [7.0, 0.918]


def test_the_market_table_is_untouched_and_shares_the_database(url):
    with SignalTable(url) as table:
        table.append_signals([_signal()])
    with MarketTable(url) as market:
        assert market.read().empty
        market.create()  # both schemas live side by side


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": "rumour"},
        {"value": float("nan")},
        {"value": -1.0},
        {"count": 0},
        {"observed_at": pd.Timestamp("2025-10-04T00:00:00")},
    ],
)
def test_bad_signals_are_refused_before_anything_is_written(url, bad):
    good = _signal().__dict__
    with SignalTable(url) as table:
        with pytest.raises(ValueError):
            table.append_signals([good, {**good, **bad, "zone": "us-east-1b"}])
        assert table.read_signals().empty


def test_probe_spend_per_day_and_market(url):
    probes = [
        ProbeSpend(T0, "gcp", "us-central1", "us-central1-a", "a3", 1, 1, 0.04, "in use"),
        ProbeSpend(T0 + pd.Timedelta(minutes=20), "gcp", "us-central1", "us-central1-a", "a3", 1, 0, 0.0, "in use"),
        ProbeSpend(T0 + pd.Timedelta(minutes=20), "gcp", "us-east4", "us-east4-a", "a3", 1, 1, 0.03, "baseline"),
    ]
    with SignalTable(url) as table:
        assert table.record_probes(probes) == 3
        assert table.record_probes(probes[:1]) == 0
        assert table.spent_usd(since=T0.floor("D"), until=T0.ceil("D")) == pytest.approx(0.04)
        assert table.spent_usd(since=T0.ceil("D")) == pytest.approx(0.03)
        daily = table.daily_spend()
    assert daily.to_dict("records") == [
        {"day": "2025-10-04", "cloud": "gcp", "zone": "us-central1-a", "instance_type": "a3", "probes": 1, "usd": 0.04},
        {"day": "2025-10-05", "cloud": "gcp", "zone": "us-central1-a", "instance_type": "a3", "probes": 1, "usd": 0.0},
        {"day": "2025-10-05", "cloud": "gcp", "zone": "us-east4-a", "instance_type": "a3", "probes": 1, "usd": 0.03},
    ]


def test_skynomad_market_spend_prints_cost_per_day_per_market(url, capsys):
    from airflow_provider_skynomad.cli import main

    assert main(["market", "spend", "--url", url]) == 0
    assert "no launch probes recorded" in capsys.readouterr().out
    with SignalTable(url) as table:
        table.record_probes(
            [
                ProbeSpend(T0, "gcp", "us-central1", "us-central1-a", "a3", 1, 1, 0.04, "in use"),
                ProbeSpend(T0 + pd.Timedelta(minutes=1), "gcp", "us-east4", "us-east4-a", "a3", 1, 1, 0.03, "x"),
            ]
        )
    assert main(["market", "spend", "--url", url]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "2025-10-04: $0.07 for 2 probes",
        "  gcp us-central1-a a3: $0.04 for 1 probes",
        "  gcp us-east4-a a3: $0.03 for 1 probes",
    ]
