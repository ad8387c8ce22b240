"""A Cloud wrapper that injects API faults, for tests and benchmarks.

Real cloud APIs throttle, time out and run out of capacity in the middle of a job; the simulated
cloud does none of that by itself. `FaultyCloud` sits between the runtime and any cloud and
makes chosen calls fail the way real ones do:

- ``throttle``: refused before reaching the cloud (HTTP 429 / ``RequestLimitExceeded``);
- ``timeout``: the request never arrived (a connect timeout);
- ``lost_reply``: the call *went through* and its answer was lost (a read timeout): the case a
  launch's client token exists for — a retry must get the same group, never a second one;
- ``capacity``: the cloud has no capacity for the launch (`CapacityError`; spot or on-demand).

Faults are rules in one `FaultPlan`, which every wrapper made from it shares (the worker, the
trigger and a retried task each build their own cloud object; the plan counts calls across all
of them, in one process). The plan also records what it injected, so a test can check that the
fault really happened.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from airflow_provider_skynomad.clouds.base import CapacityError, Cloud
from airflow_provider_skynomad.clouds.wrapped import ApiCall, T, WrappedCloud
from airflow_provider_skynomad.exceptions import InjectedTimeout, ThrottledError

KINDS = ("throttle", "timeout", "lost_reply", "capacity")
METHODS = ("find", "launch", "poll", "terminate", "progress", "probe", "copy_checkpoint", "bill")


@dataclass
class Fault:
    """One rule: calls of `method` matching the filters fail as `kind`.

    :param skip: let this many matching calls through first.
    :param times: fail this many matching calls (None: every one from then on).
    :param zones: only calls about these zones (None: any).
    :param spot: only spot (True) or on-demand (False) launches (None: both).
    :param when: an extra condition on the call's arguments (e.g. the simulated clock).
    """

    method: str
    kind: str
    skip: int = 0
    times: int | None = 1
    zones: frozenset[str] | None = None
    spot: bool | None = None
    when: Callable[..., bool] | None = None
    seen: int = 0
    injected: int = 0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; one of {METHODS}")
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; one of {KINDS}")
        if self.kind == "capacity" and self.method != "launch":
            raise ValueError("capacity faults apply to launches only")
        if self.zones is not None:
            self.zones = frozenset(self.zones)

    def matches(self, method: str, zone: str | None, spot: bool | None, args: tuple) -> bool:
        if method != self.method:
            return False
        if self.zones is not None and zone not in self.zones:
            return False
        if self.spot is not None and spot is not None and spot != self.spot:
            return False
        return self.when is None or bool(self.when(*args))


@dataclass
class FaultPlan:
    """The rules and what they injected, shared by every `FaultyCloud` made from it."""

    faults: list[Fault] = field(default_factory=list)
    log: list[dict] = field(default_factory=list)
    calls: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, method: str, kind: str, **kwargs) -> Fault:
        fault = Fault(method, kind, **kwargs)
        self.faults.append(fault)
        return fault

    def pick(self, method: str, zone: str | None, spot: bool | None, args: tuple) -> Fault | None:
        """The rule that fails this call, if one does (counting the call either way)."""
        with self._lock:
            self.calls[method] = self.calls.get(method, 0) + 1
            for fault in self.faults:
                if not fault.matches(method, zone, spot, args):
                    continue
                fault.seen += 1
                if fault.seen <= fault.skip or (fault.times is not None and fault.injected >= fault.times):
                    continue
                fault.injected += 1
                self.log.append({"method": method, "kind": fault.kind, "zone": zone})
                return fault
        return None

    def injected(self, method: str | None = None, kind: str | None = None) -> int:
        with self._lock:
            return sum(1 for e in self.log if method in (None, e["method"]) and kind in (None, e["kind"]))


class FaultyCloud(WrappedCloud):
    """`inner` with the faults of `plan` injected; everything else is `inner`'s own attribute."""

    def __init__(self, inner: Cloud, plan: FaultPlan):
        super().__init__(inner)
        self.plan = plan

    def api(self, call: ApiCall, make: Callable[[], T]) -> T:
        fault = self.plan.pick(call.method, call.zone, call.spot, call.args) if call.method in METHODS else None
        if fault is None:
            return make()
        method, where = call.method, f" in {call.zone}" if call.zone else ""
        if fault.kind == "throttle":
            raise ThrottledError(f"Rate exceeded: {method}{where} (RequestLimitExceeded, injected)")
        if fault.kind == "timeout":
            raise InjectedTimeout(f"connect timeout: {method}{where} (injected)")
        if fault.kind == "capacity":
            mode = "spot" if call.spot else "on-demand"
            raise CapacityError(f"insufficient {mode} capacity{where} (InsufficientInstanceCapacity, injected)")
        make()  # lost_reply: the cloud did it, the answer never came back
        raise InjectedTimeout(f"read timeout: {method}{where} went through, its answer was lost (injected)")
