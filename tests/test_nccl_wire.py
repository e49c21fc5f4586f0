"""NCCL-style ring programs: NCCL's constants, the pieces, the data they compute, the model's bytes.

The data executor proves every channel / protocol / buffer combination computes its collective;
the cost model must put the protocol's flag bytes on the links and keep channels apart.
"""

from __future__ import annotations

import itertools

import pytest

from genie.collectives import build_program
from genie.collectives.cost import estimate
from genie.collectives.data_exec import verify
from genie.collectives.flowsim import FlowSim, Instance
from genie.collectives.nccl_wire import (
    LL,
    LL128,
    SIMPLE,
    NcclStyle,
    chunk_bytes,
    piece_channels,
    pieces,
    wire_bytes,
)
from genie.collectives.program import Op, Step
from genie.collectives.registry import program_from_bytes
from genie.collectives.topology import switch
from genie.errors import CollectiveError, TransportError

# small buffers (NCCL_BUFFSIZE-like) so a test buffer runs many loops and slices
SMALL = {"simple": 8 * 4096, "ll": 8 * 1024, "ll128": 8 * 1920 * 2}


def test_nccl_constants_give_nccls_chunk_sizes() -> None:
    # NCCL 2.30.7: Simple 4 MiB / 8 steps x 4 chunk steps; LL 512 KiB / 8 / 2; LL128 x 15/16
    assert chunk_bytes(NcclStyle(1, "simple")) == 2 << 20
    assert chunk_bytes(NcclStyle(1, "ll")) == 32768
    assert chunk_bytes(NcclStyle(1, "ll128")) == 576_000


def test_protocol_framing_bytes() -> None:
    assert wire_bytes(SIMPLE, 1000) == 1000
    assert wire_bytes(LL, 1000) == 2000  # 16-byte lines of 8 data bytes
    assert wire_bytes(LL, 1001) == 2016
    assert wire_bytes(LL128, 1200) == 1280  # 128-byte lines of 120 data bytes
    assert wire_bytes(LL128, 1201) == 1408
    assert wire_bytes(LL, 0) == wire_bytes(LL128, 0) == 0


@pytest.mark.parametrize("coll", ["all_reduce", "reduce_scatter", "all_gather"])
@pytest.mark.parametrize("proto", ["simple", "ll128", "ll"])
@pytest.mark.parametrize("channels", [1, 2, 3])
def test_nccl_style_programs_compute_their_collective(coll, proto, channels) -> None:
    for n in (2, 3, 4):
        for size in (0, 48, 100_000, 3 * 65_536 + 16 * n):
            style = NcclStyle(channels, proto, SMALL[proto])
            p = build_program(coll, "ring", n, size * n if coll != "all_reduce" else size,
                              size_convention="nccl", style=style)  # fmt: skip
            verify(p)  # the sum / shards, and no race between concurrent steps
            assert program_from_bytes(p.to_bytes()).spec == p.spec


def test_pieces_cover_each_channel_part_and_pipeline_within_their_channel() -> None:
    p = build_program(
        "all_reduce", "ring", 4, 1 << 20, size_convention="nccl",
        style=NcclStyle(2, "ll", SMALL["ll"]),
    )  # fmt: skip
    ps = pieces(p.spec)
    assert p.spec.chunks == len(ps) > 2
    covered = sorted(r for _, shards in ps for r in shards if r[1])
    assert sum(nb for _, nb in covered) == 1 << 20  # every byte in exactly one piece
    assert all(a[0] + a[1] == b[0] for a, b in itertools.pairwise(covered))
    chans = piece_channels(p.spec)
    half = 1 << 19
    for ch, shards in ps:  # channel 0 the first half of the buffer, channel 1 the second
        assert all((off < half) == (ch == 0) for off, nb in shards if nb)
    steps = p.steps(0)
    for st in steps:
        if st.op == Op.SEND:
            for d in st.deps:  # a SEND waits only on its own channel's steps
                assert chans[steps[d].chunk] == chans[st.chunk]


def test_only_ring_collectives_take_the_style_and_it_chunks_itself() -> None:
    with pytest.raises(CollectiveError, match="NCCL style runs ring"):
        build_program("all_reduce", "direct", 4, 1 << 20, style=NcclStyle(2, "ll"))
    with pytest.raises(CollectiveError, match="chunks itself"):
        build_program("all_reduce", "ring", 4, 1 << 20, chunks=3, style=NcclStyle(1, "ll"))
    with pytest.raises(CollectiveError, match="protocol"):
        NcclStyle(1, "ll64")
    with pytest.raises(CollectiveError, match="channels"):
        NcclStyle(0, "ll")


