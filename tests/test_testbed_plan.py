"""netns plans as strings (no root), and up/down/clean logic over a fake ip/tc that keeps state."""

from __future__ import annotations

import json
import math
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import psutil
import pytest

from genie import cli
from genie.errors import TestbedError
from genie.testbed import dumps_testbed, load_testbed, loads_testbed, netns, state
from genie.testbed.netns_plan import plan_up, ring_routes, tbf_params

EXAMPLES = Path(__file__).resolve().parent.parent / "testbed"


@pytest.fixture(autouse=True)
def _state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "genie-state"
    monkeypatch.setenv("GENIE_STATE_DIR", str(d))
    return d


def _lines(tb_path: Path | str) -> list[str]:
    tb = load_testbed(tb_path) if isinstance(tb_path, Path) else loads_testbed(tb_path)
    return [shlex.join(c.argv) for c in plan_up(tb).commands]


def test_star_plan_builds_namespaces_bridge_veths_and_shapes_both_ends() -> None:
    lines = _lines(EXAMPLES / "netns-star.toml")
    for ns in ("genie-h0", "genie-h1", "genie-h2", "genie-h3", "genie-sw0"):
        assert f"ip netns add {ns}" in lines
    assert "ip -n genie-sw0 link add br0 type bridge stp_state 0" in lines
    assert "ip link add eth0 netns genie-h2 type veth peer name p2 netns genie-sw0" in lines
    assert "ip -n genie-sw0 link set p2 master br0" in lines
    shaped = [ln for ln in lines if " tbf " in ln]
    assert len(shaped) == 8  # 4 links, both ends
    assert all("rate 1000000000bit" in ln for ln in shaped)
    assert "tc -n genie-h2 qdisc replace dev eth0 root tbf rate 1000000000bit" in " ".join(shaped)
    assert "ip -n genie-h2 addr add 198.18.0.3/16 dev eth0" in lines
    assert "ip link add genie-c2 type veth peer name ctl0 netns genie-h2" in lines
    assert "ip addr add 198.19.0.9/30 dev genie-c2" in lines
    assert "ip -n genie-h2 addr add 198.19.0.10/30 dev ctl0" in lines
    assert not any("netem" in ln or "delay" in ln for ln in lines)


def test_every_namespace_is_made_before_it_is_used() -> None:
    lines = _lines(EXAMPLES / "netns-leafspine.toml")
    made: set[str] = set()
    for ln in lines:
        argv = ln.split()
        if argv[:3] == ["ip", "netns", "add"]:
            made.add(argv[3])
        for i, tok in enumerate(argv):
            if tok in ("-n", "netns") and i + 1 < len(argv) and argv[i + 1].startswith("genie"):
                assert argv[i + 1] in made, ln


def test_leafspine_plan_shapes_uplinks_and_routes_instead_of_bridging() -> None:
    text = (EXAMPLES / "netns-leafspine.toml").read_text().replace('"2:1"', '"4:1"')
    lines = _lines(text)
    up = [ln for ln in lines if "genie-spine0" in ln and " tbf " in ln]
    assert len(up) == 2 and all("rate 500000000bit" in ln for ln in up)
    assert "ip link add p2 netns genie-leaf0 type veth peer name p0 netns genie-spine0" in lines
    assert not any(" bridge " in ln or "master br0" in ln for ln in lines)
    assert "ip netns exec genie-spine0 sysctl -qw net.ipv4.ip_forward=1" in lines


def _routed(text: str, **kw) -> tuple[list[str], dict[str, str]]:
    """Plan lines, and per namespace the ``ip -batch`` script it gets."""
    plan = plan_up(loads_testbed(text), **kw)
    scripts = {c.argv[2]: c.stdin or "" for c in plan.commands if "-batch" in c.argv}
    return [shlex.join(c.argv) for c in plan.commands], scripts


LS4 = (
    '[testbed]\nname = "ls"\nkind = "netns"\n[routing]\nseed = 7\n[topology]\n'
    'shape = "leafspine"\nleaves = 2\nspines = 4\nhosts_per_leaf = 2\nrate = "1gbit"\n'
)


