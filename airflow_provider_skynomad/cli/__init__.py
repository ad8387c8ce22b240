"""The `skynomad` command: evaluate policies on traces, move market data, run the demo.

One module per subcommand (evaluate, market, demo, prices, cleanup, plan; the agent's is agent/cli.py,
which runs on instances); nothing below this package imports it. `main` is the console script,
``airflow_provider_skynomad.cli:main``. The subcommands are imported when the parser is built, not
with the package: ``python -m airflow_provider_skynomad.cli.demo --child`` (the demo's Airflow
process) must not load cli/demo.py a second time before it runs.
"""

from __future__ import annotations

import argparse
import sys

from airflow_provider_skynomad.exceptions import JobSpecError, TraceError, UsageError

DESCRIPTION = "The `skynomad` command: evaluate policies on traces, move market data, run the demo."


def build_parser() -> argparse.ArgumentParser:
    from airflow_provider_skynomad.agent.cli import add_agent_command
    from airflow_provider_skynomad.cli.cleanup import add_cleanup_command
    from airflow_provider_skynomad.cli.demo import add_demo_command
    from airflow_provider_skynomad.cli.evaluate import add_evaluate_command
    from airflow_provider_skynomad.cli.market import add_market_commands
    from airflow_provider_skynomad.cli.plan import add_plan_command
    from airflow_provider_skynomad.cli.prices import add_prices_command

    parser = argparse.ArgumentParser(prog="skynomad", description=DESCRIPTION)
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_evaluate_command(subparsers)
    add_market_commands(subparsers)
    add_demo_command(subparsers)
    add_prices_command(subparsers)
    add_cleanup_command(subparsers)
    add_agent_command(subparsers)
    add_plan_command(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (UsageError, TraceError, JobSpecError, ValueError) as exc:
        print(f"skynomad {args.command}: error: {exc}", file=sys.stderr)
        return 2
