"""The agent process: a thin ZeroMQ shell around ``AgentCore`` and the TCP data plane.

The control socket is bound on ``--listen`` with routing id = agent id; the controller's ROUTER
connects to it. It is a ROUTER, not a DEALER: a DEALER deals its outgoing messages round-robin
over every connected peer, so a second controller (or any stray connection) would receive the
first controller's replies; a ROUTER answers the peer that asked, and the core refuses job
messages from anyone but the holding controller.

One thread runs the loop: poll the control socket and a wake-up pipe the data plane writes to
when it posts an event, feed frames and events to the core, send what it returns, and tick it
for heartbeats. A frame that fails to decode is answered, never fatal.

With a key directory (``keys_dir``, or the ``GENIE_KEYS`` environment variable) the control
socket is a CURVE server and a ZAP handler admits only the trusted controller public keys; each
refused key is logged. Without keys the channel is unauthenticated, which is allowed silently
only on loopback: listening on any other address without keys prints a warning.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import queue
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable

import zmq

from agents.clock import tighten_timer_slack
from agents.facts import host_facts
from agents.state import AgentCore, Event
from agents.transports.rdma_plane import AgentDataPlane  # TCP, and RDMA jobs over verbs
from genie.errors import TransportError, UsageError
from genie.wire.clock import MonotonicClock
from genie.wire.liveness import HEARTBEAT_INTERVAL_S
from genie.wire.messages import Limits, Msg, encode


class _TrustedKeys:
    """ZAP credentials provider: admits the trusted controller keys, logs every refusal."""

    def __init__(self, keys: set[bytes], log: Callable[[str], None]) -> None:
        self.keys = keys
        self.log = log
        self.refused: dict[bytes, int] = {}

    def callback(self, _domain: str, key: bytes) -> bool:
        """True if ``key`` (z85) is a trusted controller key."""
        if key in self.keys:
            return True
        n = self.refused[key] = self.refused.get(key, 0) + 1
        if n == 1 or n % 100 == 0:  # a retrying peer must not flood the log
            self.log(
                f"auth: refused controller with unknown CURVE key {key[:8].decode()}... "
                f"({n} attempt{'s' if n > 1 else ''})"
            )
        return False


def start_auth(ctx: zmq.Context, keys_dir: str, log: Callable[[str], None]):
    """Start a ZAP handler on ``ctx`` admitting the controllers trusted in ``keys_dir``."""
    from zmq.auth.thread import ThreadAuthenticator

    from genie.keys import ZAP_DOMAIN, trusted_controllers

    provider = _TrustedKeys(trusted_controllers(keys_dir), log)
    auth = ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve_callback(ZAP_DOMAIN, credentials_provider=provider)
    return auth, provider


PROBE_THREADS_MAX = 64


def probe_peers(
    targets: dict[str, str], timeout_s: float, done: Callable[[dict[str, str]], None]
) -> None:
    """TCP-connect to every target's data listener in the background; report to ``done``."""

    def one(addr: str) -> str:
        host, _, port = addr.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
                return ""
        except (OSError, ValueError) as exc:
            return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__

    def run() -> None:
        from concurrent.futures import ThreadPoolExecutor

        names = sorted(targets)[: PROBE_THREADS_MAX * 64]
        with ThreadPoolExecutor(max_workers=min(PROBE_THREADS_MAX, max(1, len(names)))) as ex:
            results = list(ex.map(lambda a: one(targets[a]), names))
        done(dict(zip(names, results, strict=True)))

    threading.Thread(target=run, name="genie-probe", daemon=True).start()


def is_loopback(listen: str) -> bool:
    """True if the host part of ``listen`` (IP:PORT) is a loopback address."""
    host = listen.rpartition(":")[0].strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def make_agent_socket(
    ctx: zmq.Context, listen: str, agent_id: str, keys_dir: str | None = None
) -> zmq.Socket:
    """Create the agent's control socket: ROUTER, routing id = agent id, bound on ``listen``."""
    sock = ctx.socket(zmq.ROUTER)
    if keys_dir:
        from genie.keys import ZAP_DOMAIN, agent_pair

        pair = agent_pair(keys_dir, agent_id)
        sock.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN.encode())
        sock.curve_secretkey = pair.secret
        sock.curve_publickey = pair.public
        sock.curve_server = True
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


def agent_logger(agent_id: str) -> logging.Logger:
    """The agent's logger: timestamped lines on stderr, ``genie-agent ID: message``."""
    logger = logging.getLogger(f"agents.{agent_id}")
    if not any(getattr(h, "_genie_agent", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler._genie_agent = True  # type: ignore[attr-defined]
        handler.setFormatter(
            logging.Formatter(
                f"%(asctime)s.%(msecs)03d genie-agent {agent_id}: %(message)s", "%Y-%m-%d %H:%M:%S"
            )
        )
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger


def run_agent(
    listen: str,
    agent_id: str,
    data_addr: str,
    data_port: int = 0,
    heartbeat_s: float = HEARTBEAT_INTERVAL_S,
    log: Callable[[str], None] | None = None,
    ready: Callable[[], None] | None = None,
    keys_dir: str | None = None,
) -> int:
    """Run one agent until it is told to quit (or gets SIGTERM/SIGINT); return an exit code.

    ``keys_dir``: CURVE key directory (see ``genie.keys``); default ``$GENIE_KEYS``, else none.
    """
    say = log or agent_logger(agent_id).info
    tighten_timer_slack()  # inherited by every thread started later (rank workers)
    keys_dir = keys_dir or os.environ.get("GENIE_KEYS") or None
    ctx = zmq.Context()
    auth = None
    if keys_dir:
        try:
            auth, _provider = start_auth(ctx, keys_dir, say)
        except BaseException:
            ctx.term()
            raise
        say(f"control channel: CURVE, controllers trusted from {keys_dir}")
    elif not is_loopback(listen):
        say(
            f"warning: listening on {listen} without keys: any host that reaches it can drive "
            "this agent (run `genie keys init` and start agents with GENIE_KEYS=DIR)"
        )
    try:
        ctl = make_agent_socket(ctx, listen, agent_id, keys_dir)
    except BaseException:
        if auth:
            auth.stop()
        ctx.term()
        raise
    try:
        dp = AgentDataPlane(data_addr, data_port, log=say)
    except TransportError:
        ctl.close(0)
        if auth:
            auth.stop()
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
        prober=probe_peers,
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
        if auth:
            auth.stop()
        ctx.term()
        wake_r.close()
        wake_w.close()
        say("stopped")
    return 0
