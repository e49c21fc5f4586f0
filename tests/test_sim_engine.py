"""Event engine on hand-computable workloads: exact times, breakdowns, deadlocks."""

from __future__ import annotations

import pytest

from genie.errors import CollectiveError, DeadlockError, ValidationError
from genie.sim.api import replay
from genie.sim.compiled import GraphBuilder
from genie.sim.engine import simulate
from genie.sim.network import AnalyticalBackend
from genie.sim.traffic import NetModel

US = 1e-6
GIB = 2**30


def backend(n, bw=1e9, lat=0.0, **kw):
    return AnalyticalBackend(NetModel(n, bw, lat, **kw))


def approx(x):
    return pytest.approx(x, rel=1e-9, abs=1e-15)


def staggered_all_reduce(n, tail):
    """Rank r: compute (r+1) us -> all-reduce 1 MiB -> compute ``tail`` s."""
    b = GraphBuilder(n)
    b.group("world")
    for r in range(n):
        a = b.compute(r, (r + 1) * US)
        c = b.collective(r, "all_reduce", 2**20, deps=[a])
        b.compute(r, tail, deps=[c])
    return b.build()


def test_chain_of_compute_and_one_all_reduce():
    # rank r: compute (r+1) us -> all-reduce 1 MiB -> compute 2 us; switch 50 GiB/s, 250 ns per
    # link: alpha = 2 hops x 250 ns = 500 ns per message
    cw = staggered_all_reduce(4, 2 * US)
    rep, raw = replay(cw, backend(4, 50 * GIB, 250e-9), symmetry=False)
    # by hand: ring all-reduce = 2(n-1) * (500 ns + S / (n B)) = 6 * (0.5 + 4.8828125) us
    ar = 6 * (0.5 + 2**20 / (4 * 50 * GIB) / US) * US
    assert ar == approx(32.296875 * US)
    row = rep.collectives[0]
    assert row.first_arrival == approx(1 * US)  # rank 0 arrives first
    assert row.start == approx(4 * US)  # rank 3 arrives last
    assert row.time == approx(ar)
    assert rep.iteration_s == approx(4 * US + ar + 2 * US)
    r0 = rep.ranks[0]
    assert r0.compute == approx(3 * US)
    assert r0.wait == approx(3 * US)  # waited at the all-reduce for rank 3
    assert r0.exposed_comm == approx(ar)
    assert r0.idle == approx(0.0)
    r3 = rep.ranks[3]
    assert r3.wait == approx(0.0) and r3.compute == approx(6 * US)
    # algbw = S / t, busbw = algbw * 2(n-1)/n, GB/s = 1e9 B/s
    assert row.algbw_gbps == approx(2**20 / ar / 1e9)
    assert row.busbw_gbps == approx(row.algbw_gbps * 1.5)
    assert raw.makespan == rep.iteration_s


def test_two_overlapping_collectives_share_links():
    # 2 ranks, 1e9 B/s, alpha = 2 hops x 0.5 us, ring latency 2(n-1) x 1 us = 2 us. A (10 kB)
    # starts at 0, B (10 kB) at 4 us. Alone each moves its bytes in 10 us (each rank sends
    # 2(n-1)/n x S = S bytes).
    b = GraphBuilder(2)
    b.group("dp")
    b.group("dp2", [0, 1])
    for r in range(2):
        b.collective(r, "all_reduce", 10_000, group="dp")
        c = b.compute(r, 4 * US)
        b.collective(r, "all_reduce", 10_000, group="dp2", deps=[c])
    cw = b.build()
    rep, _ = replay(cw, backend(2, 1e9, 0.5 * US), symmetry=False)
    a_row, b_row = sorted(rep.collectives, key=lambda r: r.start)
    # 0..4 us: A alone, 4 us done, 6 left; then both at half rate: A's 6 take 12 -> bytes done
    # at 16 us, + 2 us latency = 18 us. B did 6 by 16 us, its last 4 alone -> 20 us, + 2 = 22.
    assert a_row.start == approx(0.0) and a_row.end == approx(18 * US)
    assert b_row.start == approx(4 * US) and b_row.end == approx(22 * US)
    assert a_row.standalone == approx(12 * US) and b_row.standalone == approx(12 * US)
    assert rep.iteration_s == approx(22 * US)
    # rank 0: compute 4 us, comm covers 0..22 -> exposed 18 us
    assert rep.ranks[0].compute == approx(4 * US)
    assert rep.ranks[0].exposed_comm == approx(18 * US)


