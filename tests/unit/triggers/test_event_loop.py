"""The trigger never blocks the triggerer's event loop (DESIGN.md §6).

Airflow's triggerer warns when one turn of its loop takes over 0.2 s, and every trigger of the
process waits that long. Here every part of a controlled job that may block (opening the
controller, a look, the live status, the cloud's clock, a log line, giving the table back) is
replaced by a stand-in that sleeps `SLOW` and notes the thread it ran on. On the loop, each would
stall it for `SLOW`; in a thread, it stalls nothing. The bounds are the stand-ins' own duration,
not a figure tuned on an idle box.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from airflow_provider_skynomad.clouds.base import GroupStatus
from airflow_provider_skynomad.jobs.controller import Controller
from airflow_provider_skynomad.triggers.skynomad import SkyNomadTrigger
from tests.unit.triggers.test_trigger import _started, world  # noqa: F401 - the fixture

SLOW = 0.5  # each stand-in's sleep: a loop stalled by one would wait at least this long
# Another process's 10 ms waits while the trigger runs, until its stdin closes: its longest wait is
# how long the box itself stopped scheduling anyone, which no trigger can help.
TWIN = """
import select, sys, time
longest = 0.0
while True:
    started = time.monotonic()
    if select.select([sys.stdin], [], [], 0.01)[0]:
        break
    longest = max(longest, time.monotonic() - started)
print(longest)
"""
STEPS = 3  # looks before the workload succeeds


class _Calls:
    """Where the stand-ins ran: (name, on the loop's thread)."""

    def __init__(self) -> None:
        self.loop_thread: int | None = None
        self.seen: list[tuple[str, bool]] = []

    def note(self, name: str, seconds: float = SLOW) -> None:
        self.seen.append((name, threading.get_ident() == self.loop_thread))
        time.sleep(seconds)

    def on_loop(self) -> list[str]:
        return sorted({name for name, on_loop in self.seen if on_loop})


class _SlowLog:
    """A log whose sink is slow (a trigger's lines are shipped to the task's log)."""

    def __init__(self, calls: _Calls, inner) -> None:
        self.calls, self.inner = calls, inner

    def __getattr__(self, level: str):
        method = getattr(self.inner, level)

        def logged(*args, **kwargs):
            self.calls.note(f"log.{level}", SLOW / 10)
            return method(*args, **kwargs)

        return logged


class _SlowCallbacks(logging.Handler):
    """asyncio's debug mode names every callback that held the loop past `slow_callback_duration`."""

    def __init__(self) -> None:
        super().__init__()
        self.took: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        found = re.search(r"took (\d+\.\d+) seconds", text)
        if text.startswith("Executing") and found:
            self.took.append((float(found.group(1)), text[:300]))


@pytest.fixture
def stand_ins(world, monkeypatch):  # noqa: F811 - the fixture imported above
    """Every blocking part of a controlled job, slow, noting where it ran; the workload succeeds
    after `STEPS` looks."""
    from airflow_provider_skynomad.market.store import table as market_table

    calls = _Calls()
    opened, step, publish, release = (
        Controller.open.__func__,
        Controller.step,
        Controller.publish,
        market_table.release_shared,
    )
    looks = []

    def slow_open(cls, *args, **kwargs):
        calls.note("Controller.open")
        return opened(cls, *args, **kwargs)

    def slow_step(self, *args, **kwargs):
        calls.note("Controller.step")
        looks.append(1)
        if len(looks) >= STEPS:
            world.status[self.steps.record.group.client_token] = GroupStatus.SUCCEEDED
        return step(self, *args, **kwargs)

    def slow_publish(self):
        calls.note("Controller.publish")
        return publish(self)

    def slow_release(table):
        calls.note("release_shared")
        return release(table)

    clock = type(world).now_hours

    def slow_clock(cloud):
        calls.note("cloud.now_hours", SLOW / 10)
        return clock(cloud)

    monkeypatch.setattr(Controller, "open", classmethod(slow_open))
    monkeypatch.setattr(Controller, "step", slow_step)
    monkeypatch.setattr(Controller, "publish", slow_publish)
    monkeypatch.setattr(market_table, "release_shared", slow_release)
    monkeypatch.setattr(type(world), "now_hours", slow_clock)
    log = SkyNomadTrigger.log
    monkeypatch.setattr(SkyNomadTrigger, "log", property(lambda self: _SlowLog(calls, log.fget(self))))
    return calls


class _LoopImports:
    """A finder that notes the provider's and the runtime's heavy modules imported for the first time
    on the loop's thread (Airflow's own lazy imports, such as asgiref in `aget_connection`, are its)."""

    ours = ("airflow_provider_skynomad", "pandas", "numpy", "sklearn", "scipy", "sqlalchemy", "pyarrow")

    def __init__(self, calls: _Calls) -> None:
        self.calls, self.names = calls, []

    def find_spec(self, name, path=None, target=None):
        if threading.get_ident() == self.calls.loop_thread and name.split(".")[0] in self.ours:
            self.names.append(name)
        return None


def test_a_controlled_job_never_stalls_the_triggerer_s_loop(stand_ins):
    trigger, _ = _started()
    calls, callbacks, imports = stand_ins, _SlowCallbacks(), _LoopImports(stand_ins)
    waits: list[float] = []

    async def main():
        loop = asyncio.get_running_loop()
        loop.set_debug(True)
        loop.slow_callback_duration = 0.1
        calls.loop_thread = threading.get_ident()

        async def ticker():  # Airflow's watchdog: how long a short sleep really waits
            while True:
                started = time.monotonic()
                await asyncio.sleep(0.01)
                waits.append(time.monotonic() - started)

        ticking = asyncio.create_task(ticker())
        run = trigger.run()
        try:
            return await asyncio.wait_for(anext(run), 60)
        finally:
            await run.aclose()
            ticking.cancel()

    asyncio_log = logging.getLogger("asyncio")
    asyncio_log.addHandler(callbacks)
    sys.meta_path.insert(0, imports)
    twin = subprocess.Popen([sys.executable, "-c", TWIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        event = asyncio.run(main())
    finally:
        sys.meta_path.remove(imports)
        asyncio_log.removeHandler(callbacks)
        box_stall = float(twin.communicate(timeout=30)[0])

    assert event.payload["kind"] == "finished"
    names = {name for name, _ in calls.seen}
    assert {"Controller.open", "Controller.step", "Controller.publish", "release_shared", "cloud.now_hours"} <= names
    assert "log.info" in names  # the look's words, said as the job stands
    assert [name for name, _ in calls.seen].count("Controller.step") == STEPS
    assert calls.on_loop() == []
    assert imports.names == []
    # A whole box that stops scheduling us (a busy 2-core CI machine) stalls the twin process too.
    assert max(waits) < SLOW / 2 + box_stall, f"the loop stalled {max(waits):.2f} s, the box {box_stall:.2f} s"
    assert [text for took, text in callbacks.took if took >= SLOW] == []


def test_the_triggerer_imports_the_trigger_without_the_runtime_s_heavy_modules():
    """The triggerer imports a trigger's class on its event loop: pandas, numpy, scikit-learn, scipy
    and the planner are imported in the threads that use them."""
    heavy = ("pandas", "numpy", "sklearn", "scipy", "airflow_provider_skynomad.jobs.controller")
    code = (
        "import sys, json\n"
        "import airflow.triggers.base\n"
        "from airflow_provider_skynomad.triggers.skynomad import SkyNomadTrigger\n"
        f"print(json.dumps([m for m in {heavy!r} if m in sys.modules]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy())
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
