"""A SIGTERM is a notice however it lands: never a hang of the agent.

The agent's loop waits on an Event 50 times a second (`Agent._watch`); a notice given from a Python
signal handler ran on that same thread, and when the signal landed while the thread held the Event's
lock (more often on a loaded box, where a thread is stopped anywhere) the handler waited for that lock
forever: the workload was never stopped, the agent never exited (issue 32: "printed only 'starting at
step 0'", tests/integration/agent/test_agent.py). The signal now only wakes the notice's own thread.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the agent's signals are Linux's")

# The agent as it stands in its loop, holding its Events' locks (inside `Event.wait` or `clear`)
# when a SIGTERM arrives; the Python-level handler, if any, runs at the next bytecode, lock held.
HELD_WHEN_SIGNALLED = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from airflow_provider_skynomad.agent.supervise import Agent, AgentConfig

    agent = Agent(AgentConfig("file:///nowhere", Path(sys.argv[1]), "run", ["true"], notice="none"))
    agent.notice.install_signal_handlers()
    with agent.wake._cond, agent.notice.event._cond:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            pass
    print("notice" if agent.notice.event.wait(10) else "no notice", agent.notice.source, flush=True)
    """
)


def test_a_sigterm_landing_while_the_agent_holds_its_locks_is_a_notice_not_a_hang(tmp_path):
    try:
        done = subprocess.run(
            [sys.executable, "-c", HELD_WHEN_SIGNALLED, str(tmp_path / "work")],
            capture_output=True,
            text=True,
            timeout=30,  # killed on timeout: the old handler deadlocked here, and ignored later SIGTERMs
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the agent deadlocked on a SIGTERM that landed while it held its own lock")
    assert (done.returncode, done.stdout.strip()) == (0, "notice sigterm"), done.stderr
