"""The probe planner: markets in use stay fresh, uncertain ones are probed more, the budget holds."""

from __future__ import annotations

import pandas as pd
import pytest

from airflow_provider_skynomad.market.store.signals import ProbeSpend, SignalTable
from airflow_provider_skynomad.probing.plan import ProbeMarket, ProbePlanner, observation_stats, probe_cost_for

NOW = pd.Timestamp("2025-10-05T06:00:00Z")
H100_SPOT, H100_OD = 2.3724, 10.3157


def _market(zone, age_minutes=30.0, *, used=False, flips=0, observations=6, spot=H100_SPOT, probed=True, up=True):
    seen = None if age_minutes is None else NOW - pd.Timedelta(minutes=age_minutes)
    return ProbeMarket(
        "gcp",
        zone.rsplit("-", 1)[0],
        zone,
        "a3-highgpu-1g",
        1,
        spot,
        H100_OD,
        used=used,
        last_observed_at=seen,
        last_probed_at=seen if probed else None,
        observations=observations,
        flips=flips,
        up=up,
    )


def _keys(plan):
    return [c.market.zone for c in plan.probe]


def test_expected_cost_is_count_times_price_times_the_minimum_billed_minute():
    planner = ProbePlanner(5.0)
    assert planner.expected_usd(_market("us-central1-a")) == pytest.approx(H100_SPOT / 60)


def test_a_used_market_is_probed_before_it_would_pass_max_market_age():
    planner = ProbePlanner(5.0, max_market_age_hours=2.0, interval_hours=1 / 6)
    plan = planner.plan([_market("a-1", 111, used=True), _market("b-1", 100, used=True)], NOW, 0.0)
    assert _keys(plan) == ["a-1"]
    assert "stay fresh" in plan.probe[0].reason


def test_a_used_market_probed_late_in_the_last_run_is_not_left_for_one_run_too_many():
    """The standalone recipe at 300x: runs 5 cloud hours apart, data kept within 10 h. A run stamps
    its rows as it probes (a run's 30 s of wall time are hours of cloud time), so at the next run a
    market probed late in the last one is a little under 5 h old; left for the run after, it would be
    10.4 h old there (past the age jobs trust: what the markets page showed as stale)."""
    planner = ProbePlanner(50.0, max_market_age_hours=10.0, interval_hours=5.0)
    late = _market("a-1", (5.0 - 0.4) * 60, used=True)
    plan = planner.plan([late], NOW, 0.0)
    assert _keys(plan) == ["a-1"] and "stay fresh" in plan.probe[0].reason


def test_uncertain_markets_are_probed_more_often_than_calm_ones():
    planner = ProbePlanner(50.0)
    flipping = _market("a-1", 60, flips=3)
    calm = _market("b-1", 60, flips=0, observations=20)
    plan = planner.plan([flipping, calm], NOW, 0.0)
    assert _keys(plan) == ["a-1"]
    assert planner.cadence_hours(flipping, H100_OD)[0] < planner.cadence_hours(calm, H100_OD)[0]


def test_a_market_dearer_than_on_demand_is_probed_rarely():
    planner = ProbePlanner(50.0)
    dear = _market("asia-south2-b", 5 * 60, spot=H100_OD + 1)
    assert planner.plan([dear], NOW, 0.0).probe == ()
    assert "dear" in planner.plan([dear], NOW, 0.0).skip[0].reason


def test_a_never_probed_market_is_probed_once():
    plan = ProbePlanner(5.0).plan([_market("a-1", 5, probed=False)], NOW, 0.0)
    assert _keys(plan) == ["a-1"] and "never probed" in plan.probe[0].reason


def test_the_budget_is_never_exceeded_even_for_markets_in_use():
    cost = H100_SPOT / 60
    markets = [_market(f"z-{i}", 115, used=True) for i in range(10)]
    plan = ProbePlanner(3.5 * cost).plan(markets, NOW, 0.0)
    assert len(plan.probe) == 3
    assert all("budget" in c.reason for c in plan.skip)
    plan = ProbePlanner(3.5 * cost).plan(markets, NOW, 3.0 * cost)
    assert len(plan.probe) == 0


def test_optional_probes_leave_room_for_keeping_used_markets_fresh_until_midnight():
    planner = ProbePlanner(0.5, max_market_age_hours=2.0)
    used = [_market(f"u-{i}", 10, used=True) for i in range(4)]
    curious = [_market(f"c-{i}", 200, flips=4) for i in range(5)]
    plan = planner.plan(used + curious, NOW, 0.0)
    # 4 used markets × 18 h / (1 h 50) ≈ 39 probes ≈ $1.55 are owed to them: nothing is left over
    assert plan.probe == () and any("kept for markets in use" in n for n in plan.notes)


def test_observation_stats_count_flips_and_ignore_rows_too_small_for_the_gang():
    times = [NOW - pd.Timedelta(minutes=m) for m in (50, 40, 30, 20, 10)]
    rows = pd.DataFrame(
        {
            "observed_at": times,
            "zone": "a-1",
            "instance_type": "t",
            "requested": [4, 4, 4, 1, 4],
            "available": [4, 0, 4, 1, 0],
            "spot_price": 1.0,
            "on_demand_price": 3.0,
        }
    )
    stats = observation_stats(rows, count=4, now=NOW)[("a-1", "t")]
    assert stats["observations"] == 4 and stats["flips"] == 3 and stats["up"] is False
    assert stats["last_observed_at"] == times[-1]


