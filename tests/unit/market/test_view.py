"""The decision grid (last observation holds) and the market view (never anything after its tick)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_skynomad.market.grid import MarketGrid, build_grid, median_step_hours
from airflow_provider_skynomad.market.observations import COLUMNS, TraceError
from airflow_provider_skynomad.market.view import MarketView

T0 = pd.Timestamp("2025-10-04T00:00:00Z")
ZONES = [("us-central1", "us-central1-a"), ("us-west1", "us-west1-a"), ("europe-west1", "europe-west1-c")]


def frame_of(rows: list[dict]) -> pd.DataFrame:
    """A validated-looking frame (typed columns) from partial row dicts."""
    full = []
    for r in rows:
        region, zone = r.get("place", ZONES[0])
        full.append(
            {
                "observed_at": T0 + pd.Timedelta(minutes=r["minute"]),
                "cloud": "gcp",
                "region": region,
                "zone": zone,
                "instance_type": r.get("instance_type", "a3-highgpu-1g"),
                "accelerator": "H100",
                "accelerator_count": 1,
                "requested": 16,
                "available": r.get("available", 16),
                "spot_price": r.get("spot", 2.0),
                "on_demand_price": r.get("od", 10.0),
            }
        )
    frame = pd.DataFrame(full, columns=COLUMNS)
    return frame.sort_values(["observed_at", "zone"], kind="stable").reset_index(drop=True)


# --------------------------------------------------------------------------- grid


def test_last_observation_holds_between_rows():
    frame = frame_of(
        [
            {"minute": 0, "available": 16, "spot": 2.0},
            {"minute": 25, "available": 0, "spot": 3.0},
            {"minute": 40, "available": 5, "spot": 4.0},  # exactly on a tick: counts for that tick
        ]
    )
    grid = build_grid(frame, step_hours=10 / 60)
    assert grid.ticks == 5  # 0, 10, 20, 30, 40 minutes
    assert grid.available[:, 0].tolist() == [16, 16, 16, 0, 5]
    assert grid.spot_usd_per_hour[:, 0].tolist() == [2.0, 2.0, 2.0, 3.0, 4.0]
    assert grid.on_demand_usd_per_hour[:, 0].tolist() == [10.0] * 5
    assert grid.time_at(3) == T0 + pd.Timedelta(minutes=30)


def test_market_first_seen_late_is_unavailable_until_then():
    frame = frame_of(
        [
            {"minute": 0, "place": ZONES[0]},
            {"minute": 30, "place": ZONES[0]},
            {"minute": 15, "place": ZONES[1], "available": 9, "spot": 1.5},
        ]
    )
    grid = build_grid(frame, step_hours=10 / 60)
    j = grid.index("us-west1-a")
    assert grid.available[:, j].tolist() == [0, 0, 9, 9]
    assert grid.spot_usd_per_hour[2:, j].tolist() == [1.5, 1.5]
    # (prices before the first row must not be the later observation: see the future-leak test below)


def test_step_is_inferred_from_the_probe_interval():
    rows = [{"minute": 3.25 * i, "place": z} for i in range(6) for z in ZONES[:2]]
    frame = frame_of(rows)
    assert median_step_hours(frame) == pytest.approx(195 / 3600)
    assert build_grid(frame).step_hours == pytest.approx(195 / 3600)
    with pytest.raises(TraceError):
        median_step_hours(frame_of([{"minute": 0}]))
    with pytest.raises(TraceError):
        build_grid(frame, step_hours=0)


def test_market_keys_include_the_instance_type_only_when_several():
    one = build_grid(frame_of([{"minute": m, "place": z} for m in (0, 10) for z in ZONES[:2]]))
    assert one.keys == ["us-central1-a", "us-west1-a"]
    two = build_grid(
        frame_of([{"minute": m, "instance_type": t} for m in (0, 10) for t in ("a3-highgpu-1g", "a3-highgpu-8g")])
    )
    assert two.keys == ["us-central1-a:a3-highgpu-1g", "us-central1-a:a3-highgpu-8g"]
    with pytest.raises(KeyError, match="unknown market"):
        one.index("nowhere")


def test_window_and_usable():
    frame = frame_of([{"minute": 10 * i, "available": i % 4} for i in range(8)])
    grid = build_grid(frame, step_hours=10 / 60)
    sub = grid.window(2, 3)
    assert sub.ticks == 3 and sub.start == grid.time_at(2)
    assert sub.available[:, 0].tolist() == [2, 3, 0]
    assert grid.window(6, 10).ticks == 2  # clipped to the trace
    assert grid.usable(2)[:, 0].tolist() == [False, False, True, True, False, False, True, True]


# --------------------------------------------------------------------------- view


def _view_values(view: MarketView, hours_list) -> dict:
    usable, seen = view.usable_history()
    age, was_usable = view.last_seen
    return {
        "now": view.now,
        "tick": view.tick,
        "keys": list(view.keys),
        "step": view.step_hours,
        "start": view.start,
        "spot": np.array(view.spot_usd_per_hour, copy=True),
        "od": np.array(view.on_demand_usd_per_hour, copy=True),
        "usable": usable.copy(),
        "seen": seen.copy(),
        "age": np.array(age, copy=True),
        "was_usable": np.array(was_usable, copy=True),
        **{f"prices_{h}": view.price_history(h).copy() for h in hours_list},
    }


def _assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], np.ndarray):
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        else:
            assert a[key] == b[key], key


HOURS = [0.0, 1 / 6, 0.5, 1.0, 3.0, 1000.0]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ticks=st.integers(2, 30),
    n=st.integers(1, 4),
    gang=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)
def test_view_never_sees_rows_after_its_tick(ticks, n, gang, seed, data):
    """Two grids (and seen masks) equal up to tick k and different after it give identical views at k."""
    k = data.draw(st.integers(0, ticks - 1))
    rng = np.random.default_rng(seed)

    def random_grid_arrays():
        return rng.integers(0, 5, (ticks, n)), rng.uniform(0.5, 5, (ticks, n)), rng.uniform(5, 12, (ticks, n))

    a_av, a_spot, a_od = random_grid_arrays()
    b_av, b_spot, b_od = random_grid_arrays()
    b_av[: k + 1], b_spot[: k + 1], b_od[: k + 1] = a_av[: k + 1], a_spot[: k + 1], a_od[: k + 1]
    seen_a = rng.random((ticks, n)) < 0.5
    seen_b = rng.random((ticks, n)) < 0.5
    seen_b[: k + 1] = seen_a[: k + 1]
    if k + 1 < ticks:  # make sure the future really differs
        b_av[k + 1 :] = (a_av[k + 1 :] + 1) % 5
        seen_b[k + 1 :] = ~seen_a[k + 1 :]

    from airflow_provider_skynomad.market.grid import Market

    markets = tuple(Market(f"z{j}", "gcp", "us-central1", f"z{j}", "t") for j in range(n))
    grid_a = MarketGrid(T0, 1 / 6, markets, a_av, a_spot, a_od)
    grid_b = MarketGrid(T0, 1 / 6, markets, b_av, b_spot, b_od)
    egress = np.zeros((n, n))
    view_a = MarketView(grid_a, k, gang, seen_a, egress)
    view_b = MarketView(grid_b, k, gang, seen_b, egress)
    values_a = _view_values(view_a, HOURS)
    _assert_same(values_a, _view_values(view_b, HOURS))

    # And the values are the grid's own, up to and including tick k.
    assert values_a["usable"].shape == (k + 1, n)
    np.testing.assert_array_equal(values_a["usable"], a_av[: k + 1] >= gang)
    np.testing.assert_array_equal(values_a["spot"], a_spot[k])
    np.testing.assert_array_equal(values_a["prices_1000.0"], a_spot[: k + 1])
    assert values_a["prices_0.0"].shape[0] == 1  # at least the current tick
    np.testing.assert_array_equal(values_a["prices_0.5"], a_spot[max(0, k - 2) : k + 1])


def _random_rows(rng, end_minute: int, places) -> list[dict]:
    rows = []
    for place in places:
        minute = 0.0  # every market has a row at the trace start (see the late-market test below)
        while minute <= end_minute:
            rows.append(
                {
                    "minute": minute,
                    "place": place,
                    "available": int(rng.integers(0, 17)),
                    "spot": round(float(rng.uniform(1, 4)), 4),
                    "od": round(float(rng.uniform(8, 12)), 4),
                }
            )
            minute += float(rng.choice([5, 7.5, 10, 13, 20]))
    return rows


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(0, 17), gang=st.integers(1, 16))
def test_views_from_traces_differing_only_after_k_are_identical(seed, k, gang):
    """End to end through build_grid: rewrite every observation after tick k's time, view at k is unchanged."""
    rng = np.random.default_rng(seed)
    rows = _random_rows(rng, 180, ZONES)
    rows.append({"minute": 180, "place": ZONES[0]})  # same last timestamp in both traces: same tick count
    rows_b = []
    for r in rows:
        r = dict(r)
        if r["minute"] > 10 * k:
            r.update(
                available=int(rng.integers(0, 17)),
                spot=round(float(rng.uniform(1, 4)), 4),
                od=round(float(rng.uniform(8, 12)), 4),
            )
        rows_b.append(r)
    grid_a = build_grid(frame_of(_dedupe(rows)), 10 / 60)
    grid_b = build_grid(frame_of(_dedupe(rows_b)), 10 / 60)
    assert grid_a.ticks == grid_b.ticks == 19
    values = [_view_values(MarketView(g, k, gang), HOURS) for g in (grid_a, grid_b)]
    _assert_same(*values)


