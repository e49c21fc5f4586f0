"""NCCL-like queue pairs on the RDMA plane, over the in-memory fabric of test_rdma_exec.

A rank pair has ``channels x qps`` queue pairs: one connection per process-group channel (as
the TCP plane has one connection set per channel), ``qps`` queue pairs per connection with a
step split across them (NCCL_IB_QPS_PER_CONNECTION); each rank's queue pairs live on its own
NIC's device on a multi-NIC host.
"""

from __future__ import annotations

import time
from collections import deque

import pytest
from test_rdma_exec import Fabric, connect_rdma, run_execs, run_rdma, run_tcp, spec
from test_rdma_plane import LOOP_GID, FabricDevice, FabricPlane, _job

from genie.collectives.program import ProgramSpec
from genie.wire.messages import DataOptions, Go, OpItem, RankOps, RdmaOptions
from genie.wire.tokens import new_token
from genie_agent.dataplane.rdma_conn import Device, Gid, Port, gid_hex
from genie_agent.dataplane.rdma_exec import qp_layout, step_lanes

MS = 1_000_000


class TimedFabric(Fabric):
    """Each queue pair serves its requests in order at ``bandwidth`` bytes/s (queue pairs in
    parallel, as a NIC schedules them): a request arrives once the ones before it on its
    queue pair have, plus its own bytes' time."""

    def __init__(self, bandwidth: float) -> None:
        super().__init__()
        self.bw = bandwidth
        self.due: dict[tuple, deque] = {}
        self.free: dict[tuple, float] = {}

    def posted_on(self, key, n: int) -> None:
        t = max(time.monotonic(), self.free.get(key, 0.0)) + n / self.bw
        self.free[key] = t
        self.due.setdefault(key, deque()).append(t)

    def budget(self, key) -> int:
        now = time.monotonic()
        return sum(1 for t in self.due.get(key, ()) if t <= now)

    def taken(self, key) -> None:
        self.due[key].popleft()


def test_qp_layout_and_a_step_cut_across_a_connections_queue_pairs() -> None:
    assert qp_layout(2, 4) == 8 and qp_layout(1, 1) == 1
    # 300 kB over 3 queue pairs of channel 1 (lanes 3..5): one part each, cut in 64 KiB requests
    parts = step_lanes(300_000, 0, 3, 3, 65536)
    assert [lane for lane, _ in parts] == [3, 4, 5]
    assert [sum(n for _, n in segs) for _, segs in parts] == [100_000] * 3
    assert parts[1][1][0] == (100_000, 65536)  # offsets from the step's start
    # a message too small to split goes whole, on the lane its sequence number picks
    assert step_lanes(1000, 4, 3, 3, 65536) == [(4, [(0, 1000)])]
    assert step_lanes(0, 0, 0, 2, 4096) == [(0, [(0, 0)])]


def test_qps_per_connection_split_a_step_and_keep_the_results() -> None:
    fab = Fabric(seed=7)
    size = 3 * 100_000
    res, errors, execs = run_rdma([spec("flow", "oneway", 2, size)], 2,
                                  RdmaOptions(qps=3, segment=8192), iters=1, warmup=0,
                                  fabric=fab)  # fmt: skip
    assert not errors, errors
    assert {k: v for k, v in fab.link_bytes.items()} == {(0, (1, k)): 100_000 for k in range(3)}
    assert res[1].bytes_received == size
    assert sorted(execs[0].links) == [(1, 0), (1, 1), (1, 2)]
    # a chunked ring over 2 queue pairs per connection, credits and all, computes what TCP does
    s = spec("selftest", "ring", 3, 3 * 400_000 + 6, chunks=2)
    res, errors, _ = run_rdma([s], 3, RdmaOptions(qps=2, window=2, segment=16384), iters=3)
    assert not errors, errors
    tcp = run_tcp([s], 3)
    assert {r: x.buffer_crc for r, x in res.items()} == {r: x.buffer_crc for r, x in tcp.items()}


