"""A controlled wire: the testbed's TCP stack set by genie, read back and recorded with each run.

Unit tests on loopback sockets and the pure plan; a live part (root) on a 2-host netns star:
the congestion control a run records is the one in force inside the namespaces, it lands in the
run store, and ``genie bench --tcp-cc reno,bbr`` puts the two side by side.
"""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

import genie
from genie.cli import main
from genie.errors import TestbedError, TransportError, UsageError
from genie.store import RunStore
from genie.testbed import dumps_testbed, loads_testbed
from genie.testbed.netns_plan import plan_up
from genie_agent.dataplane.tcp_state import (
    conditions,
    congestion,
    retransmits,
    set_congestion,
    sysctl,
)
from tests.netns_helpers import netns_testbed, unavailable

PREFIX = "genie-tc-"
STAR = """
[testbed]
name = "tc"
kind = "netns"
netns_prefix = "genie-tc-"

[topology]
shape = "star"
hosts = 2
rate = "200mbit"
"""


def _pair() -> tuple[socket.socket, socket.socket, socket.socket]:
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    a = socket.create_connection(ls.getsockname())
    b, _ = ls.accept()
    return ls, a, b


def test_the_tcp_table_is_read_written_and_checked() -> None:
    tb = loads_testbed(STAR)
    assert tb.tcp.congestion_control == "cubic,reno"  # explicit, never the host's own
    assert not tb.tcp.slow_start_after_idle and tb.tcp.ecn == "passive"
    assert tb.tcp.buffer_max is None  # the kernel's own autotuning limits
    text = STAR + '\n[tcp]\ncongestion_control = "bbr"\necn = "on"\nbuffer_max = "8MiB"\n'
    tcp = loads_testbed(text).tcp
    assert (tcp.congestion_control, tcp.ecn, tcp.buffer_max) == ("bbr", "on", 8 << 20)
    assert loads_testbed(dumps_testbed(loads_testbed(text))).tcp == tcp  # round trip
    bad_values = ('buffer_max = "1KiB"', 'buffer_max = "2GiB"', 'buffer_max = "lots"')
    for bad in ('congestion_control = "b b r"', 'ecn = "maybe"', "window = 3", *bad_values):
        with pytest.raises(TestbedError, match=r"tcp\."):
            loads_testbed(STAR + f"\n[tcp]\n{bad}\n")


def test_namespaces_get_the_stack_and_only_an_allowed_default() -> None:
    tb = loads_testbed(STAR)
    cmds = [" ".join(c.argv) for c in plan_up(tb, allowed_cc=frozenset({"reno"})).commands]
    assert any("net.ipv4.tcp_ecn=2" in c for c in cmds)
    assert any("net.ipv4.tcp_slow_start_after_idle=0" in c for c in cmds)
    # cubic is not allowed as a namespace default here: reno, the next preferred, is set
    assert sum("net.ipv4.tcp_congestion_control=reno" in c for c in cmds) == 2
    none = [" ".join(c.argv) for c in plan_up(tb).commands]
    assert not any("tcp_congestion_control" in c for c in none)
    assert not any("tcp_rmem" in c for c in none)  # no buffer_max: the kernel's limits stand
    small = loads_testbed(STAR + '\n[tcp]\nbuffer_max = "96KiB"\n')
    cmds = [" ".join(c.argv) for c in plan_up(small).commands]
    assert sum("net.ipv4.tcp_rmem=4096 98304 98304" in c for c in cmds) == 2
    assert sum("net.ipv4.tcp_wmem=4096 16384 98304" in c for c in cmds) == 2


def test_a_socket_takes_the_first_algorithm_it_may_and_says_so() -> None:
    ls, a, b = _pair()
    try:
        assert set_congestion(a, "no_such_cc,reno") == "reno"
        assert congestion(a) == "reno"
        with pytest.raises(TransportError, match=r"'no_such_cc' refused .*this host allows"):
            set_congestion(a, "no_such_cc")
        a.sendall(b"x" * 4096)
        b.recv(4096)
        cond = conditions([a, b], ["127.0.0.1"])
        assert "reno" in cond.congestion and cond.kernel and cond.mss
        assert cond.sysctl["tcp_congestion_control"] == sysctl("tcp_congestion_control")
        assert "lo" in cond.nics and cond.nics["lo"]["mtu"]
        if shutil.which("ip"):  # segmentation offload limits, as ip -d link reports them
            assert int(cond.nics["lo"]["gso_max_size"]) > 0
        assert retransmits([a, b]) >= 0
    finally:
        for s in (ls, a, b):
            s.close()


_WHY = unavailable(PREFIX)


