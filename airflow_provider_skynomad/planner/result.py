"""What one run of one policy on one window cost, in the JSON shape of docs/evaluate.md."""

from __future__ import annotations

from dataclasses import dataclass, field

from airflow_provider_skynomad.planner.timeline import SegmentEnd


@dataclass
class Segment:
    """A stretch on one option: billed `usd` for `end_hours − start_hours` hours."""

    option: str
    start_hours: float
    end_hours: float
    usd: float
    ended_by: SegmentEnd | None = None  # PREEMPTED, MOVED, IDLE, FINISHED or DEADLINE once closed


@dataclass
class RunResult:
    met_deadline: bool
    finish_hours: float | None
    spot_usd: float = 0.0
    on_demand_usd: float = 0.0
    egress_usd: float = 0.0
    probe_usd: float = 0.0
    spot_hours: float = 0.0
    on_demand_hours: float = 0.0
    migrations: int = 0
    preemptions: int = 0
    launches: int = 0
    unfinished_work_hours: float = 0.0
    lost_work_hours: float = 0.0  # progress preemptions took back (periodic checkpoints, no final one)
    segments: list[Segment] = field(default_factory=list)

    @property
    def cost_usd(self) -> float:
        return self.spot_usd + self.on_demand_usd + self.egress_usd + self.probe_usd

    def to_dict(self, timeline: bool = False) -> dict:
        data = {
            "cost_usd": round(self.cost_usd, 6),
            "met_deadline": self.met_deadline,
            "migrations": self.migrations,
            "spot_hours": round(self.spot_hours, 6),
            "on_demand_hours": round(self.on_demand_hours, 6),
            "egress_usd": round(self.egress_usd, 6),
            "probe_usd": round(self.probe_usd, 6),
            "preemptions": self.preemptions,
            "launches": self.launches,
            "finish_hours": None if self.finish_hours is None else round(self.finish_hours, 6),
        }
        if self.lost_work_hours:
            data["lost_work_hours"] = round(self.lost_work_hours, 6)
        if timeline:
            data["timeline"] = [{**vars(s), "ended_by": s.ended_by and str(s.ended_by)} for s in self.segments]
        return data