def test_collectives_on_disjoint_links_do_not_slow_each_other():
    b = GraphBuilder(4)
    b.group("left", [0, 1])
    b.group("right", [2, 3])
    for r in range(4):
        b.collective(r, "all_reduce", 10_000, group="left" if r < 2 else "right")
    rep, _ = replay(b.build(), backend(4, 1e9, 0.0))
    assert [row.time for row in rep.collectives] == [approx(10 * US), approx(10 * US)]


def test_pipeline_of_send_recv_between_stages():
    # 3 stages x 2 micro-batches; compute 10 us per micro-batch; transfer 1000 B at 1e9 B/s
    # takes 1 us + alpha (2 hops x 0.5 us) = 2 us; rendezvous: it starts when both the send and
    # the recv are posted.
    b = GraphBuilder(3)
    size, c = 1000, 10 * US
    prev = []
    for mb in range(2):
        f = b.compute(0, c, deps=prev)
        b.send(0, 1, size, tag=mb, deps=[f])
        prev = [f]
    prev = []
    for mb in range(2):
        rv = b.recv(1, 0, size, tag=mb)
        f = b.compute(1, c, deps=[rv])
        b.send(1, 2, size, tag=mb, deps=[f])
    for mb in range(2):
        rv = b.recv(2, 1, size, tag=mb)
        b.compute(2, c, deps=[rv])
    cw = b.build()
    rep, _ = replay(cw, backend(3, 1e9, 0.5 * US))
    # rank0: F0 0-10, F1 10-20, sends 10-12 and 20-22
    # rank1: C0 12-22, send 22-24; C1 22-32, send 32-34
    # rank2: C0 24-34, C1 34-44
    assert rep.iteration_s == approx(44 * US)
    p2p = sorted((row.start, row.end, row.group) for row in rep.collectives)
    assert p2p == [
        (approx(10 * US), approx(12 * US), "p2p 0->1"),
        (approx(20 * US), approx(22 * US), "p2p 0->1"),
        (approx(22 * US), approx(24 * US), "p2p 1->2"),
        (approx(32 * US), approx(34 * US), "p2p 1->2"),
    ]
    r2 = rep.ranks[2]
    assert r2.compute == approx(20 * US)
    # recv 0 waits for its send 0..22 us, moves 22..24 (exposed); recv 1 moves under compute
    assert r2.wait == approx(22 * US)
    assert r2.exposed_comm == approx(2 * US)
    assert rep.ranks[0].idle == approx(22 * US)


def test_compute_is_serial_per_rank_comm_overlaps():
    b = GraphBuilder(1)
    b.group("solo", [0])
    a = b.compute(0, 5 * US)
    b.compute(0, 5 * US)  # independent of a, but one compute stream
    b.memory(0, 3 * US)  # memory does not hold the stream
    b.compute(0, 1 * US, deps=[a])
    raw = simulate(b.build(), backend(1))
    assert raw.start.tolist() == [0.0, approx(5 * US), 0.0, approx(10 * US)]
    assert raw.makespan == approx(11 * US)


def test_mismatched_collective_counts_deadlock_names_ranks_and_nodes():
    b = GraphBuilder(2)
    b.group("world")
    x = b.collective(0, "all_reduce", 1024, name="grad_ar_0")
    b.collective(0, "all_reduce", 1024, deps=[x], name="grad_ar_1")
    b.collective(1, "all_reduce", 1024, name="grad_ar_0")
    with pytest.raises(DeadlockError) as ei:
        simulate(b.build(), backend(2))
    msg = str(ei.value)
    assert "rank 0" in msg and "grad_ar_1" in msg and "waits for ranks [1]" in msg
    assert "1 of 2 ranks stuck ([0])" in msg


def test_cyclic_wait_across_groups_is_reported_not_hung():
    b = GraphBuilder(2)
    b.group("A", [0, 1])
    b.group("B", [0, 1])
    a0 = b.collective(0, "all_reduce", 64, group="A", name="a_on_0")
    b.collective(0, "all_reduce", 64, group="B", deps=[a0], name="b_on_0")
    b1 = b.collective(1, "all_reduce", 64, group="B", name="b_on_1")
    b.collective(1, "all_reduce", 64, group="A", deps=[b1], name="a_on_1")
    with pytest.raises(DeadlockError) as ei:
        simulate(b.build(), backend(2))
    msg = str(ei.value)
    assert "2 of 2 ranks stuck" in msg
    assert "a_on_0" in msg and "b_on_1" in msg