@pytest.mark.parametrize("proto", ["simple", "ll128", "ll"])
def test_model_links_carry_the_protocols_wire_bytes(proto) -> None:
    n, size = 4, 4 << 20
    topo = switch(n, bandwidth=25e6, latency=20e-6)
    p = build_program("all_reduce", "ring", n, size, size_convention="nccl",
                      style=NcclStyle(2, proto))  # fmt: skip
    sends = [st for st in p.steps(0) if st.op == Op.SEND]
    want = sum(wire_bytes(p_id(proto), st.nbytes) for st in sends)
    for symmetric in (True, False):
        cost = estimate(p, topo, symmetric=symmetric)
        up = topo.route(0, 1)[0]
        assert cost.link_bytes[up] == pytest.approx(want)
        assert cost.bytes_sent == n * sum(st.nbytes for st in sends)  # payload, as before
    plain = estimate(build_program("all_reduce", "ring", n, size, size_convention="nccl"), topo)
    factor = {"simple": 1.0, "ll128": 128 / 120, "ll": 2.0}[proto]
    assert cost.link_bytes[up] / plain.link_bytes[up] == pytest.approx(factor, rel=2e-3)
    assert cost.time_s / plain.time_s == pytest.approx(factor, rel=0.05)


def p_id(proto: str) -> int:
    return {"simple": SIMPLE, "ll128": LL128, "ll": LL}[proto]


@pytest.mark.parametrize("channels", [False, True])
def test_model_keeps_channels_on_connections_of_their_own(channels) -> None:
    # rank 0 sends two 1 MB messages to rank 1; rank 1 copies the first one in (0.75 s).
    # On one connection they go one after the other (the first is in at 1 s); on a connection
    # each (channels) they share the port and both are in at 2 s.
    mb = 1_000_000
    steps = [
        [Step(Op.SEND, 1, mb, 0, chunk=0), Step(Op.SEND, 1, mb, 1, chunk=1)],
        [
            Step(Op.RECV, 0, mb, 0, chunk=0),
            Step(Op.RECV, 0, mb, 1, chunk=1),
            Step(Op.COPY, nbytes=750_000, src=0, deps=(0,)),
        ],
    ]
    inst = Instance(
        steps,
        lambda _r, _st: ((("port", 1.0),), 0.0),
        send_key=lambda r, st, k: (r, st.peer, st.tag, k),
        recv_key=lambda r, st, k: (st.peer, r, st.tag, k),
        channel=(lambda st: st.chunk) if channels else None,
    )
    sim = FlowSim(lambda _k: 1e6, compute_bandwidth=1e6)
    sim.add(inst)
    sim.run()
    assert inst.finish[1] == pytest.approx(2.75 if channels else 2.0)


def test_rdma_plane_refuses_channels_and_flag_bytes() -> None:
    from genie.wire.messages import Limits
    from genie_agent.dataplane.rdma_plane import refuse_nccl_style
    from genie_agent.plan import plan_agent

    def plan(style):
        prog = build_program("all_reduce", "ring", 2, 1 << 16, style=style)
        return plan_agent("a0", [prog], ["a0", "a1"], Limits())

    refuse_nccl_style(plan(None))
    refuse_nccl_style(plan(NcclStyle(1, "simple")))
    for style in (NcclStyle(2, "simple"), NcclStyle(1, "ll")):
        with pytest.raises(TransportError, match="tcp only"):
            refuse_nccl_style(plan(style))


def test_bench_refuses_what_cannot_run_nccl_style(tmp_path) -> None:
    from genie.api.benchmark import BenchSpec, nccl_style
    from genie.errors import UsageError

    spec = BenchSpec(testbed="x.toml", nccl_proto="ll")
    assert nccl_style(BenchSpec(testbed="x.toml"), "all_reduce", "ring", "tcp") is None
    assert nccl_style(spec, "all_reduce", "ring", "tcp") == NcclStyle(1, "ll")
    with pytest.raises(UsageError, match="ring of"):
        nccl_style(spec, "all_to_all", "direct", "tcp")
    with pytest.raises(UsageError, match="tcp transport only"):
        nccl_style(spec, "all_reduce", "ring", "rdma")
