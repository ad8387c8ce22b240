"""`skynomad market import|export`: move observations between trace files and the market table;
`skynomad market spend`: what the probe DAG's launch probes cost, per day per market.

A trace is a dump of the table (docs/market.md), so export(import(file)) must give the file's rows
back exactly. Both stream: import validates and inserts the file chunk by chunk inside one
transaction, so a malformed row anywhere rolls everything back and the table stays as it was;
export writes the rows chunk by chunk to a temporary file renamed at the end. Exit codes: 0 ok,
1 database or "nothing to export" trouble, 2 bad input (argparse's own convention). Messages show
URLs without passwords.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from collections.abc import Iterable
from pathlib import Path

import pandas as pd
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from airflow_provider_skynomad.market.observations import (
    TraceError,
    iter_observations,
    open_trace_for_writing,
    write_observations,
)
from airflow_provider_skynomad.market.store.table import MarketSchemaError, MarketTable, default_market_url

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def add_market_commands(subparsers) -> argparse.ArgumentParser:
    """Register `market import` and `market export` on an argparse subparsers object."""
    market = subparsers.add_parser(
        "market",
        help="import/export the market table (observations in the market-observation trace format)",
        description="Move market observations between trace files and the market table.",
    )
    commands = market.add_subparsers(dest="market_command", metavar="{import,export,compact,spend,show}", required=True)
    url_help = f"SQLAlchemy URL of the market database (default: {default_market_url()})"

    load = commands.add_parser("import", help="load a trace file into the market table")
    load.add_argument("--trace", required=True, type=Path, help="trace CSV, optionally gzipped")
    load.add_argument("--url", default=None, help=url_help)
    load.set_defaults(func=run_import)

    dump = commands.add_parser("export", help="write market-table rows as a trace file")
    dump.add_argument("--output", required=True, type=Path, help="trace CSV to write (.gz to compress)")
    dump.add_argument("--url", default=None, help=url_help)
    dump.add_argument("--zones", type=_zone_list, default=None, help="comma-separated zones (default: all)")
    dump.add_argument("--since", type=_timestamp, default=None, help="first time to include (ISO 8601, UTC)")
    dump.add_argument("--until", type=_timestamp, default=None, help="first time to exclude (ISO 8601, UTC)")
    dump.set_defaults(func=run_export)

    spend = commands.add_parser("spend", help="what launch probes cost, per day per market")
    spend.add_argument("--url", default=None, help=url_help)
    spend.add_argument("--since", type=_timestamp, default=None, help="first time to include (ISO 8601, UTC)")
    spend.add_argument("--until", type=_timestamp, default=None, help="first time to exclude (ISO 8601, UTC)")
    spend.set_defaults(func=run_spend)

    squeeze = commands.add_parser(
        "compact",
        help="retention: before the last N days keep only rows that change something, and one per market per hour",
    )
    squeeze.add_argument("--url", default=None, help=url_help)
    squeeze.add_argument(
        "--keep-full-days",
        type=float,
        default=7.0,
        help="days before the newest row kept at full resolution (default 7, at least 1)",
    )
    squeeze.add_argument("--dry-run", action="store_true", help="count the rows that would go; delete nothing")
    squeeze.set_defaults(func=run_compact)

    from airflow_provider_skynomad.cli.market_show import add_show_arguments

    show = commands.add_parser("show", help="each market now: capacity, prices, forecast lifetime, last probe age")
    add_show_arguments(show, url_help)
    return market


def run_compact(args: argparse.Namespace) -> int:
    """Delete old rows that repeat their market's previous row (docs/market.md#retention)."""
    from airflow_provider_skynomad.market.store.retention import MIN_KEEP_FULL_DAYS, compact

    days = args.keep_full_days
    if not days >= MIN_KEEP_FULL_DAYS or days == float("inf"):
        return _fail(
            f"skynomad market compact: --keep-full-days must be a number of days ≥ {MIN_KEEP_FULL_DAYS:g}, got {days}",
            EXIT_BAD_INPUT,
        )
    table = _open(args.url, "compact")
    if isinstance(table, int):
        return table
    try:
        report = compact(table, keep_full_days=days, dry_run=args.dry_run)
    except (MarketSchemaError, SQLAlchemyError) as exc:
        return _database_failure("compact", table, exc)
    finally:
        table.close()
    if report.cutoff is None:
        print(f"the market table at {table.display_url} is empty; nothing to compact")
        return EXIT_OK
    verb = "would delete" if report.dry_run else "deleted"
    print(
        f"{verb} {report.deleted} of {report.examined} rows older than {report.cutoff.isoformat()} in "
        f"{table.display_url} (kept: every change, each market's first row per hour and its last row)"
    )
    return EXIT_OK


