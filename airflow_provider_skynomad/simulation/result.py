"""What one run of one policy on one window cost: planner/result.py (the planner's rollouts bill the same way).

Re-exported here, where it was before the one-job accounting moved to the planner (planner/rollout.py).
"""

from airflow_provider_skynomad.planner.result import RunResult, Segment

__all__ = ["RunResult", "Segment"]
