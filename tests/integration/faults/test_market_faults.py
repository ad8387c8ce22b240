"""Market faults in whole `dag.test()` runs: every zone out of spot for hours, a ten-fold spot price
spike where the job runs, and the probe DAG paused for 6 hours (stale market data); the
invariants after each. The market table holds the rows the probe DAG would have written as the
job ran (a view never reads past the cloud's now)."""

from __future__ import annotations

from .conftest import START, ZONES, attach_cloud, check_run, run_job, synthetic_trace
from .invariants import move_overlap_hours

SPIKE_AT_HOURS = 0.4
# The outage begins once the first spot group has run past its cold start (0.1 h) for a
# decision step (10 min): the job has progress to lose. Before it, the worker starts the job on
# the cloud's clock (its parse, market read and first decision): at 300x the 0.5 h are 6 s of
# wall time; that start took 0.07 h (0.8 s) beside two CPU burners.
OUTAGE_FROM_HOURS = 0.5
STEP_HOURS = 10 / 60  # the test DAG's decision step (dags/skynomad_faults.py)


def test_every_zone_out_of_spot_for_hours_falls_back_to_on_demand_and_meets_the_deadline(sim, capfd):
    def outage(frame):
        frame.loc[(frame["at"] >= OUTAGE_FROM_HOURS) & (frame["at"] < 8.0), "available"] = 0

    # At 300x, not 600x: the job waits for the safety net's last safe moment, and a loaded box's
    # second of process start-up is 0.17 simulated hours at 600x (more than the margin it plans).
    env = sim(synthetic_trace(outage), speed=300.0)
    outcome, state = run_job("short_dag", work_hours=0.75, capfd=capfd)
    assert state == "success", (outcome, capfd.readouterr().out[-3000:])
    launches = attach_cloud(env.home).launches(outcome["job_id"])
    first = launches[0]
    # What the test is about needs the first launch before the outage: say so if the box was too slow.
    assert first["start_hours"] < OUTAGE_FROM_HOURS, (
        f"the worker's first launch came {first['start_hours']:.3f} h into the job's clock, after the outage "
        f"began at {OUTAGE_FROM_HOURS} h: this box took {first['start_hours'] * 3600 / 300:.1f} s to start the job"
    )
    assert first["spot"] and first["end_reason"]  # spot first, lost in the outage
    assert not launches[-1]["spot"]  # finished on on-demand
    assert outcome["deadline_met"] is True and outcome["preemptions"] >= 1
    check_run(env, outcome)


def test_a_tenfold_spot_price_spike_where_the_job_runs_makes_it_leave(sim, capfd):
    def spike(frame):
        here = (frame["zone"] == "us-central1-a") & (frame["at"] >= SPIKE_AT_HOURS)
        frame.loc[here, "spot_price"] *= 10

    frame = synthetic_trace(spike)
    env = sim(frame)
    outcome, state = run_job()
    assert state == "success", (outcome, capfd.readouterr().out[-3000:])
    first, *later = attach_cloud(env.home).launches(outcome["job_id"])
    assert first["zone"] == "us-central1-a" and first["spot"]  # the cheapest spot before the spike
    assert later, "the job stayed at ten times the price"
    # Seen at the first look after the trace's first spiked row: a decision step at most, and that
    # look may start late by the job's measured lag; the move it makes takes up to one lag more
    # (invariants.move_overlap_hours). The bound grows with the box's slowness, as measured.
    spiked = frame[(frame["zone"] == "us-central1-a") & (frame["spot_price"] > ZONES["us-central1-a"])]
    spiked_from = (spiked["observed_at"].min() - START).total_seconds() / 3600.0
    seen_by = spiked_from + STEP_HOURS + 2 * move_overlap_hours(outcome)
    assert SPIKE_AT_HOURS <= first["end_hours"] <= seen_by, (first, outcome.get("lag_hours_max"))
    assert all(g["zone"] != "us-central1-a" or not g["spot"] for g in later)
    # The cloud billed the spike's minutes at the spike's price, and the summary says the same bill.
    check_run(env, outcome)


def test_market_data_6_hours_old_gives_a_warning_and_an_on_demand_start(sim, capfd, monkeypatch):
    # The deployment's probe DAG promises data at most 2 h old, as on a real cloud (at 600x its
    # one-minute wall-clock floor alone would make 20 h-old data expected: jobs/probe_schedule.py).
    monkeypatch.setenv("SKYNOMAD_MAX_MARKET_AGE_HOURS", "2")
    env = sim(synthetic_trace(), seed_until_hours=-6.0)  # the probe DAG stopped 6 h before the job
    outcome, state = run_job("stale_dag")
    out = capfd.readouterr().out
    assert state == "success", (outcome, out[-3000:])
    # One line naming the age and the zones, not one per zone (jobs/stale.py); once per StaleGuard,
    # which is once per worker visit and per trigger in this runtime.
    assert "market data is 6 h old in every zone the job may move to" in out, out[-3000:]
    assert "market data for " not in out
    assert "paused or failing?" in out
    launches = attach_cloud(env.home).launches(outcome["job_id"])
    assert not launches[0]["spot"]  # no spot bet on what nobody has seen for 6 h
    assert outcome["deadline_met"] is True
    check_run(env, outcome)
