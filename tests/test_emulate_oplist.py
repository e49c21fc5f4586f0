"""Op-list mode of the TCP data plane: several programs of a rank in flight at once."""

from __future__ import annotations

import queue
import statistics
import time
import zlib

import msgspec
import numpy as np
import pytest

from genie.collectives import build_program
from genie.collectives.data_exec import run_data
from genie.errors import ProtocolError
from genie.wire.messages import DataOptions, Go, Limits, OpItem, Prepare, RankOps
from genie.wire.tokens import new_token
from genie_agent.dataplane.tcp import TcpDataPlane, pattern_fill
from genie_agent.oplist import check_ops
from genie_agent.plan import plan_agent
from genie_agent.programs import rebuild
from genie_agent.state import Event

SIZE = 8 << 20


def _prepared(payload: str):
    """Two planes (one rank each) prepared with two 2-rank all-reduces of SIZE bytes."""
    dps = [TcpDataPlane("127.0.0.1") for _ in range(2)]
    progs = [build_program("all_reduce", "ring", 2, SIZE, ranks=(0, 1)) for _ in range(2)]
    placement = ["a0", "a1"]
    prep = Prepare(
        job="j1",
        epoch=1,
        programs=[p.to_bytes() for p in progs],
        placement=placement,
        endpoints={f"a{i}": f"127.0.0.1:{dp.port}" for i, dp in enumerate(dps)},
        options=DataOptions(token=new_token(), verify=True, payload=payload),
    )
    events: queue.Queue[Event] = queue.Queue()
    rebuilt = [rebuild(b) for b in prep.programs]
    for i, dp in enumerate(dps):
        dp.prepare(plan_agent(f"a{i}", rebuilt, placement, Limits()), prep, events.put)
    assert all(events.get(timeout=10).kind == "prepared" for _ in dps)
    return dps, progs, events


@pytest.fixture
def job():
    """Real payloads: every op computes its all-reduce in buffers of its own."""
    dps, progs, events = _prepared("real")
    yield dps, progs, events
    for dp in dps:
        dp.close()


@pytest.fixture
def lean_job():
    """Lean payloads: pattern bytes from one region per rank, no reductions."""
    dps, progs, events = _prepared("lean")
    yield dps, progs, events
    for dp in dps:
        dp.close()


def go_ops(dps, events, ops: list[OpItem], timeout_s: float = 20.0):
    """Run the same op list on both ranks; return per rank its RankResult."""
    start = time.monotonic_ns() + 20_000_000
    for r, dp in enumerate(dps):
        go = Go(job="j1", epoch=1, timeout_s=timeout_s, ops=[RankOps(rank=r, ops=ops)])
        dp.go(go, start, events.put)
    got = [events.get(timeout=30) for _ in dps]
    assert all(e.kind == "result" for e in got), [e.error for e in got]
    out = {}
    for e in got:
        for rr in e.msg.ranks:
            out[rr.rank] = rr
    return out, start


def intervals(res) -> list[tuple[int, int]]:
    """Per op: (earliest rank start, last rank end), ns."""
    n = len(res[0].start)
    return [
        (min(r.start[j] for r in res.values()), max(r.end[j] for r in res.values()))
        for j in range(n)
    ]


def expected_crc(progs, ops: list[int], rank: int) -> int:
    """The agent's buffer CRC of one op-list run: the CRC-32 of each op's final buffer (one run
    of its program from the pattern: an op's buffers live from its start to its end), chained
    in list order as 4 little-endian bytes each."""
    crc = 0
    for p in ops:
        prog = progs[p]
        bufs = []
        for r in range(prog.n_ranks):
            b = np.empty(prog.buffer_bytes(r), dtype=np.uint8)
            pattern_fill(b, r)
            bufs.append(b.astype(np.int64))
        bufs = [b % 256 for b in run_data(prog, bufs).buffers]
        one = zlib.crc32(bufs[rank].astype(np.uint8).tobytes())
        crc = zlib.crc32(one.to_bytes(4, "little"), crc)
    return crc