def _two_groups(channels: int, program_channels: list[int]):
    """dp's 8 MiB flow from the start, tp's 128 KiB flow 20 ms later, at 25 MB/s a queue pair:
    the op durations (s) of tp and dp on the receiving rank."""
    fab = TimedFabric(25e6)
    specs = [spec("flow", "oneway", 2, 8 << 20), spec("flow", "oneway", 2, 128 << 10)]
    execs, abort = connect_rdma(specs, 2, RdmaOptions(), fab, channels, program_channels)
    ops = {r: [OpItem(program=0), OpItem(program=1, gap_ns=20 * MS)] for r in range(2)}
    res, errors = run_execs(execs, abort, Go(job="j", epoch=1, timeout_s=10), ops)
    assert not errors, errors
    assert res[1].bytes_received == (8 << 20) + (128 << 10)
    r = res[1]
    return (r.end[1] - r.start[1]) / 1e9, (r.end[0] - r.start[0]) / 1e9


def test_a_small_collective_of_another_group_does_not_queue_behind_a_big_one() -> None:
    # the big one needs ~335 ms on its queue pair; on its group's own queue pairs the small one
    # needs ~5 ms, sharing the big one's it waits out the rest (~315 ms)
    small, big = _two_groups(2, [0, 1])
    print(f"own channel: tp {small * 1e3:.1f} ms under dp {big * 1e3:.1f} ms")
    assert small < 0.15
    small, big = _two_groups(1, [0, 0])
    print(f"one channel: tp {small * 1e3:.1f} ms under dp {big * 1e3:.1f} ms")
    assert small > 0.25  # the same job on one connection: queued behind dp's requests


GID2 = "0000:0000:0000:0000:0000:ffff:7f00:0002"  # RoCE v2 GID of 127.0.0.2


class TwoNicDevice(FabricDevice):
    def __init__(self, name: str) -> None:
        self.name = name
        self.gid = gid_hex(LOOP_GID if name == "fab0" else GID2)


class TwoNicPlane(FabricPlane):
    """A host with two RoCE NICs: fab0 carries 127.0.0.1, fab1 127.0.0.2."""

    def __init__(self, fab) -> None:
        super(FabricPlane, self).__init__(["127.0.0.1", "127.0.0.2"])
        self.fab = fab
        self.chosen = None
        self.made = []
        self.opened: list[str] = []
        self.rank_dev: dict[int, str] = {}

    def find_devices(self):
        def port(ip_gid: str) -> Port:
            return Port(1, "ACTIVE", "Ethernet", 0, (Gid(1, ip_gid, "RoCE v2", "x"),))

        return [Device("fab0", (port(LOOP_GID),)), Device("fab1", (port(GID2),))]

    def open_device(self, choice):
        self.opened.append(choice.device)
        return TwoNicDevice(choice.device)

    def rank_verbs(self, dev, ro, rank, links, depth):
        self.rank_dev[rank] = dev.name
        return super().rank_verbs(dev, ro, rank, links, depth)


@pytest.mark.parametrize("rank_devices", [[], ["fab1", "", "", "fab0"]])
def test_each_rank_is_bound_to_its_nics_device(rank_devices: list[str]) -> None:
    fab = Fabric(seed=11)
    planes = [TwoNicPlane(fab), TwoNicPlane(fab)]
    try:
        s = ProgramSpec(collective="selftest", algorithm="ring", n_ranks=4, size=4 * 20_000)
        placement = ["a0", "a0", "a1", "a1"]
        addrs = ["127.0.0.1", "127.0.0.2", "127.0.0.1", "127.0.0.2"]  # rank i on NIC i % 2
        ro = RdmaOptions(qps=2, segment=8192, rank_devices=rank_devices)
        opts = DataOptions(token=new_token(), transport="rdma", rank_addrs=addrs, streams=2,
                           channels=2, program_channels=[1], rdma=ro)  # fmt: skip
        prepared, ev = _job(planes, [s], placement, opts, 1)
        assert all(e.kind == "prepared" for e in prepared), prepared
        want = {0: "fab0", 1: "fab1", 2: "fab0", 3: "fab1"}
        for r, d in enumerate(rank_devices):
            want[r] = d or want[r]
        got = {**planes[0].rank_dev, **planes[1].rank_dev}
        assert got == want
        assert all(sorted(dp.opened) == sorted(set(dp.opened)) for dp in planes)  # once each
        for dp in planes:  # 2 channels x 2 queue pairs to the ring neighbour on the other
            # host (the one on the same host is the intra-host model: no queue pair)
            assert all(len(vr.links) == 2 * 2 for vr in dp.made)
        go = Go(job="j1", epoch=1, iters=2, warmup=0, timeout_s=5)
        for dp in planes:
            dp.go(go, time.monotonic_ns(), ev.put)
        out = [ev.get(timeout=20) for _ in planes]
        assert all(e.kind == "result" for e in out), out
        crcs = {r.rank: r.buffer_crc for e in out for r in e.msg.ranks}
        assert crcs == {r: x.buffer_crc for r, x in run_tcp([s], 4, iters=2, warmup=0).items()}
        # program 0 sends on channel 1 only: lanes 2 and 3 of each connection
        lanes = {lane for (_, (_, lane)) in fab.link_bytes}
        assert lanes <= {2, 3} and lanes
    finally:
        for dp in planes:
            dp.close()


