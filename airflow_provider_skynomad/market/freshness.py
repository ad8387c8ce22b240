"""How old the market table's newest observation may be before a job stops trusting it, and how
much history a lifetime forecast shown to people is fitted on.

One value each, shared by the operators, the probe plan, the markets page and `skynomad market
show`: a probe DAG keeps markets fresher than the jobs' `max_market_age` only while both read the
same number. Nothing heavy is imported here (the `skynomad` command reads it to build its help).
"""

from __future__ import annotations

from datetime import timedelta

DEFAULT_MAX_MARKET_AGE = timedelta(hours=2)  # `max_market_age` of both operators
DEFAULT_MAX_AGE_HOURS = DEFAULT_MAX_MARKET_AGE.total_seconds() / 3600
STALE_AFTER_HOURS = 3.0  # the least a job trusts a market's newest row for (jobs/stale.py)
FORECAST_DAYS = 2.0  # the markets page's and `skynomad market show`'s forecasts are fitted on this much history
