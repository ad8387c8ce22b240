"""The plugin's HTML pages: a job page, a markets page and a jobs dashboard, plain words first, numbers in tables.

Pure rendering from plain data (facts.py, market/overview.py): no I/O. Nothing here ever sees a
connection: the markets page gets the market table's URL already stripped of its password.
"""

from __future__ import annotations

import math

import pandas as pd

from ..market.overview import Heatmap, MarketRow
from . import svg
from .facts import JobFacts, dashboard_row
from .svg import esc

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:16px;color:#212529;background:#fff}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:22px 0 6px} .sub{color:#495057;margin:0 0 12px}
table{border-collapse:collapse;font-size:13px} td,th{padding:3px 8px;border-bottom:1px solid #dee2e6;text-align:left}
th{background:#f1f3f5} td.n{text-align:right;font-variant-numeric:tabular-nums}
.cards{display:flex;gap:12px;flex-wrap:wrap} .card{border:1px solid #dee2e6;border-radius:6px;padding:8px 12px}
.card b{display:block;font-size:18px} .card span{color:#495057;font-size:12px}
.chart text{font-size:11px;fill:#343a40} .grid{stroke:#e9ecef} .deadline,.rule{stroke:#c92a2a;stroke-dasharray:4 3}
.rule-label{fill:#c92a2a} .legend{font-size:12px;margin:2px 0 8px} .key{margin-right:14px}
.key i{display:inline-block;width:18px;border-top:3px solid;margin-right:4px;vertical-align:middle}
.swatch{display:inline-block;width:12px;height:12px;margin:0 4px 0 10px;vertical-align:middle}
.bad{color:#c92a2a} .good{color:#2b8a3e} .empty{color:#868e96} ul.story{font-size:13px;padding-left:18px}
button{padding:5px 12px}
"""


REFRESH_SECONDS = 30  # a running job's page reloads itself: live while the task is deferred


def page(title: str, body: str, refresh_seconds: int | None = None) -> str:
    refresh = f'<meta http-equiv="refresh" content="{refresh_seconds}">' if refresh_seconds else ""
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">{refresh}<title>{esc(title)}</title>'
        f"<style>{STYLE}</style></head><body>{body}</body></html>"
    )


def _usd(value) -> str:
    """Dollars with the sign in front ("-$0.89": a job that cost more than all on-demand would have)."""
    if value is None:
        return "–"
    return f"-${-value:,.2f}" if value < 0 else f"${value:,.2f}"


def _pct(value) -> str:
    return "–" if value is None else f"{value:.0f}%"


def _days(n: float) -> str:
    """'1 day', '7 days', '0.5 days'."""
    return f"{n:g} day" if n == 1 else f"{n:g} days"


def _hours(value) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f} h"


def job_page(title: str, ti_state: str | None, facts: JobFacts | None, note: str = "") -> str:
    """The job's page: where it ran, why it moved, progress against the deadline, spend against on-demand."""
    head = f"<h1>{esc(title)}</h1>"
    if facts is None:
        return page(title, head + f'<p class="sub">Task state: {esc(ti_state or "?")}. {esc(note)}</p>')
    where = ", ".join(facts.zones) or "no zone yet"
    if facts.finished:
        verdict = "met" if facts.deadline_met else "MISSED"
        status = f"finished after {facts.elapsed_hours:.2f} h of {facts.deadline_hours:.2f} h: deadline {verdict}"
    else:
        slack = f", slack {facts.slack_hours:.2f} h" if facts.slack_hours is not None else ""
        status = f"running for {facts.elapsed_hours:.2f} h of {facts.deadline_hours:.2f} h{slack}"
    pct = 100.0 * facts.progress_hours / facts.work_hours if facts.work_hours else 0.0
    if facts.finished and facts.deadline_met is not None:
        pct = 100.0
    cards = [
        ("task", ti_state or "?"),
        ("ran in", where),
        ("done (checkpointed)", f"{pct:.0f}%"),
        ("deadline", f"{facts.deadline_hours:.2f} h"),
        (f"cost {facts.cost_basis}", _usd(facts.spend_usd)),
        ("all on-demand would be", _usd(facts.all_on_demand_usd)),
        ("saved", _usd(facts.saving_usd) if facts.finished else "when it ends"),
        ("preemptions / moves", f"{facts.preemptions} / {facts.migrations}"),
    ]
    body = [
        head,
        f'<p class="sub">Job {esc(facts.job_id)} ({esc(facts.policy)}): {esc(status)}. {esc(note)}</p>',
        '<div class="cards" id="job-cards">'
        + "".join(f'<div class="card"><span>{esc(k)}</span><b>{esc(v)}</b></div>' for k, v in cards)
        + "</div>",
        "<h2>Where it ran</h2>",
        "".join(f'<span class="swatch" style="background:{c}"></span>{esc(k)}' for k, c in svg.KIND_COLOURS.items())
        + ' <span class="swatch" style="background:none">✕</span>preempted'
        + ' <span class="swatch" style="background:none">▶</span>moved',
        svg.gantt(facts.bars, facts.markers, facts.zones, facts.elapsed_hours, facts.deadline_hours),
    ]
    if facts.markers:
        body.append(
            '<ul class="story">'
            + "".join(f"<li>t={m['at']:.2f} h: {esc(m['why'])}</li>" for m in facts.markers)
            + "</ul>"
        )
    safe = facts.latest_safe_switch_hours
    body += [
        "<h2>Progress against time</h2>",
        svg.lines(
            [
                ("progress (rebuilt from segments)", facts.progress_points, ""),
                ("uniform progress to the deadline", [(0.0, 0.0), (facts.deadline_hours, facts.work_hours)], "6 4"),
                (
                    "latest safe on-demand finish",
                    [
                        (facts.deadline_hours - facts.work_hours - facts.cold_start_hours, 0.0),
                        (facts.deadline_hours - facts.cold_start_hours, facts.work_hours),
                    ],
                    "2 3",
                ),
            ],
            "cloud hours since start",
            "work hours done",
            verticals=[(facts.deadline_hours, "deadline")]
            + ([] if facts.finished else [(max(0.0, safe), "latest safe switch to on-demand")]),
        ),
        f'<p class="sub">Checkpointed progress: {facts.progress_hours:.2f} of {facts.work_hours:.2f} h.'
        + ("" if facts.finished else f" Switching to on-demand later than {safe:.2f} h would miss the deadline.")
        + "</p>",
        "<h2>Cost so far against all on-demand</h2>",
        svg.lines(
            [
                ("this job (at launch-time prices)", facts.cost_points, ""),
                ("all on-demand", facts.on_demand_points, "6 4"),
            ],
            "cloud hours since start",
            "USD",
        ),
        "<h2>What happened</h2>",
        '<ul class="story">' + "".join(f"<li>{esc(line)}</li>" for line in facts.story) + "</ul>",
    ]
    if facts.decisions:
        body += [
            "<h2>Last decisions (numbers)</h2>",
            "<table><tr><th>at</th><th>chose</th><th>planner's figures</th></tr>"
            + "".join(
                f'<tr><td class="n">{d.get("at_hours", 0):.2f} h</td><td>{esc(d.get("want", ""))}</td>'
                f"<td>{esc(d.get('reason', ''))}{_weighed_table(d.get('options') or [])}</td></tr>"
                for d in facts.decisions
            )
            + "</table>",
            '<p class="sub">V: what an hour of progress is worth now; η: the share of the stay that is '
            "progress; U: V·η − price − amortised egress; # is the order the options were tried in "
            "(<code>skynomad plan --explain</code> prints every option).</p>",
        ]
    return page(title, "".join(body), None if facts.finished else REFRESH_SECONDS)


def _weighed_table(options: list[dict]) -> str:
    """The options a decision weighed (best first), as a small table inside its row."""
    if not options:
        return ""
    head = (
        '<table class="weighed"><tr><th>#</th><th>option</th><th>U $/h</th><th>V $/h</th><th>η</th>'
        "<th>price $/h</th><th>egress $/h</th><th>stay h</th></tr>"
    )
    columns = ("utility_usd_per_hour", "value_usd_per_hour", "useful_share", "price_usd_per_hour")
    columns += ("egress_usd_per_hour", "stay_hours")
    rows = "".join(
        f"<tr><td>{o.get('rank') or ''}</td><td>{esc(str(o.get('mode', '')))} in {esc(str(o.get('market', '')))}</td>"
        + "".join(f'<td class="n">{_num(o.get(c))}</td>' for c in columns)
        + "</tr>"
        for o in options
    )
    return head + rows + "</table>"


def _num(value) -> str:
    try:
        return f"{float(value):.2f}"
    except (TypeError, ValueError):
        return ""


def markets_page(
    rows: list[MarketRow],
    heat: Heatmap,
    prices: pd.DataFrame,
    spend_per_day: list[tuple[str, float]] | None,
    *,
    days: float,
    max_age_hours: float,
    source: str,
    can_probe: bool,
    probe_message: str = "",
) -> str:
    """Availability heatmap, price lines, probe ages against max_market_age, lifetime forecasts, probe spend."""
    body = [
        "<h1>SkyNomad markets</h1>",
        f'<p class="sub">The last {_days(days)} of the market table {esc(source)}: {len(rows)} markets.</p>',
    ]
    if probe_message:
        body.append(f'<p class="sub">{esc(probe_message)}</p>')
    if can_probe:
        body.append(
            '<form method="post" action="probe"><button type="submit" id="trigger-probe">'
            "Probe the markets now (runs the skynomad_probe DAG)</button></form>"
        )
    labels = [t.strftime("%m-%d %H:%M") for t in heat.starts]
    body += [
        "<h2>Availability (share of probes that found capacity"
        + (f", {heat.bucket_hours:.1f} h per cell)</h2>" if heat.markets else ")</h2>"),
        svg.heatmap(heat.markets, heat.share, labels),
        svg.heatmap_legend() if heat.markets else "",
    ]
    if not prices.empty:
        t0 = prices["observed_at"].min()
        series = []
        for market, group in prices.groupby("market", sort=True):
            hours = ((group["observed_at"] - t0).dt.total_seconds() / 3600.0).round(3)
            series.append((f"{market} spot", list(zip(hours, group["spot_price"], strict=True)), ""))
        od = prices.groupby("bucket_time", sort=True)["on_demand_price"].min()
        od_hours = ((od.index.to_series() - t0).dt.total_seconds() / 3600.0).round(3)
        series.append(("cheapest on-demand", list(zip(od_hours, od.to_numpy(), strict=True)), "6 4"))
        body += [
            "<h2>Prices (USD per instance-hour)</h2>",
            svg.lines(
                series,
                f"hours since {t0:%Y-%m-%d %H:%M} UTC",
                "USD/h",
                x_format=lambda h: f"{(t0 + pd.Timedelta(hours=h)):%m-%d %H:%M}",
            ),
        ]
    body.append(f"<h2>Each market now (stale: last probe older than {max_age_hours:g} h)</h2>")
    head = (
        "<tr><th>market</th><th>cloud</th><th>capacity</th><th>spot $/h</th><th>on-demand $/h</th>"
        "<th>forecast lifetime</th><th>last probe</th><th></th></tr>"
    )
    cells = "".join(
        f"<tr><td>{esc(r.market)}</td><td>{esc(r.cloud)}</td><td class='n'>{r.available}/{r.requested}</td>"
        f"<td class='n'>{r.spot_usd_per_hour:.2f}</td><td class='n'>{r.on_demand_usd_per_hour:.2f}</td>"
        f"<td class='n'>{_hours(r.forecast_lifetime_hours)}</td><td class='n'>{r.last_probe_age_hours:.2f} h ago</td>"
        f"<td class='{'bad' if r.stale else 'good'}'>{'stale' if r.stale else 'fresh'}</td></tr>"
        for r in rows
    )
    body.append(f'<table id="markets">{head}{cells}</table>')
    body.append("<h2>Probe spend per day</h2>")
    if spend_per_day is None:
        body.append('<p class="empty">no probe-spend record in this database</p>')
    elif not spend_per_day:
        body.append('<p class="empty">no paid probes in this window</p>')
    else:
        body.append(
            "<table><tr><th>day (UTC)</th><th>spent</th></tr>"
            + "".join(f"<tr><td>{esc(d)}</td><td class='n'>{_usd(v)}</td></tr>" for d, v in spend_per_day)
            + "</table>"
        )
    return page("SkyNomad markets", "".join(body))


def dashboard_page(jobs, days: float, job_href) -> str:
    """Every SkyNomad task of the last `days` days, with totals."""
    rows = [(job, dashboard_row(job.ti_state, job.record, job.status)) for job in jobs]
    finished = [r for _, r in rows if r.get("finished")]
    saved = sum(r["saving"] for r in finished if r.get("saving") is not None)
    met = sum(1 for r in finished if r.get("deadline_met"))
    preemptions: dict[str, int] = {}
    for _, r in rows:
        for zone, count in (r.get("preempted_in") or {}).items():
            preemptions[zone] = preemptions.get(zone, 0) + count
    cards = [
        ("SkyNomad tasks", str(len(rows))),
        ("finished", str(len(finished))),
        ("deadlines met", f"{met} of {len(finished)}"),
        ("saved against on-demand", _usd(saved)),
        ("spent", _usd(sum(r["spend"] or 0.0 for _, r in rows))),
    ]
    body = [
        "<h1>SkyNomad jobs</h1>",
        f'<p class="sub">Every SkyNomad task of the last {_days(days)} that you may read. Show the last '
        + ", ".join(f'<a href="jobs?days={d}">{_days(d)}</a>' for d in (1, 7, 30, 90))
        + ".</p>",
        '<div class="cards" id="totals">'
        + "".join(f'<div class="card"><span>{esc(k)}</span><b>{esc(v)}</b></div>' for k, v in cards)
        + "</div>",
    ]
    if preemptions:
        body.append(
            "<h2>Preemptions per zone</h2><table><tr><th>zone</th><th>preemptions</th></tr>"
            + "".join(
                f"<tr><td>{esc(z)}</td><td class='n'>{n}</td></tr>"
                for z, n in sorted(preemptions.items(), key=lambda kv: -kv[1])
            )
            + "</table>"
        )
    head = (
        "<tr><th>DAG</th><th>run</th><th>task</th><th>state</th><th>zone</th><th>done</th><th>slack</th>"
        "<th>spent</th><th>saved vs on-demand</th><th>deadline</th></tr>"
    )

    def met_cell(r):
        if r.get("deadline_met") is None:
            return "<td></td>"
        return "<td class='good'>met</td>" if r["deadline_met"] else "<td class='bad'>missed</td>"

    lines = "".join(
        f"<tr><td>{esc(job.dag_id)}</td><td><a href='{esc(job_href(job))}'>{esc(job.run_id)}</a></td>"
        f"<td>{esc(job.task_id)}{'' if job.map_index < 0 else f'[{job.map_index}]'}</td><td>{esc(r['state'])}</td>"
        f"<td>{esc(r['zone'] or '–')}</td><td class='n'>{_pct(r['pct'])}</td>"
        f"<td class='n'>{_hours(r['slack'])}</td><td class='n'>{_usd(r['spend'])}</td>"
        f"<td class='n'>{_usd(r['saving'])}</td>{met_cell(r)}</tr>"
        for job, r in rows
    )
    body.append(f"<h2>Tasks</h2><table id='jobs'>{head}{lines}</table>")
    return page("SkyNomad jobs", "".join(body))
