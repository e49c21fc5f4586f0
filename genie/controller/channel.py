"""The controller's control channels to agents: ZeroMQ ROUTER, and in-process for tests.

A transport moves opaque frames: ``send(agent, frame)`` and ``recv(timeout_s) -> (agent, frame)
| None``. The controller encodes and decodes, so both transports exercise the real codec. Each
transport also says which agents refused its handshake (``refused``), whose connection dropped
and is not back (``dropped``: a dead agent's socket closes at once, long before it misses a
beat), and why an agent may not answer (``describe``), so a silent agent is described ("nothing
listens at ...", "... does not speak genie's control protocol", "refused the CURVE handshake")
instead of a bare timeout.

Every failure is a ``ControlUnreachable`` naming the agent and its cause
(``genie.controller.faults``): a send that fails because the agent refused the handshake says
so (``HANDSHAKE_REFUSED``), whether the refusal came before the send or after it. The socket's
options are set in ``genie.wire.sockets`` (shared with the agent); a frame larger than the
wire's limit (``genie.wire.frames``) is dropped on receipt.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import zmq

from genie.controller.faults import HANDSHAKE_REFUSED, NOT_CONNECTED, SOCKET_FAILED
from genie.errors import ControlUnreachable, FrameTooLarge
from genie.wire import sockets
from genie.wire.frames import check_frame

log = logging.getLogger(__name__)


class Channel(Protocol):
    """What the controller needs from a control channel."""

    def send(self, agent: str, frame: bytes) -> None:
        """Queue ``frame`` for ``agent``; ControlUnreachable (with agent and cause) if not."""
        ...

    def recv(self, timeout_s: float) -> tuple[str, bytes] | None:
        """Next (agent, frame), or None after ``timeout_s``."""
        ...

    @property
    def refused(self) -> Mapping[str, str]:
        """Agent -> why it refused this channel's handshake (as of the last send or recv)."""
        ...

    @property
    def dropped(self) -> Mapping[str, int]:
        """Agent -> failed reconnection attempts, for each agent whose connection dropped and is
        not back (as of the last recv)."""
        ...

    def describe(self, agent: str) -> str:
        """One phrase: why ``agent`` may not answer (what its connection did)."""
        ...

    def close(self) -> None:
        """Release the channel."""
        ...


def _refused_text(agent: str, why: str) -> str:
    return f"agent {agent} refused the handshake: {why}"


@dataclass
class Link:
    """What the connection to one agent has done so far (from the socket monitor)."""

    address: str
    tries: int = 0  # failed connection attempts
    connected: int = 0  # TCP connections made
    handshakes: int = 0  # ZMTP handshakes completed
    down: bool = False  # the connection dropped and is not back
    retries_down: int = 0  # failed reconnection attempts since it dropped

    def describe(self) -> str:
        """One phrase: why this agent may not answer."""
        if self.down and self.retries_down > 0:
            return (
                f"its connection dropped and nothing accepts connections at {self.address} any more"
            )
        if self.handshakes:
            return f"the agent at {self.address} is connected but did not answer"
        if self.connected:
            return (
                f"something at {self.address} accepts connections but the control handshake "
                "fails: not a genie agent, an agent that requires CURVE keys (give the "
                "controller its keys: GENIE_KEYS=DIR or [deploy] keys), or an agent out of file "
                "descriptors (its `ulimit -n`; a flood of idle connections to its control port "
                f"is dropped after {sockets.AGENT_HANDSHAKE_S:g} s: see its log)"
            )
        if self.tries:
            return f"nothing accepts connections at {self.address} (connection refused)"
        return f"no connection to {self.address} yet"


_V4_MAPPED = re.compile(r"^tcp://\[::ffff:(\d+\.\d+\.\d+\.\d+)\]:")


