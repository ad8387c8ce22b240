"""The terminal twins of the plugin's pages: `skynomad plan --explain` and `skynomad market show`."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from airflow_provider_skynomad.cli import main
from tests.support.plugin_seed import market_frame, seed_market

TRACE = Path(__file__).resolve().parents[3] / "airflow_provider_skynomad" / "data" / "gcp-h100-2025-first-week.csv.gz"


def run(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_plan_explain_lists_every_option_with_its_terms_and_marks_the_choice(capsys):
    args = ["plan", "--trace", str(TRACE), "--at", "2025-10-05T12:00:00", "--work-hours", "20"]
    args += ["--deadline-hours", "30", "--progress-hours", "4", "--elapsed-hours", "5", "--running", "spot:us-west1-a"]
    code, out = run(capsys, *args, "--json")
    assert code == 0
    report = json.loads(out)
    options = report["options"]
    assert report["chosen"] and report["reason"].startswith("V=")
    assert options[0]["rank"] == 1 and len({(o["market"], o["mode"]) for o in options}) == len(options)
    for o in options:  # U = V·η − price − amortised egress
        expected = o["value_usd_per_hour"] * o["useful_share"] - o["price_usd_per_hour"] - o["egress_usd_per_hour"]
        assert o["utility_usd_per_hour"] == pytest.approx(expected, abs=2e-3)
    here = [o for o in options if (o["market"], o["mode"]) == ("us-west1-a", "spot")]
    assert here and here[0]["egress_usd_per_hour"] == 0  # staying moves no checkpoint
    assert any(o["egress_usd_per_hour"] > 0 for o in options)  # moving does
    code, text = run(capsys, *args, "--explain")
    assert code == 0 and "options weighed" in text and "chosen" in text and "η" in text
    code, short = run(capsys, *args)
    assert code == 0 and "the planner would run" in short and "options weighed" not in short


def test_market_show_names_capacity_prices_forecast_and_stale_markets(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'market.db'}"
    frame = market_frame(markets=3, days=1.0)
    old = frame["zone"] == "europe-west1-c"  # this market's probes stopped 5 hours ago
    frame = frame[~old | (frame["observed_at"] < frame["observed_at"].max() - pd.Timedelta(hours=5))]
    seed_market(url, frame)
    code, out = run(capsys, "market", "show", "--url", url, "--json", "--max-age-hours", "2")
    assert code == 0
    rows = {r["zone"]: r for r in map(json.loads, out.splitlines())}
    assert set(rows) == {"us-central1-a", "us-west1-a", "europe-west1-c"}
    assert rows["europe-west1-c"]["stale"] and rows["europe-west1-c"]["last_probe_age_hours"] > 5
    assert not rows["us-west1-a"]["stale"]
    assert all(r["forecast_lifetime_hours"] and r["forecast_lifetime_hours"] > 0 for r in rows.values())
    code, table = run(capsys, "market", "show", "--url", url, "--max-age-hours", "2")
    assert code == 0 and "stale" in table and "forecast lifetime" in table
    code, _ = run(capsys, "market", "show", "--url", f"sqlite:///{tmp_path / 'empty.db'}")
    assert code == 1


def test_market_show_reads_the_simulated_cloud_s_markets_on_its_replayed_clock(tmp_path, capsys, monkeypatch):
    """As the markets page: on the wall clock every row of the demo's cloud (stamped in 2025) is
    months old, so `market show` found "no observations"; rows after the clock's now are not shown."""
    from tests.support.plugin_seed import simulated_cloud_market

    _, extra = simulated_cloud_market(tmp_path)
    monkeypatch.setenv("AIRFLOW_CONN_SKYNOMAD_SIM", json.dumps({"conn_type": "skynomad", "extra": extra}))
    code, out = run(capsys, "market", "show", "--conn-id", "skynomad_sim", "--json")
    assert code == 0, out
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 3 and not any(r["stale"] for r in rows)
    assert all(r["last_probe_age_hours"] == pytest.approx(1 / 6, abs=0.02) for r in rows)


def test_market_show_calls_stale_what_the_connections_probe_dag_lets_age(tmp_path, capsys, monkeypatch):
    """At 300x the probe DAG runs every 5 cloud hours and keeps markets within 10 h: a market probed
    6 h ago is fresh there (a 2 h rule called 12 of 13 markets stale in the standalone recipe while
    the DAG ran on time), one last probed 11 h ago is not; a real cloud keeps the operators' 2 h."""
    import time

    from airflow_provider_skynomad.config import SkyNomadConfig
    from airflow_provider_skynomad.plugin.overview import expected_max_age_hours

    monkeypatch.delenv("SKYNOMAD_MAX_MARKET_AGE_HOURS", raising=False)
    monkeypatch.delenv("SKYNOMAD_PROBE_INTERVAL_MINUTES", raising=False)
    assert expected_max_age_hours(SkyNomadConfig(market_url="sqlite://", cloud="aws")) == 2.0
    state_dir = tmp_path / "cloud"
    state_dir.mkdir()
    trace_start = pd.Timestamp("2025-10-07T18:10:00+00:00")
    epoch = time.time() - 3600.0  # an hour of wall time at 300x: 300 h into the trace
    (state_dir / "cloud.json").write_text(
        json.dumps({"epoch_wall": epoch, "speed": 300.0, "trace_start": trace_start.isoformat()})
    )
    now = trace_start + pd.Timedelta(hours=300)
    frame = market_frame(markets=3, days=1.0)
    frame["observed_at"] += now.floor("min") - frame["observed_at"].max() - pd.Timedelta(hours=6)
    old = frame["zone"] == "europe-west1-c"  # its probes stopped 5 h before the others'
    frame = frame[~old | (frame["observed_at"] < frame["observed_at"].max() - pd.Timedelta(hours=5))]
    url = f"sqlite:///{tmp_path / 'market.db'}"
    seed_market(url, frame)
    extra = {"market_url": url, "cloud": "simulated", "state_dir": str(state_dir), "speed": 300.0}
    monkeypatch.setenv("AIRFLOW_CONN_SKYNOMAD_FAST", json.dumps({"conn_type": "skynomad", "extra": extra}))
    code, out = run(capsys, "market", "show", "--conn-id", "skynomad_fast", "--json")
    assert code == 0, out
    rows = {r["zone"]: r for r in map(json.loads, out.splitlines())}
    assert rows["us-west1-a"]["last_probe_age_hours"] == pytest.approx(6.0, abs=0.2)
    assert not rows["us-west1-a"]["stale"] and not rows["us-central1-a"]["stale"]
    assert rows["europe-west1-c"]["stale"] and rows["europe-west1-c"]["last_probe_age_hours"] > 10
