"""What tells a short spot stay from a long one at launch? The traces' up-spells by their age and by recent churn.

    .venv/bin/python benchmarks/bench_stays.py      # a few seconds

For every up-spell of every market (a gang's worth available, the trace as a probe of the whole
market saw it; spells still open at the trace's end left out), printed per trace and gang:

- by the spell's age (how long the market has already been up when a group launches into it):
  the spells that reach that age, the share of them that end within the cost table's 0.2 h cold
  start after it, and the mean of what is left of them capped at the planner's 4 h;
- by the losses (up → down) the market had in the 2 h and the 6 h before the spell began (issue
  33's "a market that preempted twice in an hour is not worth a cold start"): the spells' count,
  mean and median length, and the share shorter than 0.2 h and than 0.5 h.

The age separates the stays (GCP, gangs of 4: 36 % of the spells just begun end within 0.2 h,
12 % of those up for an hour); the churn before the spell much less.
"""

from __future__ import annotations

import numpy as np
from bench_policies import load_grid

SETTINGS = (("gcp-h100-2025-first-week.csv.gz", 4), ("gcp-h100-2025-first-week.csv.gz", 1), ("aws-v100-2023.csv.gz", 1))
WINDOWS_HOURS = (2.0, 6.0)
AGES_HOURS = (0.0, 1 / 6, 1 / 3, 0.5, 1.0, 2.0, 4.0)
COLD_START_HOURS = 0.2
CAP_HOURS = 4.0


def spells(up: np.ndarray, step_hours: float) -> np.ndarray:
    """Rows (losses in each of WINDOWS_HOURS before the spell, the spell's hours) over every market's closed spells."""
    rows = []
    for column in up.T:
        starts = np.flatnonzero(column[1:] & ~column[:-1]) + 1
        ends = np.flatnonzero(column[:-1] & ~column[1:]) + 1
        for start in starts:
            later = ends[ends > start]
            if not len(later):
                continue  # still up at the trace's end: its length is unknown
            before = [column[max(0, start - int(round(w / step_hours))) : start + 1] for w in WINDOWS_HOURS]
            losses = [int(np.count_nonzero(b[:-1] & ~b[1:])) for b in before]
            rows.append((*losses, (later[0] - start) * step_hours))
    return np.array(rows, dtype=float)


def main() -> None:
    for file, gang in SETTINGS:
        grid = load_grid(file, None)
        table = spells(grid.available >= gang, grid.step_hours)
        stays = table[:, -1]
        print(f"{file}, gang {gang}: {len(stays)} spells, mean {stays.mean():.2f} h, median {np.median(stays):.2f} h")
        for age in AGES_HOURS:
            left = stays[stays > age + 1e-9] - age
            print(
                f"  up for {age:4.2f} h: {len(left):4d} spells, end within {COLD_START_HOURS:g} h"
                f" {np.mean(left < COLD_START_HOURS - 1e-9):4.0%}, mean left (≤ {CAP_HOURS:g} h)"
                f" {np.mean(np.minimum(left, CAP_HOURS)):.2f} h"
            )
        for k, window in enumerate(WINDOWS_HOURS):
            for n in range(5):
                pick = table[:, k] == n if n < 4 else table[:, k] >= n
                if pick.any():
                    s = stays[pick]
                    print(
                        f"  losses in the {window:g} h before {'≥' if n == 4 else '='} {n}: {pick.sum():4d} spells,"
                        f" mean {s.mean():5.2f} h, median {np.median(s):4.2f} h,"
                        f" < 0.2 h {np.mean(s < 0.2):.0%}, ≤ 0.5 h {np.mean(s <= 0.5):.0%}"
                    )


if __name__ == "__main__":
    main()
