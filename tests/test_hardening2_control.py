"""Starting a job against real agents on loopback, under a holder that lets go (issue 31).

Item 2: another controller holds one agent and says Bye within the new controller's retry window;
the new controller must claim every agent (it used to lock itself out: its retries were refused
as "held by controller <its own id>").
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from _agents import Agent, RawClient, start_agent, write_testbed

from genie.controller.local import open_controller
from genie.controller.session import Timeouts
from genie.testbed import load_testbed
from genie.wire import messages as p


@pytest.fixture
def agents(tmp_path):
    started: list[Agent] = []

    def start(n: int = 2, **kw) -> list[Agent]:
        for i in range(n):
            started.append(start_agent(tmp_path, f"h{i}", **kw))
        return started[-n:]

    yield start
    for a in started:
        a.stop()


def _controller(tmp_path: Path, agents: list[Agent]):
    tb = load_testbed(write_testbed(tmp_path / "tb.toml", agents))
    return open_controller(tb, timeouts=Timeouts(register_s=5.0, abort_s=1.0))


def _hold_then_leave(holder: RawClient, secret: str, after_s: float, stop: threading.Event) -> None:
    """Hold the agent (beats with its ``secret``) and say Bye after ``after_s``."""
    end = time.monotonic() + after_s
    while time.monotonic() < end and not stop.is_set():
        holder.send(p.Heartbeat(session=secret))
        time.sleep(0.1)
    holder.send(p.Bye(session=secret))


def _claim(holder: RawClient) -> p.HelloReply:
    """Claim the agent (a controller that failed before may hold it a beat longer)."""
    end = time.monotonic() + 5
    while not isinstance(got := holder.hello("holder"), p.HelloReply):
        assert time.monotonic() < end, got
        time.sleep(0.1)
    return got


def test_a_holder_that_leaves_within_the_retry_window_is_waited_for(tmp_path, agents) -> None:
    """20 of 20 claims succeed when the holder of h0 says Bye 1.0-1.5 s into them."""
    a0, a1, a2 = agents(3)
    outcomes: list[str] = []
    for k in range(20):
        holder = RawClient(a0, f"holder-{k}")
        stop = threading.Event()
        got = _claim(holder)
        after_s = 1.0 + 0.5 * k / 19
        t = threading.Thread(target=_hold_then_leave, args=(holder, got.session, after_s, stop))
        ctl = _controller(tmp_path, [a0, a1, a2])
        try:
            t.start()
            ctl.connect()
            outcomes.append("ok")
        except Exception as exc:  # the outcome is what is tested
            outcomes.append(f"{type(exc).__name__}: {exc}")
        finally:
            stop.set()
            t.join(5)
            ctl.close()
            ctl.t.close()
            holder.close()
    bad = [o for o in outcomes if o != "ok"]
    print(f"\nclaims with a holder leaving after 1.0-1.5 s: {outcomes.count('ok')} of 20 ok")
    assert not bad, f"{len(bad)} of 20 failed: {sorted(set(bad))}"