def _dedupe(rows: list[dict]) -> list[dict]:
    seen, out = set(), []
    for r in rows:
        key = (r["minute"], r["place"])
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def test_prices_of_a_market_not_yet_observed_do_not_come_from_the_future():
    early = {"minute": 0, "place": ZONES[0]}
    end = {"minute": 60, "place": ZONES[0]}
    late_a = {"minute": 30, "place": ZONES[1], "spot": 1.0, "od": 9.0}
    late_b = {"minute": 30, "place": ZONES[1], "spot": 3.0, "od": 11.0}
    grid_a = build_grid(frame_of([early, end, late_a]), 10 / 60)
    grid_b = build_grid(frame_of([early, end, late_b]), 10 / 60)
    k = 1  # 10 minutes: zone 2 has not been observed yet in either trace
    # (was a bug at ba04751: build_grid back-filled the first observed prices into earlier ticks)
    _assert_same(_view_values(MarketView(grid_a, k, 1), HOURS), _view_values(MarketView(grid_b, k, 1), HOURS))


def test_last_seen_reports_age_and_outcome_of_the_latest_observation():
    from airflow_provider_skynomad.market.grid import Market

    markets = tuple(Market(f"z{j}", "gcp", "us-central1", f"z{j}", "t") for j in range(3))
    available = np.array([[1, 0, 1], [0, 1, 1], [1, 1, 0], [1, 1, 1]])
    seen = np.array([[1, 1, 0], [1, 0, 0], [0, 1, 0], [0, 0, 0]], dtype=bool)
    grid = MarketGrid(T0, 1 / 6, markets, available, np.ones((4, 3)), np.full((4, 3), 5.0))
    age, was_usable = MarketView(grid, 3, 1, seen, np.zeros((3, 3))).last_seen
    assert age.tolist() == [2, 1, np.inf]
    assert was_usable.tolist() == [False, True, False]
    # A view with no `seen` mask treats every past cell as observed.
    age, was_usable = MarketView(grid, 2, 1, None, np.zeros((3, 3))).last_seen
    assert age.tolist() == [0, 0, 0] and was_usable.tolist() == [True, True, False]


def test_view_outside_the_grid_is_refused():
    from airflow_provider_skynomad.market.grid import Market

    grid = MarketGrid(
        T0, 1 / 6, (Market("z", "gcp", "r", "z", "t"),), np.ones((3, 1), int), np.ones((3, 1)), np.ones((3, 1))
    )
    for tick in (-1, 3):
        with pytest.raises(IndexError):
            MarketView(grid, tick, 1)