def _unmapped(endpoint: str) -> str:
    """``endpoint`` with an IPv4-mapped IPv6 address as the IPv4 address it maps (libzmq names
    a reconnection to 127.0.0.1 ``tcp://[::ffff:127.0.0.1]:PORT`` on an IPv6-enabled socket)."""
    return _V4_MAPPED.sub(r"tcp://\1:", endpoint)


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
        self.monitor: zmq.Socket | None = None
        pair = None
        if keys_dir:
            from genie.keys import CONTROLLER, load_pair

            pair = load_pair(keys_dir, CONTROLLER)
        try:
            self.sock = sockets.controller_socket(self.ctx, identity, pair)
        except zmq.ZMQError as exc:
            why = f"cannot open the control socket: {exc}"
            raise ControlUnreachable(why, cause=SOCKET_FAILED) from None
        try:
            self._setup(endpoints, keys_dir, devices or {})
        except zmq.ZMQError as exc:
            self.close()
            why = f"cannot open the control socket: {exc}"
            raise ControlUnreachable(why, cause=SOCKET_FAILED) from None
        except BaseException:
            self.close()
            raise

    def _setup(
        self, endpoints: dict[str, str], keys_dir: str | None, devices: dict[str, str]
    ) -> None:
        self.monitor = sockets.monitor(self.sock, sockets.CONTROLLER_EVENTS)
        self.poller = zmq.Poller()
        self.poller.register(self.sock, zmq.POLLIN)
        self.poller.register(self.monitor, zmq.POLLIN)
        for name, addr in endpoints.items():
            server_key = None
            if keys_dir:
                from genie.keys import agent_public

                server_key = agent_public(keys_dir, name)
            self.links[name] = Link(address=addr)
            self._by_endpoint[sockets.endpoint(addr)] = name
            try:
                sockets.connect_agent(self.sock, name, addr, server_key, devices.get(name, ""))
            except zmq.ZMQError as exc:
                why = f"cannot connect to agent {name} at {addr}: {exc}"
                raise ControlUnreachable(why, agent=name, cause=NOT_CONNECTED) from None

    def _monitor_events(self) -> None:
        if self.monitor is None:
            return
        for ev in sockets.read_events(self.monitor, 10_000):
            who = self._by_endpoint.get(_unmapped(ev.endpoint), ev.endpoint)
            link = self.links.get(who)
            if ev.kind == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL and not self.curve:
                continue  # the peer hung up mid-handshake: not a genie agent (see Link)
            if ev.kind & sockets.REFUSALS:
                self.refused[who] = _refusal(ev.kind, ev.value)
            elif link is None:
                continue
            elif ev.kind == zmq.EVENT_CONNECT_RETRIED:
                link.tries += 1
                # libzmq schedules a reconnect as a connection drops (one event), then once per
                # failed attempt
                link.retries_down += link.down
            elif ev.kind == zmq.EVENT_CONNECTED:
                link.connected += 1
            elif ev.kind == zmq.EVENT_DISCONNECTED:
                if link.handshakes:  # a connection that never spoke is no agent that went away
                    link.down, link.retries_down = True, -1
            elif ev.kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                link.handshakes += 1
                link.down, link.retries_down = False, 0
                self.refused.pop(who, None)

    @property
    def dropped(self) -> dict[str, int]:
        """Agent -> failed reconnection attempts, for agents whose connection dropped."""
        return {a: max(0, k.retries_down) for a, k in self.links.items() if k.down}

    def describe(self, agent: str) -> str:
        """Why ``agent`` may not answer, from what its connection did."""
        with contextlib.suppress(zmq.ZMQError):
            self._monitor_events()
        if agent in self.refused:
            return _refused_text(agent, self.refused[agent])
        link = self.links.get(agent)
        return link.describe() if link else f"agent {agent} is not in this controller's testbed"

    def send(self, agent: str, frame: bytes) -> None:
        """Send one frame to ``agent``; ControlUnreachable if it is not connected.

        A connection whose handshake the agent refused is gone, and its refusal is already on
        the monitor (libzmq reports it before it drops the connection): the error's cause is
        then ``HANDSHAKE_REFUSED``, however soon after the refusal the send came.
        """
        try:
            self.sock.send_multipart([agent.encode(), frame], zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            with contextlib.suppress(zmq.ZMQError):
                self._monitor_events()
            cause = HANDSHAKE_REFUSED if agent in self.refused else NOT_CONNECTED
            raise ControlUnreachable(
                f"cannot send to agent {agent}: {exc}", agent=agent, cause=cause
            ) from None

    def recv(self, timeout_s: float) -> tuple[str, bytes] | None:
        """Next frame from any agent, or None after ``timeout_s`` (or for a dropped frame)."""
        try:
            ready = dict(self.poller.poll(max(0, int(timeout_s * 1000))))
            if self.monitor in ready:
                self._monitor_events()
            if self.sock not in ready:
                return None
            parts = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return None
        except zmq.ZMQError as exc:
            raise ControlUnreachable(f"control socket failed: {exc}", cause=SOCKET_FAILED) from None
        if len(parts) < 2:
            return None
        agent = parts[0].bytes.decode(errors="replace")
        try:
            check_frame(len(parts[-1]), f"a control frame from agent {agent}")
        except FrameTooLarge as exc:
            log.warning("dropped %s", exc)
            return None
        return agent, parts[-1].bytes

    def close(self) -> None:
        """Close the socket (and its monitor); never raises."""
        with contextlib.suppress(AttributeError):
            sockets.close(self.sock, self.monitor)


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
        self.refused: dict[str, str] = {}  # agents that refuse this channel (a wrong key)
        self.dropped: dict[str, int] = {}  # agents whose connection closed (a dead process)

    def send(self, agent: str, frame: bytes) -> None:
        """Deliver ``frame`` to the agent's handler at once."""
        self.sent.append((agent, frame))
        if agent in self.refused:
            raise ControlUnreachable(
                f"cannot send to agent {agent}: refused", agent=agent, cause=HANDSHAKE_REFUSED
            )
        if agent in self.drop:
            return
        if agent not in self.handlers:
            raise ControlUnreachable(
                f"cannot send to agent {agent}: unknown", agent=agent, cause=NOT_CONNECTED
            )
        self.inbox.extend((agent, f) for f in self.handlers[agent](frame))

    def describe(self, agent: str) -> str:
        """Why ``agent`` may not answer: refused, gone, cut off, unknown, or silent."""
        if agent in self.refused:
            return _refused_text(agent, self.refused[agent])
        if self.dropped.get(agent, 0) > 0:
            return f"its connection dropped and agent {agent} does not take it again"
        if agent in self.drop:
            return f"agent {agent} is cut off (its frames are dropped)"
        if agent not in self.handlers:
            return f"agent {agent} is not on this channel"
        return f"agent {agent} is connected but did not answer"

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