def run_spend(args: argparse.Namespace) -> int:
    """Print the probe-spend record: USD and probes per UTC day per market, and each day's total."""
    from airflow_provider_skynomad.market.store.signals import SignalTable

    table = _open(args.url, "spend")
    if isinstance(table, int):
        return table
    try:
        daily = SignalTable(market=table).daily_spend(since=args.since, until=args.until)
    except (MarketSchemaError, SQLAlchemyError) as exc:
        return _database_failure("spend", table, exc)
    finally:
        table.close()
    if daily.empty:
        print(f"no launch probes recorded in {table.display_url}")
        return EXIT_OK
    for day, rows in daily.groupby("day", sort=True):
        print(f"{day}: ${rows['usd'].sum():.2f} for {int(rows['probes'].sum())} probes")
        for row in rows.itertuples():
            print(f"  {row.cloud} {row.zone} {row.instance_type}: ${row.usd:.2f} for {row.probes} probes")
    return EXIT_OK


def run_import(args: argparse.Namespace) -> int:
    """Validate and insert the trace chunk by chunk in one transaction; existing rows are kept."""
    try:
        # The header, the file's readability and its first chunk are checked before the database is opened.
        chunks = iter_observations(args.trace, zone_names=True)  # stored rows name real zones
        first = next(chunks)
    except TraceError as exc:
        return _fail(f"skynomad market import: {exc}; nothing was written", EXIT_BAD_INPUT)
    table = _open(args.url, "import")
    if isinstance(table, int):
        return table
    seen = [0]

    def counted():
        for chunk in itertools.chain([first], chunks):
            seen[0] += len(chunk)
            yield chunk

    try:
        inserted = table.append_chunks(counted(), source=str(args.trace), validated=True)
    except TraceError as exc:
        return _fail(f"skynomad market import: {exc}; nothing was written", EXIT_BAD_INPUT)
    except (MarketSchemaError, SQLAlchemyError) as exc:
        return _database_failure("import", table, exc)
    finally:
        table.close()
    skipped = seen[0] - inserted
    print(
        f"imported {inserted} new rows from {args.trace} into {table.display_url}"
        + (f" ({skipped} already present, kept as stored)" if skipped else "")
    )
    return EXIT_OK


def run_export(args: argparse.Namespace) -> int:
    """Write the selected rows in the canonical trace format, atomically (no partial file)."""
    table = _open(args.url, "export")
    if isinstance(table, int):
        return table
    try:
        if args.zones:
            known = table.zones()
            unknown = [z for z in args.zones if z not in known]
            if unknown:
                return _fail(
                    f"skynomad market export: zones {unknown} have no rows in {table.display_url}; "
                    f"known zones: {known}",
                    EXIT_BAD_INPUT,
                )
        written = _write_atomically(table.iter_read(zones=args.zones, since=args.since, until=args.until), args.output)
    except (MarketSchemaError, SQLAlchemyError) as exc:
        return _database_failure("export", table, exc)
    except OSError as exc:
        return _fail(f"skynomad market export: cannot write {args.output}: {exc.strerror or exc}", EXIT_FAILED)
    finally:
        table.close()
    if not written:
        return _fail(
            f"skynomad market export: no rows in {table.display_url} match the filters; {args.output} was not written",
            EXIT_FAILED,
        )
    print(f"exported {written} rows from {table.display_url} to {args.output}")
    return EXIT_OK


def _write_atomically(chunks: Iterable[pd.DataFrame], output: Path) -> int:
    """Write the chunks as one canonical trace; return the row count (0: no file is left behind)."""
    # Same directory (so os.replace is atomic) and same suffix (so .gz still means gzip).
    temporary = output.with_name(f".tmp-{os.getpid()}-{output.name}")
    written = 0
    try:
        with open_trace_for_writing(temporary) as handle:
            for chunk in chunks:
                write_observations(chunk, handle, header=written == 0)
                written += len(chunk)
        if written:
            os.replace(temporary, output)
    finally:
        temporary.unlink(missing_ok=True)
    return written


def _zone_list(text: str) -> list[str]:
    zones = [z.strip() for z in text.split(",") if z.strip()]
    if not zones:
        raise argparse.ArgumentTypeError("expected comma-separated zone names, e.g. us-central1-a,us-west1-a")
    return zones


def _timestamp(text: str) -> pd.Timestamp:
    try:
        stamp = pd.Timestamp(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"cannot parse time {text!r}; use ISO 8601 such as 2025-10-04T00:00:00Z"
        ) from None
    if pd.isna(stamp):
        raise argparse.ArgumentTypeError(f"cannot parse time {text!r}; use ISO 8601 such as 2025-10-04T00:00:00Z")
    return stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")


def _open(url: str | None, command: str) -> MarketTable | int:
    """The table, or an exit code when the URL itself is unusable (messages never echo a password)."""
    try:
        return MarketTable(url)
    except (ValueError, ArgumentError) as exc:
        return _fail(f"skynomad market {command}: bad --url: {exc}", EXIT_BAD_INPUT)


def _database_failure(command: str, table: MarketTable, exc: Exception) -> int:
    # SQLAlchemy's own text repeats the statement and parameters; the driver's message is enough.
    reason = getattr(exc, "orig", None) or exc
    return _fail(f"skynomad market {command}: {table.display_url}: {str(reason).strip()}", EXIT_FAILED)


def _fail(message: str, code: int) -> int:
    print(message, file=sys.stderr)
    return code
