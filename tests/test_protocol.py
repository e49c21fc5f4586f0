"""The control protocol: every message round-trips; bad frames raise ProtocolError only."""

from __future__ import annotations

import contextlib

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from genie.errors import ProtocolError
from genie.wire import messages as p
from genie.wire.clock import estimate_offset, sample_offset
from genie.wire.frames import MAX_FRAME_BYTES

SAMPLES = [
    p.Hello(controller="c1", version="0.1.0"),
    p.HelloReply(
        agent="a0",
        version="0.1.0",
        protocol=1,
        facts=p.HostFacts(cpus_logical=2),
        data_addr="127.0.0.1",
        data_port=5000,
    ),
    p.Heartbeat(job="j", epoch=3, seq=7),
    p.TimeProbe(t0=12),
    p.TimeReply(t0=1, t1=2, t2=3),
    p.Prepare(
        job="j",
        epoch=1,
        programs=[b"\x80"],
        placement=["a0", "a1"],
        endpoints={"a0": "127.0.0.1:1", "a1": "127.0.0.1:2"},
    ),
    p.Prepared(job="j", epoch=1, ranks=[0], connections=1, setup_s=0.01),
    p.Go(job="j", epoch=1, program=0, iters=3, warmup=1, start_at=10, offset=-5),
    p.Result(
        job="j",
        epoch=1,
        program=0,
        warmup=1,
        ranks=[p.RankResult(rank=0, start=[1, 2], end=[3, 4])],
    ),
    p.Error(code="stale", message="x"),
    p.Abort(job="j", epoch=1, reason="r"),
    p.Release(job="j", epoch=1),
    p.Ack(what="abort"),
    p.Quit(),
    p.Bye(),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(msg: p.Msg) -> None:
    assert p.decode(p.encode(msg)) == msg


def test_wrong_types_and_unknown_tags_are_protocol_errors() -> None:
    bad = [
        b"",
        b"\xc1",
        msgspec.msgpack.encode({"t": "nope"}),
        msgspec.msgpack.encode({"t": "go", "iters": "many"}),
        msgspec.msgpack.encode({"t": "prepare", "programs": 5}),
        msgspec.msgpack.encode({"t": "hello", "controller": "c", "version": "v", "evil": 1}),
        msgspec.msgpack.encode([1, 2, 3]),
    ]
    for frame in bad:
        with pytest.raises(ProtocolError):
            p.decode(frame)


def test_oversized_frame_refused_before_decoding() -> None:
    with pytest.raises(ProtocolError, match="exceeds"):
        p.decode(b"\x00" * (MAX_FRAME_BYTES + 1))


@settings(max_examples=300, deadline=None)
@given(hs.binary(max_size=200))
def test_random_bytes_never_raise_anything_else(frame: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        p.decode(frame)


def test_offset_estimate_prefers_min_rtt_sample() -> None:
    # agent clock = controller + 1000 ns; one fast symmetric sample, two slow asymmetric ones
    fast = (0, 1000 + 50, 1000 + 60, 110)
    slow1 = (0, 1000 + 5000, 1000 + 5010, 5100)
    slow2 = (0, 1000 + 100, 1000 + 110, 9000)
    est = estimate_offset([slow1, fast, slow2])
    assert est.offset_ns == sample_offset(*fast)[0] == 1000
    assert est.rtt_min_ns == 100
    assert est.uncertainty_ns == 50
    assert est.samples == 3


def test_rdma_options_round_trip_and_a_frame_without_the_traffic_class_decodes() -> None:
    ro = p.RdmaOptions(qps=4, stall_s=2.5, traffic_class=106, rank_devices=["mlx5_0", ""])
    prep = p.Prepare(job="j", epoch=1, programs=[b"\x80"], placement=["a0"],
                     endpoints={"a0": "127.0.0.1:1"},
                     options=p.DataOptions(transport="rdma", rdma=ro))  # fmt: skip
    back = p.decode(p.encode(prep))
    assert isinstance(back, p.Prepare) and back.options.rdma == ro
    # an agent of this protocol reading a controller's options that name no traffic class
    old = msgspec.msgpack.decode(p.encode(prep))
    del old["options"]["rdma"]["traffic_class"]
    again = p.decode(msgspec.msgpack.encode(old))
    assert isinstance(again, p.Prepare) and again.options.rdma.traffic_class == 0
    held = p.WireConditions(nics={"mlx5_0": {"rdma_qps": "4", "rdma_traffic_class": "106"}})
    prepared = p.Prepared(job="j", epoch=1, ranks=[0], connections=1, setup_s=0.1,
                          conditions=held)  # fmt: skip
    assert p.decode(p.encode(prepared)) == prepared


def test_the_largest_result_with_counters_at_every_bound_fits_one_frame() -> None:
    """genie.wire.frames' size note: 8 ranks x max_iters iterations of times, and counters at
    every bound of genie.wire.counters (16 sources x 256 names of 64 characters, values
    2^63-1, 32 samples of 32 names each), in one frame under the limit."""
    from genie.wire import counters as c

    def name(i: int) -> str:
        return f"n{i:05d}".ljust(c.MAX_NAME, "x")

    sample = c.CounterSample(
        t_ms=c.MAX_VALUE, deltas={name(i): c.MAX_VALUE for i in range(c.MAX_SAMPLE_COUNTERS)}
    )
    sets = [c.CounterSet(source=f"rdma:dev{s}/1".ljust(c.MAX_NAME, "d"),
                         deltas={name(i): c.MAX_VALUE for i in range(c.MAX_COUNTERS)},
                         samples=[sample] * c.MAX_SAMPLES)
            for s in range(c.MAX_SOURCES)]  # fmt: skip
    iters = p.Limits().max_iters
    t = [(1 << 62) + i for i in range(iters)]
    ranks = [p.RankResult(rank=r, start=t, end=t) for r in range(8)]
    frame = p.encode(p.Result(program=0, warmup=0, ranks=ranks, counters=sets))
    assert 14 << 20 < len(frame) <= MAX_FRAME_BYTES
    back = p.decode(frame)
    assert isinstance(back, p.Result) and back.counters == sets
