"""TCP data plane in-process: real sockets on loopback, two or three planes, checked bytes."""

from __future__ import annotations

import queue
import socket
import struct
import zlib

import msgspec
import pytest

from genie.collectives.program import ProgramSpec
from genie.wire.messages import DataOptions, Go, Limits, Prepare
from genie.wire.tokens import new_token, token_bytes
from genie_agent.dataplane.tcp import HANDSHAKE, HANDSHAKE_MAGIC, HDR, TcpDataPlane, split_parts
from genie_agent.plan import plan_agent
from genie_agent.programs import builtin_program
from genie_agent.state import Event


@pytest.fixture
def planes():
    made: list[TcpDataPlane] = []

    def make(n: int) -> list[TcpDataPlane]:
        for _ in range(n):
            made.append(TcpDataPlane("127.0.0.1"))
        return made[-n:]

    yield make
    for dp in made:
        dp.close()


def spec(collective: str, algorithm: str, n: int, size: int, chunks: int = 1) -> ProgramSpec:
    return ProgramSpec(
        collective=collective, algorithm=algorithm, n_ranks=n, size=size, chunks=chunks
    )


def run_job(dps, specs, placement, opts=None, iters=2, warmup=1, timeout_s=5.0):
    """Prepare every plane for the job, run program 0 on all, return the posted events."""
    agents = [f"a{i}" for i in range(len(dps))]
    opts = opts or DataOptions(token=new_token())
    prep = Prepare(
        job="j1",
        epoch=1,
        programs=[msgspec.msgpack.encode(s) for s in specs],
        placement=placement,
        endpoints={a: f"127.0.0.1:{dp.port}" for a, dp in zip(agents, dps, strict=True)},
        options=opts,
    )
    events: queue.Queue[Event] = queue.Queue()
    programs = [builtin_program(s) for s in specs]
    for a, dp in zip(agents, dps, strict=True):
        dp.prepare(plan_agent(a, programs, placement, Limits()), prep, events.put)
    prepared = [events.get(timeout=10) for _ in dps]
    assert all(e.kind == "prepared" for e in prepared), prepared
    go = Go(job="j1", epoch=1, iters=iters, warmup=warmup, timeout_s=timeout_s, record_steps=True)
    import time

    start = time.monotonic_ns() + 20_000_000
    for dp in dps:
        dp.go(go, start, events.put)
    return prepared, [events.get(timeout=20) for _ in dps], start


def test_split_parts_covers_message_exactly() -> None:
    for nbytes in (0, 1, 1000, 65536 * 4 + 3, 10**7):
        for streams in (1, 2, 4, 7):
            parts = split_parts(nbytes, streams, 65536)
            assert sum(ln for _, ln in parts) == nbytes
            assert all(off == sum(ln for _, ln in parts[:i]) for i, (off, _) in enumerate(parts))
            assert 1 <= len(parts) <= streams


@pytest.mark.parametrize("streams", [1, 4])
def test_point_to_point_moves_and_checks_every_byte(planes, streams: int) -> None:
    dps = planes(2)
    size = 3 * 1024 * 1024 + 17
    prepared, results, start = run_job(
        dps,
        [spec("flow", "oneway", 2, size)],
        ["a0", "a1"],
        DataOptions(streams=streams, token=new_token()),
    )
    assert [e.msg.connections for e in prepared] == [streams, streams]
    assert all(e.kind == "result" for e in results), results
    by_rank = {r.rank: r for e in results for r in e.msg.ranks}
    send_rank, recv_rank = by_rank[0], by_rank[1]
    assert send_rank.bytes_sent == size * 3  # 1 warm-up + 2 iterations
    assert recv_rank.bytes_received == size * 3
    parts = len(split_parts(size, streams, 65536))
    assert recv_rank.messages_verified == 3 * parts
    assert len(recv_rank.start) == 3 and all(
        e >= s for s, e in zip(recv_rank.start, recv_rank.end, strict=False)
    )
    assert recv_rank.start[0] >= start  # nothing began before the requested start


