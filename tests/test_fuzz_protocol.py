"""Fuzzing the control protocol: the decoder and the agent's state machine take any frame.

Random bytes, msgpack of random shapes under real message tags (wrong types, missing and extra
fields), valid messages with out-of-range sizes, and oversized frames: ``decode`` raises only
``ProtocolError``; ``AgentCore.handle`` never raises and never answers ``internal`` (a bug it
caught). Case counts: FRAME_CASES + SHAPE_CASES + SIZE_CASES + SEQUENCE_CASES examples.
"""

from __future__ import annotations

import contextlib

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from genie.collectives.program import ProgramSpec
from genie.errors import ProtocolError
from genie.wire import messages as p
from genie.wire.clock import FakeClock
from genie.wire.frames import MAX_FRAME_BYTES
from genie_agent.state import AgentCore, State

FRAME_CASES = 3000
SHAPE_CASES = 2000
SIZE_CASES = 1500
SEQUENCE_CASES = 500
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])

TAGS = [
    "hello",
    "hello_reply",
    "heartbeat",
    "time_probe",
    "time_reply",
    "prepare",
    "prepared",
    "go",
    "result",
    "error",
    "abort",
    "release",
    "ack",
    "quit",
    "bye",
    "data_probe",
    "data_probe_reply",
    "nope",
]
FIELDS = [
    "job",
    "epoch",
    "controller",
    "version",
    "protocol",
    "programs",
    "placement",
    "endpoints",
    "options",
    "program",
    "iters",
    "warmup",
    "start_at",
    "offset",
    "timeout_s",
    "spin_ns",
    "streams",
    "t0",
    "reason",
    "x",
]


class NullDataPlane:
    """Accepts every request and does nothing (the core's answers are what is checked)."""

    def endpoint(self) -> tuple[str, int]:
        return "127.0.0.1", 1

    def prepare(self, plan, prep, post) -> None:
        pass

    def go(self, go, start_local_ns, post) -> None:
        pass

    def release(self) -> None:
        pass


def _core() -> AgentCore:
    core = AgentCore("a0", NullDataPlane(), FakeClock(), lambda _e: None)
    core.handle(p.encode(p.Hello(controller="c", version="x")), "peer")
    return core


def _answers_sanely(core: AgentCore, frame: bytes) -> list[p.Msg]:
    out = core.handle(frame, "peer")
    assert isinstance(out, list)
    for m in out:
        assert isinstance(m, p.Msg)
        assert not (isinstance(m, p.Error) and m.code == "internal"), m
        p.decode(p.encode(m))  # every answer is itself a valid frame
    return out


leaf = (
    hs.none()
    | hs.booleans()
    | hs.integers(-(2**63), 2**64 - 1)
    | hs.floats(allow_nan=True)
    | hs.text(max_size=8)
    | hs.binary(max_size=16)
)
values = hs.recursive(
    leaf,
    lambda kids: (
        hs.lists(kids, max_size=4) | hs.dictionaries(hs.text(max_size=6), kids, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=FRAME_CASES, **SETTINGS)
@given(hs.binary(max_size=512))
def test_random_bytes(frame: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        p.decode(frame)
    _answers_sanely(_core(), frame)


@settings(max_examples=SHAPE_CASES, **SETTINGS)
@given(
    tag=hs.sampled_from(TAGS),
    fields=hs.dictionaries(hs.sampled_from(FIELDS), values, max_size=6),
)
def test_real_tags_with_random_fields(tag: str, fields: dict) -> None:
    frame = msgspec.msgpack.encode({"t": tag, **fields})
    try:
        msg = p.decode(frame)
    except ProtocolError:
        msg = None
    if msg is not None:
        assert msg.__struct_config__.tag == tag
    core = _core()
    _answers_sanely(core, frame)
    assert core.state in (State.IDLE, State.PREPARING)


@settings(max_examples=SIZE_CASES, **SETTINGS)
@given(
    n=hs.integers(-(2**31), 2**40),
    size=hs.integers(-(2**63), 2**63 - 1),
    chunks=hs.integers(-(2**31), 2**62),
    streams=hs.integers(-(2**31), 2**31),
    iters=hs.integers(-(2**31), 2**40),
    timeout=hs.floats(allow_nan=True, allow_infinity=True),
    start_at=hs.integers(-(2**63), 2**63 - 1),
)
def test_out_of_range_sizes_are_refused_before_allocation(
    n, size, chunks, streams, iters, timeout, start_at
) -> None:
    core = _core()
    spec = msgspec.msgpack.encode(
        ProgramSpec(collective="all_reduce", algorithm="ring", n_ranks=2, size=1024)
    )
    wild = msgspec.msgpack.encode(
        {
            "collective": "all_reduce",
            "algorithm": "ring",
            "n_ranks": n,
            "size": size,
            "chunks": chunks,
        }
    )
    prep = p.Prepare(
        job="j",
        epoch=1,
        programs=[spec, wild],
        placement=["a0", "a1"],
        endpoints={"a0": "127.0.0.1:1", "a1": "127.0.0.1:2"},
        options=p.DataOptions(streams=streams),
    )
    out = _answers_sanely(core, p.encode(prep))
    if core.state is State.PREPARING:  # accepted: everything asked for is within the limits
        assert core.plan is not None
        for plans in core.plan.rank_plans:  # one program on every local rank at once fits
            total = sum(rp.buffer_bytes + rp.scratch_bytes for rp in plans.values())
            assert total <= core.limits.max_agent_bytes
        core.state = State.PREPARED
        go = p.Go(job="j", epoch=1, iters=iters, timeout_s=timeout, start_at=start_at)
        _answers_sanely(core, p.encode(go))
    else:
        assert out and isinstance(out[0], p.Error)


@settings(max_examples=SEQUENCE_CASES, **SETTINGS)
@given(hs.lists(hs.tuples(hs.sampled_from(TAGS), hs.sampled_from(["peer", "other"])), max_size=12))
def test_any_sequence_of_messages_keeps_the_core_consistent(seq) -> None:
    core = _core()
    for tag, sender in seq:
        frame = msgspec.msgpack.encode({"t": tag, "job": "j", "epoch": 1})
        core.handle(frame, sender)
        core.tick()
        assert (core.state is State.IDLE) == (core.plan is None)


def test_oversized_frame_is_refused_before_decoding() -> None:
    big = b"\x91" + b"\x00" * (MAX_FRAME_BYTES + 1)
    with pytest.raises(ProtocolError, match="exceeds"):
        p.decode(big)
    # a small frame claiming a huge array: msgspec checks the claim against the bytes present
    claim = b"\x82\xa1t\xa7prepare\xa8programs\xdd\xff\xff\xff\xff"
    with pytest.raises(ProtocolError):
        p.decode(claim)
