"""`Fleet.from_rows`: the live job table's rows as what one job sees of its deployment."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from airflow_provider_skynomad.market.fleet import Fleet, FleetRowError, claim_of

KEYS = ["z-a", "z-b", "z-c"]


def row(job_id, market, mode, count=4, since=1.0, slack_hours=5.0):
    fields = {"job_id": job_id, "market": market, "mode": mode, "count": count, "since": since}
    return fields | {"slack_hours": slack_hours}


def test_rows_give_held_capacity_launch_order_and_claims_per_market():
    rows = [
        row("me", "z-a", "spot", since=2.0),
        row("old", "z-a", "spot", since=1.0),
        row("young", "z-a", "spot", since=3.0, count=2),
        row("starting", "z-b", "launching", since=9.0),
        row("tight", "z-c", "waiting", count=8, since=None, slack_hours=1.0),
        row("loose", "z-c", "waiting", count=4, since=None, slack_hours=9.0),
        row("od", None, "on-demand", since=None),
        row("elsewhere", "other-zone", "spot"),  # another market's capacity: not this job's concern
    ]
    fleet = Fleet.from_rows(rows, KEYS, me="me")
    assert list(fleet.held) == [6, 4, 0]
    assert fleet.own_since == 2.0
    assert fleet.held_before(0, fleet.own_since) == 4  # only "old" comes before this job's group
    assert fleet.held_before(0, None) == 6  # a new launch is the youngest
    assert list(fleet.waited_for(5.0)) == [0, 0, 8]  # only claims with less slack than 5 h
    assert {c.job_id for c in fleet.claims()} == {"old", "young", "starting", "tight", "loose", "od"}


def test_since_takes_numbers_aware_datetimes_and_iso_strings_on_one_clock():
    at = datetime(2025, 10, 4, 12, tzinfo=UTC)
    rows = [row("a", "z-a", "spot", since=at), row("b", "z-a", "spot", since="2025-10-04T13:00:00Z")]
    fleet = Fleet.from_rows(rows, KEYS)
    assert fleet.held_before(0, at.timestamp() + 1) == 4
    assert np.all(np.diff(fleet.since) == 3600.0)


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"job_id": "x", "market": "z-a", "mode": "spot"}, "missing field"),
        (row("x", "z-a", "parked"), "mode must be one of"),
        (row("x", "z-a", "spot", count=0), "count must be an integer"),
        (row("x", "z-a", "spot", count=2.5), "count must be an integer"),
        (row("x", None, "spot"), "needs a market key"),
        (row("x", "z-a", "spot", since=None), "needs `since`"),
        (row("x", "z-a", "spot", since=datetime(2025, 1, 1)), "no time zone"),
        (row("x", "z-a", "spot", since="yesterday"), "ISO-8601"),
        (row("x", "z-a", "spot", slack_hours=float("nan")), "slack_hours must be a finite number"),
        (row("", "z-a", "spot"), "job_id must be a non-empty string"),
        ("z-a,spot,4", "expected a mapping"),
    ],
)
def test_a_bad_row_names_the_row_and_the_field(bad, message):
    with pytest.raises(FleetRowError, match=message) as caught:
        Fleet.from_rows([row("fine", "z-b", "spot"), bad], KEYS)
    assert str(caught.value).startswith("row 1")


def test_one_row_per_job():
    with pytest.raises(FleetRowError, match="appears twice"):
        Fleet.from_rows([row("a", "z-a", "spot"), row("a", "z-b", "spot")], KEYS)


def test_break_3_a_reader_checks_each_row_alone_and_bounds_its_count_by_the_largest_gang():
    assert claim_of(row("a", "z-a", "spot", count=10**9)).count == 10**9  # unbounded unless asked
    assert claim_of(row("a", "z-a", "spot", count=10_000), max_count=10_000).count == 10_000
    with pytest.raises(FleetRowError, match=r"row 3 \(b\): count must be an integer from 1 to 10000, got 10001"):
        claim_of(row("b", "z-a", "spot", count=10_001), 3, max_count=10_000)
    with pytest.raises(FleetRowError, match="slack_hours must be a finite number"):
        claim_of(row("c", "z-a", "waiting", slack_hours=float("inf")), max_count=10_000)
