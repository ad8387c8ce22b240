"""The agent's command line: ``run --store URI [--restore-from URI] --work-dir DIR --run-id ID [...] -- ARGV...``.

Argument errors exit 2 (argparse's own code, and the contract's "the agent's own arguments or
store are wrong"), before anything is restored or started. ``skynomad agent ...`` delegates here.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from airflow_provider_skynomad.agent import EXIT_USAGE

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")  # it names a file in the store
SIMULATED_POLL_SECONDS = 0.02  # the simulated cloud's workload checkpoints every ~0.1 wall s
DEFAULT_POLL_SECONDS = 2.0


def build_parser(prog: str = "python -m airflow_provider_skynomad.agent") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="The SkyNomad workload agent (docs/agent.md).")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run",
        help="restore, run the workload, upload its checkpoints, react to the interruption notice",
        usage="%(prog)s --store URI --work-dir DIR --run-id ID [options] -- ARGV...",
    )
    run.add_argument(
        "--store",
        required=True,
        help="where this run writes its checkpoints: file:///abs, s3://b/p or gs://b/p "
        "({aws:userid} in it: this instance's AWS session's name)",
    )
    run.add_argument(
        "--restore-from",
        default=None,
        help="where to restore from when --store holds no checkpoint (the prefix the controller found newest)",
    )
    run.add_argument("--work-dir", required=True, type=Path, help="local disk; the checkpoint goes to DIR/checkpoint")
    run.add_argument("--run-id", required=True, help="names runs/<ID>.json (the group's client token, -<rank>)")
    run.add_argument("--notice", choices=("aws", "gcp", "simulated", "none"), default="none")
    run.add_argument("--rank", type=int, default=None, help="only rank 0 uploads (default $SKYNOMAD_RANK, else 0)")
    run.add_argument(
        "--poll-seconds",
        type=float,
        default=None,
        help=f"how often to look at progress and the notice (default {SIMULATED_POLL_SECONDS} simulated, "
        f"{DEFAULT_POLL_SECONDS} otherwise)",
    )
    return parser


def parse(argv: list[str], prog: str | None = None):
    """(namespace, workload argv); exits 2 with a message on bad arguments."""
    parser = build_parser(*([prog] if prog else []))
    own, command = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    args = parser.parse_args(own)
    if not command:
        parser.error("no workload: give its command after --, e.g. -- python train.py")
    if not _RUN_ID.fullmatch(args.run_id):
        parser.error(f"--run-id {args.run_id!r}: use letters, digits, '.', '_' and '-' (it names a file)")
    if args.rank is None:
        text = os.environ.get("SKYNOMAD_RANK", "0")
        try:
            args.rank = int(text)
        except ValueError:
            parser.error(f"SKYNOMAD_RANK must be an integer, got {text!r}")
    if args.rank < 0:
        parser.error(f"--rank must be ≥ 0, got {args.rank}")
    if args.poll_seconds is None:
        args.poll_seconds = SIMULATED_POLL_SECONDS if args.notice == "simulated" else DEFAULT_POLL_SECONDS
    if not args.poll_seconds > 0:
        parser.error(f"--poll-seconds must be > 0, got {args.poll_seconds}")
    return args, command


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args, command = parse(sys.argv[1:] if argv is None else list(argv), prog)
    from airflow_provider_skynomad.agent.identity import resolve_store
    from airflow_provider_skynomad.agent.notice import notice_seconds
    from airflow_provider_skynomad.agent.signing import KEY_ENV, key_from_env
    from airflow_provider_skynomad.agent.supervise import Agent, AgentConfig, log

    try:
        seconds = notice_seconds(args.notice)
        key = key_from_env(os.environ)
        store = resolve_store(args.store)
    except ValueError as exc:
        log(str(exc))
        return EXIT_USAGE
    except Exception as exc:  # the SDK's own errors: no credentials, no endpoint
        log(f"--store {args.store!r}: cannot ask AWS for this instance's session name: {type(exc).__name__}: {exc}")
        return EXIT_USAGE
    os.environ.pop(KEY_ENV, None)  # nothing this process starts inherits it
    config = AgentConfig(
        store=store,
        restore_from=args.restore_from,
        work_dir=args.work_dir,
        run_id=args.run_id,
        command=command,
        notice=args.notice,
        rank=args.rank,
        poll_seconds=args.poll_seconds,
        notice_seconds=seconds,
        checkpoint_key=key,
    )
    if key is not None:
        log("checkpoint manifests are signed and verified with this job's key")
    return Agent(config).run()


def add_agent_command(subparsers) -> None:
    """``skynomad agent run ...``: the same command, for images that have the ``skynomad`` script."""
    p = subparsers.add_parser(
        "agent",
        help="the workload agent an instance runs around the job's command (docs/agent.md)",
        add_help=False,
        prefix_chars="+",  # every argument, --help too, is the agent's own parser's
    )
    p.add_argument("agent_argv", nargs=argparse.REMAINDER)
    p.set_defaults(func=lambda args: main(args.agent_argv, prog="skynomad agent"))
