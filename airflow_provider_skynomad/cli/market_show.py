"""`skynomad market show`: each market as the market table shows it now (the markets page's table, for terminals).

"Now" is the connection's cloud clock, as on the page: the simulated cloud's rows are stamped
with its replayed trace's time.

Zone, capacity, prices, the lifetime forecast of a spot launch made now and the age of the last
probe against ``max_market_age`` (plugin/overview.py computes them for both). Exit codes as the
other market commands: 0 ok, 1 database trouble or an empty window, 2 bad input.
"""

from __future__ import annotations

import argparse

from airflow_provider_skynomad.market.freshness import DEFAULT_MAX_AGE_HOURS, FORECAST_DAYS

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def add_show_arguments(show: argparse.ArgumentParser, url_help: str) -> None:
    show.add_argument("--url", default=None, help=url_help)
    show.add_argument(
        "--days",
        type=float,
        default=FORECAST_DAYS,
        help=f"history the forecast is fitted on and markets are listed from (default: {FORECAST_DAYS:g}, as the page)",
    )
    show.add_argument(
        "--max-age-hours",
        type=float,
        default=None,
        help="a market whose last probe is older is stale (default: what the connection's probe DAG keeps markets "
        f"within, as on the page: {DEFAULT_MAX_AGE_HOURS:g} h on a real cloud, two rounds on a fast simulated clock)",
    )
    show.add_argument(
        "--conn-id",
        default=None,
        help="the skynomad connection whose cloud's clock says what 'now' is, and whose market table is read "
        "without --url (default skynomad_default: on the simulated cloud, its replayed trace's clock)",
    )
    show.add_argument("--json", action="store_true", help="print the rows as JSON lines instead of a table")
    show.set_defaults(func=run_show)


def run_show(args: argparse.Namespace) -> int:
    import sys

    if args.days <= 0 or (args.max_age_hours is not None and args.max_age_hours <= 0):
        print("skynomad market show: --days and --max-age-hours must be > 0", file=sys.stderr)
        return EXIT_BAD_INPUT
    # Imported here: `skynomad market import` and the others build this parser too.
    import pandas as pd
    from sqlalchemy.exc import SQLAlchemyError

    from airflow_provider_skynomad.clouds.factory import market_now
    from airflow_provider_skynomad.hooks.skynomad import DEFAULT_CONN_ID, SkyNomadConfigError, SkyNomadHook
    from airflow_provider_skynomad.market.store.table import MarketSchemaError, MarketTable
    from airflow_provider_skynomad.plugin.overview import expected_max_age_hours, market_rows

    try:
        config = SkyNomadHook(args.conn_id or DEFAULT_CONN_ID).get_config()
    except (SkyNomadConfigError, ValueError) as exc:
        print(f"skynomad market show: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.max_age_hours is None:
        args.max_age_hours = expected_max_age_hours(config)
    try:
        table = MarketTable(args.url or config.market_url)
    except ValueError as exc:
        print(f"skynomad market show: bad --url: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    now = market_now(config)
    try:
        frame = table.read(since=now - pd.Timedelta(days=args.days), until=now + pd.Timedelta(microseconds=1))
    except (MarketSchemaError, SQLAlchemyError) as exc:
        reason = getattr(exc, "orig", None) or exc
        print(f"skynomad market show: {table.display_url}: {str(reason).strip()}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        table.close()
    rows = market_rows(frame, now, args.max_age_hours)
    if not rows:
        print(
            f"skynomad market show: no observations in the last {args.days:g} days in {table.display_url}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    if args.json:
        import json

        for row in rows:
            print(json.dumps(row.to_dict()))
        return EXIT_OK
    print_rows(rows, table.display_url, args.max_age_hours)
    return EXIT_OK


def print_rows(rows, source: str, max_age_hours: float) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"markets in {source} (stale: last probe older than {max_age_hours:g} h)")
    for name in ("market", "cloud", "capacity", "spot $/h", "on-demand $/h", "forecast lifetime", "last probe", ""):
        table.add_column(name, justify="right" if name not in ("market", "cloud", "") else "left")
    for r in rows:
        table.add_row(
            r.market,
            r.cloud,
            f"{r.available}/{r.requested}",
            f"{r.spot_usd_per_hour:.2f}",
            f"{r.on_demand_usd_per_hour:.2f}",
            r.forecast_text(),
            f"{r.last_probe_age_hours:.2f} h ago",
            "stale" if r.stale else "fresh",
        )
    Console(width=140).print(table)