def test_overlapping_ops_are_on_the_wire_together_and_slower_than_alone(job) -> None:
    dps, progs, events = job
    alone, together = [], []
    # alone and together alternate, so the load of the shared machine swings both alike
    for _ in range(4):
        res, _ = go_ops(dps, events, [OpItem(program=0)])
        (a,) = intervals(res)
        alone.append(a[1] - a[0])
        for rr in res.values():
            assert rr.bytes_sent == rr.bytes_received == SIZE // 2 * 2  # ring on 2: 2 halves each
            assert rr.messages_verified > 0
        res, _ = go_ops(dps, events, [OpItem(program=0), OpItem(program=1)])
        (a, b) = intervals(res)
        assert a[0] < b[1] and b[0] < a[1], "two ops with no deps must overlap in time"
        together.append((a[1] - a[0], b[1] - b[0]))
        for rr in res.values():
            assert rr.bytes_sent == rr.bytes_received == 2 * SIZE  # both programs' bytes
    for r, rr in res.items():
        assert rr.buffer_crc == expected_crc(progs, [0, 1], r)  # each op computed its all-reduce
    # the dependency path: op 1 after op 0 plus a 5 ms compute gap does not overlap it
    for _ in range(2):
        res, _ = go_ops(
            dps, events, [OpItem(program=0), OpItem(program=1, deps=[0], gap_ns=5_000_000)]
        )
        for rr in res.values():  # on every rank: op 1 only after its op 0 and the gap
            assert rr.start[1] >= rr.end[0] + 5_000_000
    alone_p50 = statistics.median(alone)
    both_p50 = statistics.median(max(x) for x in together)
    print(f"alone p50 {alone_p50 / 1e6:.2f} ms, overlapped p50 {both_p50 / 1e6:.2f} ms")
    # sharing the loopback (and the 2 cores) between two 8 MiB all-reduces: the later of them
    # takes longer than one alone at its quickest; only the direction is asserted, not a ratio,
    # and against the quickest lone run (a load spike on the shared machine slows a lone run
    # as much as sharing: 55.3 ms alone vs 43.5 ms overlapped, medians of 4, in one CI run)
    assert both_p50 > min(alone)


def test_an_op_waits_for_its_gap_from_the_start(job) -> None:
    dps, _progs, events = job
    res, start = go_ops(dps, events, [OpItem(program=0, gap_ns=30_000_000)])
    for rr in res.values():
        assert rr.start[0] - start >= 30_000_000
        assert rr.end[0] > rr.start[0]


def test_an_op_in_issue_order_waits_for_the_earlier_op_without_a_gap(job) -> None:
    dps, _progs, events = job
    # op 1 may start 1 ms after the start (its gap) but waits for op 0 to end (issue order)
    res, start = go_ops(
        dps, events, [OpItem(program=0), OpItem(program=1, gap_ns=1_000_000, after=[0])]
    )
    for rr in res.values():
        assert rr.start[1] >= rr.end[0]
        assert rr.start[1] - start >= 1_000_000
    # a gap longer than op 0 still holds: due is the later of the two
    res, start = go_ops(
        dps, events, [OpItem(program=0), OpItem(program=1, gap_ns=400_000_000, after=[0])]
    )
    for rr in res.values():
        assert rr.start[1] - start >= 400_000_000 and rr.start[1] >= rr.end[0]


def test_bad_op_lists_are_refused_before_running(job) -> None:
    dps, _progs, events = job
    plan = dps[0]._plan
    good = [RankOps(rank=0, ops=[OpItem(program=0), OpItem(program=1, deps=[0])])]
    assert set(check_ops(good, plan)) == {0}
    shared = [RankOps(rank=0, ops=[OpItem(program=0, instance=k) for k in range(3)])]
    assert len(check_ops(shared, plan)[0]) == 3  # a program runs for several instances
    bad = [
        [RankOps(rank=1, ops=[OpItem(program=0)])],  # rank not on this agent
        [RankOps(rank=0, ops=[OpItem(program=5)])],  # no such program
        [RankOps(rank=0, ops=[OpItem(program=0), OpItem(program=0)])],  # instance 0 twice
        [RankOps(rank=0, ops=[OpItem(program=0, instance=3), OpItem(program=1, instance=3)])],
        [RankOps(rank=0, ops=[OpItem(program=0, instance=-2)])],  # instance out of range
        [RankOps(rank=0, ops=[OpItem(program=0, deps=[0])])],  # dep on itself
        [RankOps(rank=0, ops=[OpItem(program=0, gap_ns=-1)])],
        [RankOps(rank=0, ops=[OpItem(program=0, after=[0])])],  # order dep on itself
        [RankOps(rank=0, ops=[OpItem(program=0), OpItem(program=1, after=[0, 0])])],
    ]
    for b in bad:
        with pytest.raises(ProtocolError):
            check_ops(b, plan)
    go = Go(job="j1", epoch=1, ops=bad[1])
    dps[0].go(go, time.monotonic_ns(), events.put)
    ev = events.get(timeout=5)
    assert ev.kind == "run_failed" and "op list refused" in ev.error