def test_recv_without_send_is_a_deadlock():
    b = GraphBuilder(2)
    b.compute(0, 1 * US)
    b.recv(1, 0, 100, tag=7, name="recv_act")
    with pytest.raises(DeadlockError, match=r"rank 1: node recv_act \(recv from rank 0, tag 7"):
        simulate(b.build(), backend(2))


def test_type_or_size_mismatch_is_a_clear_error():
    b = GraphBuilder(2)
    b.group("world")
    b.collective(0, "all_reduce", 1024, name="x")
    b.collective(1, "all_gather", 1024, name="y")
    with pytest.raises(CollectiveError, match=r"rank 0 node x is all_reduce.*rank 1 node y"):
        b.build()
    b = GraphBuilder(2)
    b.group("world")
    b.collective(0, "all_reduce", 1024)
    b.collective(1, "all_reduce", 2048)
    with pytest.raises(CollectiveError, match=r"1024 B.*2048 B"):
        b.build()


def test_collective_on_a_group_the_rank_is_not_in():
    b = GraphBuilder(3)
    b.group("pair", [0, 1])
    b.collective(2, "all_reduce", 8, group="pair")
    with pytest.raises(ValidationError, match="not a member"):
        b.build()


def test_dependency_cycle_is_reported():
    from genie.sim.compiled import Kind, finish, make_rank

    rank = make_rank([Kind.COMPUTE, Kind.COMPUTE], [1e-6, 1e-6], [[1], [0]])
    cw = finish([rank], ["world"], [(0,)])
    with pytest.raises(DeadlockError, match="2 nodes never ready"):
        simulate(cw, backend(1))


def test_the_straggler_is_named_per_collective():
    b = GraphBuilder(3)
    b.group("world")
    for r, d in enumerate((2, 7, 3)):
        c = b.compute(r, d * US)
        b.collective(r, "all_reduce", 1000, deps=[c])
    rep, _ = replay(b.build(), backend(3), symmetry=False)
    row = rep.collectives[0]
    assert row.last_rank == 1 and row.start == approx(7 * US)
    assert row.first_arrival == approx(2 * US)


class _PerMember:
    """A per-member backend: member r of an instance ends ``(r + 1)`` us after it arrives."""

    name = "per-member"
    per_member = True
    lazy_next = None
    standalone = None

    def __init__(self):
        self.notes: list[str] = []
        self.arrivals: list[tuple[int, int, float]] = []
        self._due: list[tuple[float, int, int]] = []

    def arrive(self, transfer, rank, now):
        self.arrivals.append((transfer.iid, rank, now))
        self._due.append((now + (rank + 1) * US, transfer.iid, rank))
        self._due.sort()

    def next_time(self):
        return self._due[0][0] if self._due else float("inf")

    def pop_members(self, now):
        out = []
        while self._due and self._due[0][0] <= now:
            _, iid, rank = self._due.pop(0)
            out.append((iid, rank))
        return out


def test_per_member_backend_hears_each_arrival_and_ends_members_apart():
    """A per-member backend gets every member's own arrival (no rendezvous), ends members one
    by one, and each rank goes on from its own end; replay() then simulates every rank."""
    cw = staggered_all_reduce(3, 10 * US)
    be = _PerMember()
    rep, raw = replay(cw, be)
    assert sorted(be.arrivals) == [(0, 0, approx(1 * US)), (0, 1, approx(2 * US)),
                                   (0, 2, approx(3 * US))]  # fmt: skip
    for r in range(3):
        lo = raw.rank_slice(r).start
        # arrive at (r+1) us, end (r+1) us later, then 10 us of compute
        assert raw.end[lo + 1] == approx(2 * (r + 1) * US)
        assert raw.end[lo + 2] == approx((2 * (r + 1) + 10) * US)
    assert raw.makespan == approx(16 * US)
    # ranks that are provably identical are still all replayed for a per-member backend
    b = GraphBuilder(3)
    b.group("world")
    for r in range(3):
        b.collective(r, "all_reduce", 2**20, deps=[b.compute(r, US)])
    be = _PerMember()
    rep, raw = replay(b.build(), be)
    assert sorted(r for _, r, _ in be.arrivals) == [0, 1, 2] and not rep.symmetric
    assert raw.makespan == approx(4 * US)
