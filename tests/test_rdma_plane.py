"""The RDMA data plane end to end in-process: real TCP side channels, the real QpFacts exchange,
landing slots and executors, with the verbs calls played by the in-memory fabric of
test_rdma_exec (the only simulated part). Then a TCP job on the same planes.
"""

from __future__ import annotations

import queue
import time
from collections import deque

import msgspec
from test_rdma_exec import Fabric, FakeVerbs, run_tcp

from genie.collectives.program import ProgramSpec
from genie.wire.messages import DataOptions, Go, Limits, Prepare, RdmaOptions
from genie.wire.tokens import new_token
from genie_agent.dataplane.rdma_conn import Device, Gid, Port, gid_hex
from genie_agent.dataplane.rdma_plane import AgentDataPlane
from genie_agent.plan import plan_agent
from genie_agent.programs import builtin_program

LOOP_GID = "0000:0000:0000:0000:0000:ffff:7f00:0001"  # RoCE v2 GID of 127.0.0.1


class FabricRank(FakeVerbs):
    """FakeVerbs with the queue-pair bookkeeping the plane asks of a VerbsRank."""

    def __init__(self, fab, rank, links):
        super().__init__(fab, rank)
        fab.cq.setdefault(rank, deque())
        self.links = links
        self.peers = sorted({q for q, _ in links})
        self.connected: dict[int, tuple] = {}

    def qpn(self, link) -> int:
        return 1000 * self.r + 10 * link[0] + link[1]

    def connect(self, mine, peer) -> None:
        lanes = sorted(k for q, k in self.links if q == mine.dst)
        # the peer's QPs towards us, lane by lane
        assert peer.qpns == [1000 * mine.dst + 10 * mine.src + k for k in lanes]
        assert peer.qpn == peer.qpns[0]
        self.connected[mine.dst] = (mine, peer)

    def to_error(self) -> None:
        pass

    def close(self) -> None:
        pass


class FabricDevice:
    gid = gid_hex(LOOP_GID)
    lid = 0
    mtu = 4096

    def close(self) -> None:
        pass


class FabricPlane(AgentDataPlane):
    def __init__(self, fab: Fabric):
        super().__init__("127.0.0.1")
        self.fab = fab
        self.chosen = None
        self.made: list[FabricRank] = []

    def find_devices(self):
        gids = (Gid(0, "fe80:0000:0000:0000:0000:0000:0000:0001", "RoCE v2", "lo"),
                Gid(1, LOOP_GID, "RoCE v2", "lo"))  # fmt: skip
        return [Device("fab0", (Port(1, "ACTIVE", "Ethernet", 0, gids),))]

    def open_device(self, choice):
        self.chosen = choice
        return FabricDevice()

    def rank_verbs(self, dev, ro, rank, links, depth):
        vr = FabricRank(self.fab, rank, links)
        self.made.append(vr)
        return vr


def _job(planes, specs, placement, opts, epoch):
    agents = [f"a{i}" for i in range(len(planes))]
    prep = Prepare(
        job=f"j{epoch}",
        epoch=epoch,
        programs=[msgspec.msgpack.encode(s) for s in specs],
        placement=placement,
        endpoints={a: f"127.0.0.1:{dp.port}" for a, dp in zip(agents, planes, strict=True)},
        options=opts,
    )
    ev: queue.Queue = queue.Queue()
    programs = [builtin_program(s) for s in specs]
    for a, dp in zip(agents, planes, strict=True):
        dp.prepare(plan_agent(a, programs, placement, Limits()), prep, ev.put)
    prepared = [ev.get(timeout=10) for _ in planes]
    return prepared, ev