def test_a_leaf_has_a_multipath_route_over_every_spine_and_hashes_the_5_tuple() -> None:
    lines, scripts = _routed(LS4, hash_seed=True)
    leaf0 = scripts["genie-leaf0"].splitlines()
    # h0, h1 are behind leaf0: direct; h2, h3 behind leaf1: ECMP over the four spines
    assert "route add 198.18.0.1/32 dev p0 scope link" in leaf0
    remote = [ln for ln in leaf0 if ln.startswith("route add 198.18.0.3/32")]
    assert len(remote) == 1 and remote[0].count("nexthop via") == 4
    assert all(f"dev p{2 + k} onlink" in remote[0] for k in range(4))
    # spines have one way down to each host
    assert "route add 198.18.0.3/32 via 198.18.0.6 dev p1 onlink" in scripts["genie-spine2"]
    for sw in ("leaf0", "spine3"):
        assert f"ip netns exec genie-{sw} sysctl -qw net.ipv4.fib_multipath_hash_policy=3" in lines
        assert (
            f"ip netns exec genie-{sw} sysctl -qw net.ipv4.fib_multipath_hash_fields=0x37" in lines
        )
    seeds = {ln.split("=")[-1] for ln in lines if "fib_multipath_hash_seed" in ln}
    assert len(seeds) == 6 and "0" not in seeds  # one per switch, fixed, never "random"
    again, _ = _routed(LS4, hash_seed=True)
    assert again == lines  # the same testbed, the same seeds and routes
    assert not any("hash_seed" in ln for ln in _routed(LS4)[0])  # a kernel without the knob
    # every host routes the data block into its leaf, from its own address
    assert scripts["genie-h2"].splitlines() == [
        "address add 198.18.0.3/32 dev eth0",
        "route add 198.18.0.0/16 via 198.18.0.6 dev eth0 onlink src 198.18.0.3",
    ]


def test_multi_nic_hosts_send_from_each_nic_out_of_that_nic() -> None:
    text = (
        '[testbed]\nname = "r"\nkind = "netns"\n[topology]\nshape = "rail"\nhosts = 2\n'
        'rails = 2\nspines = 1\nrate = "1gbit"\n'
    )
    lines, scripts = _routed(text)
    assert "ip link add eth1 netns genie-h0 type veth peer name p0 netns genie-leaf1" in lines
    h0 = scripts["genie-h0"].splitlines()
    nic1 = "198.18.0.3"  # NIC 1 of h0: after both hosts' first NICs
    assert f"address add {nic1}/32 dev eth1" in h0
    assert f"rule add from {nic1} table 101 pref 1001" in h0
    assert any(ln.startswith("route add 198.18.0.0/16 via") and "table 101" in ln for ln in h0)
    # rail leaf 1 reaches h0's NIC 1 directly and h0's NIC 0 only over the spine
    leaf1 = scripts["genie-leaf1"]
    assert f"route add {nic1}/32 dev p0 scope link" in leaf1
    assert "route add 198.18.0.1/32 via" in leaf1


def test_interface_names_fit_ifnamsiz_for_large_testbeds() -> None:
    text = (
        '[testbed]\nname = "big"\nkind = "netns"\nnetns_prefix = "genie-abcd-"\n'
        '[topology]\nshape = "star"\nhosts = 1001\nrate = "1gbit"\n'
    )
    plan = plan_up(loads_testbed(text))
    names = set(plan.root_links)
    for c in plan.commands:
        a = c.argv
        if a[:3] == ["ip", "link", "add"] or (len(a) > 4 and a[3:5] == ["link", "add"]):
            names.add(a[a.index("add") + 1])
        if "peer" in a:
            names.add(a[a.index("peer") + 2])
    assert max(len(n) for n in names) <= 15
    assert "genie-abcdc1000" in names
    assert all(n.startswith("genie-abcd-") for n in plan.namespaces)


def test_ring_plan_routes_the_short_way_through_forwarding_hosts() -> None:
    tb = loads_testbed(
        '[testbed]\nname = "r"\nkind = "netns"\n[topology]\nshape = "ring"\nhosts = 5\n'
        'rate = "100mbit"\n'
    )
    routes = ring_routes(tb)
    h0 = dict((dst, (via, dev)) for dst, via, dev in routes["h0"])
    assert h0["198.18.0.2"] == ("198.18.0.2", "eth0")  # h1: clockwise neighbour
    assert h0["198.18.0.3"] == ("198.18.0.2", "eth0")  # h2: via h1
    assert h0["198.18.0.4"] == ("198.18.0.5", "eth1")  # h3: the other way, via h4
    lines = [shlex.join(c.argv) for c in plan_up(tb).commands]
    assert "ip -n genie-h0 addr add 198.18.0.1/32 dev lo" in lines
    assert "ip netns exec genie-h3 sysctl -qw net.ipv4.ip_forward=1" in lines
    assert "ip netns exec genie-h3 sysctl -qw net.ipv4.conf.eth1.rp_filter=0" in lines
    assert (
        "ip -n genie-h0 route add 198.18.0.4/32 via 198.18.0.5 dev eth1 onlink src 198.18.0.1"
        in lines
    )


