"""Stale market data: say so, and plan as if nobody knew there was spot capacity.

The planner sees a market's last observation hold until the next one (docs/market.md), which
is right between two probe rounds and wrong when the probe DAG has stopped: hours later the
view still shows the capacity of then, and a plan built on it is a silent guess. So before the
runtime (the worker's `JobWorker` and the trigger's `Watch`, through `jobs.markets`) hands a view to the planner, every
market whose newest row is older than `after_hours` is shown as a market before its first
observation is (no spot capacity and no spot price *now*; on-demand prices are public and stay):
the planner then moves only to markets someone has looked at lately, or to on-demand (which
always launches), and its safety net keeps the deadline. The job's own rows (launch outcomes)
are written with the prices as observed, never from this view. The market the job runs on is exempt:
its own group, polled every step, is a fresher observation than any probe.

A warning is for what a user can act on: the probe DAG late against its own schedule. One market
left old is the probe planner's choice (its budget goes to markets in use and uncertain ones
first), not news. So the job warns once, in one line, when even the newest row of the markets it
may move to is older than the probe DAG's rounds allow, and again only after fresh data came and
went. The thresholds follow the probe DAG's schedule on the cloud's clock (`ProbeSchedule`,
`StaleGuard.for_config`): at 300x in ``airflow standalone`` a probe round every 60 s of wall time
is 5 cloud hours apart, so a 3 h rule would call every market stale between two rounds of a
punctual DAG. The runtime always uses the schedule: the probe planner refreshes markets against the
same `max_market_age`, so what it keeps fresh the guard trusts. A pace read from the rows alone
is too short there: the planner skips markets that are fresh enough (a round may write no row at
all) and a job's own launch rows fall between rounds. Without a schedule (`StaleGuard()`, a
`Watch` built on its own) the rule reads the DAG's pace from its rows (two rounds), and never less
than `STALE_AFTER_HOURS`, above the default `max_market_age` at which a job refuses to *start*
(2 h), so a job that starts on fresh data keeps its plan through an ordinary gap between rounds.

On a busy box one probe run can be many cloud hours long (4 min 40 s of wall time is 23 h at
300x): rows from its first region are older than the rule allows when its last region ends. So
a market whose rows are old but whose probe round completed within two of the probe DAG's real
paces (market/store/rounds.py, `rounds_verdict`) is not stale either, and not late: the rule
follows the probe DAG's completions, read from the market database at most every quarter of
`after_hours` of the cloud's clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import pandas as pd

from airflow_provider_skynomad.market.freshness import STALE_AFTER_HOURS, CompletedRound, rounds_verdict
from airflow_provider_skynomad.market.view import MarketView

REREAD_FRACTION = 0.25  # the probe rounds are read again after this share of `after_hours` (cloud clock)


@dataclass(frozen=True)
class StaleMarket:
    key: str
    zone: str
    newest: pd.Timestamp
    age_hours: float


def newest_rows(frame: pd.DataFrame) -> pd.Series:
    """(zone, instance_type) → the newest observed_at in `frame`."""
    return frame.groupby(["zone", "instance_type"], sort=False)["observed_at"].max()


def stale_markets(
    view: MarketView,
    frame: pd.DataFrame,
    now: pd.Timestamp,
    after_hours: float = STALE_AFTER_HOURS,
    newest: pd.Series | None = None,
) -> list[StaleMarket]:
    """Markets of `view` whose newest row in `frame` (the job's window of the table) is older than `after_hours`."""
    if frame.empty:
        return []
    newest = newest_rows(frame) if newest is None else newest
    out = []
    for market in view.markets:
        at = newest.get((market.zone, market.instance_type))
        if at is None:
            continue
        age = (now - at).total_seconds() / 3600.0
        if age > after_hours:
            out.append(StaleMarket(market.key, market.zone, at, age))
    return out


def without_spot(view: MarketView, keys: list[str]) -> MarketView:
    """`view` with nothing known about spot now in the markets `keys`: no capacity and an infinite
    price at its current tick, as a grid shows a market before its first observation (market/grid.py),
    so no policy chooses spot there; their history and on-demand prices are unchanged."""
    if not keys:
        return view
    grid = view._grid  # noqa: SLF001 - a copy of the view's own grid, one tick changed
    available, spot = grid.available.copy(), grid.spot_usd_per_hour.copy()
    for key in keys:
        available[view.tick, view.index(key)] = 0
        spot[view.tick, view.index(key)] = float("inf")
    source_key = (view.source_key, "no spot now", tuple(sorted(keys)))
    return MarketView(
        replace(grid, available=available, spot_usd_per_hour=spot),
        view.tick,
        view.gang_size,
        egress_usd_per_gb=view.egress_usd_per_gb,
        source_key=source_key,
    )


def held_rows(source) -> pd.DataFrame:
    """The rows a `MarketSource` holds after its last view (no new read of the table)."""
    frame = getattr(source, "_frame", None)
    return frame if frame is not None else pd.DataFrame(columns=["zone", "instance_type", "observed_at"])


def late_words(markets: list[StaleMarket], schedule_words: str | None) -> str:
    """One line for a probe DAG that missed its rounds: how old, where, what to do."""
    newest = max(markets, key=lambda m: m.newest)
    zones = sorted({m.zone for m in markets})
    named = ", ".join(zones[:3]) + (f" and {len(zones) - 3} more" if len(zones) > 3 else "")
    pace = f" ({schedule_words})" if schedule_words else ""
    return (
        f"market data is {newest.age_hours:.0f} h old in every zone the job may move to ({named}; newest "
        f"observation {newest.newest.isoformat()}): the skynomad_probe DAG{pace} has missed its rounds; is it "
        "paused or failing? Planning as if those zones had no spot capacity until a probe or a launch looks again"
    )


def probe_gap_hours(frame: pd.DataFrame) -> float | None:
    """How far apart the probe DAG's rounds are on the cloud's clock, as its rows show: the median
    gap between a market's consecutive observations (None before any market was seen twice)."""
    if len(frame) < 2:
        return None
    rows = frame[["zone", "instance_type", "observed_at"]].sort_values("observed_at")
    gaps = rows.groupby(["zone", "instance_type"], sort=False)["observed_at"].diff().dropna()
    gaps = gaps[gaps > pd.Timedelta(0)]
    return None if gaps.empty else float(gaps.dt.total_seconds().median()) / 3600.0


@dataclass
class StaleGuard:
    """Applies the rule above to each view; says a late probe DAG once (until fresh data came again).

    :param after_hours: a market whose newest row is older shows the planner no spot capacity.
    :param late_after_hours: the probe DAG is late when the newest row of every market the job may
        move to is older than this.
    :param schedule_words: the probe DAG's pace in words, for the warning.

    Without a schedule (``late_after_hours`` None) the rule reads the probe DAG's pace from its
    rows: two rounds (``2 × probe_gap_hours``) or `after_hours`, whichever is longer, and it says
    nothing about lateness before it has seen a market twice (a DAG that just started is not late).
    """

    after_hours: float = STALE_AFTER_HOURS
    late_after_hours: float | None = None
    schedule_words: str | None = None
    warned: pd.Timestamp | None = None  # the newest row when the late probe DAG was said
    rounds: Callable[[list[tuple[str, str]], pd.Timestamp], list[CompletedRound]] | None = None
    """(markets as (zone, instance_type), now) → the probe DAG's completed rounds of them (None: rows only)."""
    _newest: tuple | None = None  # (frame identity, rows, newest per market, gap): one groupby per new read
    _rounds: tuple | None = None  # (markets asked, read at, rounds)

    @classmethod
    def for_config(cls, config, environ=None) -> StaleGuard:
        """The rule for the probe DAG's schedule on the `skynomad` connection's cloud clock, following
        the probe rounds recorded in the connection's market database."""
        from airflow_provider_skynomad.jobs.probe_schedule import ProbeSchedule

        schedule = ProbeSchedule.of(config, environ)
        return cls(
            schedule.stale_after_hours,
            schedule.max_market_age_hours,
            schedule.words(),
            rounds=_round_reader(config.market_url),
        )

    def apply(
        self, view: MarketView, frame: pd.DataFrame, now: pd.Timestamp, running_key: str | None
    ) -> tuple[MarketView, list[str]]:
        """(the view the planner gets, new warnings in plain words: at most one)."""
        key = (id(frame), len(frame))
        if self._newest is None or self._newest[:2] != key:
            learn = self.late_after_hours is None and len(frame)
            self._newest = (*key, newest_rows(frame) if len(frame) else None, probe_gap_hours(frame) if learn else None)
        after, late_after = self._thresholds()
        found = stale_markets(view, frame, now, after, self._newest[2])
        vouched = self._vouched(view, found, now, after)
        stale = [m for m in found if m.key != running_key and m.key not in vouched]
        words = [] if vouched else self._late(view, frame, now, running_key, late_after)
        return without_spot(view, sorted(m.key for m in stale)), words

    def _vouched(self, view: MarketView, found: list[StaleMarket], now: pd.Timestamp, after: float) -> set[str]:
        """Keys of the `found` markets whose probe round completed within the probe DAG's own pace."""
        if self.rounds is None or not found:
            return set()
        names = {m.key: (m.zone, m.instance_type) for m in view.markets}
        asked = tuple(sorted(names[m.key] for m in found))
        cached = self._rounds
        if cached is None or cached[0] != asked or (now - cached[1]).total_seconds() / 3600 > REREAD_FRACTION * after:
            cached = self._rounds = (asked, now, self.rounds(list(asked), now))
        by_market: dict[tuple[str, str], list[CompletedRound]] = {}
        for done in cached[2]:
            by_market.setdefault((done.zone, done.instance_type), []).append(done)
        return {m.key for m in found if rounds_verdict(by_market.get(names[m.key], []), now, after).fresh}

    def _thresholds(self) -> tuple[float, float | None]:
        """(after_hours, late_after_hours) for this frame; late None: lateness cannot be told yet."""
        if self.late_after_hours is not None:
            return self.after_hours, self.late_after_hours
        gap = self._newest[3]
        if gap is None:
            return self.after_hours, None
        hours = max(self.after_hours, 2.0 * gap)
        return hours, hours

    def _late(self, view, frame, now, running_key, late_after: float | None) -> list[str]:
        if late_after is None:
            return []
        seen = [m for m in stale_markets(view, frame, now, float("-inf"), self._newest[2]) if m.key != running_key]
        if not seen or min(m.age_hours for m in seen) <= late_after:
            self.warned = None  # a market the job may move to was probed lately: the probe DAG runs
            return []
        if self.warned is not None:
            return []  # said once for this spell
        self.warned = max(m.newest for m in seen)
        gap = self._newest[3]
        pace = self.schedule_words or (f"its rows are {gap:.2g} h apart" if gap else None)
        return [late_words(seen, pace)]


def _round_reader(market_url: str):
    """Reads the probe DAG's completed rounds of some markets from the market database; a database
    that cannot answer (or a user that may not create the table) gives none: the rows decide."""

    def read(markets: list[tuple[str, str]], now: pd.Timestamp) -> list[CompletedRound]:
        """The completed probe rounds of `markets` up to `now`; none when the database cannot say."""
        from sqlalchemy.exc import SQLAlchemyError

        from airflow_provider_skynomad.market.store.rounds import ProbeRoundTable

        try:
            with ProbeRoundTable(market_url) as table:
                return table.recent(now, markets)
        except (SQLAlchemyError, OSError):
            return []

    return read
