"""Runs completed / runs started under each injected fault (issue 16, item 3), with the invariants checked.

Each run is one whole `dag.test()` of tests/integration/faults' job DAG (the light workload, 1 h of work by
default) on the simulated cloud replaying tests/integration/faults' synthetic three-zone trace, with the
fault of its scenario: API faults come from `clouds/faults.py` below the runtime's retries, market
faults are in the trace and the market table. After each run the invariants of
tests/integration/faults/invariants.py are checked (no job lost, one group at a time, nothing left running,
deadlines met, the bill adds up, no market row lost or duplicated).

Per scenario it prints: runs started, runs that succeeded, runs that failed naming their cause
(where a failure is the right end: an API that never answers), runs whose invariants held, and
the mean wall seconds of a run. "completed" = ended as the scenario expects with every invariant held.

Run: ``python benchmarks/bench_faults.py`` (one run per scenario, ~5 minutes on a quiet 2-core box),
``python benchmarks/bench_faults.py --runs 3 --only throttle,outage``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402 - after the path: tests/ is imported from the checkout

from tests.integration.faults import conftest as faults  # noqa: E402
from tests.integration.faults.invariants import check_all  # noqa: E402
from tests.support import airflow_env  # noqa: E402 - sets up a throwaway AIRFLOW_HOME


@dataclass(frozen=True)
class Scenario:
    name: str
    words: str
    expect: str = "success"  # or "failed": the right end is a failure naming its cause
    dag: str = "dag"
    speed: float = faults.SPEED
    work_hours: float = 1.0
    seed_until_hours: float = faults.FUTURE_HOURS

    def trace(self):
        return faults.synthetic_trace({"outage": _outage, "spike": _spike}.get(self.name))

    def plan(self):
        from airflow_provider_skynomad.clouds.faults import FaultPlan

        plan = FaultPlan()
        if self.name == "throttle":
            plan.add("launch", "throttle", times=2)
            plan.add("launch", "lost_reply", times=1)
            plan.add("poll", "throttle", skip=1, times=3)
            plan.add("progress", "timeout", times=2)
        elif self.name == "api-down-launch":
            plan.add("launch", "throttle", times=None)
        elif self.name == "api-down-poll":
            plan.add("poll", "throttle", skip=2, times=None)
        elif self.name == "no-spot-capacity":
            plan.add("launch", "capacity", zones={"us-central1-a"}, times=None)
        elif self.name == "no-on-demand-capacity":
            plan.add("launch", "capacity", zones={"us-central1-a"}, spot=False, times=None)
        return plan if plan.faults else None


def _outage(frame):
    frame.loc[(frame["at"] >= 0.2) & (frame["at"] < 8.0), "available"] = 0


def _spike(frame):
    here = (frame["zone"] == "us-central1-a") & (frame["at"] >= 0.4)
    frame.loc[here, "spot_price"] *= 10


SCENARIOS = [
    Scenario("none", "no fault"),
    Scenario("throttle", "launch throttled twice then its reply lost; polls throttled; progress reads time out"),
    Scenario("api-down-launch", "the API never takes a launch", expect="failed"),
    Scenario("api-down-poll", "the API stops answering polls", expect="failed"),
    Scenario("no-spot-capacity", "the API refuses spot and on-demand in the cheapest zone"),
    Scenario("no-on-demand-capacity", "no on-demand capacity in one zone", dag="on_demand_dag"),
    Scenario("outage", "every zone out of spot for 8 h", dag="short_dag", speed=300.0, work_hours=0.75),
    Scenario("spike", "ten-fold spot price spike where the job runs"),
    Scenario("stale", "probe DAG paused 6 h before the job", dag="stale_dag", seed_until_hours=-6.0),
]


@contextlib.contextmanager
def captured_fds(path: Path):
    """stdout and stderr of this process (dag.test() prints the task's and trigger's logs) into `path`."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with path.open("wb") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def run_once(scenario: Scenario, work: Path) -> dict:
    from airflow_provider_skynomad.market.store.table import MarketTable

    home = Path(tempfile.mkdtemp(prefix="skynomad-faults-", dir=work))
    log = home / "run.log"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SKYNOMAD_HOME", str(home / "skynomad"))
        mp.chdir(home)
        frame = scenario.trace()
        env = _setup(mp, home, frame, scenario)
        started = time.monotonic()
        with captured_fds(log):
            outcome, state = faults.run_job(scenario.dag, scenario.work_hours)
        wall = time.monotonic() - started
        text = log.read_text(errors="replace")
        if "error" in outcome:
            outcome["error"] = faults.failure_of(text)
        table = MarketTable()
        try:
            check_all(faults.attach_cloud(env.home), [outcome], table, written=env.written, started=1)
            broken = ""
        except AssertionError as exc:
            broken = str(exc)
        finally:
            table.close()
    return {"state": state, "outcome": outcome, "broken": broken, "wall": wall, "log": str(log)}


def _setup(mp, home: Path, frame, scenario: Scenario):
    import json
    from types import SimpleNamespace

    trace = faults.write_trace(frame, home / "trace.csv")
    connection = {
        "conn_type": "skynomad",
        "extra": {
            "cloud": "simulated",
            "speed": scenario.speed,
            "trace_path": str(trace),
            "cloud_options": {"trace_start": faults.HISTORY_HOURS},
        },
    }
    mp.setenv("AIRFLOW_CONN_SKYNOMAD_DEFAULT", json.dumps(connection))
    written = faults.seed_rows(frame, scenario.seed_until_hours)
    plan = scenario.plan()
    if plan is not None:
        faults.use_fault_plan(mp, plan)
    return SimpleNamespace(home=home / "skynomad", written=written)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="runs per scenario")
    parser.add_argument("--only", default="", help="comma-separated scenario names (default: all)")
    parser.add_argument("--keep", action="store_true", help="keep the runs' files and logs (default: removed)")
    args = parser.parse_args(argv)
    wanted = [s for s in SCENARIOS if not args.only or s.name in args.only.split(",")]
    result = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], capture_output=True, text=True, env=os.environ.copy()
    )
    if result.returncode != 0:
        print(result.stderr[-3000:], file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="bench-faults-"))
    try:
        return _run(wanted, args.runs, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(airflow_env._HOME, ignore_errors=True)


def _run(wanted: list[Scenario], runs_each: int, work: Path) -> int:
    print(f"Airflow home {airflow_env._HOME}; runs under {work}; {runs_each} run(s) per scenario")
    header = (
        f"{'scenario':<22} {'started':>7} {'succeeded':>9} {'failed+cause':>12} {'invariants':>10} "
        f"{'completed':>9} {'wall s':>7}"
    )
    print(header)
    print("-" * len(header))
    for scenario in wanted:
        runs = [run_once(scenario, work) for _ in range(runs_each)]
        ok = sum(r["state"] == "success" for r in runs)
        caused = sum(r["state"] != "success" and bool(r["outcome"].get("error")) for r in runs)
        held = sum(not r["broken"] for r in runs)
        completed = sum(not r["broken"] and (r["state"] == "success") == (scenario.expect == "success") for r in runs)
        wall = sum(r["wall"] for r in runs) / len(runs)
        print(f"{scenario.name:<22} {len(runs):>7} {ok:>9} {caused:>12} {held:>10} {completed:>9} {wall:>7.1f}")
        for r in runs:
            if r["broken"] or (r["state"] == "success") != (scenario.expect == "success"):
                why = r["broken"] or r["outcome"].get("error") or r["state"]
                print(f"    {scenario.words}: {why[:300]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
