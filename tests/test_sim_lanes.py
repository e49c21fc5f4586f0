"""Lanes (genie.sim.lanes): CPU, GPU compute and GPU streams run in parallel, each one at a time."""

from __future__ import annotations

import numpy as np
import pytest

from genie.errors import DeadlockError
from genie.sim.compiled import GraphBuilder
from genie.sim.engine import simulate
from genie.sim.lanes import lane_key
from genie.sim.network import FixedTimeBackend
from genie.sim.symmetry import representatives

US = 1e-6


class PerSize(FixedTimeBackend):
    """Every instance takes its size in microseconds, alone or not."""

    def __init__(self) -> None:
        super().__init__("per-size")

    def duration(self, transfer) -> float:
        return transfer.size * US


def times(cw, raw, rank=0):
    sl = raw.rank_slice(raw.sim_ranks.index(rank))
    return list(zip(raw.start[sl] / US, raw.end[sl] / US, strict=True))


def test_lane_key_rules():
    assert lane_key("compute", True, None) == "cpu"
    assert lane_key("compute", True, 7) == "cpu"  # a CPU op's stream is not a GPU stream
    assert lane_key("host", True, None) == "cpu"
    assert lane_key("compute", False, None) == "gpu"
    assert lane_key("compute", False, 7) == "stream 7"
    assert lane_key("collective", False, 20) == "stream 20"
    assert lane_key("recv", False, 20) == "stream 20"
    assert lane_key("collective", False, None) is None  # left to the network model
    assert lane_key("memory", False, 3) is None
    assert lane_key("other", True, None) is None


def test_lanes_run_in_parallel_and_each_one_at_a_time():
    b = GraphBuilder(1)
    a = b.compute(0, 1 * US, lane="cpu")
    b.compute(0, 3 * US, lane="cpu")  # ready at 0 too: waits for a
    b.compute(0, 2 * US, lane="stream 7")  # another lane: runs at once
    b.compute(0, 2 * US, deps=[a], lane="stream 7")  # ready at 1, stream 7 busy until 2
    raw = simulate(b.build(), PerSize())
    assert times(None, raw) == [
        pytest.approx((0, 1)),
        pytest.approx((1, 4)),
        pytest.approx((0, 2)),
        pytest.approx((2, 4)),
    ]
    assert raw.ready[3] == pytest.approx(1 * US)  # ready when a ended; started at 2


def test_collectives_on_one_stream_run_in_issue_order_on_other_streams_overlap():
    b = GraphBuilder(2)
    b.group("A")
    b.group("B")
    for r in range(2):
        b.collective(r, "all_reduce", 5, "A", lane="stream 20")
        b.collective(r, "all_reduce", 3, "B", lane="stream 20")
        b.collective(r, "all_gather", 4, "A", lane="stream 24")
    raw = simulate(b.build(), PerSize())
    t = times(None, raw)
    assert t[0] == pytest.approx((0, 5))
    assert t[1] == pytest.approx((5, 8))  # queued behind the first on stream 20
    assert t[2] == pytest.approx((0, 4))  # stream 24 overlaps
    # without lanes (genie's model for communication without a stream) all three overlap
    b2 = GraphBuilder(2)
    b2.group("A")
    b2.group("B")
    for r in range(2):
        b2.collective(r, "all_reduce", 5, "A")
        b2.collective(r, "all_reduce", 3, "B")
    assert times(None, simulate(b2.build(), PerSize()))[1] == pytest.approx((0, 3))


def test_a_kernel_on_the_stream_of_a_collective_waits_for_it_and_compute_elsewhere_does_not():
    b = GraphBuilder(2)
    for r in range(2):
        b.collective(r, "all_reduce", 6, lane="stream 20")
        b.compute(r, 1 * US, lane="stream 20")  # same stream: after the collective
        b.compute(r, 1 * US, lane="stream 7")  # compute stream: at once
    raw = simulate(b.build(), PerSize())
    t = times(None, raw, rank=1)
    assert t[1] == pytest.approx((6, 7)) and t[2] == pytest.approx((0, 1))


def test_time_queued_for_the_lane_is_reported_as_wait_not_compute():
    from genie.sim.report import build_report

    b = GraphBuilder(2)
    for r in range(2):
        b.collective(r, "all_reduce", 4, lane="stream 20")
        b.collective(r, "all_reduce", 4, lane="stream 20")
    cw = b.build()
    raw = simulate(cw, PerSize())
    rep = build_report(cw, raw)
    assert rep.iteration_s == pytest.approx(8 * US)
    assert rep.ranks[0].compute == 0.0
    assert rep.ranks[0].exposed_comm == pytest.approx(8 * US)
    assert raw.ready[1] == 0.0 and raw.start[1] == pytest.approx(4 * US)


def test_opposite_issue_orders_on_one_stream_deadlock_and_the_message_names_the_lane():
    b = GraphBuilder(2)
    b.group("A")
    b.group("B")
    b.collective(0, "all_reduce", 1, "A", name="ar_A", lane="stream 20")
    b.collective(0, "all_reduce", 1, "B", name="ar_B", lane="stream 20")
    b.collective(1, "all_reduce", 1, "B", name="ar_B", lane="stream 20")
    b.collective(1, "all_reduce", 1, "A", name="ar_A", lane="stream 20")
    with pytest.raises(DeadlockError) as e:
        simulate(b.build(), PerSize())
    msg = str(e.value)
    assert "rank 0: node ar_A (all_reduce #0 of group 'A') waits for ranks [1]" in msg
    assert "node ar_B is queued on lane 'stream 20' behind node ar_A" in msg
    assert "rank 1: node ar_B (all_reduce #0 of group 'B') waits for ranks [0]" in msg


def test_merging_compute_runs_is_skipped_with_several_lanes_and_times_stay_exact():
    b = GraphBuilder(2)
    for r in range(2):
        prev = None
        for k in range(6):
            prev = b.compute(r, (k + 1) * US, deps=[prev] if prev is not None else [], lane="cpu")
            g = b.compute(r, 2 * US, deps=[prev], lane="stream 7")
        c = b.collective(r, "all_reduce", 3, deps=[g], lane="stream 20")
        b.compute(r, 1 * US, deps=[c], lane="cpu")
    cw = b.build()
    merged, plain = simulate(cw, PerSize()), simulate(cw, PerSize(), merge_chains=False)
    assert np.array_equal(merged.end, plain.end) and np.array_equal(merged.start, plain.start)
    # by hand: cpu ops end at 1, 3, 6, 10, 15, 21; each gpu kernel 2 us after its cpu op (the
    # stream is free by then); the collective at 23..26; the last cpu op 26..27
    assert plain.makespan == pytest.approx(27 * US)


def test_lanes_are_part_of_the_symmetry_proof():
    b = GraphBuilder(2)
    for r in range(2):
        b.compute(r, 1 * US, lane="cpu")
        b.compute(r, 1 * US, lane="cpu" if r == 0 else "gpu")
    cw = b.build()
    assert representatives(cw) is None  # rank 0 runs them in sequence, rank 1 in parallel
    raw = simulate(cw, PerSize())
    assert raw.end[1] == pytest.approx(2 * US) and raw.end[3] == pytest.approx(1 * US)
