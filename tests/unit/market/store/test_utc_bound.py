"""`utc()` range bounds: the simulated clock's nanosecond stamps convert without a warning."""

from __future__ import annotations

import warnings

import pandas as pd

from airflow_provider_skynomad.market.store.database import utc


def test_a_nanosecond_stamp_becomes_a_bound_without_a_warning_in_the_task_log():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Discarding nonzero nanoseconds in conversion" in every job's last visit
        bound = utc(pd.Timestamp("2025-10-11T05:31:50.239005123Z"))
    assert bound == pd.Timestamp("2025-10-11T05:31:50.239005Z").to_pydatetime()
    assert utc("2025-10-11 05:31:50").tzinfo is not None
