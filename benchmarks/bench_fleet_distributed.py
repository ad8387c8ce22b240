"""A fleet of SkyNomad jobs on shared spot capacity, through the distributed harness (issue 26).

The cluster is tests/integration/distributed/cluster.py (CeleryExecutor, Redis broker, two Celery workers, two
triggerers, scheduler, dag-processor, api-server, a private PostgreSQL, the simulated cloud on a
fast clock). The cloud shares spot capacity between groups (`market.capacity`): a spot launch is
refused when the trace's `available` minus what other groups hold is below its count, and when
capacity drops the youngest groups are taken back first. The GCP H100 trace shows at most 16
instances per zone; every job here is a gang of 4 (tests/integration/distributed/dags/skynomad_fleet_capacity.py,
light workload), so 50 jobs cannot all hold spot at once.

The jobs start staggered (evenly over ``--stagger-hours`` of the cloud's clock) with mixed slack:
work P of 3.0 or 3.5 h, deadline T from 1.1 P to 2.0 P (shuffled, so slack does not follow start
order), T relative to each run's start, cold start 0.2 h. Printed:

- ``fleet: jobs=N policy=P harness=distributed misses=M cost_vs_on_demand=R preemptions=K``, the
  issue's line, from each run's XCom summary: misses are runs whose deadline was not met (or that
  did not complete), cost_vs_on_demand is the fleet's billed cost over its all-on-demand cost,
  preemptions are the jobs' own count;
- runs completed / started, refused spot launches (the jobs' records: the cloud keeps no record of
  a launch it refused) against the spot launches that got capacity (the cloud's `launches()`),
  preemptions as the cloud recorded them and how many of those capacity other groups held caused;
- per zone, the most spot instances held at once (the cloud's launch records) against the trace's
  capacity then and its most over the run, and the instants at which held exceeded capacity
  (it never should: that is the proof the capacity was shared);
- wall times.

``policy=`` is what the runs did, read from their summaries: ``fleet-aware`` when every summary
says ``"fleet_aware": true`` (the runtime's summary should carry that once it plans with
`LiveStatusTable.fleet()`), else ``alone``. ``--policy NAME`` (and ``--policy-params JSON``) runs a
registered planner other than ``skynomad``, for a fleet-aware planner wired in under its own name.

Run: ``python benchmarks/bench_fleet_distributed.py`` (50 jobs at 50x: about 15 minutes of wall on
a loaded 2-core box); ``--runs 8`` for a quick check.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import signal
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration" / "distributed"))

from cluster import PROBE_DAG, Cluster  # noqa: E402

DAG_ID = "skynomad_fleet_capacity"
INSTANCES = 4  # the DAG's gang size
COLD_START_HOURS = 0.2  # the DAG's
WORK_HOURS = (3.0, 3.5)
SLACK_RATIOS = (1.1, 2.0)  # T/P, lowest and highest
SEED = 26
_CAUSE = re.compile(
    r'"exc_type":\s*"(\w+)",\s*"exc_value":\s*"((?:[^"\\]|\\.)*)"'
)  # as in tests/integration/distributed
_TAKEN_BY_OLDER = "groups launched earlier hold"  # the cloud's end reason when sharing cost a group its capacity


@dataclass(frozen=True)
class FleetJob:
    run_id: str
    start_offset_hours: float  # when to trigger, cloud hours after the first run
    work_hours: float
    deadline_hours: float

    def conf(self, policy: str | None, policy_params: dict | None, alone: bool = False) -> dict:
        conf = {"work_hours": self.work_hours, "deadline_hours": self.deadline_hours, "fleet_aware": not alone}
        if policy:
            conf["policy"] = policy
        if policy_params:
            conf["policy_params"] = policy_params
        return conf


def fleet_jobs(runs: int, stagger_hours: float) -> list[FleetJob]:
    """`runs` jobs, evenly staggered, T/P spread over `SLACK_RATIOS` in a fixed shuffled order."""
    low, high = SLACK_RATIOS
    ratios = [low + (high - low) * i / max(1, runs - 1) for i in range(runs)]
    random.Random(SEED).shuffle(ratios)
    jobs = []
    for i, ratio in enumerate(ratios):
        work = WORK_HOURS[i % len(WORK_HOURS)]
        deadline = round(work * ratio, 3)
        if deadline < work + COLD_START_HOURS:
            raise ValueError(f"job {i}: T={deadline} h < P + d = {work + COLD_START_HOURS} h is infeasible")
        jobs.append(FleetJob(f"fleet_{i:03d}", stagger_hours * i / runs, work, deadline))
    return jobs


class Stagger:
    """`wait_runs`'s `during` hook: triggers each job when the cloud's clock reaches its start."""

    def __init__(self, cluster: Cluster, jobs: list[FleetJob], speed: float, policy, policy_params, alone=False):
        self.cluster, self.pending, self.speed = cluster, list(jobs), speed
        self.policy, self.policy_params, self.alone = policy, policy_params, alone
        self.began = time.monotonic()
        self.triggered_wall: dict[str, float] = {}

    def __call__(self, _elapsed: float) -> None:
        while self.pending:
            job = self.pending[0]
            if time.monotonic() - self.began < job.start_offset_hours * 3600.0 / self.speed:
                return
            try:
                self.cluster.trigger(DAG_ID, job.conf(self.policy, self.policy_params, self.alone), run_id=job.run_id)
            except Exception as exc:  # noqa: BLE001 - a busy api-server: try again next second
                if "409" not in str(exc):  # 409: the run exists (an earlier try got through)
                    return
            self.triggered_wall[job.run_id] = time.monotonic() - self.began
            self.pending.pop(0)


def open_dag(cluster: Cluster, dag_id: str, timeout: float = 240) -> None:
    """Wait until the dag-processor has parsed `dag_id`, then unpause it (the cluster opens only its own three)."""
    stop = time.monotonic() + timeout
    while time.monotonic() < stop:
        try:
            if cluster.sql("SELECT 1 FROM dag WHERE dag_id=%s", (dag_id,)):
                cluster.api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
                return
        except Exception:  # noqa: BLE001 - not parsed yet, or the api-server busy
            pass
        time.sleep(1)
    raise RuntimeError(f"DAG {dag_id} was not parsed in {timeout} s\n{cluster.tail()}")


def failure_cause(cluster: Cluster, run_id: str) -> str:
    causes = _CAUSE.findall(cluster.task_log(DAG_ID, run_id))
    return f"{causes[-1][0]}: {causes[-1][1][:160]}" if causes else "no cause in its log"


@dataclass
class ZoneUse:
    peak_held: int = 0
    peak_at_hours: float = 0.0
    capacity_at_peak: int = 0
    capacity_max: int = 0
    over: int = 0  # instants at which held > capacity
    worst_over: str = ""


def zone_use(cloud, launches: list[dict]) -> dict[str, ZoneUse]:
    """Spot instances held at once per zone (the cloud's launch records) against the trace's capacity.

    Held is evaluated just after every launch and every change of the trace's capacity while any
    group of the zone was alive; a group holds from its start until its end (a group taken back at
    a drop no longer holds just after it).
    """
    market = cloud.market
    offset = market.hours_of(cloud.clock.start)  # the cloud's hour 0 on the trace's grid
    now = cloud.clock.now_hours()
    by_market: dict[tuple[str, str], list[tuple[float, float, int]]] = defaultdict(list)
    for launch in launches:
        if launch["spot"]:
            end = launch["end_hours"] if launch["end_hours"] is not None else now
            by_market[(launch["zone"], launch["instance_type"])].append(
                (launch["start_hours"], end, launch["gang_size"])
            )
    epsilon = 1e-6
    uses = {}
    for (zone, instance_type), groups in sorted(by_market.items()):
        j = market.index(zone, instance_type)
        first, last = min(g[0] for g in groups), max(g[1] for g in groups)
        step = market.step_hours
        k0, k1 = market.tick(first + offset), market.tick(last + offset)
        changes = [k * step - offset for k in range(k0 + 1, k1 + 1)]
        use = ZoneUse()
        for t in sorted({g[0] for g in groups} | set(changes)):
            at = t + epsilon
            held = sum(count for start, end, count in groups if start <= at < end)
            capacity = market.available(j, at + offset)
            use.capacity_max = max(use.capacity_max, capacity)
            if held > use.peak_held:
                use.peak_held, use.peak_at_hours, use.capacity_at_peak = held, t, capacity
            if held > capacity:
                use.over += 1
                use.worst_over = use.worst_over or f"{held} held at {t:.3f} h, trace {capacity}"
        uses[zone] = use
    return uses


def report(cluster: Cluster, jobs: list[FleetJob], states: dict[str, str], wall: dict[str, float]) -> None:
    summaries = {r: s for r, s in cluster.summaries(DAG_ID).items() if r in states}
    completed = [r for r, state in states.items() if state == "success" and r in summaries]
    done = [summaries[r] for r in completed]
    misses = sum(not s["deadline_met"] for s in done) + (len(states) - len(completed))
    cost = sum(s["cost_usd"]["total"] for s in done)
    on_demand = sum(s["all_on_demand_cost_usd"] for s in done)
    preemptions = sum(s["preemptions"] for s in done)
    refused = sum(s["failed_launches"] for s in done)
    fleet_aware = [bool(s.get("fleet_aware")) for s in done]
    policy = "fleet-aware" if fleet_aware and all(fleet_aware) else ("mixed" if any(fleet_aware) else "alone")
    ratio = cost / on_demand if on_demand else float("nan")
    print(
        f"\nfleet: jobs={len(jobs)} policy={policy} harness=distributed misses={misses} "
        f"cost_vs_on_demand={ratio:.3f} preemptions={preemptions}"
    )

    cloud = cluster.cloud()
    job_ids = {s["job_id"] for s in summaries.values()}
    launches = [launch for launch in cloud.launches() if launch["job_id"] in job_ids]
    spot = [launch for launch in launches if launch["spot"]]
    preempted = [launch for launch in spot if launch["status"] == "preempted"]
    shared = sum(_TAKEN_BY_OLDER in (launch["end_reason"] or "") for launch in preempted)
    planners = sorted({s["policy"] for s in done})
    print(f"runs completed / started: {len(completed)} / {len(states)}; planner {', '.join(planners) or '-'}")
    for run_id in sorted(set(states) - set(completed)):
        print(f"  {run_id}: {states[run_id]}: {failure_cause(cluster, run_id)}")
    print(
        f"cost: ${cost:.2f} billed against ${on_demand:.2f} all on-demand; "
        f"group-hours spot {sum(s['spot_hours'] for s in done):.1f}, "
        f"on-demand {sum(s['on_demand_hours'] for s in done):.1f}"
    )
    print(
        f"spot launches: {len(spot)} got capacity (the cloud's launches()), {refused} refused (the jobs' "
        f"failed launches; the cloud records no refused launch); on-demand launches: {len(launches) - len(spot)}"
    )
    print(
        f"preemptions (the cloud's records): {len(preempted)}, of which {shared} because groups launched "
        "earlier held the capacity left"
    )
    by_slack = defaultdict(lambda: [0, 0])
    for job in jobs:
        summary = summaries.get(job.run_id)
        bucket = "T/P<1.4" if job.deadline_hours < 1.4 * job.work_hours else "T/P>=1.4"
        by_slack[bucket][0] += 1
        by_slack[bucket][1] += summary is None or not summary["deadline_met"]
    print("misses by slack: " + ", ".join(f"{k}: {m} of {n}" for k, (n, m) in sorted(by_slack.items())))
    for job in jobs:
        summary = summaries.get(job.run_id)
        if summary is not None and not summary["deadline_met"]:
            print(
                f"  missed {job.run_id}: T/P {job.deadline_hours / job.work_hours:.2f}, finished at "
                f"{summary['elapsed_hours']:.2f} h of {summary['deadline_hours']:.2f} h, spot "
                f"{summary['spot_hours']:.2f} h, on-demand {summary['on_demand_hours']:.2f} h, "
                f"{summary['preemptions']} preemption(s), {summary['failed_launches']} refused launch(es)"
            )
    print("spot instances held at once per zone (cloud's launch records) vs the trace's capacity:")
    uses = zone_use(cloud, launches)
    for zone, use in uses.items():
        print(
            f"  {zone:<18} peak {use.peak_held:>2} held (at {use.peak_at_hours:.2f} h, trace {use.capacity_at_peak} "
            f"then), trace at most {use.capacity_max:>2} meanwhile; above capacity: "
            + (f"{use.over} instants, first {use.worst_over}" if use.over else "never")
        )
    print(
        f"wall: cluster up {wall['start']:.0f} s, runs {wall['runs']:.0f} s (last trigger at "
        f"{wall['last_trigger']:.0f} s), total {wall['total']:.0f} s"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="jobs in the fleet")
    parser.add_argument("--stagger-hours", type=float, default=2.0, help="cloud hours over which the jobs start")
    parser.add_argument("--speed", type=float, default=50.0, help="simulated seconds per wall second")
    parser.add_argument("--trace-start-hours", type=float, default=90.0, help="the cloud's start, hours into the trace")
    parser.add_argument("--policy", default=None, help="planner for every job (default: the DAG's, skynomad)")
    parser.add_argument("--policy-params", type=json.loads, default=None, help="the planner's keyword arguments, JSON")
    parser.add_argument("--alone", action="store_true", help="every job plans as if it were alone (fleet_aware=False)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the cluster's files (logs) in this directory")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the cluster on the way out
    jobs = fleet_jobs(args.runs, args.stagger_hours)
    span_hours = args.stagger_hours + max(job.deadline_hours for job in jobs)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="skynomad-bench-fleet-") as tmp:
        root = args.keep.resolve() if args.keep else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        cluster = Cluster(
            root / "cluster",
            speed=args.speed,
            trace_start_hours=args.trace_start_hours,
            task_queued_timeout=max(600.0, 12.0 * args.runs),
            future_hours=span_hours + 2.0,
        )
        try:
            cluster.start()
            open_dag(cluster, DAG_ID)
            wall = {"start": time.monotonic() - began}
            print(
                f"cluster up in {wall['start']:.0f} s: CeleryExecutor, {cluster.workers} workers x "
                f"{cluster.worker_concurrency} slots, {cluster.triggerers} triggerers, simulated cloud at "
                f"{args.speed:g}x from trace hour {args.trace_start_hours:g} (GCP H100, shared spot capacity)"
            )
            print(
                f"{len(jobs)} jobs of {INSTANCES} instances, started over {args.stagger_hours:g} cloud h, "
                f"P in {sorted(set(WORK_HOURS))} h, T/P {SLACK_RATIOS[0]}-{SLACK_RATIOS[1]}, d {COLD_START_HOURS} h"
            )
            probes = list(cluster.run_states(PROBE_DAG)) or [cluster.trigger(PROBE_DAG)]
            cluster.wait_runs(PROBE_DAG, probes, 600)
            stagger = Stagger(cluster, jobs, args.speed, args.policy, args.policy_params, args.alone)
            timeout = 2 * span_hours * 3600.0 / args.speed + 600.0
            states = cluster.wait_runs(DAG_ID, [job.run_id for job in jobs], timeout, during=stagger)
            wall["runs"] = time.monotonic() - stagger.began
            wall["last_trigger"] = max(stagger.triggered_wall.values(), default=0.0)
            wall["total"] = time.monotonic() - began
            report(cluster, jobs, states, wall)
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
