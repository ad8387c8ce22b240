"""`skynomad evaluate`: every policy (and the optimum) on a trace, as a table, a JSON report and a plot."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from airflow_provider_skynomad.cli.common import UsageError, number
from airflow_provider_skynomad.market.egress import EgressModel, FlatEgress
from airflow_provider_skynomad.market.grid import build_grid, default_step_hours
from airflow_provider_skynomad.market.observations import read_observations
from airflow_provider_skynomad.planner.job import JobSpec
from airflow_provider_skynomad.simulation.evaluate import DEFAULT_POLICIES, Evaluation


def _csv(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def add_evaluate_command(subparsers) -> None:
    p = subparsers.add_parser("evaluate", help="run every policy on every window of a trace and compare costs")
    p.add_argument("--trace", required=True, help="market-observation CSV (optionally .gz)")
    p.add_argument("--zones", type=_csv, default=None, help="comma-separated zones (default: all in the trace)")
    p.add_argument("--work-hours", type=number, required=True, help="P: hours of work on the gang")
    p.add_argument("--deadline-hours", type=number, required=True, help="T: hours from the job's start")
    p.add_argument("--cold-start-hours", type=number, default=0.2, help="d: paid on every launch")
    p.add_argument("--checkpoint-gb", type=number, default=50.0, help="S: moved on every migration")
    p.add_argument("--instances", type=int, default=1, help="N: gang size")
    p.add_argument("--window-step-hours", type=number, default=12.0, help="hours between window starts")
    p.add_argument("--max-windows", type=int, default=None, help="keep at most K windows, evenly spread")
    p.add_argument("--policies", type=_csv, default=list(DEFAULT_POLICIES), help="comma-separated policy names")
    p.add_argument(
        "--step-minutes",
        type=number,
        default=None,
        help="decision step (default: the trace's probe interval, rounded to whole minutes)",
    )
    p.add_argument(
        "--egress-usd-per-gb",
        type=number,
        default=None,
        help="flat inter-region egress price (default: public list prices, see market/egress.py)",
    )
    p.add_argument(
        "--bandwidth-gb-per-second",
        type=number,
        default=None,
        help="checkpoint transfer rate between zones: a migration also takes S/bandwidth (default: instant)",
    )
    p.add_argument(
        "--checkpoint-interval-hours",
        type=number,
        default=0.0,
        help="the job checkpoints every this many hours of progress (default 0: progress is saved as made)",
    )
    p.add_argument(
        "--final-checkpoint-on-notice",
        action="store_true",
        help="a preemption notice leaves time for a last checkpoint (default: a preempted group loses the "
        "progress since its last periodic checkpoint)",
    )
    p.add_argument(
        "--reaction-minutes",
        type=number,
        default=0.0,
        help="Airflow's event → worker lag: every change is carried out this late, rounded up to "
        "whole decision steps, and the planner plans with it (default: 0, instant)",
    )
    p.add_argument(
        "--market-table-minutes",
        type=number,
        default=None,
        help="what the policies know inside a window: the probe DAG's market table, every market "
        "probed every M minutes and the last row holding, as under Airflow (default: only what "
        "each job observed itself)",
    )
    p.add_argument(
        "--actual-work-ratio",
        default="1",
        metavar="R or LOW:HIGH",
        help="the job's real work is R × --work-hours; the planner learns it from the checkpoints as the "
        "runtime does, the optimum knows it. LOW:HIGH draws R uniformly per window (seeded by "
        "--work-ratio-seed). Windows where even all on-demand cannot meet the deadline at the real work "
        "are reported apart, not as misses (default: 1, as declared)",
    )
    p.add_argument("--work-ratio-seed", type=int, default=0, help="seed of the per-window draw of LOW:HIGH")
    p.add_argument("--forecaster", default=None, help="skynomad's lifetime forecaster (nelson-aalen, learned)")
    p.add_argument("--output", type=Path, default=None, help="write the JSON report here")
    p.add_argument("--plot", type=Path, default=None, help="write a PNG of cost per policy per window here")
    p.add_argument(
        "--timeline",
        action="store_true",
        help="add every simulated run's segments to the JSON report: option, start and end hour, "
        "USD billed, and why it ended (preempted, moved, idle, finished, deadline); needs --output",
    )
    p.set_defaults(func=run_evaluate)


def _check_writable(path: Path | None, flag: str) -> None:
    if path is None:
        return
    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a directory; give a file name")
    if not path.parent.resolve().is_dir():
        raise UsageError(f"{flag} {path}: directory {path.parent} does not exist")


def _check_plot_format(path: Path | None) -> None:
    if path is None:
        return
    from matplotlib.figure import Figure

    formats = Figure().canvas.get_supported_filetypes()
    suffix = path.suffix.lstrip(".").lower()
    if suffix not in formats:
        raise UsageError(f"--plot {path}: unsupported image format {suffix!r}; use one of {sorted(formats)}")


def parse_work_ratio(text: str) -> float | tuple[float, float]:
    """`--actual-work-ratio`: R, or LOW:HIGH for a uniform draw per window; every R finite and > 0."""
    parts = text.split(":")
    if len(parts) > 2:
        raise UsageError(f"--actual-work-ratio {text}: give R or LOW:HIGH")
    values = []
    for part in parts:
        try:
            value = float(part)
        except ValueError:
            raise UsageError(f"--actual-work-ratio {text}: {part!r} is not a number") from None
        if not (math.isfinite(value) and value > 0):
            raise UsageError(f"--actual-work-ratio {text}: every ratio must be a finite number > 0, got {part}")
        values.append(value)
    if len(values) == 1:
        return values[0]
    low, high = values
    if low > high:
        raise UsageError(f"--actual-work-ratio {text}: LOW must not exceed HIGH")
    return (low, high)


def _prepare(args) -> tuple[Evaluation, list[str]]:
    """Everything that can be wrong with the input is found here, before any run and any write."""
    _check_writable(args.output, "--output")
    _check_writable(args.plot, "--plot")
    _check_plot_format(args.plot)
    work_ratio = parse_work_ratio(args.actual_work_ratio)
    if args.timeline and args.output is None:
        raise UsageError("--timeline adds the runs' segments to the JSON report; give --output too")
    bandwidth = args.bandwidth_gb_per_second
    if bandwidth is not None and bandwidth <= 0:
        raise UsageError(f"--bandwidth-gb-per-second must be > 0, got {bandwidth}")
    if args.checkpoint_interval_hours < 0:
        raise UsageError(f"--checkpoint-interval-hours must be ≥ 0, got {args.checkpoint_interval_hours}")
    if args.reaction_minutes < 0:
        raise UsageError(f"--reaction-minutes must be ≥ 0, got {args.reaction_minutes}")
    table_minutes = args.market_table_minutes
    if table_minutes is not None and table_minutes <= 0:
        raise UsageError(f"--market-table-minutes must be > 0, got {table_minutes}")
    job = JobSpec(
        work_hours=args.work_hours,
        deadline_hours=args.deadline_hours,
        cold_start_hours=args.cold_start_hours,
        checkpoint_gb=args.checkpoint_gb,
        instances=args.instances,
        bandwidth_gb_per_hour=None if bandwidth is None else bandwidth * 3600.0,
        reaction_hours=args.reaction_minutes / 60.0,
        checkpoint_interval_hours=args.checkpoint_interval_hours,
        final_checkpoint_on_notice=args.final_checkpoint_on_notice,
    )
    job.require_feasible()
    frame = read_observations(args.trace, args.zones)
    if args.step_minutes is not None and args.step_minutes <= 0:
        raise UsageError(f"--step-minutes must be > 0, got {args.step_minutes}")
    step_hours = args.step_minutes / 60 if args.step_minutes else None
    grid = build_grid(frame, step_hours or default_step_hours(frame))
    egress = EgressModel() if args.egress_usd_per_gb is None else FlatEgress(args.egress_usd_per_gb)
    params = {"skynomad": {"forecaster": args.forecaster}} if args.forecaster else {}
    evaluation = Evaluation(
        job=job,
        grid=grid,
        egress_usd_per_gb=egress.matrix(grid.markets),
        policies=tuple(args.policies),
        window_step_hours=args.window_step_hours,
        max_windows=args.max_windows,
        policy_params=params,
        timeline=args.timeline,
        table_probe_hours=None if table_minutes is None else table_minutes / 60.0,
        work_ratio=work_ratio,
        work_ratio_seed=args.work_ratio_seed,
    )
    if args.plot and not any(evaluation.real_job(start).feasible for start in evaluation.windows()):
        raise UsageError(
            f"--plot: at --actual-work-ratio {args.actual_work_ratio} no window can meet the deadline even all "
            "on-demand: nothing to plot"
        )
    return evaluation, grid.keys


def run_evaluate(args) -> int:
    from rich.console import Console
    from rich.progress import Progress

    console = Console(stderr=True)
    evaluation, zones = _prepare(args)
    started = time.perf_counter()
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("simulating", total=evaluation.total_runs())
        report = evaluation.run(progress=lambda: bar.advance(task))
    report = {
        "job": evaluation.job.to_dict(),
        "trace": {
            "path": str(args.trace),
            "zones": zones,
            "step_hours": evaluation.grid.step_hours,
            "market_table_minutes": args.market_table_minutes,
        },
        **({"actual_work_ratio": args.actual_work_ratio} if evaluation.work_ratio != 1.0 else {}),
        **report,
        "wall_seconds": round(time.perf_counter() - started, 3),
    }
    print_summary(report)
    skipped = report.get("infeasible_windows", 0)
    if skipped:
        console.print(
            f"{skipped} of {len(report['windows'])} windows cannot meet the deadline at the real work even all "
            "on-demand from the start (real work + one cold start > deadline): left out of the table, not misses",
            style="yellow",
        )
    if args.output:
        args.output.write_text(json.dumps(report, indent=2, default=float))
    if args.plot:
        from airflow_provider_skynomad.simulation.plot import plot_costs

        plot_costs(report, args.plot)
    return 0


def print_summary(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    ratio = f", real work = {report['actual_work_ratio']} × declared" if "actual_work_ratio" in report else ""
    table = Table(title=f"{len(report['windows'])} windows, {report['wall_seconds']} s{ratio}")
    for column in ("policy", "mean cost (USD)", "× optimal", "misses", "migrations", "optimum gap"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for name, row in sorted(report["summary"].items(), key=lambda kv: kv[1]["mean_cost_usd"]):
        label = f"{name} ({row['zone']})" if "zone" in row else name
        ratio = row.get("ratio_to_optimal")
        table.add_row(
            label,
            f"{row['mean_cost_usd']:.2f}",
            f"{ratio:.3f}" if ratio else "-",
            f"{row['misses']:g}",
            f"{row['mean_migrations']:.1f}",
            _optimum_gap(row) if name == "optimal" else "",
        )
    Console().print(table)
    optimal = report["summary"].get("optimal")
    if optimal is not None and not optimal.get("exact", True):
        upper = optimal.get("mean_upper_usd")
        upper = "unbounded" if upper is None else f"{upper:.2f} USD"
        Console().print(
            f"The optimum is bracketed, not exact, in some windows (widest gap {_optimum_gap(optimal)[2:]}, "
            f"mean upper end {upper}): the × optimal figures are upper bounds."
        )


def _optimum_gap(row: dict) -> str:
    """'exact', or the widest bracket of the windows where the DP could only bracket the optimum."""
    if row.get("exact", True):
        return "exact"
    gap = row.get("max_gap")
    return "≤ unbounded" if gap is None else f"≤ {gap:.2%}"
