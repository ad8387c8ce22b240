"""The job's real pace, learnt from its checkpoints: how much work the job really is.

`work_hours` is the user's guess. A checkpoint says two things the planner can trust: the share
of the work done (`fraction`) and how long the groups ran, after their warm-ups, to do it
(`productive_hours`). Their ratio measures the work the job really is; `Pace` turns the series
of checkpoints into a work figure the planner can plan with: the declared `work_hours` before any
checkpoint, then a conservative upper bound that follows the evidence and tightens as it grows.
Everything here is pure (no I/O, no clock): the simulator and the Airflow runtime feed it the same
observations and hand the planner the same `planning_job` and progress.

The estimator, in plain terms (docs/planner.md, "Pace"):

- **Point estimate.** ``W = productive_hours / fraction``, the ratio of the totals. Both totals
  are read *at a checkpoint*, so the time since the last checkpoint never counts as slowness: a
  job checkpointing every hour is not "half as fast" half-way between two checkpoints.
- **Its uncertainty.** The pace of real work drifts (input pipelines, evaluations, throttling).
  Model the work done in Δh productive hours as ``Δh / W`` with a relative spread ``cv·√Δh``
  (independent increments); the relative error of W from h hours is then ``cv/√h``. `cv` is
  measured from the checkpoints themselves (the scatter of the per-interval paces about the
  common one: ``Σ (Δf − Δh/W)² / Δh``), shrunk toward a prior `PRIOR_CV` (2 % per √hour: a
  training loop's pace over an hour is steady to a few per cent) worth `PRIOR_INTERVALS`
  intervals, so two lucky checkpoints cannot make it confident, and a pace that does scatter
  widens the margin as soon as it shows it. The half-width
  of the confidence interval, in log terms, is ``ε = z · cv / √h`` (z = 2, ≈ 98 % one-sided).
- **The bound.** In log terms, with x = ln W and p = ln declared:
  ``bound = max(min(p, x + ε), x + clip(x − p, 0, ε))``.
  Slower than declared (x > p): the estimate plus a margin as large as the evidence of slowness,
  capped at the full half-width ε, so the bound is W·e^ε (the upper confidence bound) once the
  data refute the declared figure, and a checkpoint that agrees with the declared figure moves
  nothing. Faster (x < p): the declared figure until the upper confidence bound falls below it,
  then that bound, so a faster job is trusted only as far as the evidence goes. The bound is
  continuous and increasing in W; before data it is the declared figure; as the evidence grows
  ε shrinks and the bound tightens onto W.

Why this shape: a margin added whatever the data say (a plain W·e^ε) reserves hours the job
then spends on on-demand even when its pace is exactly as declared, which the cost table of
tight deadlines cannot afford; no margin at all lets a job that runs 25 % slow discover it
only when the safety net has already fired on the declared figure, too late. With the margin
tied to the evidence of slowness, a job on its declared pace plans exactly as before, and one
running slow plans at least with what it measured from its first checkpoint on.

A faster-than-declared job is safe by construction: `fraction` is capped at 1 and the remaining
work ``(1 − fraction) · bound`` is never negative.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from airflow_provider_skynomad.exceptions import PaceError
from airflow_provider_skynomad.planner.job import JobSpec

PRIOR_CV = 0.02  # relative spread of the pace over one productive hour, before the job shows its own
PRIOR_INTERVALS = 4.0  # how many checkpoint intervals the prior spread weighs
Z = 2.0  # one-sided ≈ 98 %
AGREE = 1e-9  # relative difference below which the measured work *is* the declared work (rounding)


def _check(name: str, value: float, low: float = 0.0) -> float:
    value = float(value)
    if not math.isfinite(value) or value < low:
        raise PaceError(f"{name} must be a finite number ≥ {low:g}, got {value}")
    return value


@dataclass(frozen=True)
class Pace:
    """What the job's checkpoints say about its real work, and the work to plan with.

    :param declared_work_hours: the prior: the user's `work_hours`.
    :param productive_hours: run time after warm-ups, up to the latest checkpoint, of the groups
        whose work that checkpoint holds (cumulative). Time whose work a preemption lost is not
        in it: that work was lost, not slow.
    :param fraction: the checkpointed share of the work, in [0, 1] (cumulative).
    :param checkpoints: observations so far.
    :param squares_per_hour: Σ Δfraction² / Δhours over the intervals between checkpoints (the
        sufficient statistic of the pace's scatter).
    :param intervals: intervals that entered `squares_per_hour` (both totals grew).
    """

    declared_work_hours: float
    productive_hours: float = 0.0
    fraction: float = 0.0
    checkpoints: int = 0
    squares_per_hour: float = 0.0
    intervals: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.declared_work_hours) and self.declared_work_hours > 0):
            raise PaceError(f"declared_work_hours must be a finite number > 0, got {self.declared_work_hours}")
        _check("productive_hours", self.productive_hours)
        if not 0.0 <= self.fraction <= 1.0:
            raise PaceError(f"fraction must be in [0, 1], got {self.fraction}")

    def observed(self, productive_hours: float, fraction: float) -> Pace:
        """The pace after a checkpoint: the new cumulative totals at the moment it was written.

        A fraction above 1 (a workload reporting past its end) counts as 1. Totals that went down
        (work lost and redone from an older checkpoint) replace the old ones without adding an
        interval to the scatter.
        """
        hours = _check("productive_hours", productive_hours)
        done = min(_check("fraction", fraction), 1.0)
        dh, df = hours - self.productive_hours, done - self.fraction
        squares, intervals = self.squares_per_hour, self.intervals
        if dh > 0 and df >= 0:
            squares += df * df / dh
            intervals += 1
        return replace(
            self,
            productive_hours=hours,
            fraction=done,
            checkpoints=self.checkpoints + 1,
            squares_per_hour=squares,
            intervals=intervals,
        )

    @property
    def measured(self) -> bool:
        """Some work was checkpointed after some productive time: there is a pace to speak of."""
        return self.fraction > 0 and self.productive_hours > 0

    @property
    def work_hours_estimate(self) -> float:
        """Point estimate of the real total work: productive hours ÷ fraction (declared before data)."""
        if not self.measured:
            return self.declared_work_hours
        return self.productive_hours / self.fraction

    @property
    def spread(self) -> float:
        """cv: the pace's relative spread over one productive hour, measured and shrunk toward the prior."""
        if not self.measured:
            return PRIOR_CV
        h, f = self.productive_hours, self.fraction
        scatter = max(self.squares_per_hour - f * f / h, 0.0) * h / (f * f)  # Σ (Δf − Δh·f/h)²/Δh ÷ (f/h)²
        dof = max(self.intervals - 1, 0)
        return math.sqrt((PRIOR_INTERVALS * PRIOR_CV**2 + scatter) / (PRIOR_INTERVALS + dof))

    @property
    def half_width(self) -> float:
        """ε: half-width of the confidence interval of ln(work), z·cv/√h (inf before data)."""
        if not self.measured:
            return math.inf
        return Z * self.spread / math.sqrt(self.productive_hours)

    @property
    def work_hours_bound(self) -> float:
        """Conservative upper bound on the real total work (the module docstring says why this one)."""
        if not self.measured:
            return self.declared_work_hours
        x, p, eps = math.log(self.work_hours_estimate), math.log(self.declared_work_hours), self.half_width
        lean = x - p
        if abs(lean) <= AGREE:
            return self.declared_work_hours
        return math.exp(max(min(p, x + eps), x + min(max(lean, 0.0), eps)))

    def remaining_work_hours(self) -> float:
        """Work left at the bound: (1 − fraction) · bound, never negative."""
        return max(0.0, 1.0 - self.fraction) * self.work_hours_bound

    def progress_hours(self) -> float:
        """Progress in the planning job's hours: fraction · bound."""
        return self.fraction * self.work_hours_bound

    def planning_job(self, job: JobSpec) -> JobSpec:
        """`job` with `work_hours` at the bound (the same object when the bound is the declared work)."""
        bound = self.work_hours_bound
        return job if bound == job.work_hours else replace(job, work_hours=bound)

    def ratio_to_declared(self) -> float | None:
        """Measured work ÷ declared when the checkpoints refute the declared figure (z, either way), else None."""
        if not self.measured:
            return None
        lean = math.log(self.work_hours_estimate / self.declared_work_hours)
        return self.work_hours_estimate / self.declared_work_hours if abs(lean) > self.half_width else None

    def slower_than_declared(self) -> float | None:
        """E.g. 1.25 when the checkpoints show the work is 25 % more than declared; None while unsure or faster."""
        ratio = self.ratio_to_declared()
        return ratio if ratio is not None and ratio > 1.0 else None

    def faster_than_declared(self) -> float | None:
        """E.g. 0.8 when the checkpoints show the work is 20 % less than declared; None while unsure or slower."""
        ratio = self.ratio_to_declared()
        return ratio if ratio is not None and ratio < 1.0 else None


@dataclass(frozen=True)
class PaceByType:
    """One `Pace` per instance type, for a job that runs on more than one (single-type jobs use `Pace`).

    The runtime feeds each type its own totals: the productive hours of that type's groups and
    the share of the work they checkpointed. The work is the same job, only the speed differs:
    a type's bound is its own once it has measured one, else the pooled one of every type, and
    the remaining work at it is (1 − the job's whole fraction) · that bound.
    """

    declared_work_hours: float
    by_type: tuple[tuple[str, Pace], ...] = ()

    def observed(self, instance_type: str, productive_hours: float, fraction: float) -> PaceByType:
        """`instance_type`'s new cumulative totals (its productive hours, the share of the work it checkpointed)."""
        paces = dict(self.by_type)
        pace = paces.get(instance_type, Pace(self.declared_work_hours))
        paces[instance_type] = pace.observed(productive_hours, fraction)
        return replace(self, by_type=tuple(sorted(paces.items())))

    @property
    def fraction(self) -> float:
        return min(1.0, sum(pace.fraction for _, pace in self.by_type))

    def pooled(self) -> Pace:
        """Every type's totals together: the job's pace as if it ran on one type."""
        paces = [pace for _, pace in self.by_type]
        return replace(
            Pace(self.declared_work_hours),
            productive_hours=sum(p.productive_hours for p in paces),
            fraction=self.fraction,
            checkpoints=sum(p.checkpoints for p in paces),
            squares_per_hour=sum(p.squares_per_hour for p in paces),
            intervals=sum(p.intervals for p in paces),
        )

    def pace_of(self, instance_type: str) -> Pace:
        """The type's own pace once it has measured one, else the pooled pace of every type."""
        own = dict(self.by_type).get(instance_type)
        return own if own is not None and own.measured else self.pooled()

    def work_hours_bound(self, instance_type: str) -> float:
        return self.pace_of(instance_type).work_hours_bound

    def remaining_work_hours(self, instance_type: str) -> float:
        """(1 − the job's whole fraction) · the type's bound."""
        return (1.0 - self.fraction) * self.work_hours_bound(instance_type)

    def planning_job(self, job: JobSpec, instance_type: str) -> JobSpec:
        bound = self.work_hours_bound(instance_type)
        return job if bound == job.work_hours else replace(job, work_hours=bound)