def test_tbf_parameters_follow_rate_mtu_and_queue() -> None:
    bits, burst, limit = tbf_params(1e9 / 8, 1500, None)
    assert bits == 1_000_000_000
    assert burst == 125_000  # 1 ms at 1 Gbit/s: no burst above line rate for longer
    assert limit == 4 * 2**20  # at least 4 MiB (16 ms at 1 Gbit/s is 2 MB)
    assert tbf_params(10e9 / 8, 1500, None)[2] == 20_000_000  # 16 ms at 10 Gbit/s
    bits, burst, limit = tbf_params(1e6 / 8, 9000, 100_000)
    assert burst == 36_056 and limit == 100_000  # four 9000-byte frames at least
    assert tbf_params(200e6 / 8, 1500, None)[1] == 2 * (16384 + 14)  # two GSO packets
    assert tbf_params(100e9 / 8, 65535, None)[1] == 12_500_000


def test_every_shaped_port_sends_small_gso_packets() -> None:
    plan = plan_up(load_testbed(EXAMPLES / "netns-star.toml"))
    gso = [c.argv for c in plan.commands if "gso_max_size" in c.argv]
    tbf = [c.argv for c in plan.commands if "tbf" in c.argv]
    assert len(gso) == len(tbf) == 8 and all(a[-1] == "16384" for a in gso)


LOSSY = """
[testbed]
name = "lossy"
kind = "netns"
netns_prefix = "genie-ly-"
[topology]
shape = "star"
hosts = 2
rate = "100mbit"
latency = "2ms"
jitter = "100us"
loss = "0.1%"
"""


def test_delay_jitter_and_loss_put_netem_over_each_ends_tbf() -> None:
    tb = loads_testbed(LOSSY)
    lk = tb.links[0]
    assert (lk.latency, lk.jitter, lk.loss) == pytest.approx((0.002, 1e-4, 0.001))
    assert loads_testbed(dumps_testbed(tb)).links == tb.links  # round trip
    lines = _lines(LOSSY)
    netem = [ln for ln in lines if " netem " in ln]
    tbf = [ln for ln in lines if " tbf " in ln]
    assert len(netem) == len(tbf) == 4  # both ends of both links
    assert netem[0] == (
        "tc -n genie-ly-h0 qdisc replace dev eth0 root handle 1: netem limit 1000 "
        "delay 2000us 100us loss 0.1%"
    )
    assert all("parent 1:1 handle 10: tbf rate 100000000bit" in ln for ln in tbf)
    # netem holds what the link carries over the delay, twice, at full-size frames
    fast = loads_testbed(LOSSY.replace('"100mbit"', '"10gbit"').replace('"2ms"', '"20ms"'))
    limits = {ln.split()[12] for ln in _lines(dumps_testbed(fast)) if " netem " in ln}
    assert limits == {str(math.ceil(2 * 10e9 / 8 * 0.0201 / 1514))}
    plain = _lines(EXAMPLES / "netns-star.toml")
    assert not any("netem" in ln for ln in plain)
    for bad, message in [('loss = "1.5"', "fraction"), ('loss = "100%"', "below 100%")]:
        with pytest.raises(TestbedError, match=message):
            loads_testbed(LOSSY.replace('loss = "0.1%"', bad))


def test_up_refuses_delay_and_loss_without_netem_and_builds_nothing(monkeypatch) -> None:
    monkeypatch.setattr(netns, "NETEM_MODULE", Path("/nonexistent/sch_netem"))
    fake = FakeIp()
    fake.fail_on = " netem"  # this kernel has no sch_netem: tc refuses the qdisc
    with pytest.raises(TestbedError, match=r"link h0-sw0 has latency.*needs netem"):
        netns.up(loads_testbed(LOSSY), runner=fake)
    assert fake.namespaces == [] and state.load_all() == []  # the probe's namespace is gone
    assert any(c[:3] == ["ip", "netns", "add"] and c[3].endswith("netem-probe") for c in fake.calls)
    ok = FakeIp()  # a kernel with netem: the testbed goes up with netem on its links
    netns.up(loads_testbed(LOSSY), runner=ok)
    assert sum(" netem " in shlex.join(c) for c in ok.calls) == 4 + 1  # links, then the probe


def test_static_testbeds_are_not_built() -> None:
    with pytest.raises(TestbedError, match="only netns"):
        plan_up(load_testbed(EXAMPLES / "loopback.toml"))


