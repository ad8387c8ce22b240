"""`skynomad evaluate`: every policy on every window of a trace, through the same simulator (docs/evaluate.md)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from airflow_provider_skynomad.market.grid import MarketGrid
from airflow_provider_skynomad.planner.job import JobSpec
from airflow_provider_skynomad.planner.registry import POLICIES, get_policy
from airflow_provider_skynomad.simulation.optimal import GAP_WARNING, optimal_cost
from airflow_provider_skynomad.simulation.simulator import check_work_ratio, simulate, window_ticks

OPTIMAL = "optimal"
UNIFORM = "uniform-progress"
DEFAULT_POLICIES = ("skynomad", OPTIMAL, "on-demand", UNIFORM, "eager-failover")


class OptimumGapWarning(UserWarning):
    """The DP could not be exact in its time budget and its bracket is wider than 0.1 %."""


@dataclass
class Evaluation:
    job: JobSpec
    grid: MarketGrid
    egress_usd_per_gb: np.ndarray
    policies: tuple[str, ...] = DEFAULT_POLICIES
    window_step_hours: float = 12.0
    max_windows: int | None = None
    policy_params: dict[str, dict] = field(default_factory=dict)
    timeline: bool = False  # add each simulated run's segments to its result (where its money went)
    observe_all: bool = False  # diagnostic: policies see every market every step (simulator.simulate)
    table_probe_hours: float | None = None  # policies see the probe DAG's market table (simulator.simulate)
    # Real work ÷ declared: one R for every window, or (low, high) for R drawn uniformly per window
    # (seeded by `work_ratio_seed` and the window's start, so a window keeps its R whatever else runs).
    work_ratio: float | tuple[float, float] = 1.0
    work_ratio_seed: int = 0
    measure_pace: bool = True  # False: an ablation, the policies believe the declared work (simulator.simulate)

    def __post_init__(self):
        if isinstance(self.work_ratio, tuple):
            low, high = (check_work_ratio(r) for r in self.work_ratio)
            if low > high:
                raise ValueError(f"the actual work ratio range {low:g}:{high:g} must run from low to high")
        else:
            check_work_ratio(self.work_ratio)
        unknown = [p for p in self.policies if p != OPTIMAL and p not in POLICIES]
        if unknown:
            raise ValueError(f"unknown policies {unknown}; choose from {sorted([*POLICIES, OPTIMAL])}")
        if self.window_step_hours <= 0:
            raise ValueError(f"--window-step-hours must be > 0, got {self.window_step_hours}")
        if self.max_windows is not None and self.max_windows < 1:
            raise ValueError(f"--max-windows must be ≥ 1, got {self.max_windows}")
        if not self.windows():
            span = self.grid.ticks * self.grid.step_hours
            raise ValueError(
                f"the trace covers {span:.1f} h, shorter than one job window of "
                f"{window_ticks(self.job, self.grid.step_hours) * self.grid.step_hours:.1f} h (the deadline)"
            )

    def windows(self) -> list[int]:
        """Start ticks: every `window_step_hours` while a whole window fits, thinned evenly to `max_windows`."""
        length = window_ticks(self.job, self.grid.step_hours)
        stride = max(1, int(round(self.window_step_hours / self.grid.step_hours)))
        fits = (self.grid.ticks - length) // stride + 1 if self.grid.ticks >= length else 0
        starts = [i * stride for i in range(max(0, fits))]
        if self.max_windows is not None and len(starts) > self.max_windows:
            if self.max_windows == 1:
                return starts[:1]
            picks = [round(i * (len(starts) - 1) / (self.max_windows - 1)) for i in range(self.max_windows)]
            starts = [starts[k] for k in picks]
        return starts

    def ratio_at(self, start: int) -> float:
        """R of the window starting at grid tick `start`."""
        if not isinstance(self.work_ratio, tuple):
            return self.work_ratio
        low, high = self.work_ratio
        return float(np.random.default_rng([self.work_ratio_seed, start]).uniform(low, high))

    def real_job(self, start: int) -> JobSpec:
        """The job as it really is in the window starting at `start` (what the optimum knows)."""
        ratio = self.ratio_at(start)
        return self.job if ratio == 1.0 else replace(self.job, work_hours=self.job.work_hours * ratio)

    def runs(self) -> list[tuple[str, Callable[[int], dict]]]:
        """(result name, run(start_tick) → result dict) for every policy, zones expanded for uniform progress."""
        out = []
        for name in self.policies:
            if name == OPTIMAL:
                out.append((OPTIMAL, self._optimal))
            elif name == UNIFORM:
                for key in self.grid.keys:
                    out.append((f"{UNIFORM}[{key}]", self._simulator(UNIFORM, zone=key)))
            else:
                out.append((name, self._simulator(name, **self.policy_params.get(name, {}))))
        return out

    def _simulator(self, name: str, **params) -> Callable[[int], dict]:
        def run(start: int) -> dict:
            policy = get_policy(name, **params)
            result = simulate(
                policy,
                self.job,
                self.grid,
                start,
                self.egress_usd_per_gb,
                observe_all=self.observe_all,
                table_probe_hours=self.table_probe_hours,
                work_ratio=self.ratio_at(start),
                measure_pace=self.measure_pace,
            )
            return result.to_dict(self.timeline)

        return run

    def _optimal(self, start: int) -> dict:
        """The exact optimum; where the DP could only bracket it, its lower end and upper end (`_bracket` ends it).

        It knows the real work (perfect knowledge), so it stays a lower bound on every policy.
        """
        job = self.real_job(start)
        if not job.feasible:
            return {"cost_usd": None, "met_deadline": False, "exact": True, "infeasible": True}
        best = optimal_cost(job, self.grid, start, self.egress_usd_per_gb)
        out = {"cost_usd": round(best.cost_usd, 6), "met_deadline": best.feasible, "exact": best.exact}
        if not best.exact:
            out["upper_usd"] = best.upper_usd
        return out

    def _bracket(self, start: int, results: dict) -> None:
        """Close a bracketed optimum: its upper end is also no more than any on-time run's cost; gap; warn."""
        best = results.get(OPTIMAL)
        if best is None or best["exact"]:
            return
        on_time = [r["cost_usd"] for name, r in results.items() if name != OPTIMAL and r["met_deadline"]]
        upper = min([best["upper_usd"], *on_time])
        lower = best["cost_usd"]
        gap = (upper - lower) / lower if lower > 0 and np.isfinite(upper) else (0.0 if upper == lower else np.inf)
        best["upper_usd"] = round(upper, 6) if np.isfinite(upper) else None
        best["gap"] = round(gap, 6) if np.isfinite(gap) else None
        if not gap <= GAP_WARNING:
            wide = f"{upper:.2f} USD (gap {gap:.2%})" if np.isfinite(gap) else "unbounded (no run met the deadline)"
            warnings.warn(
                f"the optimum of the window at {self.grid.time_at(start).isoformat()} is only bracketed: "
                f"{lower:.2f}–{wide}; ratios to it are upper bounds on the true ratios",
                OptimumGapWarning,
                stacklevel=3,
            )

    def run(self, progress: Callable[[], None] | None = None) -> dict:
        windows = []
        runs = self.runs()
        for start in self.windows():
            results = {}
            for name, run in runs:
                results[name] = run(start)
                if progress:
                    progress()
            self._bracket(start, results)
            window = {"start": self.grid.time_at(start).isoformat().replace("+00:00", "Z"), "results": results}
            if self.work_ratio != 1.0:
                window["work_ratio"] = round(self.ratio_at(start), 6)
                window["feasible"] = self.real_job(start).feasible
            windows.append(window)
        report = {"windows": windows, "summary": summarise(windows)}
        if self.work_ratio != 1.0:
            report["infeasible_windows"] = sum(not w["feasible"] for w in windows)
        return report

    def total_runs(self) -> int:
        return len(self.windows()) * len(self.runs())