@pytest.mark.skipif(_WHY is not None, reason=_WHY or "")
def test_the_recorded_congestion_control_is_the_one_in_force_in_the_namespaces(
    tmp_path: Path, capsys
) -> None:
    body = '[topology]\nshape = "star"\nhosts = 2\nrate = "200mbit"\n'
    body += '[tcp]\nbuffer_max = "2MiB"\n'
    with netns_testbed(tmp_path, "tc-star2", PREFIX, body) as path:
        store = tmp_path / "runs.sqlite"
        spec = genie.BenchSpec(
            testbed=str(path), sizes=(1 << 20,), iters=2, warmup=1, store=str(store)
        )
        res = genie.bench(spec.replace(congestion="reno"))
        assert sorted(res.conditions) == ["h0", "h1"]
        for c in res.conditions.values():
            assert c.congestion == ["reno"]  # read back from the data sockets
            assert c.sysctl["tcp_slow_start_after_idle"] == "0"  # the namespace's, as set
            assert c.sysctl["tcp_ecn"] == "2"
            assert c.sysctl["tcp_rmem"].split()[-1] == c.sysctl["tcp_wmem"].split()[-1] == "2097152"
            (nic,) = c.nics.values()
            assert nic["mtu"] == "1500" and nic["qdisc"].startswith("tbf rate 25000000 B/s")
            assert nic["gso_max_size"] == "16384"  # set by testbed up (a switch port's bursts)
        with RunStore(store) as st:
            meta = st.run(res.run_id or "").meta
        assert meta["conditions"]["h0"]["congestion"] == ["reno"]
        other = genie.bench(spec.replace(congestion="bbr"))
        cmp = genie.compare_runs(res.run_id or "", other.run_id or "", store=str(store))
        assert "congestion control of the data sockets: reno vs bbr" in cmp.conditions_differ()
        runs = (res.run_id or "", other.run_id or "")
        with pytest.raises(UsageError, match=r"different conditions .*data sockets: reno vs bbr"):
            genie.calibrate(genie.CalibrateSpec(runs=runs, store=str(store), save=False))
        assert main(["runs", "show", res.run_id or "", "--store", str(store)]) == 0
        assert "congestion control of the data sockets: reno" in capsys.readouterr().out
        argv = ["bench", "--testbed", str(path), "--sizes", "1MiB", "--iters", "2"]
        assert main([*argv, "--no-store", "--tcp-cc", "reno,bbr"]) == 0
        out = capsys.readouterr().out
        assert "reno" in out and "bbr" in out and "retransmits" in out and "in force" in out
        assert main([*argv, "--no-store", "--tcp-cc", "reno,bbr", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)["tcp_cc"]
        assert doc["bbr"]["conditions"]["h1"]["congestion"] == ["bbr"]


def test_conditions_flatten_and_differ_in_words() -> None:
    from genie.wire.conditions import conditions_of, differences, flatten

    a = {"h0": {"congestion": ["reno"], "kernel": "6.1", "nics": {"eth0": {"mtu": "1500"}}}}
    b = {"h0": {"congestion": ["bbr"], "kernel": "6.1", "nics": {"eth0": {"mtu": "9000"}}}}
    b["h1"] = {"congestion": ["reno"], "kernel": "6.1"}
    cc, mtu = "congestion control of the data sockets", "MTU of the data NIC (bytes)"
    assert flatten(a) == {cc: "reno", "kernel": "6.1", mtu: "1500"}
    assert flatten(b)[cc] == "h0=bbr, h1=reno"  # agents that disagree, each named
    assert differences(a, b) == [f"{mtu}: 1500 vs 9000", f"{cc}: reno vs h0=bbr, h1=reno"]
    assert differences(a, a) == [] and conditions_of({"meta": 1}) == {}


def test_a_queue_depth_is_bytes_or_time_of_the_rate() -> None:
    text = STAR.replace('rate = "200mbit"', 'rate = "200mbit"\nqueue_limit = "2ms"')
    assert {lk.queue_limit for lk in loads_testbed(text).links} == {50_000}  # 2 ms of 25 MB/s
    text = STAR.replace('rate = "200mbit"', 'rate = "200mbit"\nqueue_limit = "64KiB"')
    assert {lk.queue_limit for lk in loads_testbed(text).links} == {65_536}
    with pytest.raises(TestbedError, match="queue_limit"):
        loads_testbed(STAR.replace('rate = "200mbit"', 'rate = "200mbit"\nqueue_limit = "0ms"'))


@pytest.mark.skipif(_WHY is not None, reason=_WHY or "")
def test_a_shallow_queue_shows_incast_and_the_run_records_it(tmp_path: Path) -> None:
    """Four hosts all-to-all at 200 Mbit/s: three senders converge on every receiver's port.
    With a 1 ms queue TCP loses segments and retransmits (slower than the model, which assumes
    lossless links); with the default 16 ms queue it does not."""
    out = {}
    for q in ("1ms", "16ms"):
        body = f'[topology]\nshape = "star"\nhosts = 4\nrate = "200mbit"\nqueue_limit = "{q}"\n'
        (tmp_path / q).mkdir()
        with netns_testbed(tmp_path / q, f"tc-q{q}", PREFIX, body) as path:
            spec = genie.BenchSpec(
                testbed=str(path),
                collective="all_to_all",
                sizes=(4 << 20,),
                iters=3,
                warmup=1,
                store=None,
                progress=False,
            )
            res = genie.bench(spec)
            (row,) = res.rows
            out[q] = (row.stats.p50 / (row.modeled_s or 1), res.retransmits)
    print(f"\nmeasured/model and retransmits by queue depth: {out}")
    assert out["1ms"][1] > 50 and out["1ms"][0] > 1.3  # drops, and the time they cost
    # a loaded machine adds some spurious retransmits (timeouts while a sender waits for CPU)
    # to either queue: the deep queue's still stay well under the shallow queue's drops
    assert out["16ms"][1] < out["1ms"][1] / 2 and out["16ms"][0] < 1.15
