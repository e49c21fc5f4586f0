"""The control sockets of both ends, set up in one place: options, CURVE, ZAP domains, monitors.

Both ends are ZeroMQ ROUTER sockets. The agent's is bound on its listen address with routing
id = agent id (a ROUTER, not a DEALER: a DEALER deals its outgoing messages round-robin over
every connected peer, so a stray connection would receive another controller's replies). The
controller's connects to every agent, naming each connection after its agent
(CONNECT_ROUTING_ID), so a frame is addressed by agent name. Both refuse to drop a frame for an
unknown peer silently (ROUTER_MANDATORY), wait at most ``LINGER_MS`` for unsent frames on close,
accept IPv6 addresses, and let libzmq drop a frame larger than the wire's limit before it is
buffered (MAXMSGSIZE: ``frames.SOCKET_MAX_MSG``; the exact limit is checked on each frame).

CURVE: the agent is the server, its ZAP handler admitting the trusted controller keys in
``AGENT_ZAP_DOMAIN``; the controller is a client holding each agent's public key. The
controller's socket always sets a ZAP domain (``CONTROLLER_ZAP_DOMAIN``), with or without keys:
that makes libzmq refuse ZMTP 1.0/2.0 peers outright (libzmq asserts, SIGABRT, when such a peer
reconnects while the socket closes).

A connection that has not completed its handshake within ``AGENT_HANDSHAKE_S`` (agent) or
``CONTROLLER_HANDSHAKE_S`` (controller: it then reconnects) is dropped, so a flood of idle
connections holds an agent's descriptors for seconds, not libzmq's default 30 s.

A monitor socket reports what each connection does; ``read_events`` drains it without blocking.
Imports: pyzmq, the standard library and ``genie.errors`` only (the agent stays light).
"""

from __future__ import annotations

import contextlib
import struct
from dataclasses import dataclass
from typing import Protocol

import zmq

from genie.errors import UsageError
from genie.wire.frames import SOCKET_MAX_MSG

LINGER_MS = 200  # a closing socket waits this long for unsent frames (a Bye, a last Ack)
AGENT_SNDHWM = 10_000  # frames an agent queues for a slow controller before dropping
# a connection to the agent that has not completed the ZMTP (and CURVE) handshake within this
# is dropped (libzmq's default is 30 s): idle connections cannot hold the agent's descriptors
AGENT_HANDSHAKE_S = 2.0
CONTROLLER_HANDSHAKE_S = 3.0  # the controller's connection retries past a stuck handshake
AGENT_ZAP_DOMAIN = "genie"  # the agent's ZAP handler admits controllers in this domain
CONTROLLER_ZAP_DOMAIN = b"genie-controller"  # any non-empty domain: refuses ZMTP 1.0/2.0 peers

# what each end's monitor reports
REFUSALS = (
    zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)
CONTROLLER_EVENTS = (
    REFUSALS
    | zmq.EVENT_CONNECTED
    | zmq.EVENT_CONNECT_RETRIED
    | zmq.EVENT_DISCONNECTED
    | zmq.EVENT_HANDSHAKE_SUCCEEDED
)
# (not HANDSHAKE_FAILED_NO_DETAIL: every port probe that connects and hangs up makes one)
AGENT_EVENTS = (
    zmq.EVENT_ACCEPTED
    | zmq.EVENT_ACCEPT_FAILED
    | zmq.EVENT_DISCONNECTED
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
)


class CurvePair(Protocol):
    """A CURVE key pair, z85 bytes (``genie.keys.KeyPair`` is one)."""

    @property
    def public(self) -> bytes:
        """The public key."""
        ...

    @property
    def secret(self) -> bytes:
        """The secret key."""
        ...


@dataclass(frozen=True)
class SocketEvent:
    """One monitor event: its kind (``zmq.EVENT_*``), value and endpoint."""

    kind: int
    value: int
    endpoint: str


def _common(sock: zmq.Socket, routing_id: str) -> None:
    if routing_id:
        sock.setsockopt(zmq.ROUTING_ID, routing_id.encode())
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    sock.setsockopt(zmq.LINGER, LINGER_MS)
    sock.setsockopt(zmq.MAXMSGSIZE, SOCKET_MAX_MSG)
    sock.setsockopt(zmq.IPV6, 1)  # IPv6 addresses ([::1]:PORT) too


