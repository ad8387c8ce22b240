"""`skynomad demo`: the probe DAG, then a deadline-bound fine-tune DAG, through Airflow, in minutes.

What it does, all under ``./.skynomad/demo`` (recreated each run; nothing outside it is touched).
Every flag is checked before anything is deleted, and the directory is cleared only if this
command made it (it holds a ``.skynomad-demo`` marker file) or it is empty: any other directory
is refused with exit code 2, untouched.

1. a private ``AIRFLOW_HOME`` and ``airflow db migrate`` (SQLite metadata DB);
2. a `skynomad` connection (in the environment) for the embedded simulated cloud: the bundled
   GCP H100 trace replayed from hour ``--trace-start-hours`` at ``--speed`` simulated seconds per
   wall second;
3. the market table gets the trace's previous 48 h, standing in for the probe DAG's past runs;
4. ``skynomad_probe`` runs through ``dag.test()`` (one mapped task per region, live probes);
5. ``skynomad_fine_tune`` runs through ``dag.test()``: the training workload really runs,
   checkpoints, is preempted by the trace, and resumes where the planner moves it; the trigger
   runs inline;
6. prints the zones timeline, the cost against all-on-demand, whether the deadline was met, and
   whether the final model equals, bit for bit, the one an uninterrupted run produces.

Airflow reads its configuration when imported, so the work happens in a child interpreter that
starts with the demo environment (``python -m airflow_provider_skynomad.cli.demo --child``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from airflow_provider_skynomad.cli.common import UsageError, number

DEFAULT_TRACE_START_HOURS = 90.0
DEFAULT_SPEED = 600.0
DEFAULT_WORK_HOURS = 6.0

MARKER = ".skynomad-demo"
"""Written into the working directory the demo makes; only a directory holding it (or an empty one) is cleared."""
TRACE = "gcp-h100-2025-first-week.csv.gz"
"""The bundled trace the demo replays (its history, its simulated cloud) and checks --trace-start-hours against."""
# What example_dags/skynomad_fine_tune.py declares (tests/unit/cli/test_demo_dag.py checks it), so that
# --work-hours and --trace-start-hours are checked here, before anything is deleted.
FINE_TUNE_DEADLINE_HOURS = 10.0
FINE_TUNE_COLD_START_HOURS = 0.2

_PACKAGE = Path(__file__).resolve().parents[1]  # the package (cli/ is one level down)


def add_demo_command(subparsers) -> None:
    """Register `skynomad demo` on the CLI's argparse subparsers."""
    parser = subparsers.add_parser(
        "demo",
        help="run the probe DAG and a fine-tune DAG through Airflow on the simulated cloud",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_options(parser)
    parser.set_defaults(func=run_demo)


def _add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", default=".skynomad/demo", help="working directory (recreated; default %(default)s)")
    parser.add_argument("--speed", type=number, default=DEFAULT_SPEED, help="simulated seconds per wall second")
    parser.add_argument(
        "--trace-start-hours",
        type=number,
        default=DEFAULT_TRACE_START_HOURS,
        help="where in the trace the simulated clock starts (hours after its first row)",
    )
    parser.add_argument("--work-hours", type=number, default=DEFAULT_WORK_HOURS, help="work of the fine-tune job")


def example_dags_dir() -> Path:
    """The example DAGs: inside the package when installed from a wheel (see pyproject.toml), else
    the checkout's top-level example_dags/ (an editable install)."""
    bundled = _PACKAGE / "example_dags"
    return bundled if bundled.is_dir() else _PACKAGE.parent / "example_dags"


EXAMPLE_DAGS = example_dags_dir()


def demo_trace() -> Path:
    return _PACKAGE / "data" / TRACE


def load_example_dag(name: str):
    """The `dag` object of example_dags/<name>.py (shipped in the wheel, or the checkout's)."""
    path = EXAMPLE_DAGS / f"{name}.py"
    if not path.exists():
        raise FileNotFoundError(f"{path}: example DAG not found; reinstall airflow-provider-skynomad")
    spec = importlib.util.spec_from_file_location(f"skynomad_example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def demo_environment(workdir: Path, speed: float, trace_start_hours: float) -> dict[str, str]:
    """Environment of the child: private AIRFLOW_HOME, example DAGs, the simulated `skynomad` connection."""
    dags = EXAMPLE_DAGS
    connection = {
        "conn_type": "skynomad",
        "extra": {
            "cloud": "simulated",
            "trace_path": str(demo_trace()),
            "speed": speed,
            "cloud_options": {"trace_start": trace_start_hours},
        },
    }
    return {
        **os.environ,
        "AIRFLOW_HOME": str(workdir / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{workdir / 'airflow' / 'airflow.db'}",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        "SKYNOMAD_HOME": str(workdir / "home"),
        "AIRFLOW_CONN_SKYNOMAD_DEFAULT": json.dumps(connection),
    }


def check_flags(args: argparse.Namespace) -> Path:
    """Every flag, checked before anything is deleted; returns the working directory.

    Raises UsageError, which `skynomad` (cli.main) reports with exit code 2.
    """
    for flag, value in (("--speed", args.speed), ("--work-hours", args.work_hours)):
        if value <= 0:
            raise UsageError(f"{flag} must be > 0, got {value:g}")
    if args.trace_start_hours < 0:
        raise UsageError(f"--trace-start-hours must be ≥ 0, got {args.trace_start_hours:g}")
    room = FINE_TUNE_DEADLINE_HOURS - FINE_TUNE_COLD_START_HOURS
    if args.work_hours >= room:
        raise UsageError(
            f"--work-hours must be < {room:g}: the fine-tune DAG's deadline is {FINE_TUNE_DEADLINE_HOURS:g} h "
            f"after the run starts and every launch pays a {FINE_TUNE_COLD_START_HOURS:g} h cold start, "
            f"got {args.work_hours:g}"
        )
    span = trace_hours()
    latest = span - FINE_TUNE_DEADLINE_HOURS
    if args.trace_start_hours > latest:
        raise UsageError(
            f"--trace-start-hours must be ≤ {latest:g}: the bundled trace {TRACE} covers {span:g} h and the "
            f"fine-tune job may run until its deadline, {FINE_TUNE_DEADLINE_HOURS:g} h later; "
            f"got {args.trace_start_hours:g}"
        )
    workdir = Path(args.dir).expanduser().resolve()
    check_workdir(workdir)
    return workdir


def trace_hours() -> float:
    """Hours from the demo trace's first row to its last."""
    from airflow_provider_skynomad.market.observations import read_observations

    times = read_observations(demo_trace())["observed_at"]
    return (times.max() - times.min()).total_seconds() / 3600.0


def check_workdir(workdir: Path) -> None:
    """--dir must be new, empty, or made by an earlier demo (it holds MARKER): nothing else is cleared."""
    if workdir.exists() and not workdir.is_dir():
        raise UsageError(f"--dir {workdir}: exists and is not a directory")
    if workdir.is_dir() and not (workdir / MARKER).is_file() and any(workdir.iterdir()):
        raise UsageError(
            f"--dir {workdir}: not empty and not made by `skynomad demo` (no {MARKER} file in it); "
            "refusing to clear it: give a new or empty directory"
        )
    ancestor = next(parent for parent in workdir.parents if parent.exists())
    if not workdir.exists() and not (ancestor.is_dir() and os.access(ancestor, os.W_OK | os.X_OK)):
        raise UsageError(f"--dir {workdir}: cannot be created ({ancestor} is not a writable directory)")


def recreate_workdir(workdir: Path) -> None:
    """Empty the directory (checked by check_workdir: new, empty or ours), mark it ours, make airflow/."""
    if workdir.is_dir():
        for entry in workdir.iterdir():  # its contents, not the directory itself: it may be the cwd
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / MARKER).write_text("Made by `skynomad demo`; its next run with this --dir clears this directory.\n")
    (workdir / "airflow").mkdir()


def run_demo(args: argparse.Namespace) -> int:
    workdir = check_flags(args)
    recreate_workdir(workdir)
    env = demo_environment(workdir, args.speed, args.trace_start_hours)
    started = time.monotonic()
    print(f"SkyNomad demo in {workdir} (simulated cloud at {args.speed:g}x, trace hour {args.trace_start_hours:g})")
    migrate = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True, text=True
    )
    if migrate.returncode != 0:
        print(migrate.stderr[-4000:], file=sys.stderr)
        print("error: `airflow db migrate` failed (output above)", file=sys.stderr)
        return 1
    print(f"[{time.monotonic() - started:5.1f}s] airflow db migrate: done")
    child = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_provider_skynomad.cli.demo",
            "--child",
            "--dir",
            str(workdir),
            "--speed",
            repr(args.speed),
            "--trace-start-hours",
            repr(args.trace_start_hours),
            "--work-hours",
            repr(args.work_hours),
        ],
        env=env,
    )
    print(f"[{time.monotonic() - started:5.1f}s] demo finished; Airflow logs under {workdir / 'airflow'}")
    return child.returncode


