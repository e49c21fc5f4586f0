"""The one control-frame limit, checked where a frame is made and on both receive paths.

Each check at its boundary: a frame of exactly ``MAX_FRAME_BYTES`` passes, one byte more is
refused (by ``encode``, by the controller's channel, by the agent's daemon), with CURVE too.
"""

from __future__ import annotations

import logging
import time

import msgspec
import pytest
import zmq

from genie.controller.channel import ZmqChannel
from genie.controller.local import LocalCluster, free_port_range
from genie.errors import FrameTooLarge, GenieError, ProtocolError
from genie.keys import agent_pair, init_keys
from genie.wire import messages as p
from genie.wire import sockets
from genie.wire.frames import MAX_FRAME_BYTES, SOCKET_MAX_MSG

MAX = MAX_FRAME_BYTES


def _error_of_size(n: int) -> p.Error:
    """An Error message whose frame is exactly ``n`` bytes (n well above 64 KiB)."""
    overhead = len(msgspec.msgpack.encode(p.Error(code="x", message="m" * 70_000))) - 70_000
    return p.Error(code="x", message="m" * (n - overhead))


def test_encode_accepts_a_frame_at_the_limit_and_refuses_one_byte_more() -> None:
    at = _error_of_size(MAX)
    assert len(p.encode(at)) == MAX
    with pytest.raises(FrameTooLarge) as info:
        p.encode(_error_of_size(MAX + 1))
    exc = info.value
    assert isinstance(exc, GenieError) and (exc.size, exc.limit) == (MAX + 1, MAX)
    assert str(exc).startswith(f"the Error frame of {MAX + 1} bytes") and "exceeds" in str(exc)


def test_decode_checks_the_size_before_anything_else() -> None:
    with pytest.raises(FrameTooLarge):
        p.decode(b"\x00" * (MAX + 1))
    with pytest.raises(ProtocolError, match="malformed") as info:
        p.decode(b"\x00" * MAX)  # the right size: refused for its content only
    assert not isinstance(info.value, FrameTooLarge)
    assert isinstance(p.decode(p.encode(_error_of_size(MAX))), p.Error)


def _fake_agent(ctx: zmq.Context, port: int, keys=None) -> zmq.Socket:
    return sockets.agent_socket(ctx, f"127.0.0.1:{port}", "h0", keys)


def _first_frame(ch: ZmqChannel, timeout_s: float = 10.0) -> tuple[str, bytes]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = ch.recv(0.1)
        if got is not None:
            return got
    raise AssertionError("no frame arrived")


@pytest.mark.parametrize("curve", [False, True], ids=["plain", "curve"])
def test_the_controllers_channel_drops_a_frame_one_byte_over(tmp_path, caplog, curve) -> None:
    keys_dir = None
    pair = None
    if curve:
        init_keys(tmp_path, ["h0"])
        keys_dir = str(tmp_path)
        pair = agent_pair(tmp_path, "h0")
    ctx = zmq.Context()
    port = free_port_range(1)
    agent = _fake_agent(ctx, port, pair)
    ch = ZmqChannel({"h0": f"127.0.0.1:{port}"}, ctx=ctx, keys_dir=keys_dir)
    try:
        ch.send("h0", b"hi")  # the fake agent learns the controller's routing id
        assert agent.poll(10_000)
        ctl_id, hi = agent.recv_multipart()
        assert hi == b"hi"
        agent.send_multipart([ctl_id, b"o" * (MAX + 1)])  # dropped by the channel's check
        agent.send_multipart([ctl_id, b"a" * MAX])  # at the limit: delivered
        with caplog.at_level(logging.WARNING, logger="genie.controller.channel"):
            who, frame = _first_frame(ch)
        assert who == "h0" and len(frame) == MAX and frame[:1] == b"a"
        assert f"a control frame from agent h0 of {MAX + 1} bytes" in caplog.text
    finally:
        ch.close()
        agent.close(0)
        ctx.term()


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    cl = LocalCluster.start(1, tmp_path_factory.mktemp("cl"))
    try:
        yield cl.testbed.hosts[0]
    finally:
        cl.stop()


def _ask(host, frame: bytes) -> p.Msg:
    """Send one raw frame to the agent from a fresh connection; decode its one answer."""
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.MAXMSGSIZE, SOCKET_MAX_MSG)
    try:
        s.connect(sockets.endpoint(host.control))
        s.send(frame)
        assert s.poll(15_000), "the agent did not answer"
        return p.decode(s.recv())
    finally:
        s.close(0)
        ctx.term()


def test_the_agent_refuses_a_frame_one_byte_over_before_decoding_it(agent) -> None:
    over = _ask(agent, b"\x00" * (MAX + 1))
    assert isinstance(over, p.Error) and over.code == "limit", over
    assert f"control frame of {MAX + 1} bytes" in over.message
    at = _ask(agent, b"\x00" * MAX)  # passes the size check, then fails to decode
    assert isinstance(at, p.Error) and at.code == "malformed", at
    assert "exceeds" not in at.message


def test_the_agent_replaces_a_reply_too_large_for_the_wire(agent) -> None:
    # a TimeProbe just under the limit asks for a TimeReply (two more clock fields) over it
    overhead = len(p.encode(p.TimeProbe(job="j" * 70_000, t0=1))) - 70_000
    probe = p.TimeProbe(job="j" * (MAX - overhead), t0=1)
    assert len(p.encode(probe)) == MAX
    got = _ask(agent, p.encode(probe))
    assert isinstance(got, p.Error) and got.code == "limit", got
    assert "the TimeReply frame of" in got.message and "exceeds" in got.message
    small = _ask(agent, p.encode(p.TimeProbe(t0=7)))  # the agent is fine afterwards
    assert isinstance(small, p.TimeReply) and small.t0 == 7
