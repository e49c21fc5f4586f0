"""Routed netns fabrics (root): ECMP over several spines, fixed flows, NICs on their own rails.

A 2-leaf fabric with 2 spines is built as routers with multipath routes and L4 hashing: a job's
cross-leaf flows spread over both spines, the same way on every run (fixed source ports, fixed
hash seeds); on a rail-optimised testbed each rank's connections leave from its NIC's address
and ranks of one host open none. Prefix ``genie-pf-``; everything is removed afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from genie.collectives import build_program
from genie.controller.local import open_controller
from genie.testbed import load_testbed, netns
from genie.testbed.flows import observed_paths, spine_shares
from genie.wire.messages import DataOptions
from tests._agents import closed, netns_unavailable

PREFIX = "genie-pf-"
_WHY = netns_unavailable(f"{PREFIX}probe")
pytestmark = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")


def _tx_bytes(ns: str, dev: str) -> int:
    out = subprocess.run(
        ["ip", "-n", ns, "-j", "-s", "link", "show", dev], capture_output=True, text=True
    )
    return int(json.loads(out.stdout)[0]["stats64"]["tx"]["bytes"])


def _connections(ns: str) -> list[tuple[str, int, str, int]]:
    """Established TCP connections in ``ns``: (local ip, port, peer ip, port)."""
    out = subprocess.run(
        ["ip", "netns", "exec", ns, "ss", "-Htn", "state", "established"],
        capture_output=True,
        text=True,
    ).stdout
    rows = []
    for line in out.splitlines():
        parts = line.split()
        (la, lp), (pa, pp) = (p.rsplit(":", 1) for p in parts[-2:])
        if la.startswith("198.18."):  # data connections only (the control one is 198.19)
            rows.append((la, int(lp), pa, int(pp)))
    return rows


@pytest.fixture
def up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Build a testbed from TOML text with agents; yield it; remove everything afterwards."""
    monkeypatch.setenv("GENIE_STATE_DIR", str(tmp_path / "genie-state"))
    made = []

    def build(name: str, body: str):
        path = tmp_path / f"{name}.toml"
        path.write_text(
            f'[testbed]\nname = "{name}"\nkind = "netns"\nnetns_prefix = "{PREFIX}"\n{body}'
        )
        tb = load_testbed(path)
        made.append(tb)
        netns.up(tb)
        netns.start_agents(tb)
        return tb

    yield build
    try:
        for tb in made:
            netns.down(tb)
    finally:
        netns.clean(prefix=PREFIX)


LEAFSPINE = """
[routing]
seed = 3
[topology]
shape = "leafspine"
leaves = 2
spines = 2
hosts_per_leaf = 1
rate = "400mbit"
"""


def test_ecmp_spreads_a_pairs_flows_over_both_spines_the_same_way_every_run(up) -> None:
    tb = up("pf-ls", LEAFSPINE)
    size = 8 << 20
    prog = build_program("send_recv", None, 2, size, oneway=True)
    topo = tb.to_topology()
    splits, ports = [], []
    with closed(open_controller(tb)) as ctl:
        ctl.connect()
        ctl.sync_clocks(rounds=2)
        for _ in range(2):
            ctl.prepare([prog], ["h0", "h1"], DataOptions(streams=16, verify=False))
            conns = _connections(tb.hosts[0].netns)
            ports.append(sorted(lp for _, lp, _, _ in conns))
            # what the switches say they do with these very 5-tuples
            paths = observed_paths(tb, topo)[(0, 1)]
            told = spine_shares(paths, topo, ["spine0", "spine1"])[0]
            before = [_tx_bytes(f"{PREFIX}leaf0", dev) for dev in ("p1", "p2")]
            ctl.run(iters=2, warmup=0)
            after = [_tx_bytes(f"{PREFIX}leaf0", dev) for dev in ("p1", "p2")]
            ctl.release()
            sent = [b - a for a, b in zip(before, after, strict=True)]
            assert sum(sent) >= 2 * size  # all of it crossed the spines
            splits.append(sent[0] / sum(sent))
            assert len(paths) == 16 and abs(splits[-1] - told) < 0.02
    print(f"share of spine0: {splits}, source ports {ports}")
    # 16 flows hashed over 2 spines: both carry some (all on one: 2^-15)
    assert all(0.02 < s < 0.98 for s in splits)
    # h0 connects every flow from a source port fixed per flow: the same ports, the same paths
    assert len(ports[0]) == 16 and ports[0] == ports[1]
    assert all(20000 <= p < 32768 for p in ports[0])
    assert abs(splits[0] - splits[1]) < 0.05


RAIL = """
[topology]
shape = "rail"
hosts = 2
rails = 2
spines = 1
rate = "400mbit"
"""


def test_each_rank_connects_from_its_nic_and_ranks_of_one_host_open_none(up) -> None:
    tb = up("pf-rail", RAIL)
    h0, h1 = tb.hosts
    prog = build_program("all_to_all", "direct", 4, 4 << 20)
    placement = ["h0", "h0", "h1", "h1"]  # ranks 0, 2 on NIC 0; ranks 1, 3 on NIC 1
    with closed(open_controller(tb)) as ctl:
        ctl.connect()
        ctl.sync_clocks(rounds=2)
        ctl.prepare([prog], placement, DataOptions(streams=1))
        conns = _connections(h0.netns)
        before = {k: _tx_bytes(h0.netns, f"eth{k}") for k in (0, 1)}
        out = ctl.run(iters=1, warmup=0)
        after = {k: _tx_bytes(h0.netns, f"eth{k}") for k in (0, 1)}
        ctl.release()
    assert len(out.instances) == 1
    nic = [n.data_addr for n in h0.nics]
    far = [n.data_addr for n in h1.nics]
    # h0's ranks 0 (NIC 0) and 1 (NIC 1) each talk to ranks 2 (h1 NIC 0) and 3 (h1 NIC 1):
    # four connections, each from the rank's NIC address to the peer rank's; none within h0
    pairs = sorted((la, pa) for la, _, pa, _ in conns)
    assert pairs == sorted((a, b) for a in nic for b in far)
    assert not any(pa in nic for _, _, pa, _ in conns)
    # both of h0's NICs carried the bytes of their own ranks
    assert all(after[k] - before[k] > (4 << 20) // 4 for k in (0, 1))


def test_routed_fabric_has_no_bridge_and_hashes_the_5_tuple(up) -> None:
    tb = up("pf-ls4", LEAFSPINE.replace("spines = 2", "spines = 4"))
    leaf = f"{PREFIX}leaf0"
    policy = subprocess.run(
        ["ip", "netns", "exec", leaf, "sysctl", "-n", "net.ipv4.fib_multipath_hash_policy"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert policy == "3"  # custom: the 5-tuple, never the socket's random hash
    dst, src = tb.hosts[1].data_addr, tb.hosts[0].data_addr
    vias = set()
    for sport in range(20000, 20064):
        out = subprocess.run(
            ["ip", "-n", leaf, "route", "get", dst, "from", src, "iif", "p0", "ipproto", "tcp",
             "sport", str(sport), "dport", "40000"],
            capture_output=True, text=True,
        ).stdout  # fmt: skip
        vias.add(out.split(" via ")[1].split()[0])
    assert len(vias) == 4  # 64 source ports reach all four spines
    links = subprocess.run(["ip", "-n", leaf, "-j", "link"], capture_output=True, text=True)
    assert not any(
        e.get("linkinfo", {}).get("info_kind") == "bridge" for e in json.loads(links.stdout)
    )
    assert os.geteuid() == 0
