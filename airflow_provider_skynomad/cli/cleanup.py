"""`skynomad cleanup [--dry-run] [--older-than DURATION] [--grace DURATION]`: end what this deployment's
ended jobs left, asking Airflow's metadata database (clouds/cleanup_run.py does the run).

Exit codes: 0 done (also when nothing was left), 1 a release or a lookup failed, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta

from airflow_provider_skynomad.clouds.cleanup import DEFAULT_CHECKPOINT_RETENTION, DEFAULT_GRACE
from airflow_provider_skynomad.clouds.cleanup_run import cleanup, jobs_from_metadata_db

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def add_cleanup_command(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "cleanup",
        help="end instances, spot requests and checkpoints of this deployment's jobs that provably ended",
        description="List what carries SkyNomad's tags in the connection's clouds, ask Airflow's metadata "
        "database about the exact task instance each names, and end only this deployment's resources whose "
        "task instance ended (checkpoints after a retention period) and probes' leftovers. Anything that "
        "cannot be told is kept and listed with the reason.",
    )
    p.add_argument("--dry-run", action="store_true", help="only list what would be ended and kept, and why")
    p.add_argument(
        "--older-than",
        type=_duration,
        default=DEFAULT_CHECKPOINT_RETENTION,
        help="delete an ended job's checkpoints only this long after it ended, e.g. 7d, 12h, 30m (default 7d)",
    )
    p.add_argument(
        "--grace",
        type=_duration,
        default=DEFAULT_GRACE,
        help="end an ended job's instances and spot requests only this long after its task ended (default 10m)",
    )
    p.add_argument("--conn-id", default=None, help="the skynomad connection (default skynomad_default)")
    p.set_defaults(func=run_cleanup)
    return p


def run_cleanup(args: argparse.Namespace) -> int:
    from airflow_provider_skynomad.hooks.skynomad import DEFAULT_CONN_ID, SkyNomadHook, make_cloud

    config = SkyNomadHook(args.conn_id or DEFAULT_CONN_ID).get_config()  # a bad field: exit 2, naming it
    cloud = make_cloud(config)
    try:
        _, failures = cleanup(
            cloud,
            jobs_from_metadata_db,
            dry_run=args.dry_run,
            checkpoint_retention=args.older_than,
            grace=args.grace,
        )
    except Exception as exc:  # noqa: BLE001 - a listing or a database that fails: say so, exit 1
        print(config.redact(f"skynomad cleanup: {type(exc).__name__}: {exc}"), file=sys.stderr)
        return EXIT_FAILED
    return EXIT_FAILED if failures else EXIT_OK


def _duration(text: str) -> timedelta:
    units = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}
    try:
        number, unit = float(text[:-1]), units[text[-1].lower()]
        if number < 0:
            raise ValueError
    except (ValueError, KeyError, IndexError):
        raise argparse.ArgumentTypeError(f"expected a duration such as 7d, 12h or 30m, got {text!r}") from None
    return timedelta(**{unit: number})
