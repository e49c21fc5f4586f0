"""NCCL-style programs on the TCP data plane (loopback): the wire carries what the program and the
model say, each channel on a connection of its own; and ``genie bench`` runs them on local agents.

The bytes each connection carried are read from the kernel (``TCP_INFO``'s
``tcpi_bytes_received`` on the receiving end) before the job is released, and compared with the
program: per SEND of that channel, a 48-byte frame header and the protocol's wire bytes
(``nccl_wire.wire_bytes``); summed over a rank's connections they are the model's bytes on that
rank's link, framing included.
"""

from __future__ import annotations

import json
import queue
import socket
import struct
import time

import msgspec
import pytest

from genie.collectives import build_program
from genie.collectives.cost import estimate
from genie.collectives.nccl_wire import NcclStyle, piece_channels, wire_bytes
from genie.collectives.program import Op, Program
from genie.collectives.topology import switch
from genie.wire.messages import DataOptions, Go, Limits, Prepare
from genie.wire.tokens import new_token
from genie_agent.dataplane.tcp import HDR, TcpDataPlane
from genie_agent.plan import plan_agent
from genie_agent.state import Event

# struct tcp_info: 8 u8, 24 u32, pacing_rate, max_pacing_rate, bytes_acked, bytes_received
BYTES_RECEIVED_AT = 128
SLACK = 40  # the handshake (32 bytes) an accepting side's count also holds


def _received(sock: socket.socket) -> int:
    """Bytes the kernel received on ``sock`` (all in once the receiving rank is done)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return struct.unpack_from("Q", raw, BYTES_RECEIVED_AT)[0]


def _run(dps: list[TcpDataPlane], prog: Program, streams: int, iters: int) -> list[Event]:
    agents = [f"a{i}" for i in range(len(dps))]
    prep = Prepare(
        job="j1",
        epoch=1,
        programs=[prog.to_bytes()],
        placement=agents,
        endpoints={a: f"127.0.0.1:{dp.port}" for a, dp in zip(agents, dps, strict=True)},
        options=DataOptions(streams=streams, token=new_token()),
    )
    events: queue.Queue[Event] = queue.Queue()
    for a, dp in zip(agents, dps, strict=True):
        dp.prepare(plan_agent(a, [prog], agents, Limits()), prep, events.put)
    prepared = [events.get(timeout=10) for _ in dps]
    assert all(e.kind == "prepared" for e in prepared), prepared
    go = Go(job="j1", epoch=1, iters=iters, warmup=0, timeout_s=10.0)
    start = time.monotonic_ns() + 20_000_000
    for dp in dps:
        dp.go(go, start, events.put)
    results = [events.get(timeout=30) for _ in dps]
    assert all(e.kind == "result" for e in results), results
    return results


@pytest.fixture
def planes():
    made = [TcpDataPlane("127.0.0.1") for _ in range(3)]
    yield made
    for dp in made:
        dp.close()


@pytest.mark.parametrize(("proto", "channels"), [("simple", 2), ("ll128", 1), ("ll", 3)])
def test_each_channel_is_its_own_connection_carrying_the_protocols_bytes(
    planes, proto, channels
) -> None:
    n, size, iters = 3, 600_000, 2
    style = NcclStyle(channels, proto, 8 * 8192 if proto != "ll128" else 8 * 1920 * 4)
    prog = build_program("all_reduce", "ring", n, size, size_convention="nccl", style=style)
    results = _run(planes, prog, channels, iters)
    crcs = {r.rank: r.buffer_crc for e in results for r in e.msg.ranks}
    chans = piece_channels(prog.spec)
    topo = switch(n, 1e9, 0.0)
    model = estimate(prog, topo)
    for r in range(n):
        # what the program says rank r puts on each connection to its right neighbour
        want = [0] * channels
        for st in prog.steps(r):
            if st.op == Op.SEND:
                want[chans[st.chunk]] += HDR.size + wire_bytes(style.proto_id, st.nbytes)
        right, left = (r + 1) % n, (r - 1) % n
        assert len(planes[r]._execs[r].streams[right]) == channels  # a connection per channel
        got = [_received(s.sock) for s in planes[right]._execs[right].streams[r]]
        for k in range(channels):
            assert iters * want[k] <= got[k] <= iters * want[k] + SLACK, (r, k, got, want)
        # nothing goes to the left neighbour but the handshake
        assert all(_received(s.sock) <= SLACK for s in planes[left]._execs[left].streams[r])
        # the link's bytes (frame headers aside) are the model's, framing included
        frames = sum(1 for st in prog.steps(r) if st.op == Op.SEND)
        payload_wire = sum(want) - frames * HDR.size
        assert payload_wire == pytest.approx(model.link_bytes[topo.route(r, right)[0]])
    for dp in planes:
        dp.release()
    plain = build_program("all_reduce", "ring", n, size, size_convention="nccl")
    plain_crcs = {r.rank: r.buffer_crc for e in _run(planes, plain, 1, iters) for r in e.msg.ranks}
    assert crcs == plain_crcs  # the same sums as genie's own ring (pattern-filled inputs)
    for dp in planes:
        dp.release()


def test_bench_on_local_agents_runs_nccl_style_and_says_so(tmp_path, capsys) -> None:
    from genie.cli import main
    from genie.controller.local import LocalCluster

    with LocalCluster.start(3, tmp_path) as cl:
        base = ["bench", "--testbed", str(cl.testbed_path), "--no-store", "--repeats", "1"]
        base += ["--sizes", "256KiB", "--iters", "2", "--warmup", "1"]
        assert main([*base, "--nccl-channels", "2", "--nccl-proto", "ll", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["style"] == "NCCL-style ring, 2 channels, LL"
        assert doc["streams"] == 2 and doc["algorithm"] == "ring"
        assert doc["rows"][0]["size"] == 256 << 10 and doc["rows"][0]["modeled_s"] > 0
        assert main([*base, "--nccl-proto", "ll128"]) == 0
        title = " ".join(capsys.readouterr().out.split())  # a long testbed path wraps it
        assert "(NCCL-style ring, 1 channel, LL128)" in title
        assert main([*base, "--json"]) == 0  # without the options: no style, as before
        assert "style" not in json.loads(capsys.readouterr().out)
        code = main([*base, "--collective", "all_to_all", "--nccl-proto", "ll"])
        assert code != 0
        assert "NCCL-style runs the ring of" in capsys.readouterr().err


def test_spec_round_trip_keeps_the_style() -> None:
    prog = build_program("all_gather", "ring", 4, 1 << 20, style=NcclStyle(2, "ll128"))
    spec = msgspec.msgpack.decode(prog.to_bytes(), type=type(prog.spec))
    assert spec.options["nccl_channels"] == 2 and spec.chunks == prog.spec.chunks