def controller_socket(
    ctx: zmq.Context, identity: str = "", keys: CurvePair | None = None
) -> zmq.Socket:
    """The controller's ROUTER (a CURVE client with ``keys``); zmq.ZMQError on failure."""
    sock = ctx.socket(zmq.ROUTER)
    try:
        if keys is not None:
            sock.curve_secretkey = keys.secret
            sock.curve_publickey = keys.public
        sock.setsockopt(zmq.ZAP_DOMAIN, CONTROLLER_ZAP_DOMAIN)
        sock.setsockopt(zmq.HANDSHAKE_IVL, int(CONTROLLER_HANDSHAKE_S * 1000))
        _common(sock, identity)
    except BaseException:
        sock.close(0)
        raise
    return sock


def endpoint(address: str) -> str:
    """The ZeroMQ endpoint of ``IP:PORT`` (``tcp://[v6]:port`` for an IPv6 address)."""
    host, _, port = address.rpartition(":")
    return f"tcp://[{host.strip('[]')}]:{port}" if ":" in host else f"tcp://{address}"


def connect_agent(
    sock: zmq.Socket,
    name: str,
    address: str,
    server_key: bytes | None = None,
    device: str = "",
) -> str:
    """Connect the controller's ``sock`` to agent ``name`` at ``address``; return the endpoint.

    ``server_key``: the agent's CURVE public key (a CURVE socket); ``device``: the network
    interface the connection must leave by (SO_BINDTODEVICE, needs CAP_NET_RAW; the option
    sticks to later connects, so give it for all agents or none). zmq.ZMQError on failure.
    """
    target = endpoint(address)
    sock.setsockopt(zmq.CONNECT_ROUTING_ID, name.encode())
    if server_key is not None:
        sock.curve_serverkey = server_key
    if device:
        sock.setsockopt(zmq.BINDTODEVICE, device.encode())
    sock.connect(target)
    return target


def agent_socket(
    ctx: zmq.Context, listen: str, agent_id: str, keys: CurvePair | None = None
) -> zmq.Socket:
    """The agent's ROUTER bound on ``listen`` (a CURVE server with ``keys``); UsageError if not."""
    sock = ctx.socket(zmq.ROUTER)
    try:
        if keys is not None:
            sock.setsockopt(zmq.ZAP_DOMAIN, AGENT_ZAP_DOMAIN.encode())
            sock.curve_secretkey = keys.secret
            sock.curve_publickey = keys.public
            sock.curve_server = True
        _common(sock, agent_id)
        sock.setsockopt(zmq.SNDHWM, AGENT_SNDHWM)
        sock.setsockopt(zmq.HANDSHAKE_IVL, int(AGENT_HANDSHAKE_S * 1000))
        sock.bind(f"tcp://{listen}")
    except zmq.ZMQError as exc:
        sock.close(0)
        raise UsageError(f"agent cannot listen on {listen}: {exc}") from None
    return sock


def monitor(sock: zmq.Socket, events: int) -> zmq.Socket:
    """A PAIR socket receiving ``sock``'s monitor ``events``."""
    return sock.get_monitor_socket(events)


def read_events(mon: zmq.Socket, most: int = 1000) -> list[SocketEvent]:
    """Up to ``most`` monitor events queued on ``mon`` (never blocks)."""
    out: list[SocketEvent] = []
    for _ in range(most):
        try:
            head, where = mon.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            break
        except ValueError:  # not two frames: not a monitor event
            continue
        if len(head) != 6:
            continue
        kind, value = struct.unpack("=HI", head)
        out.append(SocketEvent(kind, value, where.decode(errors="replace")))
    return out


def close(sock: zmq.Socket, mon: zmq.Socket | None = None) -> None:
    """Close ``sock`` and its monitor (never raises)."""
    if mon is not None:
        with contextlib.suppress(zmq.ZMQError):
            sock.disable_monitor()
        with contextlib.suppress(zmq.ZMQError):
            mon.close(0)
    with contextlib.suppress(zmq.ZMQError):
        sock.close(linger=LINGER_MS)