# -- the child: Airflow is configured for the demo by now ------------------------------------------


def _child(args: argparse.Namespace) -> int:
    import logging

    import pandas as pd

    # SKYNOMAD_DEMO_LOG_LEVEL=INFO shows the job's own log lines (the controller's decisions) too.
    logging.getLogger().setLevel(os.environ.get("SKYNOMAD_DEMO_LOG_LEVEL", "WARNING").upper())
    from airflow_provider_skynomad.market.observations import read_observations
    from airflow_provider_skynomad.market.store.table import MarketTable

    t0 = time.monotonic()
    workdir = Path(args.dir)
    frame = read_observations(demo_trace())
    start = frame["observed_at"].min() + pd.Timedelta(hours=args.trace_start_hours)
    history = frame[(frame["observed_at"] < start) & (frame["observed_at"] >= start - pd.Timedelta(hours=48))]
    table = MarketTable()
    table.create()
    table.append(history, source="demo history")
    table.close()
    print(f"[child {time.monotonic() - t0:5.1f}s] market table seeded with {len(history)} rows (48 h before {start})")

    fine_tune = load_example_dag("skynomad_fine_tune")
    probe = load_example_dag("skynomad_probe")

    state, _ = run_dag_test(probe)
    print(f"[child {time.monotonic() - t0:5.1f}s] skynomad_probe: {state}")
    if state != "success":
        return 1
    # Airflow warns "skipping deadline alert because the deadline reference evaluated to None" here:
    # a dag.test() run is never queued, so the DAG's DeadlineAlert has no start to count from.
    print(
        f"[child {time.monotonic() - t0:5.1f}s] skynomad_fine_tune: starting (Airflow's own deadline alert is "
        "skipped in a test run, which has no queue time; the job keeps its deadline itself)"
    )
    state, run_id = run_dag_test(fine_tune, run_conf={"work_hours": args.work_hours})
    print(f"[child {time.monotonic() - t0:5.1f}s] skynomad_fine_tune: {state}")
    summary = task_result(fine_tune.dag_id, run_id, "fine_tune")
    if summary is None:
        print("error: the fine-tune task left no result; see the Airflow log above", file=sys.stderr)
        return 1
    print(format_summary(summary))
    identical = model_is_bit_identical(summary, workdir)
    print(f"final model bit-identical to an uninterrupted run: {identical}")
    return 0 if (state == "success" and summary["deadline_met"] and identical) else 1


