"""The `skynomad` command: evaluate policies on traces, move market data, run the demo.

One module per subcommand (evaluate, market, demo, prices, cleanup, plan; the agent's is agent/cli.py,
which runs on instances); nothing below this package imports it. `main` is the console script,
``airflow_provider_skynomad.cli:main``. A subcommand's module is imported when the parser is built,
and only the named one (see `COMMANDS`), not with the package: ``python -m
airflow_provider_skynomad.cli.demo --child`` (the demo's Airflow process) must not load cli/demo.py
a second time before it runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from airflow_provider_skynomad.exceptions import JobSpecError, TraceError, UsageError

DESCRIPTION = "The `skynomad` command: evaluate policies on traces, move market data, run the demo."


# Each subcommand and the function that adds its parser: a command imports only its own module
# (`skynomad market import` needs neither scikit-learn nor Airflow's plugin machinery).
COMMANDS = {
    "evaluate": "airflow_provider_skynomad.cli.evaluate:add_evaluate_command",
    "market": "airflow_provider_skynomad.cli.market:add_market_commands",
    "demo": "airflow_provider_skynomad.cli.demo:add_demo_command",
    "prices": "airflow_provider_skynomad.cli.prices:add_prices_command",
    "cleanup": "airflow_provider_skynomad.cli.cleanup:add_cleanup_command",
    "agent": "airflow_provider_skynomad.agent.cli:add_agent_command",
    "plan": "airflow_provider_skynomad.cli.plan:add_plan_command",
}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser for `argv`: only its subcommand's when `argv` starts with one (the command has no
    options of its own), else every subcommand's (``skynomad --help``, a typo's list of choices)."""
    named = list(argv[:1]) if argv and argv[0] in COMMANDS else []
    parser = argparse.ArgumentParser(prog="skynomad", description=DESCRIPTION)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in named or COMMANDS:
        module, function = COMMANDS[name].split(":")
        getattr(importlib.import_module(module), function)(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    try:
        return args.func(args)
    except (UsageError, TraceError, JobSpecError, ValueError) as exc:
        print(f"skynomad {args.command}: error: {exc}", file=sys.stderr)
        return 2
