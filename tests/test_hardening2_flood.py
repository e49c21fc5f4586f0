"""Idle connections to an agent's control port cannot keep a controller out (issue 31 item 5).

The agent runs under ``ulimit -n 1024``; 1,100 raw TCP connections that never speak are opened
to its control port and kept open. Before the fix every descriptor stayed taken for libzmq's
30 s handshake bound, and a controller failed after its 10 s with "not a genie agent, or ...
CURVE keys". Now the agent drops a connection that has not completed the handshake within
``AGENT_HANDSHAKE_S`` and the controller gets in.
"""

from __future__ import annotations

import resource
import socket
import time
from pathlib import Path

import pytest
from _agents import start_agent, write_testbed

from genie.controller.local import open_controller
from genie.controller.session import Timeouts
from genie.testbed import load_testbed
from genie.wire.sockets import AGENT_HANDSHAKE_S

FLOOD = 1100


@pytest.fixture
def many_fds():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < FLOOD + 200:
        pytest.skip(f"this test opens {FLOOD} sockets; the hard fd limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, FLOOD + 200), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_idle_control_connections_do_not_keep_a_controller_out(tmp_path: Path, many_fds) -> None:
    agent = start_agent(tmp_path, "h0", nofile=1024)
    socks: list[socket.socket] = []
    try:
        connected = 0
        for _ in range(FLOOD):
            s = socket.socket()
            s.settimeout(1.0)  # paced by the agent's accept queue
            try:
                s.connect(("127.0.0.1", agent.port))
                connected += 1
            except OSError:
                pass
            socks.append(s)
        fds = agent.fds()
        tb = load_testbed(write_testbed(tmp_path / "tb.toml", [agent]))
        ctl = open_controller(tb, timeouts=Timeouts(register_s=10.0, abort_s=1.0))
        t0 = time.monotonic()
        try:
            hello = ctl.connect()  # was: "not a genie agent, or ... CURVE keys" after 10 s
            took = time.monotonic() - t0
        finally:
            ctl.close()
            ctl.t.close()
        print(f"\n{connected} of {FLOOD} idle connections made and kept open (agent then at "
              f"{fds}/1024 fds): claimed in {took:.1f} s")  # fmt: skip
        assert connected >= 1000  # the flood was made (before the fix: the table stayed full)
        assert list(hello) == ["h0"]
        assert took < AGENT_HANDSHAKE_S + 5.0
    finally:
        for s in socks:
            s.close()
        agent.stop()
