"""The controller's control channels to agents: ZeroMQ ROUTER, and in-process for tests.

A transport moves opaque frames: ``send(agent, frame)`` and ``recv(timeout_s) -> (agent, frame)
| None``. The controller encodes and decodes, so both transports exercise the real codec.

No abort, ever: libzmq asserts (SIGABRT, exit 134) when a peer that answers like a ZMTP 1.0/2.0
socket (anything whose first bytes are not a ZMTP 3 greeting, and then hangs up) reconnects
while the socket closes. Genie's peers all speak ZMTP 3, so the controller's socket sets a ZAP
domain, which makes libzmq refuse the old protocols outright. Every ZeroMQ error becomes a
``ControlUnreachable``; the socket monitor keeps, per agent, what its connection did, so a
silent agent can be described ("nothing listens at ...", "... does not speak genie's control
protocol", "refused the CURVE handshake") instead of a bare timeout.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import zmq

from genie.errors import ControlUnreachable

ZAP_DOMAIN_CONTROLLER = b"genie-controller"  # any non-empty domain: refuses ZMTP 1.0/2.0 peers


class Channel(Protocol):
    """What the controller needs from a control channel."""

    def send(self, agent: str, frame: bytes) -> None:
        """Queue ``frame`` for ``agent``."""
        ...

    def recv(self, timeout_s: float) -> tuple[str, bytes] | None:
        """Next (agent, frame), or None after ``timeout_s``."""
        ...

    def close(self) -> None:
        """Release the channel."""
        ...


_REFUSALS = (
    zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)
_EVENTS = (
    _REFUSALS
    | zmq.EVENT_CONNECTED
    | zmq.EVENT_CONNECT_RETRIED
    | zmq.EVENT_DISCONNECTED
    | zmq.EVENT_HANDSHAKE_SUCCEEDED
)


@dataclass
class Link:
    """What the connection to one agent has done so far (from the socket monitor)."""

    address: str
    tries: int = 0  # failed connection attempts
    connected: int = 0  # TCP connections made
    handshakes: int = 0  # ZMTP handshakes completed

    def describe(self) -> str:
        """One phrase: why this agent may not answer."""
        if self.handshakes:
            return f"the agent at {self.address} is connected but did not answer"
        if self.connected:
            return (
                f"something at {self.address} accepts connections but the control handshake "
                "fails: not a genie agent, or an agent that requires CURVE keys (give the "
                "controller its keys: GENIE_KEYS=DIR or [deploy] keys)"
            )
        if self.tries:
            return f"nothing accepts connections at {self.address} (connection refused)"
        return f"no connection to {self.address} yet"


def _refusal(kind: int, value: int) -> str:
    if kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return f"authentication handshake refused (ZAP status {value})"
    if kind == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        return "the agent closed the CURVE handshake"
    return f"CURVE handshake refused (protocol error {value:#x})"


class ZmqChannel:
    """ROUTER socket connected to every agent's ROUTER; the routing id of a peer = agent id.

    With ``keys_dir`` (see ``genie.keys``) the socket is a CURVE client: its own pair is the
    controller pair, each agent's server key its public key. A handshake an agent refuses is
    recorded in ``refused`` (agent -> reason) from the socket monitor, so the controller can
    say so at once instead of timing out; ``links`` says what every connection did.
    ``devices``: agent -> network interface its connection must leave by (SO_BINDTODEVICE,
    needs CAP_NET_RAW): a netns testbed's controller reaches each agent through its own link.
    """

    def __init__(
        self,
        endpoints: dict[str, str],
        ctx: zmq.Context | None = None,
        identity: str = "",
        keys_dir: str | None = None,
        devices: dict[str, str] | None = None,
    ) -> None:
        self.ctx = ctx or zmq.Context.instance()
        self.curve = bool(keys_dir)
        self.refused: dict[str, str] = {}
        self.links: dict[str, Link] = {}
        self._by_endpoint: dict[str, str] = {}
        try:
            self.sock = self.ctx.socket(zmq.ROUTER)
        except zmq.ZMQError as exc:
            raise ControlUnreachable(f"cannot open the control socket: {exc}") from None
        try:
            self._setup(endpoints, identity, keys_dir, devices or {})
        except zmq.ZMQError as exc:
            self.close()
            raise ControlUnreachable(f"cannot open the control socket: {exc}") from None
        except BaseException:
            self.close()
            raise

    def _setup(
        self,
        endpoints: dict[str, str],
        identity: str,
        keys_dir: str | None,
        devices: dict[str, str],
    ) -> None:
        if keys_dir:
            from genie.keys import CONTROLLER, load_pair

            pair = load_pair(keys_dir, CONTROLLER)
            self.sock.curve_secretkey = pair.secret
            self.sock.curve_publickey = pair.public
        self.sock.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN_CONTROLLER)
        self.monitor = self.sock.get_monitor_socket(_EVENTS)
        if identity:
            self.sock.setsockopt(zmq.ROUTING_ID, identity.encode())
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.LINGER, 200)
        self.sock.setsockopt(zmq.MAXMSGSIZE, 64 << 20)
        self.sock.setsockopt(zmq.IPV6, 1)
        self.poller = zmq.Poller()
        self.poller.register(self.sock, zmq.POLLIN)
        self.poller.register(self.monitor, zmq.POLLIN)
        for name, addr in endpoints.items():
            self.sock.setsockopt(zmq.CONNECT_ROUTING_ID, name.encode())
            host, _, port = addr.rpartition(":")
            target = f"tcp://[{host.strip('[]')}]:{port}" if ":" in host else f"tcp://{addr}"
            if keys_dir:
                from genie.keys import agent_public

                self.sock.curve_serverkey = agent_public(keys_dir, name)
            if devices.get(name):  # all hosts or none (the option sticks to later connects)
                self.sock.setsockopt(zmq.BINDTODEVICE, devices[name].encode())
            self._by_endpoint[target] = name
            self.links[name] = Link(address=addr)
            try:
                self.sock.connect(target)
            except zmq.ZMQError as exc:
                why = f"cannot connect to agent {name} at {addr}: {exc}"
                raise ControlUnreachable(why) from None

    def _monitor_events(self) -> None:
        from zmq.utils.monitor import recv_monitor_message

        for _ in range(10_000):
            try:
                ev = recv_monitor_message(self.monitor, zmq.NOBLOCK)
            except zmq.ZMQError:
                return
            endpoint = ev["endpoint"].decode(errors="replace")
            who = self._by_endpoint.get(endpoint, endpoint)
            link = self.links.get(who)
            kind = ev["event"]
            if kind == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL and not self.curve:
                continue  # the peer hung up mid-handshake: not a genie agent (see Link)
            if kind & _REFUSALS:
                self.refused[who] = _refusal(kind, int(ev["value"]))
            elif link is None:
                continue
            elif kind == zmq.EVENT_CONNECT_RETRIED:
                link.tries += 1
            elif kind == zmq.EVENT_CONNECTED:
                link.connected += 1
            elif kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                link.handshakes += 1
                self.refused.pop(who, None)

    def describe(self, agent: str) -> str:
        """Why ``agent`` may not answer, from what its connection did."""
        with contextlib.suppress(zmq.ZMQError):
            self._monitor_events()
        if agent in self.refused:
            return f"agent {agent} refused the handshake: {self.refused[agent]}"
        link = self.links.get(agent)
        return link.describe() if link else f"agent {agent} is not in this controller's testbed"

    def send(self, agent: str, frame: bytes) -> None:
        """Send one frame to ``agent``; ControlUnreachable if it is not connected."""
        try:
            self.sock.send_multipart([agent.encode(), frame], zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            raise ControlUnreachable(f"cannot send to agent {agent}: {exc}") from None

    def recv(self, timeout_s: float) -> tuple[str, bytes] | None:
        """Next frame from any agent, or None after ``timeout_s``."""
        try:
            ready = dict(self.poller.poll(max(0, int(timeout_s * 1000))))
            if self.monitor in ready:
                self._monitor_events()
            if self.sock not in ready:
                return None
            parts = self.sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return None
        except zmq.ZMQError as exc:
            raise ControlUnreachable(f"control socket failed: {exc}") from None
        if len(parts) < 2:
            return None
        return parts[0].decode(errors="replace"), parts[-1]

    def close(self) -> None:
        """Close the socket (and its monitor); never raises."""
        with contextlib.suppress(zmq.ZMQError, AttributeError):
            self.sock.disable_monitor()
        with contextlib.suppress(zmq.ZMQError, AttributeError):
            self.monitor.close(0)
        with contextlib.suppress(zmq.ZMQError, AttributeError):
            self.sock.close(linger=200)


class InProcChannel:
    """Frames go straight into in-process agent handlers; time moves only on a fake clock.

    ``handlers[agent](frame) -> list[bytes]`` answers a frame; ``pump() -> list[(agent, frame)]``
    yields anything agents produce on their own (events, heartbeats). When nothing is pending,
    ``recv`` advances the clock by ``timeout_s`` via ``advance`` and returns None.
    """

    def __init__(
        self,
        handlers: dict[str, Callable[[bytes], list[bytes]]],
        pump: Callable[[], list[tuple[str, bytes]]],
        advance: Callable[[float], None],
    ) -> None:
        self.handlers = handlers
        self.pump = pump
        self.advance = advance
        self.inbox: deque[tuple[str, bytes]] = deque()
        self.sent: list[tuple[str, bytes]] = []
        self.drop: set[str] = set()  # agents whose frames vanish (a cut cable)

    def send(self, agent: str, frame: bytes) -> None:
        """Deliver ``frame`` to the agent's handler at once."""
        self.sent.append((agent, frame))
        if agent in self.drop:
            return
        if agent not in self.handlers:
            raise ControlUnreachable(f"cannot send to agent {agent}: unknown")
        self.inbox.extend((agent, f) for f in self.handlers[agent](frame))

    def recv(self, timeout_s: float) -> tuple[str, bytes] | None:
        """Next pending frame; else advance the fake clock and return None."""
        if not self.inbox:
            self.inbox.extend(x for x in self.pump() if x[0] not in self.drop)
        if self.inbox:
            return self.inbox.popleft()
        self.advance(timeout_s)
        return None

    def close(self) -> None:
        """Nothing to release."""
