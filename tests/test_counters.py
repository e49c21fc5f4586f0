"""NIC and stack counters beside every Go: read by the agent from a sysfs tree, carried in the
Result (bounded), stored with the run, shown per size or iteration by ``genie runs show``, the
report and ``genie runs compare`` (issue 34, part 2).

The live test runs loopback agents pointed at a fake sysfs tree (``GENIE_COUNTERS_SYSFS``) and a
fake ``ethtool`` (``GENIE_ETHTOOL``): a test thread increments the device's counter files while
the run goes, and every ``ethtool -S`` call adds a fixed amount to the pause counters, so each
Go's pause delta is exact.
"""

from __future__ import annotations

import json
import os
import queue
import re
import stat
import threading
import time
from pathlib import Path

import msgspec
import pytest

from genie.cli import main
from genie.collectives.program import ProgramSpec
from genie.controller.local import LocalCluster
from genie.errors import ProtocolError, StoreError
from genie.report.counters import compare_counters, group_counters, group_lines
from genie.store import RunStore
from genie.units import format_bytes
from genie.wire.counters import (
    MAX_COUNTERS,
    MAX_SAMPLES,
    MAX_SOURCES,
    CounterSample,
    CounterSet,
    headline,
    summary,
)
from genie.wire.messages import Go, Prepare, Prepared, Result, decode, encode
from genie_agent.counters import CounterReader, Roots, deltas, read_tcp, safe_name
from genie_agent.counting import CountingDataPlane
from genie_agent.state import Event

DEV = "mlx5_0"
HW = ("np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets", "out_of_sequence")
HW2 = ("packet_seq_err", "local_ack_timeout_err", "rnr_nak_retry_err", "vendor_magic_ctr")
PORT = ("port_xmit_wait", "port_rcv_errors", "port_xmit_data")
PAUSE_US_PER_CALL = 6000  # tx_prio3_pause_duration grows by this on every ethtool call


def _write(path: Path, value: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{value}\n")
    os.replace(tmp, path)


def fake_sysfs(root: Path, ip: str = "127.0.0.1", netdev: str = "lo") -> Path:
    """A ConnectX-like port 1 of ``DEV`` whose RoCE v2 GID 3 carries ``ip``; all counters 0."""
    port = root / "class" / "infiniband" / DEV / "ports" / "1"
    for sub in ("counters", "hw_counters", "gids", "gid_attrs/ndevs", "gid_attrs/types"):
        (port / sub).mkdir(parents=True, exist_ok=True)
    (port / "gids" / "0").write_text("fe80:0000:0000:0000:0000:0000:0000:0001\n")
    a, b, c, d = (int(x) for x in ip.split("."))
    (port / "gids" / "3").write_text(
        f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}\n"
    )
    (port / "gid_attrs" / "types" / "3").write_text("RoCE v2\n")
    (port / "gid_attrs" / "ndevs" / "3").write_text(f"{netdev}\n")
    for n in HW + HW2:
        _write(port / "hw_counters" / n, 0)
    for n in PORT:
        _write(port / "counters" / n, 0)
    return port


