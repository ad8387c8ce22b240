"""What every `skynomad` subcommand shares: the usage error and the numeric flag type.

A leaf module (standard library only), so the subcommands (`cli` for evaluate, `demo`) import it
and `cli` imports them: the import graph has no cycle.
"""

from __future__ import annotations

import argparse
import math

from airflow_provider_skynomad.exceptions import UsageError as UsageError


def number(text: str) -> float:
    """argparse type for numeric flags: a finite float (nan or inf would only fail later, deep in a run)."""
    value = float(text)  # a ValueError here becomes argparse's "invalid number value"
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value
