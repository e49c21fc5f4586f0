"""Control-channel transports for the controller: ZeroMQ ROUTER, and in-process for tests.

A transport moves opaque frames: ``send(agent, frame)`` and ``recv(timeout_s) -> (agent, frame)
| None``. The controller encodes and decodes, so both transports exercise the real codec.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable
from typing import Protocol

import zmq

from genie.errors import ControlUnreachable


class Transport(Protocol):
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


_AUTH_EVENTS = zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL


class ZmqTransport:
    """ROUTER socket connected to every agent's ROUTER; the routing id of a peer = agent id.

    With ``keys_dir`` (see ``genie.keys``) the socket is a CURVE client: its own pair is the
    controller pair, each agent's server key its public key. A handshake an agent refuses is
    recorded in ``refused`` (agent -> reason) from the socket monitor, so the controller can
    say so at once instead of timing out.
    """

    def __init__(
        self,
        endpoints: dict[str, str],
        ctx: zmq.Context | None = None,
        identity: str = "",
        keys_dir: str | None = None,
    ) -> None:
        self.ctx = ctx or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.refused: dict[str, str] = {}
        self._by_endpoint: dict[str, str] = {}
        if keys_dir:
            from genie.keys import CONTROLLER, load_pair

            pair = load_pair(keys_dir, CONTROLLER)
            self.sock.curve_secretkey = pair.secret
            self.sock.curve_publickey = pair.public
        self.monitor = self.sock.get_monitor_socket(_AUTH_EVENTS)
        if identity:
            self.sock.setsockopt(zmq.ROUTING_ID, identity.encode())
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.LINGER, 200)
        self.sock.setsockopt(zmq.MAXMSGSIZE, 64 << 20)
        self.sock.setsockopt(zmq.IPV6, 1)
        for name, addr in endpoints.items():
            self.sock.setsockopt(zmq.CONNECT_ROUTING_ID, name.encode())
            host, _, port = addr.rpartition(":")
            target = f"tcp://[{host.strip('[]')}]:{port}" if ":" in host else f"tcp://{addr}"
            if keys_dir:
                from genie.keys import agent_public

                self.sock.curve_serverkey = agent_public(keys_dir, name)
            self._by_endpoint[target] = name
            self.sock.connect(target)
        self.poller = zmq.Poller()
        self.poller.register(self.sock, zmq.POLLIN)
        self.poller.register(self.monitor, zmq.POLLIN)

    def _monitor_events(self) -> None:
        from zmq.utils.monitor import recv_monitor_message

        while True:
            try:
                ev = recv_monitor_message(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            who = self._by_endpoint.get(
                ev["endpoint"].decode(errors="replace"), ev["endpoint"].decode(errors="replace")
            )
            what = "authentication" if ev["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH else "CURVE"
            self.refused[who] = f"{what} handshake refused (error {ev['value']})"

    def send(self, agent: str, frame: bytes) -> None:
        """Send one frame to ``agent``; ControlUnreachable if it is not connected."""
        try:
            self.sock.send_multipart([agent.encode(), frame], zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            raise ControlUnreachable(f"cannot send to agent {agent}: {exc}") from None

    def recv(self, timeout_s: float) -> tuple[str, bytes] | None:
        """Next frame from any agent, or None after ``timeout_s``."""
        ready = dict(self.poller.poll(max(0, int(timeout_s * 1000))))
        if self.monitor in ready:
            self._monitor_events()
        if self.sock not in ready:
            return None
        parts = self.sock.recv_multipart(zmq.NOBLOCK)
        if len(parts) < 2:
            return None
        return parts[0].decode(errors="replace"), parts[-1]

    def close(self) -> None:
        """Close the socket."""
        with contextlib.suppress(zmq.ZMQError):
            self.sock.disable_monitor()
            self.monitor.close(0)
            self.sock.close(linger=200)


class InProcTransport:
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
