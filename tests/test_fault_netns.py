"""A data link taken down mid-flow on a real netns testbed: the error names the cut-off host.

The star's hosts reach each other's data ports through one switch namespace; the control
network is separate, so heartbeats keep flowing and the fault shows as a data-plane stall
(bounded by the iteration timeout), after which the controller probes every agent's peers.
Namespaces use the prefix ``genie-pt-f`` and are removed afterwards, even on failure.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest
from _agents import netns_unavailable

from genie.collectives import build_program
from genie.controller.local import open_controller
from genie.controller.session import Timeouts
from genie.errors import RuntimeFault
from genie.testbed import load_testbed, netns

PREFIX = "genie-ptf-"
RATE_BITS = 200_000_000
ITER_TIMEOUT_S = 1.0


_WHY = netns_unavailable(f"{PREFIX}probe")
pytestmark = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")


@pytest.fixture
def star(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GENIE_STATE_DIR", str(tmp_path / "genie-state"))
    f = tmp_path / "star.toml"
    f.write_text(
        f'[testbed]\nname = "ptf-star3"\nkind = "netns"\nnetns_prefix = "{PREFIX}"\n'
        f'[topology]\nshape = "star"\nhosts = 3\nrate = "{RATE_BITS}bit"\n'
    )
    tb = load_testbed(f)
    netns.up(tb)
    try:
        netns.start_agents(tb)
        yield tb
    finally:
        try:
            netns.down(tb)
        finally:
            netns.clean(prefix=PREFIX)


def test_link_down_mid_flow_names_the_cut_off_host(star) -> None:
    tb = star
    names = [h.name for h in tb.hosts]
    ctl = open_controller(tb, timeouts=Timeouts(heartbeat_s=0.2, abort_s=1.0))
    try:
        ctl.connect()
        ctl.sync_clocks(rounds=4)
        ctl.prepare([build_program("all_reduce", "ring", 3, 1 << 20)], names)
        assert len(ctl.run(iters=1).instances) == 1  # the link works before the cut
        cut: dict[str, float] = {}

        def take_down() -> None:
            time.sleep(0.4)
            cut["t"] = time.monotonic()
            # h2's switch port: its data link, as if the cable were pulled
            subprocess.run(["ip", "-n", f"{PREFIX}sw0", "link", "set", "p2", "down"], check=True)

        threading.Thread(target=take_down, daemon=True).start()
        with pytest.raises(RuntimeFault) as info:
            ctl.run(iters=10_000, timeout_s=ITER_TIMEOUT_S)
        detected = time.monotonic() - cut["t"]
    finally:
        ctl.close()
        ctl.t.close()
    msg = str(info.value)
    print(f"\nlink h2-sw0 down: error after {detected:.2f} s: {msg}")
    # the agents see a stall (timed out), a peer's closed connection or its reset (the kernel
    # gives up on the link), whichever comes first: seen all three on this machine
    assert any(w in msg for w in ("timed out", "closed the link", "Connection reset by peer"))
    assert "h2 is cut off" in msg and "the link of host h2 is down" in msg
    assert "h0->h2" in msg and "h1->h2" in msg
    assert detected < ITER_TIMEOUT_S + 3.0  # the iteration bound plus abort and probe