def summarise(windows: list[dict]) -> dict:
    """Mean cost, misses and migrations per policy; uniform progress also as best and mean over zones.

    Only over the windows whose real work can meet the deadline at all (one on-demand run from the
    start): where even that is late (a real work ratio too high) a late run is not the policy's miss;
    `infeasible_windows` counts them.
    """
    skipped = sum(not w.get("feasible", True) for w in windows)
    windows = [w for w in windows if w.get("feasible", True)]
    names = list(windows[0]["results"]) if windows else []
    summary = {}
    for name in names:
        rows = [w["results"][name] for w in windows]
        summary[name] = {
            "mean_cost_usd": round(float(np.mean([r["cost_usd"] for r in rows])), 6),
            "misses": sum(not r["met_deadline"] for r in rows),
            "mean_migrations": round(float(np.mean([r.get("migrations", 0) for r in rows])), 6),
        }
        if skipped:
            summary[name]["infeasible_windows"] = skipped
    zones = [n for n in names if n.startswith(f"{UNIFORM}[")]
    if zones:
        best = min(zones, key=lambda n: summary[n]["mean_cost_usd"])
        summary[f"{UNIFORM}-best"] = {**summary[best], "zone": best[len(UNIFORM) + 1 : -1]}
        summary[f"{UNIFORM}-mean"] = {
            key: round(float(np.mean([summary[n][key] for n in zones])), 6)
            for key in ("mean_cost_usd", "misses", "mean_migrations")
        }
        for n in zones:
            summary.pop(n)
    if OPTIMAL in summary:
        # Exact in every window, or the widest bracket (ratios to the optimum are then upper bounds).
        # An unbounded bracket (no run on time) is None in the JSON and inf here: its max/mean are None too.
        gaps = [_number(w["results"][OPTIMAL].get("gap", 0.0)) for w in windows]
        summary[OPTIMAL]["exact"] = all(w["results"][OPTIMAL].get("exact", True) for w in windows)
        summary[OPTIMAL]["max_gap"] = _finite(max(gaps))
        optima = [w["results"][OPTIMAL] for w in windows]
        uppers = [_number(r.get("upper_usd", r["cost_usd"])) for r in optima]
        summary[OPTIMAL]["mean_upper_usd"] = _finite(np.mean(uppers))
    if OPTIMAL in summary and summary[OPTIMAL]["mean_cost_usd"] > 0:
        for row in summary.values():
            row["ratio_to_optimal"] = round(row["mean_cost_usd"] / summary[OPTIMAL]["mean_cost_usd"], 4)
    return summary


def _number(value) -> float:
    return np.inf if value is None else float(value)


def _finite(value) -> float | None:
    return round(float(value), 6) if np.isfinite(value) else None
