"""No silent hang on the RDMA plane: a stalled peer is named within the run's bound, and an idle
rank sleeps instead of spinning (over the in-memory fabric of test_rdma_exec)."""

from __future__ import annotations

import time

import pytest
from test_rdma_exec import Fabric, connect_rdma, run_execs, spec
from test_rdma_plane import FabricPlane, _job

from genie.collectives.program import ProgramSpec
from genie.wire.messages import DataOptions, Go, RdmaOptions
from genie.wire.tokens import new_token
from genie_agent.dataplane.rdma_exec import SPIN_POLLS, Backoff


class StalledFabric(Fabric):
    """A fabric whose link to and from ``stalled`` ranks stops: nothing of theirs arrives."""

    def __init__(self, stalled: set[int]) -> None:
        super().__init__(seed=2)
        self.stalled = stalled

    def budget(self, key) -> int:
        src, (dst, _) = key
        return 0 if {src, dst} & self.stalled else super().budget(key)


@pytest.mark.parametrize("events", [False, True])
def test_a_stalled_peer_is_named_by_the_watchdog_within_the_bound(events: bool) -> None:
    fab = StalledFabric({1})
    opts = RdmaOptions(segment=16384, window=4, stall_s=0.5, events=events)
    execs, abort = connect_rdma([spec("flow", "oneway", 2, 100_000)], 2, opts, fab)
    t0 = time.monotonic()
    _, errors = run_execs(execs, abort, Go(job="j", epoch=1, timeout_s=20))
    took = time.monotonic() - t0
    assert took < 5  # the stall bound (0.5 s), far inside the run's timeout (20 s)
    first = next(e for e in errors if "aborted" not in e)
    assert "\n" not in first
    # the sender names its QP (the double's qp_num 0x110: rank 0 -> rank 1, lane 0), the peer
    # and what is stuck there; the receiver names the QP it waits on
    if first.startswith("rank 0"):
        assert first.startswith("rank 0: stalled: no work completion for ")
        assert "QP 0x110 to rank 1 (lane 0): 4 work requests outstanding, 3 queued" in first
    else:
        assert first.startswith("rank 1: stalled: ")
        assert "QP 0x200 to rank 0 (lane 0): waiting for 7 segments of recv 0" in first
    assert "(stall bound 0.5 s)" in first and "iteration 0 of program 0" in first
    # the idle rank slept: a busy-wait polls hundreds of thousands of times in 0.5 s
    assert all(ex.polls < 5000 for ex in execs.values()), [ex.polls for ex in execs.values()]


def test_without_a_stall_bound_the_runs_timeout_bounds_the_wait() -> None:
    fab = StalledFabric({1})
    execs, abort = connect_rdma([spec("flow", "oneway", 2, 4096)], 2, RdmaOptions(), fab)
    t0 = time.monotonic()
    _, errors = run_execs(execs, abort, Go(job="j", epoch=1, timeout_s=0.4))
    assert time.monotonic() - t0 < 4
    first = next(e for e in errors if "aborted" not in e)
    assert "stalled: no work completion" in first and "(stall bound 0.4 s)" in first


def test_backoff_spins_then_sleeps_growing_and_never_past_its_limit() -> None:
    b = Backoff()
    t0 = time.monotonic()
    for _ in range(SPIN_POLLS):
        b.idle(1.0)
    assert time.monotonic() - t0 < 0.05  # spinning: no sleep yet
    sleeps = []
    for _ in range(12):
        before = b.sleep_s
        b.idle(1.0)
        sleeps.append(before)
    assert sleeps[0] < sleeps[3] and max(sleeps) <= 1e-3  # grows, capped at 1 ms
    b.reset()
    assert b.empty == 0 and b.sleep_s == sleeps[0]
    t0 = time.monotonic()
    b.sleep_s = 5.0
    b.empty = SPIN_POLLS
    b.idle(0.01)  # never sleeps past the caller's limit
    assert time.monotonic() - t0 < 1.0


def test_the_stall_reaches_the_controller_as_one_line() -> None:
    fab = StalledFabric({0})
    planes = [FabricPlane(fab), FabricPlane(fab)]
    try:
        s = ProgramSpec(collective="flow", algorithm="oneway", n_ranks=2, size=50_000)
        opts = DataOptions(token=new_token(), transport="rdma",
                           rdma=RdmaOptions(segment=8192, stall_s=0.3))  # fmt: skip
        prepared, ev = _job(planes, [s], ["a0", "a1"], opts, 1)
        assert all(e.kind == "prepared" for e in prepared), prepared
        go = Go(job="j1", epoch=1, iters=2, timeout_s=30)
        t0 = time.monotonic()
        for dp in planes:
            dp.go(go, time.monotonic_ns(), ev.put)
        out = [ev.get(timeout=10) for _ in planes]
        assert time.monotonic() - t0 < 8
        assert all(e.kind == "run_failed" for e in out), out
        for e in out:
            assert "\n" not in e.error and "stalled: no work completion" in e.error
            assert " QP " in e.error and "to rank" in e.error
    finally:
        for dp in planes:
            dp.close()


def test_a_completion_channel_wait_is_bounded_by_flushing_the_queue_pairs() -> None:
    # pyverbs' get_cq_event has no timeout: at the bound a timer moves the QPs to ERR, whose
    # flushed work requests are the event that wakes the rank
    import threading
    from types import SimpleNamespace

    from genie_agent.dataplane.rdma import VerbsRank

    woke = threading.Event()

    class Qp:
        def modify(self, attr, mask) -> None:
            assert attr.qp_state == "ERR" and mask == "STATE"
            woke.set()

    vr = VerbsRank.__new__(VerbsRank)
    vr.pv = SimpleNamespace(qp=SimpleNamespace(QPAttr=lambda qp_state: SimpleNamespace(
        qp_state=qp_state)))  # fmt: skip
    vr.e = SimpleNamespace(IBV_QPS_ERR="ERR", IBV_QP_STATE="STATE")
    vr.qps = {(1, 0): Qp(), (1, 1): Qp()}
    vr._early = []
    vr.cq = SimpleNamespace(req_notify=lambda: None, poll=lambda n: (0, []),
                            ack_events=lambda n: None)  # fmt: skip
    vr.channel = SimpleNamespace(get_cq_event=lambda cq: woke.wait(30))
    t0 = time.monotonic()
    vr.wait(0.2)
    assert woke.is_set() and 0.15 < time.monotonic() - t0 < 5
