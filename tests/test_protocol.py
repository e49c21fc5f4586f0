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