def test_probe_cost_for_a_job_is_the_spend_on_its_markets_while_it_ran(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with SignalTable(url) as table:
        table.record_probes(
            [
                ProbeSpend(NOW, "gcp", "r", "a-1", "t", 1, 1, 0.04),
                ProbeSpend(NOW + pd.Timedelta(hours=1), "gcp", "r", "a-1", "t", 1, 1, 0.04),
                ProbeSpend(NOW + pd.Timedelta(hours=1), "gcp", "r", "b-1", "t", 1, 1, 0.10),  # not the job's
                ProbeSpend(NOW + pd.Timedelta(hours=9), "gcp", "r", "a-1", "t", 1, 1, 0.04),  # after it
            ]
        )
    end = NOW + pd.Timedelta(hours=5)
    assert probe_cost_for(["a-1"], NOW, end, url=url) == pytest.approx(0.08)
    assert probe_cost_for(["a-1:t", "c-1"], NOW, end, url=url, sharing_jobs=2) == pytest.approx(0.04)
    assert probe_cost_for(["a-1:other"], NOW, end, url=url) == 0.0


# -- probe kinds -------------------------------------------------------------------------------


def test_a_request_probe_is_planned_at_the_share_fulfilled_before_the_cancel():
    from dataclasses import replace

    from airflow_provider_skynomad.probing.plan import REQUEST_FULFILLED_SHARE

    planner = ProbePlanner(5.0)
    launch = _market("us-east-1a")
    request = replace(launch, cloud="aws", probe_kind="request")
    assert planner.expected_usd(request) == pytest.approx(REQUEST_FULFILLED_SHARE * H100_SPOT / 60)
    assert 0 < planner.expected_usd(request) < planner.expected_usd(launch)


def test_a_budget_too_small_for_launch_probes_keeps_request_probed_markets_fresh():
    from dataclasses import replace

    markets = [_market(f"z-{i}", 115, used=True) for i in range(4)]
    budget = 2.5 * H100_SPOT / 60  # two launch probes' worth for the day
    by_launch = ProbePlanner(budget).plan(markets, NOW, 0.0)
    by_request = ProbePlanner(budget).plan([replace(m, cloud="aws", probe_kind="request") for m in markets], NOW, 0.0)
    assert len(by_launch.probe) == 2 and len(by_request.probe) == 4
    assert by_request.expected_usd <= budget


def test_the_default_probe_kind_is_request_only_where_the_cloud_allows_it():
    from airflow_provider_skynomad.probing.plan import default_probe_kind, probe_kind_for

    assert [default_probe_kind(c) for c in ("aws", "gcp", "simulated", "other")] == [
        "request",
        "request",
        "request",
        "launch",
    ]
    assert probe_kind_for("aws", None) == "request" and probe_kind_for("gcp", "launch") == "launch"
    with pytest.raises(ValueError, match="other cloud has no billing-free spot request"):
        probe_kind_for("other", "request")
    with pytest.raises(ValueError, match="probe_kind must be"):
        probe_kind_for("aws", "offer")


def _spend_and_kinds(cloud: str, billed: list[bool], kind: str = "request", available: int = 1):
    times = [NOW - pd.Timedelta(minutes=10 * i) for i in range(len(billed))]
    spend = pd.DataFrame(
        {
            "probed_at": times,
            "cloud": cloud,
            "zone": "z-1",
            "instance_type": "t",
            "available": available,
            "usd": [0.04 if b else 0.0 for b in billed],
        }
    )
    kinds = pd.DataFrame({"observed_at": times, "zone": "z-1", "instance_type": "t", "probe_kind": kind})
    return spend, kinds


def test_the_race_share_starts_at_the_prior_and_moves_to_each_clouds_own_record():
    from airflow_provider_skynomad.probing.plan import RACE_PRIOR_PROBES, REQUEST_FULFILLED_SHARE, race_shares

    assert race_shares(*_spend_and_kinds("aws", [])) == {}
    few = race_shares(*_spend_and_kinds("aws", [True, False]))["aws"]
    assert few == pytest.approx((1 + REQUEST_FULFILLED_SHARE * RACE_PRIOR_PROBES) / (2 + RACE_PRIOR_PROBES))
    many = race_shares(*_spend_and_kinds("gcp", [False] * 400))["gcp"]
    assert many < 0.01  # 400 free probes outweigh the 10 % prior
    assert race_shares(*_spend_and_kinds("aws", [True] * 5, kind="launch")) == {}  # launch probes say nothing
    assert race_shares(*_spend_and_kinds("aws", [False] * 5, available=0)) == {}  # nor probes that saw none


def test_a_request_probe_is_planned_at_its_clouds_race_share():
    from dataclasses import replace

    market = replace(_market("us-east-1a"), cloud="aws", probe_kind="request")
    planner = ProbePlanner(5.0)
    assert planner.expected_usd(replace(market, race_share=0.5)) == pytest.approx(0.5 * H100_SPOT / 60)
    assert planner.expected_usd(replace(market, race_share=0.0)) == 0.0