def test_an_op_list_runs_through_the_rdma_plane() -> None:
    fab = Fabric(seed=13)
    planes = [FabricPlane(fab), FabricPlane(fab)]
    try:
        specs = [ProgramSpec(collective="flow", algorithm="oneway", n_ranks=2, size=n)
                 for n in (200_000, 3000)]  # fmt: skip
        opts = DataOptions(token=new_token(), transport="rdma", streams=2, channels=2,
                           program_channels=[0, 1], rdma=RdmaOptions(segment=8192))  # fmt: skip
        prepared, ev = _job(planes, specs, ["a0", "a1"], opts, 1)
        assert all(e.kind == "prepared" for e in prepared), prepared
        for r, dp in enumerate(planes):  # each agent gets the op lists of its ranks
            ops = [RankOps(rank=r, ops=[OpItem(program=0), OpItem(program=1, deps=[0])])]
            dp.go(Go(job="j1", epoch=1, timeout_s=5, ops=ops), time.monotonic_ns(), ev.put)
        out = [ev.get(timeout=20) for _ in planes]
        assert all(e.kind == "result" for e in out), out
        recv = next(r for e in out for r in e.msg.ranks if r.rank == 1)
        assert recv.bytes_received == 203_000 and len(recv.start) == 2
        assert recv.start[1] >= recv.end[0]  # op 1 waited for op 0
    finally:
        for dp in planes:
            dp.close()


def test_the_controller_names_each_ranks_nic_device_from_the_testbed() -> None:
    from genie.controller.local import options_for_testbed
    from genie.testbed import loads_testbed

    tb = loads_testbed(
        '[testbed]\nname = "m"\nkind = "static"\ntransport = "rdma"\n'
        '[[hosts]]\nname = "a"\ncontrol = "10.0.0.1:7000"\nranks = 2\n'
        '[[hosts.nics]]\ndata_addr = "10.1.0.1"\nrdma_device = "mlx5_0"\n'
        '[[hosts.nics]]\ndata_addr = "10.2.0.1"\nrdma_device = "mlx5_1"\n'
        '[[hosts]]\nname = "b"\ncontrol = "10.0.0.2:7000"\n'
        '[[switches]]\nname = "sw"\n'
        '[[links]]\na = "a.nic0"\nb = "sw"\nrate = "100gbit"\n'
        '[[links]]\na = "a.nic1"\nb = "sw"\nrate = "100gbit"\n'
        '[[links]]\na = "b"\nb = "sw"\nrate = "100gbit"\n'
    )
    opts = options_for_testbed(tb, DataOptions(transport="rdma"), ["a", "a", "b"])
    assert opts.rdma.rank_devices == ["mlx5_0", "mlx5_1", ""]
    assert opts.rank_addrs == ["10.1.0.1", "10.2.0.1", ""]
    mine = DataOptions(rdma=RdmaOptions(rank_devices=["x", "y", "z"]))
    assert options_for_testbed(tb, mine, ["a", "a", "b"]).rdma.rank_devices == ["x", "y", "z"]