def test_rdma_job_through_the_plane_matches_tcp() -> None:
    fab = Fabric(seed=5)
    planes = [FabricPlane(fab), FabricPlane(fab)]
    try:
        s = ProgramSpec(collective="selftest", algorithm="ring", n_ranks=3, size=3 * 30_000,
                        chunks=3)  # fmt: skip
        placement = ["a0", "a1", "a0"]  # ranks 0 and 2 share a0: on the wire, their pair is
        # exchanged too (a loopback QP; the intra-host model is test_rdma_intra's)
        opts = DataOptions(token=new_token(), transport="rdma", intra="wire",
                           rdma=RdmaOptions(window=2, segment=8192))  # fmt: skip
        prepared, ev = _job(planes, [s], placement, opts, 1)
        assert all(e.kind == "prepared" for e in prepared), prepared
        assert all(dp.chosen.gid_index == 1 for dp in planes)  # the GID of the data address
        # the ring 0->1->2->0: rank 0 talks to 1 and 2, rank 1 to 0 and 2, rank 2 to 1 and 0
        for dp in planes:
            for vr in dp.made:
                assert sorted(vr.connected) == sorted(vr.peers) and len(vr.peers) == 2
        go = Go(job="j1", epoch=1, iters=3, warmup=1, timeout_s=5)
        for dp in planes:
            dp.go(go, time.monotonic_ns(), ev.put)
        out = [ev.get(timeout=20) for _ in planes]
        assert all(e.kind == "result" for e in out), out
        crcs = {r.rank: r.buffer_crc for e in out for r in e.msg.ranks}
        tcp = run_tcp([s], 3)
        assert crcs == {r: x.buffer_crc for r, x in tcp.items()}
        for dp in planes:
            dp.release()
        # the same planes run a TCP job next
        prepared, ev = _job(planes, [s], placement, DataOptions(token=new_token()), 2)
        assert all(e.kind == "prepared" for e in prepared), prepared
        go = Go(job="j2", epoch=2, iters=1, timeout_s=5)
        for dp in planes:
            dp.go(go, time.monotonic_ns(), ev.put)
        assert all(ev.get(timeout=20).kind == "result" for _ in planes)
    finally:
        for dp in planes:
            dp.close()


def test_prepared_says_which_queue_pairs_and_traffic_class_the_job_runs_with() -> None:
    """What the controller stores as the run's conditions (genie.wire.conditions)."""
    from genie.wire.conditions import flatten

    fab = Fabric()
    planes = [FabricPlane(fab), FabricPlane(fab)]
    try:
        s = ProgramSpec(collective="flow", algorithm="oneway", n_ranks=2, size=4096)
        opts = DataOptions(token=new_token(), transport="rdma",
                           rdma=RdmaOptions(qps=3, traffic_class=106))  # fmt: skip
        prepared, _ = _job(planes, [s], ["a0", "a1"], opts, 1)
        assert all(e.kind == "prepared" for e in prepared), prepared
        for e in prepared:
            assert e.msg.conditions.nics == {"fab0": {"rdma_qps": "3", "rdma_traffic_class": "106"}}
        held = {f"a{i}": msgspec.to_builtins(e.msg.conditions) for i, e in enumerate(prepared)}
        assert flatten(held) == {
            "RDMA queue pairs per connection": "3",
            "RDMA traffic class (GRH)": "106",
        }
    finally:
        for dp in planes:
            dp.close()


def test_per_host_device_names_are_used_and_a_wrong_one_is_one_line() -> None:
    fab = Fabric()
    planes = [FabricPlane(fab), FabricPlane(fab)]
    try:
        s = ProgramSpec(collective="flow", algorithm="oneway", n_ranks=2, size=4096)
        opts = DataOptions(token=new_token(), transport="rdma", connect_timeout_s=1.0,
                           rdma=RdmaOptions(devices={"a0": "fab0", "a1": "mlx5_9"}))  # fmt: skip
        prepared, _ = _job(planes, [s], ["a0", "a1"], opts, 1)
        by_agent = {e.error.split(":")[0]: e for e in prepared}
        assert by_agent["a1"].kind == "prepare_failed"
        assert by_agent["a1"].error == "a1: RDMA device 'mlx5_9' not found (have fab0)"
        assert planes[0].chosen is not None and planes[0].chosen.device == "fab0"
        assert planes[1].chosen is None  # refused before opening anything
    finally:
        for dp in planes:
            dp.close()


def test_a_job_beyond_the_agents_memory_bound_is_refused_before_registering() -> None:
    fab = Fabric()
    planes = [FabricPlane(fab), FabricPlane(fab)]
    try:
        planes[1].memory_bound = 150_000  # rank 1 needs its 100 kB buffer and 100 kB scratch
        s = ProgramSpec(collective="flow", algorithm="oneway", n_ranks=2, size=100_000)
        opts = DataOptions(token=new_token(), transport="rdma", connect_timeout_s=2.0)
        prepared, _ = _job(planes, [s], ["a0", "a1"], opts, 1)
        by_agent = {e.error.split(":")[0]: e for e in prepared if e.kind == "prepare_failed"}
        assert by_agent["a1"].error == (
            "a1: RDMA buffers of this job need 200000 bytes of registered memory on this agent, "
            "beyond its memory bound of 150000 bytes"
        )
    finally:
        for dp in planes:
            dp.close()
