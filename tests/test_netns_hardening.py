"""Netns testbeds isolated from each other, and never reached but by their own links (issue 18).

Row 15: a controller of a testbed that is down, on a host with a default route, connected to
198.19.0.x through that route for 10 s; now it refuses at once, naming `genie testbed up`, and
sends nothing (checked inside an empty namespace whose default route is a dummy interface).
Row 13: two testbeds with different prefixes shared control subnets and one controller drove the
other's agents; now each has blocks of its own, each controller reaches its own agents (checked
by pid), an agent refuses another testbed's controller, and `testbed up` refuses a testbed whose
addresses collide. Root only (skips otherwise); run under the netns lock.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import string
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _agents import closed, netns_unavailable

from genie import cli
from genie.collectives import build_program
from genie.controller.channel import ZmqChannel
from genie.controller.local import open_controller
from genie.controller.session import Controller, Timeouts
from genie.errors import AgentRefused, TestbedError
from genie.testbed import addressing, load_testbed, netns, state

REPO = Path(__file__).resolve().parents[1]
EMPTY = "genie-hx-empty"  # genie-prefixed: `genie testbed clean` would sweep it too
PREFIXES = ("genie-ha-", "genie-hb-")


_WHY = netns_unavailable(EMPTY)
pytestmark = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")


@pytest.fixture(autouse=True)
def _state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GENIE_STATE_DIR", str(tmp_path / "genie-state"))


def _ip(*args: str) -> str:
    out = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture
def empty_ns():
    """A namespace with nothing genie made in it, whose default route leads out of veth d0.

    The other end (d1) stays in the namespace with no address, so nothing answers: whatever
    the kernel sends by the default route (ARP for the gateway first) counts on d0's tx. IPv6
    is off, so the link makes no traffic of its own.
    """
    subprocess.run(["ip", "netns", "del", EMPTY], capture_output=True)
    _ip("netns", "add", EMPTY)
    try:
        for key in ("all", "default"):
            _ip("netns", "exec", EMPTY, "sysctl", "-qw", f"net.ipv6.conf.{key}.disable_ipv6=1")
        _ip("-n", EMPTY, "link", "set", "lo", "up")
        _ip("-n", EMPTY, "link", "add", "d0", "type", "veth", "peer", "name", "d1")
        _ip("-n", EMPTY, "addr", "add", "10.255.0.1/24", "dev", "d0")
        _ip("-n", EMPTY, "link", "set", "d1", "up")
        _ip("-n", EMPTY, "link", "set", "d0", "up")
        _ip("-n", EMPTY, "route", "add", "default", "via", "10.255.0.2", "dev", "d0")
        yield EMPTY
    finally:
        subprocess.run(["ip", "netns", "del", EMPTY], capture_output=True)


def _tx_packets(ns: str, dev: str) -> int:
    (link,) = json.loads(_ip("-n", ns, "-s", "-j", "link", "show", dev))
    return int(link["stats64"]["tx"]["packets"])


def test_a_controller_refuses_a_testbed_that_is_not_up_here(empty_ns, tmp_path) -> None:
    testbed = REPO / "testbed" / "netns-star.toml"
    before = _tx_packets(empty_ns, "d0")
    t0 = time.monotonic()
    out = subprocess.run(
        ["ip", "netns", "exec", empty_ns, sys.executable, "-m", "genie", "bench",
         "--testbed", str(testbed), "--store", str(tmp_path / "runs.sqlite")],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    took = time.monotonic() - t0
    sent = _tx_packets(empty_ns, "d0") - before
    lines = out.stderr.strip().splitlines()
    print(f"\nbench on a testbed not up here: exit {out.returncode} after {took:.1f} s, "
          f"{sent} packets out of the default route: {lines[-1] if lines else ''}")  # fmt: skip
    assert out.returncode == 1 and len(lines) == 1, out.stderr
    assert "testbed netns-star is not up on this host" in lines[0]
    assert f"sudo genie testbed up {testbed} --agents" in lines[0]
    assert sent == 0  # was: SYNs to 198.19.0.x for 10 s through the default route
    assert took < 10


def test_the_check_looks_at_this_network_namespace(empty_ns, tmp_path) -> None:
    """Up in the root namespace, a testbed is not up for a controller in another one."""
    from genie.testbed.reach import control_links

    tb = load_testbed(_write(tmp_path, "genie-hc-"))
    try:
        netns.up(tb)
        links = control_links(tb)  # here: every host by its own root-side link
        assert links == {"h0": "genie-hcc0", "h1": "genie-hcc1"}
        code = (
            "from genie.testbed import load_testbed\n"
            "from genie.testbed.reach import control_links\n"
            "from genie.errors import TestbedDown\n"
            f"tb = load_testbed({str(tmp_path / 'iso-hc.toml')!r})\n"
            "try:\n    control_links(tb, 'x.toml')\nexcept TestbedDown as exc:\n    print(exc)\n"
        )
        out = subprocess.run(
            ["ip", "netns", "exec", empty_ns, sys.executable, "-c", code],
            capture_output=True, text=True, timeout=30, cwd=REPO,
        )  # fmt: skip
    finally:
        netns.down(tb)
    assert out.returncode == 0, out.stderr
    assert "no control link genie-hcc0 for host h0 in this network namespace" in out.stdout
    assert "sudo genie testbed up x.toml --agents" in out.stdout


def _write(tmp: Path, prefix: str) -> Path:
    name = f"iso-{addressing.prefix_tag(prefix)}"
    path = tmp / f"{name}.toml"
    path.write_text(
        f'[testbed]\nname = "{name}"\nkind = "netns"\nnetns_prefix = "{prefix}"\n'
        '[topology]\nshape = "star"\nhosts = 2\nrate = "1gbit"\n'
    )
    return path


def _colliding_tag(prefix: str) -> str:
    want = addressing.address_slot(prefix)
    for n in (1, 2, 3):
        for t in itertools.product(string.ascii_lowercase + string.digits, repeat=n):
            tag = "".join(t)
            if f"genie-{tag}-" != prefix and addressing.address_slot(f"genie-{tag}-") == want:
                return tag
    raise AssertionError("no colliding tag")


def test_two_testbeds_up_at_once_each_drive_their_own_agents(tmp_path) -> None:
    paths = [_write(tmp_path, pre) for pre in PREFIXES]
    tbs = [load_testbed(p) for p in paths]
    try:
        for path in paths:
            assert cli.main(["testbed", "up", str(path), "--agents"]) == 0
        a, b = tbs
        assert {h.control for h in a.hosts}.isdisjoint(h.control for h in b.hosts)
        records = {st.name: st for _, st in state.load_all() if st}
        for tb in tbs:
            ctl = open_controller(tb, timeouts=Timeouts(register_s=5.0))
            with closed(ctl):
                hellos = ctl.connect()
                mine = {r.host: r.pid for r in records[tb.name].agents}
                assert {h: r.pid for h, r in hellos.items()} == mine  # its own agents
                names = [h.name for h in tb.hosts]
                ctl.prepare([build_program("all_gather", "ring", 2, 4096)], names)
                assert len(ctl.run(0, iters=2).instances) == 2
                ctl.release()
        # a controller that names testbed b, connected to a's agents, is refused by them
        tr = ZmqChannel({h.name: h.control for h in a.hosts})
        stranger = Controller(tr, [h.name for h in a.hosts], testbed=b.identity,
                              timeouts=Timeouts(register_s=5.0))  # fmt: skip
        try:
            with pytest.raises(AgentRefused, match=f"serves testbed '{a.identity}'"):
                stranger.connect()
        finally:
            stranger.close()
            tr.close()
        # a third testbed whose prefix has a's address slot is refused before anything is made
        clash = _write(tmp_path, f"genie-{_colliding_tag(PREFIXES[0])}-")
        with pytest.raises(TestbedError, match="would share control addresses"):
            netns.up(load_testbed(clash))
        assert netns.list_namespaces(prefix=load_testbed(clash).netns_prefix) == []
    finally:
        for tb in tbs:
            with contextlib.suppress(TestbedError):
                netns.down(tb)
            netns.clean(prefix=tb.netns_prefix)
