"""The agent process: a thin ZeroMQ shell around ``AgentCore`` and the TCP data plane.

The control socket is bound on ``--listen`` with routing id = agent id; the controller's ROUTER
connects to it. It is a ROUTER, not a DEALER: a DEALER deals its outgoing messages round-robin
over every connected peer, so a second controller (or any stray connection) would receive the
first controller's replies; a ROUTER answers the peer that asked, and the core refuses job
messages from anyone but the holding controller.

One thread runs the loop: poll the control socket and a wake-up pipe the data plane writes to
when it posts an event, feed frames and events to the core, send what it returns, and tick it
for heartbeats. A frame that fails to decode is answered, never fatal.
"""

from __future__ import annotations

import contextlib
import queue
import signal
import socket
import sys
import time
from collections.abc import Callable

import zmq

from agents.clock import MonotonicClock, tighten_timer_slack
from agents.facts import host_facts
from agents.protocol import Limits, Msg, encode
from agents.state import HEARTBEAT_INTERVAL_S, AgentCore, Event
from agents.transports.tcp import TcpDataPlane
from genie.errors import TransportError, UsageError


def make_agent_socket(ctx: zmq.Context, listen: str, agent_id: str) -> zmq.Socket:
    """Create the agent's control socket: ROUTER, routing id = agent id, bound on ``listen``."""
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.ROUTING_ID, agent_id.encode())
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    sock.setsockopt(zmq.LINGER, 200)
    sock.setsockopt(zmq.SNDHWM, 10_000)
    sock.setsockopt(zmq.MAXMSGSIZE, 32 << 20)  # larger frames are dropped by libzmq itself
    sock.setsockopt(zmq.IPV6, 1)  # accept IPv6 listen addresses ([::1]:PORT) too
    try:
        sock.bind(f"tcp://{listen}")
    except zmq.ZMQError as exc:
        sock.close(0)
        raise UsageError(f"agent cannot listen on {listen}: {exc}") from None
    return sock


def run_agent(
    listen: str,
    agent_id: str,
    data_addr: str,
    data_port: int = 0,
    heartbeat_s: float = HEARTBEAT_INTERVAL_S,
    log: Callable[[str], None] | None = None,
    ready: Callable[[], None] | None = None,
) -> int:
    """Run one agent until it is told to quit (or gets SIGTERM/SIGINT); return an exit code."""
    say = log or (lambda m: print(f"genie-agent {agent_id}: {m}", file=sys.stderr, flush=True))
    tighten_timer_slack()  # inherited by every thread started later (rank workers)
    ctx = zmq.Context()
    ctl = make_agent_socket(ctx, listen, agent_id)
    try:
        dp = TcpDataPlane(data_addr, data_port, log=say)
    except TransportError:
        ctl.close(0)
        ctx.term()
        raise
    events: queue.Queue[Event] = queue.Queue()
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)

    def post(ev: Event) -> None:
        events.put(ev)
        with contextlib.suppress(OSError):
            wake_w.send(b"!")

    core = AgentCore(
        agent_id,
        dp,
        MonotonicClock(),
        post,
        facts=host_facts(),
        limits=Limits(),
        heartbeat_interval_s=heartbeat_s,
    )
    stop = {"flag": False}

    def on_signal(_sig, _frm) -> None:
        stop["flag"] = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(ValueError):
            signal.signal(sig, on_signal)
    poller = zmq.Poller()
    poller.register(ctl, zmq.POLLIN)
    poller.register(wake_r.fileno(), zmq.POLLIN)
    say(f"listening on {listen} (control), {dp.addr}:{dp.port} (data)")
    if ready:
        ready()
    seen_log = 0

    def send(msgs: list[Msg], peer: bytes | None = None) -> None:
        dest = peer if peer is not None else core.peer.encode("latin-1")
        if not dest:
            return
        for m in msgs:
            with contextlib.suppress(zmq.ZMQError):  # peer gone or queue full: drop
                ctl.send_multipart([dest, encode(m)], zmq.NOBLOCK)

    try:
        while not core.quit and not stop["flag"]:
            wait_ms = max(0, (core.next_deadline() - time.monotonic_ns()) // 1_000_000)
            for s, _ in poller.poll(timeout=min(wait_ms + 1, 200)):
                if s is ctl:
                    for _ in range(1000):
                        try:
                            frames = ctl.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        if len(frames) < 2:
                            continue
                        peer, frame = frames[0], frames[-1]
                        send(core.handle(frame, peer.decode("latin-1")), peer)
                else:
                    with contextlib.suppress(BlockingIOError):
                        wake_r.recv(4096)
            while True:
                try:
                    ev = events.get_nowait()
                except queue.Empty:
                    break
                send(core.on_event(ev))
            send(core.tick())
            for line in core.log[seen_log:]:
                say(line)
            seen_log = len(core.log)
    finally:
        dp.close()
        ctl.close(linger=200)
        ctx.term()
        wake_r.close()
        wake_w.close()
        say("stopped")
    return 0