def fake_ethtool(d: Path) -> Path:
    """An ``ethtool`` whose every ``-S IF`` call adds PAUSE_US_PER_CALL us of tx pause on
    priority 3 and one pause frame (the calls of parallel agents take turns: flock)."""
    state = d / "ethtool-calls"
    state.write_text("0\n")
    script = d / "ethtool"
    script.write_text(
        f"""#!/bin/sh
[ "$1" = "-S" ] || exit 1
exec 9>>"{d}/ethtool.lock"
flock 9
n=$(( $(cat "{state}") + 1 ))
echo $n > "{state}"
echo "NIC statistics:"
echo "     rx_bytes: 123456"
echo "     rx_prio3_pause: $n"
echo "     tx_prio3_pause: $n"
echo "     tx_prio3_pause_duration: $(( n * {PAUSE_US_PER_CALL} ))"
echo "     rx_pause_ctrl_phy: 0"
"""
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


# ---- wire ---------------------------------------------------------------------------------
def _result(counters) -> bytes:
    doc = {"t": "result", "program": 0, "warmup": 0, "ranks": [], "counters": counters}
    return msgspec.msgpack.encode(doc)


def test_a_result_carries_counter_sets_and_a_hostile_peers_are_refused() -> None:
    r = Result(program=0, warmup=0, ranks=[], counters=[CounterSet(source="tcp", deltas={})])
    assert decode(encode(r)).counters == r.counters
    ok = decode(_result([["rdma:mlx5_0/1", {"np_cnp_sent": 5, "x.y-z": 0}]]))
    assert ok.counters[0].deltas == {"np_cnp_sent": 5, "x.y-z": 0}
    bad = [
        [["rdma", {"np_cnp_sent": -1}]],  # negative
        [["rdma", {"np_cnp_sent": 1 << 63}]],  # beyond SQLite's INTEGER
        [["rdma", {"np_cnp_sent": 1.5}]],  # not an int
        [["rdma", {"a\x1b[2J": 1}]],  # a terminal escape in a name
        [["rdma", {"n" * 65: 1}]],  # too long a name
        [["\x07bell", {}]],
        [["rdma", {f"c{i}": 1 for i in range(MAX_COUNTERS + 1)}]],  # too many names
        [["s", {}]] * (MAX_SOURCES + 1),  # too many sources
    ]
    for counters in bad:
        with pytest.raises(ProtocolError):
            decode(_result(counters))


def test_headline_and_summary_say_what_moved() -> None:
    d = {
        "np_cnp_sent": 1240,
        "rp_cnp_handled": 0,
        "tx_prio3_pause_duration": 18000,
        "rx_prio3_pause": 7,
        "port_rcv_errors": 2,
        "vendor_magic_ctr": 9,
    }
    h = headline(d)
    assert h["CNPs sent"] == 1240 and h["pause us"] == 18000 and h["pause frames"] == 7
    assert h["errors"] == 2 and h["CNPs handled"] == 0
    said = summary(d)
    assert said == "1,240 CNPs sent, 7 pause frames, 18 ms of pause and 2 errors"
    assert summary({"TcpRetransSegs": 312}) == "312 retransmits"
    assert summary({"TcpRetransSegs": 0}) == ""


# ---- the agent's reader -------------------------------------------------------------------
def test_reader_finds_the_port_of_the_data_address_and_keeps_unknown_names(tmp_path) -> None:
    port = fake_sysfs(tmp_path / "sys", ip="10.0.0.7", netdev="eth9")
    (port / "hw_counters" / "odd name!").write_text("3\n")  # a driver's odd name: kept, safe
    (port / "hw_counters" / "garbage").write_text("not a number\n")  # left out
    (port / "hw_counters" / "huge").write_text("9" * 80 + "\n")  # over the bound: left out
    roots = Roots(sysfs=str(tmp_path / "sys"), proc=str(tmp_path / "proc"), ethtool="/nonexistent")
    other = CounterReader(roots, addrs=("10.0.0.8",))
    other.configure("rdma")
    assert other.ports == []  # no GID carries its address, and the job names no device
    other.configure("rdma", named=[DEV])
    assert [p.source for p in other.ports] == ["rdma:mlx5_0/1"]
    r = CounterReader(roots, addrs=("10.0.0.7",))
    r.configure("rdma")
    (p,) = r.ports
    assert (p.device, p.port, p.netdevs) == (DEV, 1, ("eth9",))
    before = r.snapshot()
    assert set(before) == {"rdma:mlx5_0/1"}  # no ethtool, no /proc here; an RDMA job: no tcp
    assert before["rdma:mlx5_0/1"]["odd_name_"] == 3
    assert "garbage" not in before["rdma:mlx5_0/1"] and "huge" not in before["rdma:mlx5_0/1"]
    _write(port / "hw_counters" / "np_cnp_sent", 1240)
    _write(port / "hw_counters" / "vendor_magic_ctr", 5)
    _write(port / "hw_counters" / "odd name!", 1)  # went down (reset): counts from zero
    (port / "hw_counters" / "new_one").write_text("4\n")  # appeared: from zero
    (d,) = deltas(before, r.snapshot())
    assert d.deltas["np_cnp_sent"] == 1240 and d.deltas["vendor_magic_ctr"] == 5
    assert d.deltas["odd_name_"] == 1 and d.deltas["new_one"] == 4
    assert d.deltas["port_xmit_wait"] == 0  # a headline counter: kept at 0
    assert "port_xmit_data" not in d.deltas  # did not move, not a headline: left out
    assert safe_name("a b\x1b" + "x" * 100) == "a_b_" + "x" * 60


def test_tcp_counters_come_from_proc_with_nstat_names(tmp_path) -> None:
    net = tmp_path / "proc" / "net"
    net.mkdir(parents=True)
    (net / "snmp").write_text(
        "Ip: Forwarding DefaultTTL\nIp: 1 64\n"
        "Tcp: RtoAlgorithm ActiveOpens RetransSegs\nTcp: 1 10 312\n"
        "Udp: InDatagrams\nUdp: 5\n"
    )
    (net / "netstat").write_text(
        "TcpExt: TCPTimeouts TCPLostRetransmit TCPSynRetrans TCPDeliveredCE\n"
        "TcpExt: 4 2 1 7\nIpExt: InCEPkts InECT0Pkts\nIpExt: 9 11\n"
    )
    got = read_tcp(Roots(proc=str(tmp_path / "proc")))
    assert got["TcpRetransSegs"] == 312 and got["TcpExtTCPTimeouts"] == 4
    assert got["TcpExtTCPDeliveredCE"] == 7 and got["IpExtInCEPkts"] == 9
    assert not any(k.startswith(("Ip", "Udp")) and not k.startswith("IpExt") for k in got)


class _SlowPlane:
    """A data plane whose Go takes ``run_s`` and reports an empty Result."""

    def __init__(self, run_s: float) -> None:
        self.run_s = run_s

    def endpoint(self) -> tuple[str, int]:
        return ("127.0.0.1", 1)

    def prepare(self, plan, prep, post) -> None:
        post(Event("prepared", prep.job, prep.epoch, Prepared(ranks=[], connections=0, setup_s=0)))

    def go(self, go, start_local_ns, post) -> None:
        def run() -> None:
            time.sleep(self.run_s)
            post(Event("result", go.job, go.epoch, Result(program=0, warmup=0, ranks=[])))

        threading.Thread(target=run, daemon=True).start()

    def release(self) -> None:
        pass


def test_a_long_go_is_sampled_as_it_runs_and_its_samples_stay_bounded(tmp_path) -> None:
    port = fake_sysfs(tmp_path / "sys", ip="10.0.0.7", netdev="eth9")
    roots = Roots(sysfs=str(tmp_path / "sys"), proc=str(tmp_path / "proc"), ethtool="/nonexistent")
    reader = CounterReader(roots, addrs=("10.0.0.7",))
    got: queue.Queue[Event] = queue.Queue()
    stop, counts = threading.Event(), {"n": 0}
    bumper = threading.Thread(target=_bump, args=(port, stop, counts), daemon=True)
    bumper.start()
    try:
        for period, epoch in ((0.05, 1), (0.002, 2)):
            plane = CountingDataPlane(_SlowPlane(0.4), "h0", reader, log=print, period_s=period)
            plane.prepare(
                None,
                Prepare(job="j", epoch=epoch, programs=[], placement=[], endpoints={}),
                got.put,
            )
            assert got.get(timeout=10).kind == "prepared"
            plane.go(Go(job="j", epoch=epoch), time.monotonic_ns(), got.put)
            ev = got.get(timeout=10)
            assert ev.kind == "result" and isinstance(ev.msg, Result)
            (cs,) = ev.msg.counters
            assert cs.source == "rdma:mlx5_0/1" and cs.deltas["np_cnp_sent"] > 0
            ts = [x.t_ms for x in cs.samples]
            cnps = [x.deltas.get("np_cnp_sent", 0) for x in cs.samples]
            assert 3 <= len(ts) <= MAX_SAMPLES and ts == sorted(ts) and len(set(ts)) == len(ts)
            assert cnps == sorted(cnps) and 0 < cnps[-1] <= cs.deltas["np_cnp_sent"]
            assert ts[-1] >= 200  # thinned or not, the samples span the Go
            assert decode(encode(ev.msg)).counters == ev.msg.counters  # fits the wire's bounds
    finally:
        stop.set()
        bumper.join(timeout=10)


# ---- the store ----------------------------------------------------------------------------
def _spec(size: int) -> ProgramSpec:
    return ProgramSpec(collective="all_reduce", algorithm="ring", n_ranks=2, size=size)


def test_store_keeps_counters_per_go_and_refuses_a_corrupt_row(tmp_path) -> None:
    with RunStore(tmp_path / "runs.sqlite") as st:
        rid = st.start_run("genie bench")
        sets = {"h1": [CounterSet(source="rdma:mlx5_0/1", deltas={"np_cnp_sent": 3})]}
        st.add_counters(rid, 0, _spec(4096), 4, sets)
        st.add_counters(rid, 1, _spec(4096), 4, sets)
        st.add_counters(rid, 2, None, 1, {"h0": [CounterSet(source="tcp", deltas={"x": 1})]})
        rows = st.counters(rid)
        assert [(r["go"], r["agent"], r["size"]) for r in rows] == [
            (0, "h1", 4096),
            (1, "h1", 4096),
            (2, "h0", None),
        ]
        groups = group_counters(rows)
        assert [g.label for g in groups] == ["all_reduce/ring n=2 4.0 KiB", "iteration 0"]
        assert groups[0].goes == 2 and groups[0].iterations == 8
        assert groups[0].agents == {"h1": {"np_cnp_sent": 6}}
        assert group_lines(groups) == [
            "all_reduce/ring n=2 4.0 KiB (8 iterations): 6 CNPs sent on h1"
        ]
        grew = [CounterSample(t_ms=1000, deltas={"np_cnp_sent": 1})]
        long = CounterSet(source="rdma:mlx5_0/1", deltas={"np_cnp_sent": 2}, samples=grew)
        st.add_counters(rid, 3, _spec(1 << 20), 1, {"h1": [long]})
        assert st.counters(rid)[-1]["samples"] == [[1000, {"np_cnp_sent": 1}]]
        (g,) = [g for g in group_counters(st.counters(rid)) if g.key and g.key[3] == 1 << 20]
        assert g.to_dict()["agents"]["h1"]["samples"] == [
            {"go": 3, "source": "rdma:mlx5_0/1", "samples": [[1000, {"np_cnp_sent": 1}]]}
        ]
        st.db.execute("UPDATE counters SET samples=? WHERE go=3", ("[[-1, {}]]",))
        with pytest.raises(StoreError, match="column samples is corrupt"):
            st.counters(rid)
        st.db.execute("UPDATE counters SET samples=NULL WHERE go=3")
        st.db.execute("UPDATE counters SET deltas=? WHERE go=1", ('{"np_cnp_sent": -5}',))
        with pytest.raises(StoreError, match="column deltas is corrupt"):
            st.counters(rid)


def test_compare_puts_each_counter_per_iteration_side_by_side(tmp_path) -> None:
    with RunStore(tmp_path / "runs.sqlite") as st:
        a, b = st.start_run("a"), st.start_run("b")
        st.add_counters(
            a, 0, _spec(4096), 10, {"h0": [CounterSet(source="t", deltas={"TcpRetransSegs": 20})]}
        )
        st.add_counters(
            b, 0, _spec(4096), 5, {"h0": [CounterSet(source="t", deltas={"TcpRetransSegs": 50})]}
        )
        rows = compare_counters(group_counters(st.counters(a)), group_counters(st.counters(b)))
    assert rows == [
        {
            "what": "all_reduce/ring n=2 4.0 KiB",
            "counter": "retransmits",
            "a_per_iteration": 2.0,
            "b_per_iteration": 10.0,
        }
    ]


# ---- live: loopback agents on a fake sysfs tree -------------------------------------------
@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    """Two loopback agents reading a fake sysfs tree and a fake ethtool; a thread that adds 1
    to every device counter each millisecond while it runs (``bump``: (event, thread))."""
    d = tmp_path_factory.mktemp("counted")
    port = fake_sysfs(d / "sys")
    script = fake_ethtool(d)
    mp = pytest.MonkeyPatch()
    mp.setenv("GENIE_COUNTERS_SYSFS", str(d / "sys"))
    mp.setenv("GENIE_ETHTOOL", str(script))
    try:
        with LocalCluster.start(2, d / "cluster") as cl:
            mp.undo()
            yield cl, port, d
    finally:
        mp.undo()


def _bump(port: Path, stop: threading.Event, counts: dict[str, int]) -> None:
    files = [port / "hw_counters" / n for n in HW + HW2] + [port / "counters" / "port_xmit_wait"]
    while not stop.wait(0.001):
        counts["n"] += 1
        for f in files:
            _write(f, counts["n"])


def test_runs_show_and_the_report_give_each_sizes_counters(counted, tmp_path, capsys) -> None:
    cl, port, d = counted
    store = tmp_path / "runs.sqlite"
    calls_before = int((d / "ethtool-calls").read_text())
    stop, counts = threading.Event(), {"n": 0}
    bumper = threading.Thread(target=_bump, args=(port, stop, counts), daemon=True)
    bumper.start()
    try:
        bench = ["bench", "--testbed", str(cl.testbed_path), "--store", str(store)]
        assert main([*bench, "--sizes", "64KiB,1MiB", "--iters", "20", "--warmup", "2"]) == 0
    finally:
        stop.set()
        bumper.join(timeout=10)
    capsys.readouterr()
    calls = int((d / "ethtool-calls").read_text()) - calls_before
    with RunStore(store) as st:
        (run,) = st.list_runs()
        rows = st.counters(run.run_id)
        iterations = {
            f"{format_bytes(size)}": sum(
                1 for x in st.instances(run.run_id, True) if x["size"] == size
            )
            for size in (65536, 1 << 20)
        }
    # per size, per agent: the device's port and its netdev's pause counters
    assert {(r["size"], r["agent"], r["source"]) for r in rows} == {
        (s, a, src)
        for s in (65536, 1 << 20)
        for a in ("h0", "h1")
        for src in ("rdma:mlx5_0/1", "ethtool:lo", "tcp")
    }
    # each Go's pause delta is what the ethtool calls between its two snapshots added (one call
    # per snapshot per agent: before each Go and after it); bench runs a size in batches of Goes
    pauses = [r["deltas"]["tx_prio3_pause_duration"] for r in rows if r["source"] == "ethtool:lo"]
    assert len(pauses) >= 4 and all(p > 0 and p % PAUSE_US_PER_CALL == 0 for p in pauses)
    assert max(pauses) <= calls * PAUSE_US_PER_CALL
    # the device counters moved while the run went and were never counted twice
    cnps = [r["deltas"]["np_cnp_sent"] for r in rows if r["source"] == "rdma:mlx5_0/1"]
    assert sum(cnps) > 0
    assert (
        max(
            sum(
                r["deltas"]["np_cnp_sent"]
                for r in rows
                if r["agent"] == a and r["source"].startswith("rdma")
            )
            for a in ("h0", "h1")
        )
        <= counts["n"]
    )
    # a name genie does not know is kept, and moved as the others (written one after another:
    # a snapshot may fall between two files)
    magic = [r["deltas"].get("vendor_magic_ctr", 0) for r in rows if r["source"].startswith("rdma")]
    assert sum(magic) > 0 and all(abs(m - c) <= 1 for m, c in zip(magic, cnps, strict=True))
    assert all(r["deltas"]["TcpRetransSegs"] >= 0 for r in rows if r["source"] == "tcp")

    assert main(["runs", "show", run.run_id, "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "counters (NIC and stack, deltas per size or iteration; read rdma:mlx5_0/1, " in out
    lines = [ln.strip() for ln in out.splitlines()]
    for size in ("64.0 KiB", "1.0 MiB"):
        mine = [ln for ln in lines if ln.startswith(f"all_reduce/ring n=2 {size} (")]
        for line, agent in zip(mine, ("h0", "h1"), strict=True):  # a line per agent
            its = int(line.split("(")[1].split()[0])
            assert its == iterations[size]  # every iteration of its Goes, warm-up included
            assert re.search(rf"\d ms of pause.* on {agent}$", line), line
    assert any("CNPs sent" in ln for ln in lines)
    assert main(["runs", "show", run.run_id, "--store", str(store), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    groups = doc["counters"]
    assert [g["size"] for g in groups] == [65536, 1 << 20]
    h0 = groups[0]["agents"]["h0"]
    assert h0["sources"] == ["rdma:mlx5_0/1", "ethtool:lo", "tcp"]
    assert h0["headline"]["pause us"] == h0["deltas"]["tx_prio3_pause_duration"] > 0

    pytest.importorskip("matplotlib")
    rep = tmp_path / "rep"
    assert main(["report", run.run_id, "--store", str(store), "--out", str(rep)]) == 0
    html = (rep / "report.html").read_text()
    assert "NIC and stack counters (deltas per size or iteration, per agent)" in html
    assert "all_reduce/ring n=2 1.0 MiB" in html and "pause us" in html and "CNPs sent" in html

    # the same sizes again: compare puts the counters per iteration side by side
    assert (
        main(
            [
                "bench",
                "--testbed",
                str(cl.testbed_path),
                "--store",
                str(store),
                "--sizes",
                "64KiB",
                "--iters",
                "5",
                "--warmup",
                "0",
            ]
        )
        == 0
    )
    capsys.readouterr()
    with RunStore(store) as st:
        second = st.list_runs()[0].run_id
    assert main(["runs", "compare", run.run_id, second, "--store", str(store), "--json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    pause = [r for r in cmp["counters"] if r["counter"] == "pause us"]
    assert [r["what"] for r in pause] == ["all_reduce/ring n=2 64.0 KiB"]
    assert pause[0]["a_per_iteration"] > 0 and pause[0]["b_per_iteration"] > 0
    assert main(["runs", "compare", run.run_id, second, "--store", str(store)]) == 0
    assert "NIC and stack counters per iteration" in capsys.readouterr().out


def _step():
    """Two ranks: compute, an all-reduce, compute, an all-reduce (a small training step)."""
    from genie.workload.generators.builder import RankBuilder, finish
    from genie.workload.model import CollectiveType

    builders = []
    for r in range(2):
        b = RankBuilder(r)
        c0 = b.compute("fwd", 2e-3)
        a = b.collective("ar0", CollectiveType.ALL_REDUCE, 1 << 16, [c0])
        c1 = b.compute("bwd", 2e-3, [a])
        b.collective("ar1", CollectiveType.ALL_REDUCE, 1 << 16, [c1])
        builders.append(b)
    return finish("step", builders)


def test_emulate_shows_each_iterations_counters(counted, tmp_path, capsys) -> None:
    import genie
    from genie.workload import save_workload

    cl, _port, _d = counted
    prefix = tmp_path / "step"
    save_workload(_step(), prefix)
    store = tmp_path / "runs.sqlite"
    spec = genie.EmulateSpec(
        testbed=str(cl.testbed_path),
        workload=str(prefix),
        store=str(store),
        iterations=3,
        warmup=1,
    )
    run_id = genie.emulate(spec).doc()["run_id"]
    with RunStore(store) as st:
        rows = st.counters(run_id)
    # one Go per iteration of the trace (warm-up first), each with its agents' counters
    assert sorted({r["go"] for r in rows}) == [0, 1, 2, 3]
    assert all(r["collective"] is None and r["iterations"] == 1 for r in rows)
    assert main(["runs", "show", run_id, "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "deltas per size or iteration (of the trace, from 0, warm-up first); read " in out
    lines = [ln.strip() for ln in out.splitlines()]
    for it in range(4):  # the fake ethtool adds pause at every snapshot: every iteration shows
        mine = [ln for ln in lines if ln.startswith(f"iteration {it}: ")]
        assert [ln.rsplit(" on ", 1)[1] for ln in mine] == ["h0", "h1"]
        assert all(re.search(r"\d ms of pause", ln) for ln in mine), mine


def test_the_agent_option_points_the_counters_at_a_sysfs_root(monkeypatch, tmp_path) -> None:
    import argparse

    from genie_agent import cli, daemon

    seen = {}
    monkeypatch.setattr(daemon, "run_agent", lambda *a, **kw: seen.update(kw) or 0)
    p = argparse.ArgumentParser()
    cli.add_agent_arguments(p)
    args = p.parse_args(
        ["--listen", "127.0.0.1:9", "--id", "h0", "--counters-sysfs", str(tmp_path)]
    )
    assert cli.run_from_args(args) == 0 and seen["counters_sysfs"] == str(tmp_path)
    monkeypatch.setenv("GENIE_COUNTERS_SYSFS", "/elsewhere")
    assert Roots.from_env(str(tmp_path)).sysfs == str(tmp_path)  # the option wins
    assert Roots.from_env(None).sysfs == "/elsewhere"
