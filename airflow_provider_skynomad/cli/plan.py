"""`skynomad plan [--explain]`: what the SkyNomad planner would do now, and with --explain every option it weighed.

The market is the market table (``--url``, its newest rows) or a trace file (``--trace``, at
``--at``); the job is given by its numbers. The explain table shows, per market and mode, the
terms of the planner's utility (planner/utility.py): V (what an hour of progress is worth now,
one figure for the step), η (the share of the expected stay that makes progress), the price,
the amortised egress per hour, the expected stay and U = V·η − price − egress, and marks the
options the planner would try, in order. It reads the policy's own scoring (the same calls
`SkyNomadPolicy.decide` makes), so the table cannot drift from the decision it explains.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from airflow_provider_skynomad.market.grid import build_grid
from airflow_provider_skynomad.market.observations import read_observations
from airflow_provider_skynomad.market.view import MarketView
from airflow_provider_skynomad.planner.actions import Mode, Option
from airflow_provider_skynomad.planner.explain import OptionRow, explain
from airflow_provider_skynomad.planner.job import JobSpec, JobState
from airflow_provider_skynomad.planner.policies.skynomad import SkyNomadPolicy


def add_plan_command(subparsers) -> None:
    plan = subparsers.add_parser(
        "plan",
        help="what the SkyNomad planner would do now (--explain: every option with V, η, price, egress, U)",
        description=__doc__.split("\n\n")[0],
    )
    source = plan.add_mutually_exclusive_group()
    source.add_argument("--url", default=None, help="SQLAlchemy URL of the market table (default: the embedded one)")
    source.add_argument("--trace", type=Path, default=None, help="a market trace instead of the market table")
    plan.add_argument("--at", default=None, help="with --trace: the moment to plan at (ISO 8601; default: its end)")
    plan.add_argument("--zones", default=None, help="comma-separated zones to choose from (default: all)")
    plan.add_argument("--work-hours", type=float, required=True)
    plan.add_argument("--deadline-hours", type=float, required=True, help="hours from now (the job's start)")
    plan.add_argument("--cold-start-hours", type=float, default=0.2)
    plan.add_argument("--checkpoint-gb", type=float, default=50.0)
    plan.add_argument("--instances", type=int, default=1)
    plan.add_argument("--elapsed-hours", type=float, default=0.0, help="hours the job has run (default 0)")
    plan.add_argument("--progress-hours", type=float, default=0.0, help="work done and checkpointed (default 0)")
    plan.add_argument("--running", default=None, help="what holds instances now, e.g. spot:us-west1-a")
    plan.add_argument("--explain", action="store_true", help="print every option weighed, not only the choice")
    plan.add_argument("--json", action="store_true", help="print JSON instead of text")
    plan.set_defaults(func=run_plan)


def _frame(args) -> pd.DataFrame:
    if args.trace is not None:
        frame = read_observations(args.trace)
        if args.at:
            frame = frame[frame["observed_at"] <= pd.Timestamp(args.at, tz="UTC")]
        return frame
    from airflow_provider_skynomad.market.store.table import MarketTable

    table = MarketTable(args.url)
    try:
        latest = table.latest_observed_at()
        if latest is None:
            raise ValueError(f"the market table {table.display_url} is empty; run the skynomad_probe DAG first")
        return table.read(since=latest - pd.Timedelta(days=7))
    finally:
        table.close()


def _running(text: str | None, view: MarketView) -> Option | None:
    if not text:
        return None
    mode, _, market = text.partition(":")
    if mode not in ("spot", "on-demand") or market not in view.keys:
        raise ValueError(f"--running must be spot:<market> or on-demand:<market> with a market in {view.keys}")
    return Option(market, Mode(mode))


def run_plan(args: argparse.Namespace) -> int:
    frame = _frame(args)
    if args.zones:
        zones = [z.strip() for z in args.zones.split(",") if z.strip()]
        frame = frame[frame["zone"].isin(zones)]
    if frame.empty:
        raise ValueError("no market observations to plan with (check --zones, --at)")
    grid = build_grid(frame)
    view = MarketView(grid, tick=grid.ticks - 1, gang_size=args.instances)
    job = JobSpec(
        work_hours=args.work_hours,
        deadline_hours=args.deadline_hours,
        cold_start_hours=args.cold_start_hours,
        checkpoint_gb=args.checkpoint_gb,
        instances=args.instances,
    )
    running = _running(args.running, view)
    state = JobState(
        elapsed_hours=args.elapsed_hours,
        progress_hours=args.progress_hours,
        running=running,
        running_since_hours=args.elapsed_hours,
        checkpoint_market=running.market if running and args.progress_hours > 0 else None,
    )
    decision, rows = explain(SkyNomadPolicy(), job, state, view, args.elapsed_hours)
    chosen = str(decision.first) if decision.first else "idle (hold no instances)"
    if args.json:
        print(json.dumps({"chosen": chosen, "reason": decision.reason, "options": [asdict(r) for r in rows]}))
        return 0
    print(f"at {view.now:%Y-%m-%d %H:%M} UTC, {len(view.keys)} markets: the planner would run {chosen}")
    if not args.explain:
        return 0
    print(f"  ({decision.reason})")
    print_options(rows)
    return 0


def print_options(rows: list[OptionRow]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="options weighed: U = V·η − price − egress (per hour of stay)")
    for name in ("", "market", "mode", "V $/h", "η", "price $/h", "egress $/h", "stay h", "U $/h"):
        table.add_column(name, justify="left" if name in ("", "market", "mode") else "right")
    for r in rows:
        mark = "chosen" if r.rank == 1 else (f"try {r.rank}" if r.rank else "")
        u = "-inf" if not math.isfinite(r.utility_usd_per_hour) else f"{r.utility_usd_per_hour:.2f}"
        table.add_row(
            mark,
            r.market,
            r.mode,
            f"{r.value_usd_per_hour:.2f}",
            f"{r.useful_share:.2f}",
            f"{r.price_usd_per_hour:.2f}",
            f"{r.egress_usd_per_hour:.2f}",
            f"{r.stay_hours:.2f}",
            u,
        )
    Console(width=140, file=sys.stdout).print(table)
