"""Every option the SkyNomad policy weighed at one decision, with the terms of its utility.

`skynomad plan --explain` prints these rows; the job runtime keeps the best few of each recent
decision so the job page can show why the job went where it did. The rows come from the policy's
own scoring (the same calls `SkyNomadPolicy.decide` makes), so they cannot drift from the decision.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Mode, Option
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.policies.skynomad import SkyNomadPolicy
from airflow_provider_skynomad.planner.utility import MODES


@dataclass(frozen=True)
class OptionRow:
    market: str
    mode: str
    value_usd_per_hour: float  # V
    useful_share: float  # η
    price_usd_per_hour: float
    egress_usd_per_hour: float  # amortised over the stay
    stay_hours: float
    utility_usd_per_hour: float  # U
    rank: int | None  # 1 = tried first; None = not tried


def explain(policy: SkyNomadPolicy, job: JobSpec, state: JobState, view: MarketView, now: float, decision=None):
    """(decision, rows): the policy's decision and the terms of every option's utility, best U first.

    Give `decision` when it was already made (the runtime's, carried out): it is not made again and
    the rows are ranked by the order it tries them.
    """
    decision = decision if decision is not None else policy.decide(job, state, view, now)
    scores, value = policy.weigh(job, state.advance(elapsed_hours=now), view)
    utility = scores.utility(value)
    order = {o: k + 1 for k, o in enumerate(o for o in decision.try_in_order if o is not None)}
    rows = []
    for i, market in enumerate(view.keys):
        for j, mode in enumerate(MODES):
            if not scores.valid[i, j]:
                continue
            table = view.spot_usd_per_hour if mode is Mode.SPOT else view.on_demand_usd_per_hour
            price = float(table[i]) * job.instances
            rows.append(
                OptionRow(
                    market=market,
                    mode=mode.value,
                    value_usd_per_hour=round(value, 4),
                    useful_share=round(float(scores.useful_share[i, j]), 4),
                    price_usd_per_hour=round(price, 4),
                    egress_usd_per_hour=round(float(scores.cost_usd_per_hour[i, j]) - price, 4),
                    stay_hours=round(float(scores.stay_hours[i, j]), 3),
                    utility_usd_per_hour=round(float(utility[i, j]), 4),
                    rank=order.get(Option(market, mode)),
                )
            )
    rows.sort(key=lambda r: (r.rank is None, r.rank or 0, -r.utility_usd_per_hour))
    return decision, rows


def weighed(
    policy: SkyNomadPolicy, job: JobSpec, state: JobState, view, now: float, top: int = 6, decision=None
) -> list[dict]:
    """The `top` options of `explain`, tried ones first, as plain data (task state, the job page)."""
    _, rows = explain(policy, job, state, view, now, decision)
    return [asdict(row) for row in rows[:top]]
