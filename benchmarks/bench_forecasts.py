"""Lifetime forecasters on the shared traces: prediction error on later data, and their cost in time.

For each bundled trace (gang size 1, every cell seen, as the market table would show it):

* fixed:        fit once on the first 60 % of ticks, predict every later (tick, market) cell inside
                a run whose capped remaining life the trace determines, at that run's true age;
* rolling N h:  refit every N hours on all history up to the refit tick, predict the next N hours
                of cells. 6 h is the brief's variant; 1 h is what the planner does (it refits about
                hourly). A variant stops after `--max-refits` refits (its label then says how far
                it got) so the whole benchmark stays under a minute.

Truth is min(remaining life, cap) from the trace. Bias = mean(prediction − truth): negative is
pessimistic (the planner leaves markets too early), positive is optimistic. "age 0" restricts
to cells where the run just began — the launch decisions, where the forecast matters most.
Forecasters estimate a conditional *mean* (the planner's utility is linear in it), so RMSE is
the score they optimise; MAE rewards the median and favours bolder, less calibrated guesses.

Run: .venv/bin/python benchmarks/bench_forecasts.py
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from airflow_provider_skynomad.forecasts import (
    ConstantForecaster,
    LearnedForecaster,
    NelsonAalenForecaster,
    in_progress_samples,
    run_age_ticks,
)
from airflow_provider_skynomad.market.grid import build_grid
from airflow_provider_skynomad.market.observations import read_observations

DATA = Path(__file__).resolve().parents[1] / "airflow_provider_skynomad" / "data"
TRACES = ["gcp-h100-2025-first-week.csv.gz", "aws-v100-2023.csv.gz"]
CAP_HOURS = 2.0

FORECASTERS = {
    "nelson-aalen": lambda: NelsonAalenForecaster(cap_hours=CAP_HOURS),
    "nelson-aalen, no volatility": lambda: NelsonAalenForecaster(cap_hours=CAP_HOURS, max_volatility_ratio=1.0),
    "nelson-aalen, no shrinkage": lambda: NelsonAalenForecaster(cap_hours=CAP_HOURS, prior_runs=0.0),
    "nelson-aalen, no recency": lambda: NelsonAalenForecaster(cap_hours=CAP_HOURS, half_life_hours=None),
    "learned": lambda: LearnedForecaster(cap_hours=CAP_HOURS),
    "constant mean": lambda: ConstantForecaster(cap_hours=CAP_HOURS),
}


def predict_cells(forecaster, ages_ticks, step_hours, ticks, markets):
    """Predictions for the cells (ticks[i], markets[i]) through the public per-tick API."""
    out = np.empty(ticks.shape[0])
    if not ticks.size:
        return out
    order = np.argsort(ticks, kind="stable")
    boundaries = np.flatnonzero(np.diff(ticks[order])) + 1
    for group in np.split(order, boundaries):
        t = ticks[group[0]]
        ages = np.maximum(ages_ticks[t], 0) * step_hours
        out[group] = forecaster.expected_remaining_hours(ages)[markets[group]]
    return out


def timed_fit(make, history, stop):
    forecaster = make()
    started = time.perf_counter()
    forecaster.fit(
        history["usable"][:stop],
        history["seen"][:stop],
        history["step_hours"],
        spot_prices=history["prices"][:stop],
        start_time=history["start"],
    )
    return forecaster, (time.perf_counter() - started) * 1e3


def evaluate(trace: str, refit_hours: list[float], split: float, max_refits: int) -> list[dict]:
    grid = build_grid(read_observations(DATA / trace))
    usable = grid.usable(1)
    seen = np.ones_like(usable)
    step = grid.step_hours
    history = {
        "usable": usable,
        "seen": seen,
        "step_hours": step,
        "prices": grid.spot_usd_per_hour,
        "start": grid.start,
    }
    first = int(grid.ticks * split)
    truth = in_progress_samples(usable, seen, step, CAP_HOURS)
    later = truth.tick >= first
    ticks, markets, target = truth.tick[later], truth.market[later], truth.remaining_hours[later]
    ages = run_age_ticks(usable, seen)

    rows = []
    for name, make in FORECASTERS.items():
        forecaster, fit_ms = timed_fit(make, history, first)
        fixed = predict_cells(forecaster, ages, step, ticks, markets)
        variants = [("fixed", np.ones(ticks.size, dtype=bool), fixed, [fit_ms])]
        for hours in refit_hours:
            every = max(1, int(round(hours / step)))
            starts = list(range(first, grid.ticks, every))
            label = f"rolling {hours:g} h"
            if len(starts) > max_refits:
                starts = starts[:max_refits]
                label += f", first {max_refits * every * step / 24:.1f} d"
            covered = ticks < starts[-1] + every
            predicted = np.full(ticks.size, np.nan)
            fit_times = []
            for t0 in starts:
                forecaster, ms = timed_fit(make, history, t0 + 1)  # history up to and including "now"
                fit_times.append(ms)
                inside = (ticks >= t0) & (ticks < t0 + every)
                predicted[inside] = predict_cells(forecaster, ages, step, ticks[inside], markets[inside])
            variants.append((label, covered, predicted, fit_times))
        for label, covered, predicted, fit_times in variants:
            error = predicted[covered] - target[covered]
            young = ages[ticks[covered], markets[covered]] == 0
            rows.append(
                {
                    "trace": "-".join(trace.split("-")[:2]),  # gcp-h100, aws-v100
                    "variant": label,
                    "forecaster": name,
                    "cells": error.size,
                    "mae": np.abs(error).mean(),
                    "rmse": np.sqrt((error**2).mean()),
                    "bias": error.mean(),
                    "mae_age0": np.abs(error[young]).mean() if young.any() else np.nan,
                    "bias_age0": error[young].mean() if young.any() else np.nan,
                    "fit_ms": float(np.median(fit_times)),
                    "fit_ms_max": float(np.max(fit_times)),
                }
            )
    return rows


def timing_rows() -> list[dict]:
    """Fit time on ~10k ticks × 13 markets (the planner's largest refit) and 2k ticks × 200 markets,
    and the cost of one expected_remaining_hours call at 13 and 200 markets."""
    grid = build_grid(read_observations(DATA / "aws-v100-2023.csv.gz"))
    rng = np.random.default_rng(0)

    def tiled(markets, ticks):  # real AWS columns at random time shifts, so markets differ
        columns = rng.integers(0, grid.available.shape[1], markets)
        shifts = rng.integers(0, grid.ticks - ticks, markets)
        index = shifts[None, :] + np.arange(ticks)[:, None]
        usable = grid.usable(1)[index, columns]
        return usable, np.ones_like(usable), grid.spot_usd_per_hour[index, columns]

    rows = []
    for name in ("nelson-aalen", "learned"):
        for markets, ticks in ((13, 10_000), (200, 2_000)):
            usable, seen, prices = tiled(markets, ticks)
            make = FORECASTERS[name]
            make().fit(usable, seen, grid.step_hours, prices, grid.start)  # warm-up (imports, thread pools)
            fits = []
            for _ in range(3):
                started = time.perf_counter()
                forecaster = make().fit(usable, seen, grid.step_hours, prices, grid.start)
                fits.append((time.perf_counter() - started) * 1e3)
            ages = rng.uniform(0, 10, markets)
            calls = 5000
            started = time.perf_counter()
            for _ in range(calls):
                forecaster.expected_remaining_hours(ages)
            predict_us = (time.perf_counter() - started) / calls * 1e6
            rows.append(
                {"forecaster": name, "shape": f"{ticks} × {markets}", "fit_ms": min(fits), "predict_us": predict_us}
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refit-hours", default="6,1", help="comma-separated refit intervals of the rolling variants")
    parser.add_argument("--max-refits", type=int, default=80, help="rolling variants stop after this many refits")
    parser.add_argument("--split", type=float, default=0.6, help="share of the trace used for the fixed fit")
    args = parser.parse_args()
    console = Console(width=180)
    started = time.perf_counter()

    table = Table(
        title=f"Capped ({CAP_HOURS:g} h) remaining-lifetime error on the last {1 - args.split:.0%} of each trace"
    )
    for column in (
        "trace",
        "variant",
        "forecaster",
        "cells",
        "MAE h",
        "RMSE h",
        "bias h",
        "MAE age0",
        "bias age0",
        "fit ms (med/max)",
    ):
        text = column in ("trace", "variant", "forecaster")
        table.add_column(column, justify="left" if text else "right", no_wrap=text)
    for trace in TRACES:
        rows = evaluate(trace, [float(h) for h in args.refit_hours.split(",")], args.split, args.max_refits)
        for variant in dict.fromkeys(r["variant"] for r in rows):
            for row in (r for r in rows if r["variant"] == variant):
                table.add_row(
                    row["trace"],
                    variant,
                    row["forecaster"],
                    f"{row['cells']}",
                    f"{row['mae']:.3f}",
                    f"{row['rmse']:.3f}",
                    f"{row['bias']:+.3f}",
                    f"{row['mae_age0']:.3f}",
                    f"{row['bias_age0']:+.3f}",
                    f"{row['fit_ms']:.1f} / {row['fit_ms_max']:.1f}",
                )
            table.add_section()
    console.print(table)

    timings = Table(title="Cost: fit (best of 3) and one expected_remaining_hours call (mean of 5000)")
    for column in ("forecaster", "ticks × markets", "fit ms", "predict µs"):
        timings.add_column(column, justify="left" if column == "forecaster" else "right")
    for row in timing_rows():
        timings.add_row(row["forecaster"], row["shape"], f"{row['fit_ms']:.1f}", f"{row['predict_us']:.1f}")
    console.print(timings)
    console.print(f"wall time {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