def _tcp_ops(specs, ops):
    """The op lists on the TCP data plane (loopback, one agent per rank): per-rank results."""
    import queue

    import msgspec

    from genie.wire.messages import Limits, Prepare
    from genie_agent.dataplane.tcp import TcpDataPlane
    from genie_agent.plan import plan_agent
    from genie_agent.programs import builtin_program

    n = len(ops)
    dps = [TcpDataPlane("127.0.0.1") for _ in range(n)]
    try:
        agents = [f"a{r}" for r in range(n)]
        prep = Prepare(
            job="j", epoch=1, programs=[msgspec.msgpack.encode(s) for s in specs],
            placement=agents,
            endpoints={a: f"127.0.0.1:{dp.port}" for a, dp in zip(agents, dps, strict=True)},
            options=DataOptions(token=new_token()),
        )  # fmt: skip
        ev: queue.Queue = queue.Queue()
        programs = [builtin_program(s) for s in specs]
        for a, dp in zip(agents, dps, strict=True):
            dp.prepare(plan_agent(a, programs, agents, Limits()), prep, ev.put)
        assert all(ev.get(timeout=10).kind == "prepared" for _ in dps)
        for r, dp in enumerate(dps):
            go = Go(job="j", epoch=1, timeout_s=5, ops=[RankOps(rank=r, ops=ops[r])])
            dp.go(go, time.monotonic_ns(), ev.put)
        out = [ev.get(timeout=20) for _ in dps]
        assert all(e.kind == "result" for e in out), out
        return {r.rank: r for e in out for r in e.msg.ranks}
    finally:
        for dp in dps:
            dp.close()


def test_an_op_list_reusing_a_program_computes_what_tcp_does() -> None:
    # a layer's all-reduce template run three times (instances 0, 2, 3) around another one:
    # its uses run one after another, each peer waiting for the credit of the next use
    specs = [spec("selftest", "ring", 3, 3 * 40_000, chunks=2), spec("selftest", "ring", 3, 3000)]
    lst = [OpItem(program=0, instance=0), OpItem(program=1, instance=1),
           OpItem(program=0, instance=2, deps=[1]), OpItem(program=0, instance=3)]  # fmt: skip
    ops = {r: lst for r in range(3)}
    execs, abort = connect_rdma(specs, 3, RdmaOptions(window=1, segment=4096), Fabric(seed=5))
    res, errors = run_execs(execs, abort, Go(job="j", epoch=1, timeout_s=10), ops)
    assert not errors, errors
    tcp = _tcp_ops(specs, [lst] * 3)
    assert {r: x.buffer_crc for r, x in res.items()} == {r: x.buffer_crc for r, x in tcp.items()}
    for x in res.values():  # the uses of program 0 never overlapped on a rank
        assert x.start[2] >= x.end[0] and x.start[3] >= x.end[2]


@pytest.mark.parametrize(("channels", "program_channels"), [(2, [0, 1]), (1, [0, 0])])
def test_through_the_plane_each_group_has_its_own_queue_pairs(channels, program_channels) -> None:
    # the same two groups as above, as genie emulate prepares them: DataOptions.channels and
    # program_channels (one connection set per process group), op lists in one Go per agent
    fab = TimedFabric(25e6)
    planes = [FabricPlane(fab), FabricPlane(fab)]
    try:
        specs = [ProgramSpec(collective="flow", algorithm="oneway", n_ranks=2, size=n)
                 for n in (8 << 20, 128 << 10)]  # fmt: skip
        opts = DataOptions(token=new_token(), transport="rdma", streams=channels,
                           channels=channels, program_channels=program_channels)  # fmt: skip
        prepared, ev = _job(planes, specs, ["a0", "a1"], opts, 1)
        assert all(e.kind == "prepared" for e in prepared), prepared
        lst = [OpItem(program=0), OpItem(program=1, gap_ns=20 * MS)]
        start = time.monotonic_ns() + 50 * MS
        for r, dp in enumerate(planes):
            dp.go(Go(job="j1", epoch=1, timeout_s=10, ops=[RankOps(rank=r, ops=lst)]), start,
                  ev.put)  # fmt: skip
        out = [ev.get(timeout=20) for _ in planes]
        assert all(e.kind == "result" for e in out), out
        recv = next(r for e in out for r in e.msg.ranks if r.rank == 1)
        small = (recv.end[1] - recv.start[1]) / 1e9
        print(f"{channels} channel(s): tp {small * 1e3:.1f} ms")
        assert small < 0.15 if channels == 2 else small > 0.25
        lanes = sorted({lane for (_, (_, lane)) in fab.link_bytes})
        assert lanes == list(range(channels))  # each group's bytes on its channel's QP
    finally:
        for dp in planes:
            dp.close()
