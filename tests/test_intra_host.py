"""Intra-host steps as a model on the agent: ranks of one agent never talk over TCP.

An agent with several ranks exchanges their steps in memory and takes the modelled time
(``genie_agent.dataplane.intra``): these tests assert it on the agent itself (no connection is made
or accepted for a co-located pair), that every byte still lands where the program says, and that
a step never completes before its modelled time.
"""

from __future__ import annotations

import queue
import time
import zlib

import numpy as np
import pytest

from genie.collectives import build_program
from genie.collectives.data_exec import run_data
from genie.wire.messages import DataOptions, Go, Limits, OpItem, Prepare, RankOps
from genie.wire.tokens import new_token
from genie_agent.dataplane.intra import Mailbox, transfer_ns
from genie_agent.dataplane.tcp import TcpDataPlane, pattern_fill
from genie_agent.plan import plan_agent
from genie_agent.programs import rebuild
from genie_agent.state import Event


@pytest.fixture
def planes():
    made: list[TcpDataPlane] = []

    def make(n: int) -> list[TcpDataPlane]:
        made.extend(TcpDataPlane("127.0.0.1") for _ in range(n))
        return made[-n:]

    yield make
    for dp in made:
        dp.close()


def prepare(dps, programs, placement, **opts):
    """Prepare every plane (agent a<i>) for ``programs``; return the Prepared messages."""
    agents = [f"a{i}" for i in range(len(dps))]
    prep = Prepare(
        job="j1",
        epoch=1,
        programs=[p.to_bytes() for p in programs],
        placement=placement,
        endpoints={a: f"127.0.0.1:{dp.port}" for a, dp in zip(agents, dps, strict=True)},
        options=DataOptions(token=new_token(), **opts),
    )
    events: queue.Queue[Event] = queue.Queue()
    rebuilt = [rebuild(b) for b in prep.programs]
    for a, dp in zip(agents, dps, strict=True):
        dp.prepare(plan_agent(a, rebuilt, placement, Limits()), prep, events.put)
    got = [events.get(timeout=10) for _ in dps]
    assert all(e.kind == "prepared" for e in got), [e.error for e in got]
    return [e.msg for e in got], events


def go(dps, events, **kw):
    """Run a Go on every plane; return global rank -> RankResult."""
    start = time.monotonic_ns() + 20_000_000
    for dp in dps:
        dp.go(Go(job="j1", epoch=1, timeout_s=20.0, **kw), start, events.put)
    got = [events.get(timeout=30) for _ in dps]
    assert all(e.kind == "result" for e in got), [e.error for e in got]
    return {rr.rank: rr for e in got for rr in e.msg.ranks}


def final_crcs(program, reps: int) -> list[int]:
    """Per rank: the CRC of its buffer after ``reps`` runs of ``program`` (what agents report)."""
    bufs = []
    for r in range(program.n_ranks):
        b = np.empty(program.buffer_bytes(r), dtype=np.uint8)
        pattern_fill(b, r)
        bufs.append(b.astype(np.int64))
    for _ in range(reps):
        bufs = [b % 256 for b in run_data(program, bufs).buffers]
    return [zlib.crc32(b.astype(np.uint8).tobytes()) for b in bufs]