class FakeIp:
    """A stand-in for ip/tc that tracks namespaces and root links, and can fail one command."""

    def __init__(self, namespaces: Sequence[str] = (), links: Sequence[str] = ()) -> None:
        self.namespaces = list(namespaces)
        self.links = ["lo", "eth0", *links]
        self.calls: list[list[str]] = []
        self.peer_ns: dict[str, str] = {}  # root link -> namespace of its veth peer
        self.fail_on: str | None = None

    def __call__(self, argv: Sequence[str], stdin: str | None) -> netns.Result:
        a = list(argv)
        self.calls.append(a)
        line = shlex.join(a)
        if self.fail_on and self.fail_on in line:
            return netns.Result(returncode=2, stdout="", stderr="RTNETLINK answers: File exists")
        if a == ["ip", "-j", "netns", "list"]:
            return netns.Result(0, json.dumps([{"name": n} for n in self.namespaces]), "")
        if a == ["ip", "-j", "link", "show"]:
            return netns.Result(0, json.dumps([{"ifname": n} for n in self.links]), "")
        if a[:3] == ["ip", "netns", "add"]:
            self.namespaces.append(a[3])
        elif a[:3] == ["ip", "netns", "del"]:
            self.namespaces.remove(a[3])
            gone = {ln for ln, ns in self.peer_ns.items() if ns == a[3]}  # veth peers go too
            self.links = [ln for ln in self.links if ln not in gone]
        elif a[:3] == ["ip", "link", "add"] and "netns" not in a[:5]:
            self.links.append(a[3])
            if "peer" in a and "netns" in a:
                self.peer_ns[a[3]] = a[a.index("netns") + 1]
        elif a[:3] == ["ip", "link", "del"]:
            self.links.remove(a[3])
        return netns.Result(0, "", "")


def test_up_then_down_leaves_nothing_and_down_twice_is_safe() -> None:
    tb = load_testbed(EXAMPLES / "netns-star.toml")
    fake = FakeIp(namespaces=["other-ns"], links=["docker0"])
    netns.up(tb, source="x.toml", runner=fake)
    assert sorted(fake.namespaces) == sorted(["other-ns", *plan_up(tb).namespaces])
    assert state.record_path(tb.name, tb.netns_prefix).exists()
    netns.down(tb, runner=fake)
    assert fake.namespaces == ["other-ns"] and fake.links == ["lo", "eth0", "docker0"]
    assert not state.record_path(tb.name, tb.netns_prefix).exists()
    assert netns.down(tb, runner=fake) == []


def test_failed_command_aborts_up_names_command_and_stderr_and_rolls_back() -> None:
    tb = load_testbed(EXAMPLES / "netns-star.toml")
    fake = FakeIp(namespaces=["other-ns"])
    fake.fail_on = "veth peer name p2"
    with pytest.raises(TestbedError) as info:
        netns.up(tb, runner=fake)
    msg = str(info.value)
    assert "ip link add eth0 netns genie-h2 type veth peer name p2 netns genie-sw0" in msg
    assert "RTNETLINK answers: File exists" in msg and "rolled back" in msg
    assert fake.namespaces == ["other-ns"]
    assert not any(ln.startswith("genie") for ln in fake.links)
    assert state.load_all() == []
    ran_after = fake.calls[[shlex.join(c) for c in fake.calls].index(msg.split("`")[1]) + 1 :]
    assert not any(c[:3] == ["ip", "-n", "genie-h3"] and "addr" in c for c in ran_after)


def test_interrupted_up_rolls_back() -> None:
    tb = load_testbed(EXAMPLES / "netns-star.toml")
    fake = FakeIp()

    def interrupt_at_tbf(argv: Sequence[str], stdin: str | None) -> netns.Result:
        if "tbf" in argv:
            raise KeyboardInterrupt
        return fake(argv, stdin)

    with pytest.raises(KeyboardInterrupt):
        netns.up(tb, runner=interrupt_at_tbf)
    assert fake.namespaces == [] and fake.links == ["lo", "eth0"]
    assert state.load_all() == []


def test_up_refuses_when_already_up() -> None:
    tb = load_testbed(EXAMPLES / "netns-star.toml")
    fake = FakeIp(namespaces=["genie-h1"])
    with pytest.raises(TestbedError, match=r"already up.*genie-h1"):
        netns.up(tb, runner=fake)
    assert fake.namespaces == ["genie-h1"]
    stale_link = FakeIp(links=["genie-c2"])  # left by a crash, its namespace gone
    with pytest.raises(TestbedError, match=r"already up.*genie-c2"):
        netns.up(tb, runner=stale_link)
    assert stale_link.namespaces == []


