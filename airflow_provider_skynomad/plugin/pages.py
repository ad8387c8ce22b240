"""The plugin's HTML pages: a job page, a markets page and a jobs dashboard, plain words first, numbers in tables.

Pure rendering from plain data (facts.py, plugin/overview.py): no I/O. This module works out what
each page says (words, totals, chart geometry through svg.py); the templates in templates/ lay it
out, escaping every value (render.py). Nothing here ever sees a connection: the markets page gets
the market table's URL already stripped of its password.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from airflow_provider_skynomad.plugin import svg
from airflow_provider_skynomad.plugin.facts import JobFacts, dashboard_row
from airflow_provider_skynomad.plugin.render import render, usd

if TYPE_CHECKING:  # the markets page's types: pandas and the forecasters are not for the job pages to load
    import pandas as pd

    from airflow_provider_skynomad.plugin.overview import Heatmap, MarketRow

log = logging.getLogger(__name__)
REFRESH_SECONDS = 10  # a running job's page reloads itself: live while the task is deferred
# Task states after which nothing more is written to the task's state: a page without a job then stays as it is.
ENDED_STATES = frozenset({"success", "failed", "upstream_failed", "skipped", "removed"})
OPTION_COLUMNS = (
    "utility_usd_per_hour",
    "value_usd_per_hour",
    "useful_share",
    "price_usd_per_hour",
    "egress_usd_per_hour",
    "stay_hours",
)


def job_page(title: str, ti_state: str | None, facts: JobFacts | None, note: str = "") -> str:
    """The job's page: where it ran, why it moved, progress against the deadline, spend against on-demand."""
    if facts is None:
        # A tab opened while the task is queued or starting comes before the record: it reloads itself
        # until the job is there, as a running job's page does, instead of waiting for a manual refresh.
        waiting = ti_state not in ENDED_STATES
        if waiting:
            note = f"{note} Live: this page reloads every {REFRESH_SECONDS} s.".strip()
        refresh = REFRESH_SECONDS if waiting else None
        return render("job.html", title=title, ti_state=ti_state, facts=None, note=note, refresh_seconds=refresh)
    if facts.finished:
        verdict = "met" if facts.deadline_met else "MISSED"
        status = f"finished after {facts.elapsed_hours:.2f} h of {facts.deadline_hours:.2f} h: deadline {verdict}"
    else:
        slack = f", slack {facts.slack_hours:.2f} h" if facts.slack_hours is not None else ""
        if facts.slack_hours is not None and facts.slack_hours < 0:
            slack += ": deadline at risk, even on-demand from now would finish after it"
        status = f"running for {facts.elapsed_hours:.2f} h of {facts.deadline_hours:.2f} h{slack}"
    pct = 100.0 * facts.progress_hours / facts.work_hours if facts.work_hours else 0.0
    if facts.finished and facts.deadline_met is not None:
        pct = 100.0
    where_launching = f"launching in {facts.launching_in}" if facts.launching_in else "no zone yet"
    cards = [
        ("task", ti_state or "?"),
        ("ran in", ", ".join(facts.zones) or where_launching),
        ("done (checkpointed)", f"{pct:.0f}%"),
        ("deadline", deadline_card(facts)),
        (f"cost {facts.cost_basis}", usd(facts.spend_usd)),
        ("all on-demand would be", usd(facts.all_on_demand_usd)),
        ("saved", usd(facts.saving_usd) if facts.finished else "when it ends"),
        ("preemptions ✕ / moves ▶", f"{facts.preemptions} / {facts.moves}"),
    ]
    safe = facts.latest_safe_switch_hours
    deadline, work = facts.deadline_hours, facts.work_hours
    progress = svg.lines(
        [
            ("progress (rebuilt from segments)", facts.progress_points, ""),
            ("uniform progress to the deadline", [(0.0, 0.0), (deadline, work)], "6 4"),
            (
                "latest safe on-demand finish",
                [(deadline - work - facts.cold_start_hours, 0.0), (deadline - facts.cold_start_hours, work)],
                "2 3",
            ),
        ],
        "cloud hours since start",
        "work hours done",
        verticals=[(deadline, "deadline")]
        + ([] if facts.finished else [(max(0.0, safe), "latest safe switch to on-demand")]),
    )
    cost = svg.lines(
        [("this job (at launch-time prices)", facts.cost_points, ""), ("all on-demand", facts.on_demand_points, "6 4")],
        "cloud hours since start",
        "USD",
    )
    return render(
        "job.html",
        title=title,
        ti_state=ti_state,
        facts=facts,
        note=note,
        status=status,
        card_items=cards,
        kind_colours=svg.KIND_COLOURS,
        gantt=svg.gantt(facts.bars, facts.markers, facts.zones, facts.elapsed_hours, facts.deadline_hours),
        progress_chart=progress,
        cost_chart=cost,
        option_columns=OPTION_COLUMNS,
        refresh_seconds=None if facts.finished else REFRESH_SECONDS,
    )


def deadline_card(facts: JobFacts) -> str:
    """The deadline and where the job stands against it, drawn with the page (no script fills it in
    later): met or MISSED once it ended, on track or AT RISK (even on-demand from now would be late)
    while it runs, from the live status or, before the trigger's first publish, from the record."""
    deadline = f"{facts.deadline_hours:.2f} h"
    if facts.finished:
        if facts.deadline_met is None:
            return deadline
        return f"{deadline}: met" if facts.deadline_met else f"{deadline}: MISSED"
    if facts.slack_hours is None:
        return deadline
    return f"{deadline}: AT RISK" if facts.slack_hours < 0 else f"{deadline}: on track"