def test_ranks_of_one_agent_open_no_tcp_connection_and_take_the_modelled_time(planes) -> None:
    (dp,) = planes(1)
    size = 8 << 20
    bw = 200e6  # bytes/s: a slow intra-host port so the model's time is far above Python's
    prog = build_program("all_reduce", "ring", 2, size)
    (prepared,), events = prepare([dp], [prog], ["a0", "a0"], intra_bandwidth=bw)
    assert prepared.connections == 0
    res = go([dp], events, iters=2, warmup=1)
    # the assertion on the agent: no data connection was opened, offered or accepted
    assert dp._socks == [] and dp.admission.stats["accepted"] == 0
    crcs = final_crcs(prog, 3)
    for r, rr in res.items():
        assert rr.buffer_crc == crcs[r]  # the bytes landed where the program says
        assert rr.bytes_sent == rr.bytes_received == 3 * 2 * (size // 2)
        assert rr.messages_verified == 0  # nothing came over a socket to check
        # a 2-rank ring all-reduce sends S/2 twice, one after the other, through each rank's
        # intra-host port: never faster than the model says
        for s, e in zip(rr.start, rr.end, strict=True):
            assert e - s >= 2 * transfer_ns(size // 2, bw)


def test_intra_host_wire_mode_still_puts_them_on_tcp(planes) -> None:
    (dp,) = planes(1)
    prog = build_program("all_reduce", "ring", 2, 1 << 20)
    (prepared,), events = prepare([dp], [prog], ["a0", "a0"], intra="wire")
    assert prepared.connections == 2  # rank 0 connects to itself on rank 1's side: both ends
    res = go([dp], events, iters=1)
    assert dp.admission.stats["accepted"] == 1
    assert all(rr.messages_verified > 0 for rr in res.values())


def test_mixed_placement_keeps_inter_host_steps_on_the_wire(planes) -> None:
    dps = planes(2)
    prog = build_program("all_reduce", "ring", 4, 4 * 300_000)
    placement = ["a0", "a0", "a1", "a1"]  # ring 0-1 and 2-3 inside agents, 1-2 and 3-0 across
    prepared, events = prepare(dps, [prog], placement, streams=2)
    # each agent: one pair across connected or accepted, two streams each; none within
    assert [p.connections for p in prepared] == [4, 4]
    res = go(dps, events, iters=2, warmup=0)
    crcs = final_crcs(prog, 2)
    for r, rr in res.items():
        assert rr.buffer_crc == crcs[r]
    # ranks 0 and 2 receive from across (3 -> 0, 1 -> 2), ranks 1 and 3 from inside
    assert [res[r].messages_verified > 0 for r in range(4)] == [True, False, True, False]


def test_a_sender_ahead_by_an_iteration_is_parked_and_held(planes) -> None:
    (dp,) = planes(1)
    # a one-way flow: the sender has nothing to wait for but its own SENDs, so it would run
    # ahead of the receiver; its frames of a later iteration wait, and so does the sender
    prog = build_program("send_recv", None, 2, 1 << 20, oneway=True)
    _, events = prepare([dp], [prog], ["a0", "a0"], intra_bandwidth=1e9)
    res = go([dp], events, iters=6, warmup=0)
    assert res[0].bytes_sent == res[1].bytes_received == 6 << 20
    assert res[1].buffer_crc == final_crcs(prog, 6)[1]
    # the sender never finished an iteration before the receiver finished the one before it
    for it in range(1, 6):
        assert res[0].end[it] >= res[1].end[it - 1]


def test_op_lists_of_co_located_ranks_run_in_memory(planes) -> None:
    (dp,) = planes(1)
    progs = [build_program("all_reduce", "ring", 2, 1 << 20, ranks=(0, 1)) for _ in range(2)]
    (prepared,), events = prepare([dp], progs, ["a0", "a0"])
    assert prepared.connections == 0
    ops = [OpItem(program=0), OpItem(program=1, after=[0])]
    res = go([dp], events, ops=[RankOps(rank=r, ops=ops) for r in range(2)])
    for rr in res.values():
        assert rr.bytes_sent == rr.bytes_received == 2 * (1 << 20)
        assert rr.start[1] >= rr.end[0]
    assert dp.admission.stats["accepted"] == 0


def test_a_mailbox_wakes_its_reader_and_never_blocks_its_writers() -> None:
    box = Mailbox()
    try:
        for k in range(100_000):  # far more wake-ups than a pipe holds: put never blocks
            box.put(k)  # type: ignore[arg-type]
        got = box.take()
        assert got == list(range(100_000))
        assert box.take() == []
    finally:
        box.close()