def run_dag_test(dag, **kwargs) -> tuple[str, str]:
    """``dag.test(**kwargs)`` → (run state, run id), working around one Airflow 3.3.2 ``dag.test()`` bug.

    ``dag.test()`` deserialises the DAG in memory, so a DAG with a ``DeadlineAlert`` reaches
    ``DagRun.update_state`` with alert dicts where database ids are expected and raises once all
    tasks are done (a real scheduler reads the ids from the database and is not affected). When
    that happens the run's state is taken from its task instances, which are already final.
    """
    from sqlalchemy.exc import StatementError

    try:
        run = dag.test(**kwargs)
        return str(run.state.value if hasattr(run.state, "value") else run.state), run.run_id
    except StatementError as exc:
        if "deadline_alert" not in str(exc):
            raise
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run = session.scalars(
            select(DagRun).where(DagRun.dag_id == dag.dag_id).order_by(DagRun.id.desc()).limit(1)
        ).one()
        states = {
            str(ti.state.value if hasattr(ti.state, "value") else ti.state)
            for ti in run.get_task_instances(session=session)
        }
        return ("success" if states == {"success"} else "failed"), run.run_id


def task_result(dag_id: str, run_id: str, task_id: str):
    """The task's return value from XCom (read from the demo's own metadata DB)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        query = XComModel.get_many(run_id=run_id, key="return_value", task_ids=task_id, dag_ids=dag_id)
        row = session.scalars(query).first()
        return XComModel.deserialize_value(row) if row is not None else None


def format_summary(summary: dict) -> str:
    from airflow_provider_skynomad.jobs.summary import cost_line, hours_line

    lines = ["", "Zones timeline (cloud hours since the job started):"]
    for seg in summary["zones_timeline"]:
        lines.append(
            f"  {seg['start_hours']:6.2f} → {seg['end_hours']:6.2f} h  {seg['mode']:<9} {seg['zone']:<20} {seg['end']}"
        )
    lines += [
        "",
        f"{hours_line(summary)}, {summary['preemptions']} preemption(s), {summary['migrations']} migration(s)",
        cost_line(summary),
        f"all on-demand would cost ${summary['all_on_demand_cost_usd']:.2f} (at the start's cheapest on-demand price)",
        f"finished after {summary['elapsed_hours']:.2f} h, deadline {summary['deadline_hours']:.2f} h: "
        + ("met" if summary["deadline_met"] else "MISSED"),
    ]
    return "\n".join(lines)


def model_is_bit_identical(summary: dict, workdir: Path) -> bool:
    """Train the same workload uninterrupted and compare the pickled models byte for byte."""
    from airflow_provider_skynomad.workload import default_steps
    from airflow_provider_skynomad.workload.train import MODEL_FILE, train

    produced = Path(summary["output_dir"]) / MODEL_FILE
    reference_dir = workdir / "reference"
    train(reference_dir, default_steps(summary["work_hours"]), 0.0)
    return produced.read_bytes() == (reference_dir / MODEL_FILE).read_bytes()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_provider_skynomad.cli.demo", description=__doc__)
    _add_options(parser)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    return _child(args) if args.child else run_demo(args)


if __name__ == "__main__":
    sys.exit(main())