def markets_page(
    rows: list[MarketRow],
    heat: Heatmap,
    prices: pd.DataFrame,
    spend_per_day: list[tuple[str, float]] | None,
    *,
    held: dict[str, tuple[int, int]] | None = None,
    days: float,
    max_age_hours: float,
    source: str,
    can_probe: bool,
    probe_message: str = "",
) -> str:
    """Availability heatmap, price lines, probe ages against max_market_age, lifetime forecasts, probe spend."""
    labels = [t.strftime("%m-%d %H:%M") for t in heat.starts]
    return render(
        "markets.html",
        title="SkyNomad markets",
        refresh_seconds=None,
        rows=rows,
        held=held,
        days=days,
        source=source,
        probe_message=probe_message,
        can_probe=can_probe,
        heatmap=svg.heatmap(heat.markets, heat.share, labels),
        bucket_hours=heat.bucket_hours,
        shades=list(zip(svg.SHADES, ["none", "¼", "½", "¾", "all"], strict=True)),
        no_probe=svg.NO_PROBE,
        prices=_price_chart(prices),
        max_age_hours=max_age_hours,
        spend_per_day=spend_per_day,
    )


def _price_chart(prices: pd.DataFrame) -> svg.Chart | None:
    """Each market's spot price and the cheapest on-demand price over the window."""
    import pandas as pd

    if prices.empty:
        return None
    t0 = prices["observed_at"].min()
    series = []
    for market, group in prices.groupby("market", sort=True):
        hours = ((group["observed_at"] - t0).dt.total_seconds() / 3600.0).round(3)
        series.append((f"{market} spot", list(zip(hours, group["spot_price"], strict=True)), ""))
    od = prices.groupby("bucket_time", sort=True)["on_demand_price"].min()
    od_hours = ((od.index.to_series() - t0).dt.total_seconds() / 3600.0).round(3)
    series.append(("cheapest on-demand", list(zip(od_hours, od.to_numpy(), strict=True)), "6 4"))
    return svg.lines(
        series,
        f"hours since {t0:%Y-%m-%d %H:%M} UTC",
        "USD/h",
        x_format=lambda h: f"{(t0 + pd.Timedelta(hours=h)):%m-%d %H:%M}",
    )


def dashboard_page(jobs, days: float, job_href) -> str:
    """Every SkyNomad task of the last `days` days, with totals."""
    lines = [_dashboard_line(job, job_href) for job in jobs]
    rows = [line for line in lines if line["error"] is None]
    finished = [r for r in rows if r["finished"]]
    saved = sum(r["saving"] for r in finished if r["saving"] is not None)
    met = sum(1 for r in finished if r["deadline_met"])
    preemptions: dict[str, int] = {}
    for r in rows:
        for zone, count in r["preempted_in"].items():
            preemptions[zone] = preemptions.get(zone, 0) + count
    totals = [
        ("SkyNomad tasks", str(len(lines))),
        ("finished", str(len(finished))),
        ("deadlines met", f"{met} of {len(finished)}"),
        ("saved against on-demand", usd(saved)),
        ("spent", usd(sum(r["spend"] or 0.0 for r in rows))),
    ]
    return render(
        "dashboard.html",
        title="SkyNomad jobs",
        refresh_seconds=None,
        days=days,
        totals=totals,
        preemptions=sorted(preemptions.items(), key=lambda kv: -kv[1]),
        lines=lines,
    )


def _also_ran_in(zones: list[str], named: int = 3) -> str:
    """The other zones a job ran in, for its zone cell: "(also us-east4-a, us-central1-a)".

    A row keeps its width however often the job moved: beyond `named` zones the rest is a count.
    """
    if not zones:
        return ""
    shown = ", ".join(zones[:named])
    rest = len(zones) - named
    return f"(also {shown} and {rest} more)" if rest > 0 else f"(also {shown})"


def _dashboard_line(job, job_href) -> dict:
    """One task's row: where it is in Airflow, and its figures, or why they cannot be shown.

    A record or status is whatever was written to the task's state: one that cannot be read spoils its
    own row (which says why), not the page of everyone who may read any job.
    """
    line = {
        "dag_id": job.dag_id,
        "run_id": job.run_id,
        "task": job.task_id + ("" if job.map_index < 0 else f"[{job.map_index}]"),
        "href": job_href(job),
        "error": None,
    }
    if getattr(job, "foreign", None):
        return line | {"error": job.foreign}
    try:
        r = dashboard_row(job.ti_state, job.record, job.status)
    except Exception as exc:  # noqa: BLE001 - any fault of one record is that row's, shown there
        log.warning("SkyNomad dashboard: cannot show %s: %s", job.key, exc, exc_info=not isinstance(exc, ValueError))
        return line | {"error": str(exc) or type(exc).__name__}
    return line | {
        "state": r["state"],
        "reason": r.get("reason"),
        "zone": r["zone"] or "–",
        "also": _also_ran_in(r.get("other_zones") or []),
        "pct": r["pct"],
        "slack": r["slack"],
        "spend": r["spend"],
        "saving": r["saving"],
        "deadline_met": r.get("deadline_met"),
        "finished": bool(r.get("finished")),
        "preempted_in": r.get("preempted_in") or {},
    }