def _record(name: str, prefix: str, namespaces: list[str], links: list[str]) -> None:
    state.save(state.TestbedState(name, prefix, "", namespaces, links))


def test_clean_all_removes_recorded_testbeds_only_and_is_safe_twice() -> None:
    """Issue 31 item 7: a genie-named namespace no record claims (another user's, or not
    genie's at all) survives the sweep, and is named as left."""
    fake = FakeIp(
        namespaces=["genie-h0", "genie-pt-h1", "genie-userstuff", "blue", "geniex"],
        links=["genie-c0", "genie-ptc3", "genie-c7", "veth9"],
    )
    _record("a", "genie-", ["genie-h0"], ["genie-c0"])
    _record("b", "genie-pt-", ["genie-pt-h1"], ["genie-ptc3"])
    removed, left = netns.clean_all(runner=fake)
    assert sorted(fake.namespaces) == ["blue", "genie-userstuff", "geniex"]
    assert fake.links == ["lo", "eth0", "genie-c7", "veth9"]
    assert "genie-pt-h1" in removed and left == ["genie-userstuff"]
    assert state.load_all() == []
    assert netns.clean_all(runner=fake) == ([], ["genie-userstuff"])


def test_clean_with_a_prefix_keeps_other_testbeds_and_refuses_bare_genie() -> None:
    fake = FakeIp(
        namespaces=["genie-h0", "genie-pt-h0", "genie-pt-sw0", "genie-userstuff"],
        links=["genie-c0", "genie-ptc0"],
    )
    _record("other", "genie-", ["genie-pt-sw0"], [])  # a host named "pt-sw0" of another one
    netns.clean(runner=fake, prefix="genie-pt-")
    assert fake.namespaces == ["genie-h0", "genie-pt-sw0", "genie-userstuff"]
    assert fake.links == ["lo", "eth0", "genie-c0"]
    for bad in ("genie-", "blue-", "genie-pt"):
        with pytest.raises(TestbedError, match="netns_prefix"):
            netns.clean(runner=fake, prefix=bad)
    assert fake.namespaces == ["genie-h0", "genie-pt-sw0", "genie-userstuff"]


def test_clean_of_a_testbed_file_removes_its_names_only_even_without_a_record() -> None:
    tb = load_testbed(EXAMPLES / "netns-star.toml")
    plan = plan_up(tb)
    fake = FakeIp(namespaces=[*plan.namespaces, "genie-userstuff"], links=plan.root_links)
    removed = netns.clean_testbed(tb, runner=fake)
    assert fake.namespaces == ["genie-userstuff"] and fake.links == ["lo", "eth0"]
    assert sorted(removed) == sorted([*plan.namespaces, *plan.root_links])


def test_clean_cli_must_be_told_which_testbed(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["testbed", "clean"]) == 2
    assert "--all-genie" in capsys.readouterr().err


def test_stop_agents_kills_recorded_pid_but_never_a_reused_one() -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) for _ in range(2)
    ]
    try:
        good = state.AgentRecord(
            host="h0", netns="genie-h0", pid=procs[0].pid,
            create_time=psutil.Process(procs[0].pid).create_time(), listen="", log="",
        )  # fmt: skip
        stale = state.AgentRecord(
            host="h1", netns="genie-h1", pid=procs[1].pid,
            create_time=psutil.Process(procs[1].pid).create_time() - 100, listen="", log="",
        )  # fmt: skip
        assert netns.stop_agents([good, stale], grace=2.0) == 1
        assert procs[0].wait(timeout=5) is not None
        assert procs[1].poll() is None
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=5)


def test_cli_show_and_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["testbed", "show", str(EXAMPLES / "netns-leafspine.toml")]) == 0
    out = capsys.readouterr().out
    assert "genie-h3" in out and "spine0" in out and "198.19.0.14:7000" in out
    assert cli.main(["testbed", "plan", str(EXAMPLES / "netns-star.toml")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "ip netns add genie-h0" and len(out) == len(
        _lines(EXAMPLES / "netns-star.toml")
    )
    assert cli.main(["testbed", "show", "--toml", str(EXAMPLES / "netns-star.toml")]) == 0
    assert loads_testbed(capsys.readouterr().out) == load_testbed(EXAMPLES / "netns-star.toml")


def test_cli_reports_bad_files_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[testbed]\nname = "x"\nkind = "netns"\n[topology]\nshape = "star"\n')
    assert cli.main(["testbed", "up", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"genie: error: {bad}:4: topology.rate: is required"
    assert cli.main(["testbed", "up", str(EXAMPLES / "loopback.toml")]) == 2
    assert "only netns" in capsys.readouterr().err