@pytest.mark.parametrize("intra", ["wire", "model"])
def test_several_ranks_per_agent_and_every_step_kind(planes, intra: str) -> None:
    dps = planes(2)
    # ranks 0 and 2 share agent a0; the ring 0->1->2->0 crosses agents and stays on one
    s = spec("selftest", "ring", 3, 3 * 40_000, chunks=4)
    opts = DataOptions(token=new_token(), intra=intra)
    prepared, results, _ = run_job(dps, [s], ["a0", "a1", "a0"], opts, iters=3, warmup=0)
    assert all(e.kind == "result" for e in results), results
    ranks = {r.rank: r for e in results for r in e.msg.ranks}
    assert sorted(ranks) == [0, 1, 2]
    for r in ranks.values():
        assert r.bytes_received == 3 * 4 * (s.size // 4)
        assert len(r.step_start) == 3 and len(r.step_start[0]) == 12
    if intra == "wire":  # every step on TCP, also 2 -> 0 on a0 itself: all CRC-checked
        assert all(r.messages_verified == 3 * 4 for r in ranks.values())
        assert dps[0].admission.stats["accepted"] == 2  # from rank 0 (itself) and rank 1
    else:  # 2 -> 0 stays in a0's memory (no connection, no frame to check); the rest is TCP
        assert [ranks[r].messages_verified for r in (0, 1, 2)] == [0, 3 * 4, 3 * 4]
        assert [e.msg.connections for e in prepared] == [2, 2]
        assert dps[0].admission.stats["accepted"] == 1  # rank 1 -> 2 only


def _fake_sender(dp: TcpDataPlane, token: str, frames: list[bytes]) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", dp.port))
    sock.sendall(HANDSHAKE.pack(HANDSHAKE_MAGIC, token_bytes(token), 0, 1, 0, 1))
    for f in frames:
        sock.sendall(f)
    return sock


def _prepare_receiver(dp: TcpDataPlane, token: str, size: int, timeout: float = 3.0):
    s = spec("flow", "oneway", 2, size)
    prep = Prepare(
        job="j1",
        epoch=1,
        programs=[msgspec.msgpack.encode(s)],
        placement=["x", "a1"],
        endpoints={"x": "127.0.0.1:1", "a1": f"127.0.0.1:{dp.port}"},
        options=DataOptions(token=token, connect_timeout_s=timeout),
    )
    events: queue.Queue[Event] = queue.Queue()
    dp.prepare(plan_agent("a1", [builtin_program(s)], prep.placement, Limits()), prep, events.put)
    return events


def test_corrupted_payload_is_detected(planes) -> None:
    (dp,) = planes(1)
    token, size = new_token(), 4096
    payload = bytes(range(256)) * 16
    bad_crc = zlib.crc32(payload) ^ 1
    frame = HDR.pack(0, 0, 0, 1, 0, 0, 0, 1, 0, size, bad_crc) + payload
    sock = _fake_sender(dp, token, [frame])
    events = _prepare_receiver(dp, token, size)
    assert events.get(timeout=5).kind == "prepared"
    dp.go(Go(job="j1", epoch=1, timeout_s=3), 0, events.put)
    ev = events.get(timeout=5)
    sock.close()
    assert ev.kind == "run_failed" and "CRC mismatch" in ev.error


def test_frame_for_no_receive_is_rejected(planes) -> None:
    (dp,) = planes(1)
    token = new_token()
    frame = HDR.pack(0, 0, 0, 1, 99, 0, 0, 1, 0, 8, 0) + bytes(8)  # tag 99: no such recv
    sock = _fake_sender(dp, token, [frame])
    events = _prepare_receiver(dp, token, 8)
    assert events.get(timeout=5).kind == "prepared"
    dp.go(Go(job="j1", epoch=1, timeout_s=3), 0, events.put)
    ev = events.get(timeout=5)
    sock.close()
    assert ev.kind == "run_failed" and "matches no receive" in ev.error


def test_silent_peer_times_out_within_bound(planes) -> None:
    (dp,) = planes(1)
    token = new_token()
    sock = _fake_sender(dp, token, [])
    events = _prepare_receiver(dp, token, 8)
    assert events.get(timeout=5).kind == "prepared"
    dp.go(Go(job="j1", epoch=1, timeout_s=0.2), 0, events.put)
    ev = events.get(timeout=3)
    sock.close()
    assert ev.kind == "run_failed" and "timed out" in ev.error and "recv 0 peer 0" in ev.error


def test_missing_peer_fails_prepare_within_bound(planes) -> None:
    (dp,) = planes(1)
    events = _prepare_receiver(dp, new_token(), 8, timeout=0.3)
    ev = events.get(timeout=5)
    assert ev.kind == "prepare_failed" and "did not arrive" in ev.error


def test_header_layout_is_48_bytes() -> None:
    assert HDR.size == 48 and struct.calcsize("<4s16sIIHH") == HANDSHAKE.size


def test_silent_stranger_does_not_block_the_job_and_release_is_prompt(planes) -> None:
    import time

    dps = planes(2)
    stranger = socket.create_connection(("127.0.0.1", dps[1].port))  # connects, says nothing
    try:
        agents = ["a0", "a1"]
        s = spec("flow", "oneway", 2, 1024)
        prep = Prepare(
            job="j1",
            epoch=1,
            programs=[msgspec.msgpack.encode(s)],
            placement=agents,
            endpoints={a: f"127.0.0.1:{dp.port}" for a, dp in zip(agents, dps, strict=True)},
            options=DataOptions(token=new_token(), connect_timeout_s=2),
        )
        events: queue.Queue[Event] = queue.Queue()
        t0 = time.monotonic()
        for a, dp in zip(agents, dps, strict=True):
            dp.prepare(plan_agent(a, [builtin_program(s)], agents, Limits()), prep, events.put)
        assert [events.get(timeout=5).kind for _ in dps] == ["prepared", "prepared"]
        assert time.monotonic() - t0 < 1.5  # not held up by the stranger's handshake timeout
        far = time.monotonic_ns() + 30 * 10**9
        for dp in dps:
            dp.go(Go(job="j1", epoch=1), far, events.put)
        t1 = time.monotonic()
        for dp in dps:
            dp.release()
        assert time.monotonic() - t1 < 1.0  # the waiting ranks gave up at once
    finally:
        stranger.close()
