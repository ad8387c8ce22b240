"""The template engine of the pages: Jinja2 (which Airflow ships) with autoescape on for every template.

Job records and live statuses are written by whoever may write a DAG's task state, market rows by
probes, imports and whoever can reach the market database: none of it is markup. With autoescape
every ``{{ value }}`` is escaped for HTML text and quoted attributes alike, so no field can be
forgotten; ``|safe`` and ``Markup`` are not used anywhere. StrictUndefined makes a misspelt name an
error in the tests instead of an empty cell.

The filters are total on what they are given: a value that is not a number shows as "–" (or "",
`num`), it never fails a page that is half written.
"""

from __future__ import annotations

import math
from functools import cache

from jinja2 import Environment, PackageLoader, StrictUndefined


def _finite(value) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def usd(value) -> str:
    """Dollars with the sign in front ("-$0.89": a job that cost more than all on-demand would have)."""
    number = _finite(value)
    if number is None:
        return "–"
    return f"-${-number:,.2f}" if number < 0 else f"${number:,.2f}"


def pct(value) -> str:
    number = _finite(value)
    return "–" if number is None else f"{number:.0f}%"


def hours(value) -> str:
    number = _finite(value)
    return "–" if number is None else f"{number:.2f} h"


def days(n: float) -> str:
    """'1 day', '7 days', '0.5 days'."""
    return f"{n:g} day" if n == 1 else f"{n:g} days"


def num(value) -> str:
    """Two decimals, or "" for what is not a number (an option's missing figure)."""
    number = _finite(value)
    return "" if number is None else f"{number:.2f}"


@cache
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("airflow_provider_skynomad.plugin", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(usd=usd, pct=pct, hours=hours, days=days, num=num)
    return env


def render(template: str, **context) -> str:
    """`template` (a file in templates/) rendered with `context`."""
    return environment().get_template(template).render(**context)
