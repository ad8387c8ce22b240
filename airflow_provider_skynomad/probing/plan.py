"""The probe planner: which markets to pay a probe for this run, within a daily budget.

A probe is the only way to learn whether a zone has spot capacity *now*. What it costs depends on
its kind (docs/probing.md):

- **launch**: the cloud bills what it granted for its minimum billed time (one minute on AWS, GCP
  and the simulated cloud): at most ``count × spot price × minimum billed time``.
- **request** (request-and-cancel: AWS a request fleet deleted while its instances are
  ``pending``, GCP a VM deleted at ``STAGING``): billed only when the instance was already running
  before the delete (the race). Expected: ``race share × count × spot price × minimum``, the race
  share measured per cloud from its own record (`race_shares`), `REQUEST_FULFILLED_SHARE` until
  there are enough probes.

The planner spends that money where it buys the most:

- **Markets in use are kept fresh.** A market a job may use (the DAG's ``job_zones``, or where a
  running job's instances are) is probed before its newest observation would pass
  ``max_market_age`` by the next run, before anything else, as long as the budget allows.
- **Uncertain markets are probed more often, calm ones less.** A market's cadence (how old its
  newest observation may get before it is due again) shrinks with recent flips (capacity coming and
  going) and with few recent observations, down to one probe-DAG interval.
- **Cheap or recently-up markets count more than dear ones.** A market whose spot price is not
  below the cheapest on-demand price can never beat on-demand: it is probed rarely (six times the
  cadence of a used market).
- **Never above the budget.** What is already spent today (UTC, on the cloud's clock) plus what
  this run expects to spend never exceeds ``budget_usd_per_day``. Probes that are not needed to
  keep a used market fresh are paced over the rest of the day, after reserving what keeping the
  used markets fresh until midnight will cost.
- **A market this planner never probed is probed once**, when the budget allows: its first probe
  checks that the zone answers at all and records its price.

Pure logic: markets in, a `ProbePlan` out, no I/O. `probe_cost_for` at the end reads the
probe-spend record (market/store/signals.py) for a job's summary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

# the probe kinds and the prior race share are the clouds' (the simulated cloud bills by the prior too)
from airflow_provider_skynomad.clouds.base import PROBE_LAUNCH, PROBE_REQUEST, REQUEST_FULFILLED_SHARE
from airflow_provider_skynomad.market.freshness import DEFAULT_MAX_AGE_HOURS

MIN_BILLED_HOURS = {"aws": 60.0 / 3600.0, "gcp": 60.0 / 3600.0, "simulated": 60.0 / 3600.0}
"""The shortest time each cloud bills an instance for (AWS Linux and GCP: 60 s; the simulated
cloud holds a probe's instances one simulated minute)."""

REQUEST_PROBE_CLOUDS = frozenset({"aws", "gcp", "simulated"})
"""Clouds whose API lets a probe give capacity back before the instance runs (AWS: a request
fleet deleted while ``pending``; GCP: a VM deleted at ``STAGING``). Their probes are ``request``
by default."""
RACE_PRIOR_PROBES = 20
"""How many probes the prior counts as (a Beta prior): after 20 request probes that saw capacity,
the measured share weighs as much as the prior; after 200, ten times as much."""

DEFAULT_BUDGET_USD_PER_DAY = 10.0
RECENT_HOURS = 6.0  # the window in which observations and flips are counted
DEAR_CADENCE_FACTOR = 6.0  # a market that cannot beat on-demand: probed this much less often
UNUSED_CADENCE_FACTOR = 2.0  # a cheap market no job is known to use
PACE_BURST = 2.0  # optional probes may spend up to this many runs' even share of the day at once


def min_billed_hours(cloud: str) -> float:
    """The cloud's minimum billed time per instance, in hours (one minute when unknown)."""
    return MIN_BILLED_HOURS.get(cloud, 60.0 / 3600.0)


def default_probe_kind(cloud: str) -> str:
    """``request`` where the cloud allows a billing-free request-and-cancel, else ``launch``."""
    return PROBE_REQUEST if cloud in REQUEST_PROBE_CLOUDS else PROBE_LAUNCH


def probe_kind_for(cloud: str, wanted: str | None) -> str:
    """The kind a target's probes use: `wanted` (a target's or connection's ``probe_kind``) when
    set, else the cloud's default; a kind the cloud cannot do is refused here, before any probe."""
    if not wanted:
        return default_probe_kind(cloud)
    if wanted not in (PROBE_LAUNCH, PROBE_REQUEST):
        raise ValueError(f"probe_kind must be {PROBE_LAUNCH!r} or {PROBE_REQUEST!r}, got {wanted!r}")
    if wanted == PROBE_REQUEST and cloud not in REQUEST_PROBE_CLOUDS:
        raise ValueError(f"probe_kind {wanted!r}: the {cloud} cloud has no billing-free spot request (docs/probing.md)")
    return wanted


def expected_probe_usd(
    count: int, spot_usd_per_hour: float, cloud: str, kind: str, race_share: float | None = None
) -> float:
    """Most a launch probe can cost (every instance granted, billed the minimum); for a request
    probe, that times the race share (`race_share`, else the prior `REQUEST_FULFILLED_SHARE`)."""
    most = count * spot_usd_per_hour * min_billed_hours(cloud)
    if kind != PROBE_REQUEST:
        return most
    return most * (REQUEST_FULFILLED_SHARE if race_share is None else race_share)


def race_shares(spend: pd.DataFrame, kinds: pd.DataFrame) -> dict[str, float]:
    """Each cloud's race share from its own record: of its request probes that saw capacity, the
    share that was billed (``usd > 0``), shrunk towards the prior `REQUEST_FULFILLED_SHARE` as if
    `RACE_PRIOR_PROBES` probes had shown it: ``(billed + prior × n0) / (seen + n0)``.

    `spend` is the probe-spend record (``probed_at, cloud, zone, instance_type, available, usd``),
    `kinds` the market rows' kinds (`MarketTable.probe_kinds`); a probe's spend row and market row
    share their time, zone and instance type. A cloud with no request probe gets no entry."""
    if spend.empty or kinds.empty:
        return {}
    rows = kinds.rename(columns={"observed_at": "probed_at"})
    spend = spend.assign(probed_at=_utc_ns(spend["probed_at"]))
    rows = rows.assign(probed_at=_utc_ns(rows["probed_at"]))
    joined = spend.merge(rows, on=["probed_at", "zone", "instance_type"], how="inner")
    joined = joined[(joined["probe_kind"] == PROBE_REQUEST) & (joined["available"] > 0)]
    out = {}
    for cloud, probes in joined.groupby("cloud"):
        billed = float((probes["usd"] > 0).sum())
        out[str(cloud)] = (billed + REQUEST_FULFILLED_SHARE * RACE_PRIOR_PROBES) / (len(probes) + RACE_PRIOR_PROBES)
    return out


def _utc_ns(times: pd.Series) -> pd.Series:
    return pd.to_datetime(times, utc=True).astype("datetime64[ns, UTC]")


@dataclass(frozen=True)
class ProbeMarket:
    """What the planner knows of one market (zone × instance type) at planning time.

    :param count: the gang size a probe asks for.
    :param spot_usd_per_hour: latest known spot price per instance (None: unknown).
    :param on_demand_usd_per_hour: latest known on-demand price per instance (None: unknown).
    :param used: a job may use it (listed, or a running job is there).
    :param last_observed_at: newest observation that can show the gang up (``requested ≥ count``),
        from any source (probes, jobs, imports); None: none.
    :param last_probed_at: newest launch probe this DAG paid for; None: never.
    :param observations: observations in the last `RECENT_HOURS`.
    :param flips: changes between up and down among them.
    :param up: whether the newest observation showed capacity for the gang.
    :param probe_kind: how it is probed (``launch`` or ``request``), which sets its expected cost.
    :param race_share: for a request probe, the share expected to be billed (its cloud's measured
        race share, `race_shares`); None: the prior `REQUEST_FULFILLED_SHARE`.
    """

    cloud: str
    region: str
    zone: str
    instance_type: str
    count: int = 1
    spot_usd_per_hour: float | None = None
    on_demand_usd_per_hour: float | None = None
    used: bool = False
    last_observed_at: pd.Timestamp | None = None
    last_probed_at: pd.Timestamp | None = None
    observations: int = 0
    flips: int = 0
    up: bool | None = None
    probe_kind: str = PROBE_LAUNCH
    race_share: float | None = None

    @property
    def key(self) -> str:
        return f"{self.zone}:{self.instance_type}"

    def age_hours(self, now: pd.Timestamp) -> float:
        if self.last_observed_at is None:
            return math.inf
        return max(0.0, (now - self.last_observed_at).total_seconds() / 3600.0)


@dataclass(frozen=True)
class ProbeChoice:
    """One market to probe (or not) and why, in plain words."""

    market: ProbeMarket
    expected_usd: float
    reason: str


@dataclass(frozen=True)
class ProbePlan:
    """The planner's decision for one run: what to probe, what not, and the money involved."""

    probe: tuple[ProbeChoice, ...]
    skip: tuple[ProbeChoice, ...]
    budget_usd_per_day: float
    spent_today_usd: float
    now: pd.Timestamp
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def expected_usd(self) -> float:
        return sum(c.expected_usd for c in self.probe)

    def to_dict(self) -> dict:
        def row(choice: ProbeChoice) -> dict:
            return {"market": choice.market.key, "expected_usd": choice.expected_usd, "reason": choice.reason}

        return {
            "now": self.now.isoformat(),
            "budget_usd_per_day": self.budget_usd_per_day,
            "spent_today_usd": self.spent_today_usd,
            "probe": [row(c) for c in self.probe],
            "skip": [row(c) for c in self.skip],
            "notes": list(self.notes),
        }


class ProbePlanner:
    """Choose this run's probes; see the module docstring for the rules.

    :param budget_usd_per_day: the most all probes of a UTC day may cost (≥ 0).
    :param max_market_age_hours: markets in use must never have an older newest observation.
    :param interval_hours: the probe DAG's period (the next chance to probe).
    """

    def __init__(
        self,
        budget_usd_per_day: float,
        max_market_age_hours: float = DEFAULT_MAX_AGE_HOURS,
        interval_hours: float = 1 / 6,
    ):
        if not (math.isfinite(budget_usd_per_day) and budget_usd_per_day >= 0):
            raise ValueError(f"probe_budget_usd_per_day must be a number ≥ 0, got {budget_usd_per_day!r}")
        if not max_market_age_hours > 0:
            raise ValueError(f"max_market_age must be > 0, got {max_market_age_hours!r} h")
        if not interval_hours > 0:
            raise ValueError(f"the probe interval must be > 0, got {interval_hours!r} h")
        self.budget_usd_per_day = float(budget_usd_per_day)
        self.max_market_age_hours = float(max_market_age_hours)
        self.interval_hours = float(interval_hours)

    # -- pieces, each small enough to test alone ----------------------------------------------

    def expected_usd(self, market: ProbeMarket) -> float | None:
        """What a probe of `market` is planned at, by its kind (`expected_probe_usd`)."""
        if market.spot_usd_per_hour is None:
            return None
        return expected_probe_usd(
            market.count, market.spot_usd_per_hour, market.cloud, market.probe_kind, market.race_share
        )

    def refresh_hours(self) -> float:
        """How old a used market's newest observation may be at a run: it must not pass
        `max_market_age` before the next run's probe of it. A run stamps its rows as it probes,
        up to a round's length after it starts (seconds on a real cloud, hours of a fast simulated
        clock), so a market probed late in the last run looks younger than its run by then: half
        an interval of slack keeps it from waiting one run too many."""
        return max(self.max_market_age_hours - 1.5 * self.interval_hours, 0.0)

    def uncertainty(self, market: ProbeMarket) -> float:
        """0 (calm, well observed) .. 1 (flipping, or hardly observed)."""
        few = 0.5 if market.observations < 3 else 0.0
        return min(1.0, 0.5 * market.flips + few)

    def cadence_hours(self, market: ProbeMarket, cheapest_on_demand: float | None) -> tuple[float, str]:
        """How old the market's newest observation may get before it is due, and why."""
        dear = (
            market.spot_usd_per_hour is not None
            and cheapest_on_demand is not None
            and market.spot_usd_per_hour >= cheapest_on_demand
        )
        if dear:
            base, kind = DEAR_CADENCE_FACTOR * self.max_market_age_hours, "dear (spot not below on-demand)"
        elif market.used:
            base, kind = self.refresh_hours(), "in use"
        elif market.up:
            base, kind = UNUSED_CADENCE_FACTOR * self.max_market_age_hours * 0.75, "recently up"
        else:
            base, kind = UNUSED_CADENCE_FACTOR * self.max_market_age_hours, "not in use"
        u = self.uncertainty(market)
        cadence = max(self.interval_hours, base * (1.0 - 0.75 * u))
        if u >= 0.5:
            kind += ", uncertain"
        elif u == 0:
            kind += ", calm"
        return cadence, kind

    # -- the plan ------------------------------------------------------------------------------

    def plan(self, markets: list[ProbeMarket], now: pd.Timestamp, spent_today_usd: float) -> ProbePlan:
        """This run's probes. `spent_today_usd`: what probes of these markets cost since midnight UTC."""
        now = pd.Timestamp(now)
        remaining = self.budget_usd_per_day - spent_today_usd
        hours_left = max((now.floor("D") + pd.Timedelta(days=1) - now).total_seconds() / 3600.0, 1e-6)
        on_demand = [m.on_demand_usd_per_hour for m in markets if m.on_demand_usd_per_hour is not None]
        cheapest_on_demand = min(on_demand) if on_demand else None
        mandatory, baseline, optional, skip = [], [], [], []
        notes = []
        for market in markets:
            cost = self.expected_usd(market)
            age = market.age_hours(now)
            if cost is None:
                skip.append(ProbeChoice(market, 0.0, "no spot price known (set spot_usd_per_hour on its probe target)"))
                continue
            cadence, kind = self.cadence_hours(market, cheapest_on_demand)
            age_words = "never observed" if math.isinf(age) else f"newest observation {_hours(age)} old"
            if market.used and age >= self.refresh_hours():
                mandatory.append((age, ProbeChoice(market, cost, f"{kind}, {age_words}: due to stay fresh")))
            elif market.last_probed_at is None:
                baseline.append((age, ProbeChoice(market, cost, f"{kind}, never probed by this DAG")))
            elif age >= cadence:
                why = f"{kind}, {age_words}, due every {_hours(cadence)}"
                optional.append((age / cadence, ProbeChoice(market, cost, why)))
            else:
                skip.append(ProbeChoice(market, cost, f"{kind}, {age_words}, next due at {_hours(cadence)}"))

        chosen: list[ProbeChoice] = []
        spend = 0.0

        def take(choices, limit: float, words: str) -> None:
            nonlocal spend
            for choice in choices:
                if spend + choice.expected_usd <= limit + 1e-12:
                    chosen.append(choice)
                    spend += choice.expected_usd
                else:
                    skip.append(ProbeChoice(choice.market, choice.expected_usd, f"{choice.reason}; {words}"))

        # 1. Used markets about to go stale, the oldest first: limited by the budget only.
        take([c for _, c in sorted(mandatory, key=lambda x: -x[0])], remaining, "not within today's budget")
        # What keeping the used markets fresh costs until midnight, beyond this run.
        reserve = sum(
            self.expected_usd(m) * hours_left / max(self.refresh_hours(), self.interval_hours)
            for m in markets
            if m.used and self.expected_usd(m) is not None
        )
        free = max(0.0, remaining - spend - reserve)
        if free <= 0 and (baseline or optional):
            notes.append(f"the rest of today's budget (${remaining - spend:.2f}) is kept for markets in use")
        # 2. Never-probed markets, once: above the reserve, not paced.
        take([c for _, c in sorted(baseline, key=lambda x: -x[0])], spend + free, "kept for markets in use")
        # 3. Due markets, the most overdue first, paced over the rest of the day.
        free = max(0.0, remaining - spend - reserve)
        paced = free * min(1.0, PACE_BURST * self.interval_hours / hours_left)
        take([c for _, c in sorted(optional, key=lambda x: -x[0])], spend + paced, "paced over the rest of the day")
        return ProbePlan(
            probe=tuple(chosen),
            skip=tuple(sorted(skip, key=lambda c: c.market.key)),
            budget_usd_per_day=self.budget_usd_per_day,
            spent_today_usd=float(spent_today_usd),
            now=now,
            notes=tuple(notes),
        )


def observation_stats(rows: pd.DataFrame, count: int, now: pd.Timestamp) -> dict[tuple[str, str], dict]:
    """Per (zone, instance type): newest usable observation, recent count and flips, last up/down,
    latest prices, from market-observation rows (any source). Rows asking for fewer than `count`
    instances cannot show the gang up, so they are left out of all but the prices."""
    out: dict[tuple[str, str], dict] = {}
    if rows.empty:
        return out
    rows = rows.sort_values("observed_at", kind="stable")
    recent_since = now - pd.Timedelta(hours=RECENT_HOURS)
    usable = rows[rows["requested"] >= count]
    usable_by_market = dict(tuple(usable.groupby(["zone", "instance_type"], sort=False)))
    for key, group in rows.groupby(["zone", "instance_type"], sort=False):
        last = group.iloc[-1]
        stats = {
            "spot_usd_per_hour": float(last["spot_price"]),
            "on_demand_usd_per_hour": float(last["on_demand_price"]),
            "last_observed_at": None,
            "observations": 0,
            "flips": 0,
            "up": None,
        }
        mine = usable_by_market.get(key)
        if mine is not None and len(mine):
            ups = (mine["available"] >= count).to_numpy()
            recent = (mine["observed_at"] >= recent_since).to_numpy()
            recent_ups = ups[recent]
            stats.update(
                last_observed_at=pd.Timestamp(mine["observed_at"].iloc[-1]),
                observations=int(recent.sum()),
                flips=int((recent_ups[1:] != recent_ups[:-1]).sum()),
                up=bool(ups[-1]),
            )
        out[key] = stats
    return out


def probe_cost_for(markets, start, end, *, url: str | None = None, sharing_jobs: int = 1) -> float:
    """What probing cost on a job's behalf: the probe spend on the markets it considered while it ran.

    :param markets: the job's markets: zones (``us-central1-a``) or ``zone:instance_type`` keys.
    :param start: the job's start (timezone-aware; naive is taken as UTC), inclusive.
    :param end: the job's end, exclusive.
    :param url: the market database (the `skynomad` connection's ``market_url``); default: the
        embedded SQLite file.
    :param sharing_jobs: how many jobs considered these markets at the same time; each pays an
        equal share (1: this job alone).
    :return: USD; 0.0 when nothing was probed (or the probe-spend table does not exist yet).
    """
    from airflow_provider_skynomad.market.store.signals import SignalTable

    if sharing_jobs < 1:
        raise ValueError(f"sharing_jobs must be ≥ 1, got {sharing_jobs!r}")
    keys = [str(m) for m in markets]
    zones = sorted({k.split(":", 1)[0] for k in keys})
    if not zones:
        return 0.0
    with SignalTable(url) as table:
        rows = table.read_spend(zones=zones, since=start, until=end)
    if rows.empty:
        return 0.0
    wanted = set(keys)
    mask = [z in wanted or f"{z}:{t}" in wanted for z, t in zip(rows["zone"], rows["instance_type"], strict=True)]
    return float(rows.loc[mask, "usd"].sum()) / sharing_jobs


def _hours(hours: float) -> str:
    if hours < 1:
        return f"{hours * 60:.0f} min"
    return f"{hours:.1f} h"