def test_many_instances_of_one_program_run_together_and_hold_only_what_is_in_flight(job):
    """One program, 24 instances: frames go by instance, each op computes its all-reduce, and
    the rank's buffers are those of the ops in flight (issue order: one at a time), not 40."""
    dps, progs, events = job
    n = 24
    ops = [OpItem(program=0, instance=100 + k, after=[k - 1] if k else []) for k in range(n)]
    res, _ = go_ops(dps, events, ops, timeout_s=60.0)
    for r, rr in res.items():
        assert len(rr.start) == n and all(e > s for s, e in zip(rr.start, rr.end, strict=True))
        assert rr.bytes_sent == rr.bytes_received == n * SIZE
        assert rr.buffer_crc == expected_crc(progs, [0] * n, r)
    for dp in dps:
        (ex,) = dp._execs.values()
        foot = ex.plans[0].buffer_bytes + ex.plans[0].scratch_bytes
        # the pool held the buffers of at most two instances at once (one in flight, one that
        # a peer started early), never the 24 the list names
        assert ex.pool.budget.peak <= 3 * foot < n * foot
    # two ops of one program in flight together: frames are told apart by their instance
    res, _ = go_ops(dps, events, [OpItem(program=0, instance=7), OpItem(program=0, instance=9)])
    (a, b) = intervals(res)
    assert a[0] < b[1] and b[0] < a[1]
    for r, rr in res.items():
        assert rr.buffer_crc == expected_crc(progs, [0, 0], r)


def test_lean_payloads_put_the_same_bytes_on_the_wire_from_a_fixed_region(lean_job) -> None:
    """Lean: every message's bytes are sent and its sample checksummed, no reduction computed,
    and the rank holds one send region and one sink (8 MiB here) whatever the op count."""
    dps, _progs, events = lean_job
    n = 12
    ops = [OpItem(program=k % 2, instance=k, after=[k - 2] if k > 1 else []) for k in range(n)]
    res, _ = go_ops(dps, events, ops, timeout_s=60.0)
    for rr in res.values():
        assert rr.bytes_sent == rr.bytes_received == n * SIZE  # ring on 2: SIZE each way
        assert rr.messages_verified > 0 and rr.buffer_crc == -1  # sampled, no results to check
    for dp in dps:
        (ex,) = dp._execs.values()
        assert ex.lean and len(ex.region) == len(ex.sink) == SIZE // 2  # the biggest message
        assert ex.pool.budget.peak == 2 * (SIZE // 2)  # no buffer per op, ever


def test_a_missing_peer_op_times_out_bounded(job) -> None:
    dps, _progs, events = job
    start = time.monotonic_ns() + 10_000_000
    # rank 1 runs only program 1, so rank 0's program 0 can never finish
    dps[0].go(
        Go(job="j1", epoch=1, timeout_s=0.5, ops=[RankOps(rank=0, ops=[OpItem(program=0)])]),
        start,
        events.put,
    )
    dps[1].go(
        Go(job="j1", epoch=1, timeout_s=0.5, ops=[RankOps(rank=1, ops=[OpItem(program=1)])]),
        start,
        events.put,
    )
    t0 = time.monotonic()
    got = [events.get(timeout=10) for _ in dps]
    assert time.monotonic() - t0 < 5
    assert all(e.kind == "run_failed" for e in got)
    assert any(
        "timed out" in e.error or "matches no" in e.error or "not in this rank" in e.error
        for e in got
    )


def test_protocol_round_trip_of_op_lists() -> None:
    from genie.wire.messages import decode, encode

    go = Go(job="j", epoch=2, ops=[RankOps(rank=3, ops=[OpItem(program=1, deps=[], gap_ns=7)])])
    back = decode(encode(go))
    assert back.ops[0].rank == 3 and back.ops[0].ops[0].gap_ns == 7
    # an op list without order deps (an older controller's three fields) still decodes
    old = msgspec.msgpack.encode([1, [0], 5])
    assert msgspec.msgpack.decode(old, type=OpItem) == OpItem(program=1, deps=[0], gap_ns=5)
    assert msgspec.msgpack.decode(encode(Go(job="j")), type=dict).get("ops") == []
