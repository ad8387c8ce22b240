"""How old the market table's newest observation may be before a job stops trusting it, and how
much history a lifetime forecast shown to people is fitted on.

One value each, shared by the operators, the probe plan, the markets page and `skynomad market
show`: a probe DAG keeps markets fresher than the jobs' `max_market_age` only while both read the
same number. Nothing heavy is imported here (the `skynomad` command reads it to build its help).

And the rule a job's start follows beside the rows' ages: the probe DAG's own completions
(`rounds_verdict`). Rows are stamped with the cloud's clock, which the simulated cloud runs
`speed` times faster than Airflow: on a busy box one probe run is many cloud hours long, and a
job queued minutes after it finds its rows older than `max_market_age` although the probe DAG
has just vouched for them. So the table is also fresh while the probe DAG keeps completing
rounds at its own pace, measured from those completions.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

DEFAULT_MAX_MARKET_AGE = timedelta(hours=2)  # `max_market_age` of both operators
DEFAULT_MAX_AGE_HOURS = DEFAULT_MAX_MARKET_AGE.total_seconds() / 3600
STALE_AFTER_HOURS = 3.0  # the least a job trusts a market's newest row for (jobs/stale.py)
FORECAST_DAYS = 2.0  # the markets page's and `skynomad market show`'s forecasts are fitted on this much history


@dataclass(frozen=True)
class CompletedRound:
    """One market's part of a completed probe round (market/store/rounds.py), on the cloud's clock.

    :param planned_at: when the round's plan judged the markets' ages.
    :param ended_at: when the region's round stored its last probe.
    """

    cloud: str
    region: str
    zone: str
    instance_type: str
    planned_at: datetime
    ended_at: datetime


@dataclass(frozen=True)
class RoundsVerdict:
    """What the probe DAG's completions say about the markets of a job.

    :param fresh: a round completed within `allowed_hours` of now.
    :param last: the newest completed round of the job's markets (None: none recorded).
    :param age_hours: how long ago it ended.
    :param pace_hours: how far apart the probe DAG's completions really are there: the longer of
        its last round's own length (plan to end) and the gap between its last two completions.
    :param allowed_hours: `max_age_hours`, or two of those paces when longer (one round may be late).
    """

    fresh: bool
    last: CompletedRound | None
    age_hours: float
    pace_hours: float
    allowed_hours: float


def rounds_verdict(rounds: list[CompletedRound], now: datetime, max_age_hours: float) -> RoundsVerdict:
    """Are the markets of `rounds` (the job's zones and instance types) kept fresh by the probe DAG?

    Per market, the newest completion is compared with the pace the probe DAG
    really keeps there: the next round is due one pace after the last one ended, and one round
    may be late, so a job started within two paces (never less than `max_age_hours`) of a
    completion is never refused, however slow the box made the rounds. The freshest market decides,
    as the newest row does in the rows' rule.
    """
    by_market: dict[tuple, list[CompletedRound]] = defaultdict(list)
    for done in sorted(rounds, key=lambda r: r.ended_at):
        by_market[(done.zone, done.instance_type)].append(done)
    best: RoundsVerdict | None = None
    for history in by_market.values():
        last = history[-1]
        pace = _hours(last.ended_at - last.planned_at)
        if len(history) > 1:
            pace = max(pace, _hours(last.ended_at - history[-2].ended_at))
        allowed = max(float(max_age_hours), 2.0 * pace)
        age = _hours(now - last.ended_at)
        verdict = RoundsVerdict(age <= allowed, last, age, pace, allowed)
        if best is None or (verdict.fresh, -verdict.age_hours) > (best.fresh, -best.age_hours):
            best = verdict
    return best or RoundsVerdict(False, None, float("inf"), 0.0, float(max_age_hours))


def _hours(delta: timedelta) -> float:
    return delta.total_seconds() / 3600.0
