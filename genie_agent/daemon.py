"""The agent process: a thin ZeroMQ shell around ``AgentCore`` and the TCP data plane.

The control socket (``genie.wire.sockets.agent_socket``) is bound on ``--listen`` with routing
id = agent id; the controller's ROUTER connects to it. A ROUTER answers the peer that asked,
and the core refuses job messages from anyone but the holding controller.

One thread runs the loop: poll the control socket, its monitor and a wake-up pipe the workers
(and signal handlers) write to when they post an event, feed frames and events to the core, send
what it returns, and tick it for heartbeats. It sleeps until the next thing is due (an unclaimed
idle agent wakes once a second). A frame that fails to decode is answered, never fatal; program
building runs on a worker thread, so the loop never stalls. A frame larger than the wire's
limit (``genie.wire.frames``) is answered with an ``Error(limit)`` before it is copied, and a
reply that would exceed it is replaced by one. The control socket's monitor tells which
connection the holder speaks on, so its close is evidence the holder is gone, and logs failed
CURVE handshakes. Every line goes through ``LogBook`` (rate-limited, sanitised). When a job is
dropped (released, aborted, failed), the loop gives its memory back to the OS
(``genie_agent.memory``); while no job is held, the memory the agent reports in its hello is
re-read before frames are handled, so a Hello carries what the host has now.

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
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec
import zmq

from genie.errors import FrameTooLarge, TransportError
from genie.wire import sockets
from genie.wire.clock import MonotonicClock
from genie.wire.frames import check_frame
from genie.wire.liveness import HEARTBEAT_INTERVAL_S, MISSED_BEATS_LIMIT
from genie.wire.messages import Error, Limits, Msg, encode
from genie_agent.clock import tighten_timer_slack
from genie_agent.counters import CounterReader, Roots
from genie_agent.counting import CountingDataPlane
from genie_agent.dataplane.rdma_plane import AgentDataPlane  # TCP, and RDMA jobs over verbs
from genie_agent.facts import available_memory, host_facts
from genie_agent.logbook import LogBook
from genie_agent.memory import release_memory
from genie_agent.state import AgentCore, Event

if TYPE_CHECKING:
    from zmq.auth.thread import ThreadAuthenticator

REFUSED_KEYS_MAX = 256  # distinct refused keys remembered (a key-rotating peer stays bounded)
IDLE_WAKE_MS = 1000  # an unclaimed idle agent still checks its stop flag this often
FACTS_FRESH_S = 0.2  # available memory is re-read at most this often (only while no job is held)


class _TrustedKeys:
    """ZAP credentials provider: admits the trusted controller keys, logs refusals (bounded)."""

    def __init__(self, keys: set[bytes], log: Callable[[str], None]) -> None:
        self.keys = keys
        self.log = log  # a LogBook: a peer retrying or rotating keys cannot flood it
        self.refused: OrderedDict[bytes, int] = OrderedDict()

    def callback(self, _domain: str, key: bytes) -> bool:
        """True if ``key`` (z85) is a trusted controller key."""
        if key in self.keys:
            return True
        n = self.refused.pop(key, 0) + 1
        self.refused[key] = n
        while len(self.refused) > REFUSED_KEYS_MAX:
            self.refused.popitem(last=False)
        if n == 1 or n % 100 == 0:
            short = key[:8].decode(errors="replace")
            self.log(
                f"auth: refused controller with unknown CURVE key {short}... "
                f"({n} attempt{'s' if n > 1 else ''})"
            )
        return False


def start_auth(
    ctx: zmq.Context, keys_dir: str, log: Callable[[str], None]
) -> tuple[ThreadAuthenticator, _TrustedKeys]:
    """Start a ZAP handler on ``ctx`` admitting the controllers trusted in ``keys_dir``."""
    from zmq.auth.thread import ThreadAuthenticator

    from genie.keys import trusted_controllers

    provider = _TrustedKeys(trusted_controllers(keys_dir), log)
    auth = ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve_callback(sockets.AGENT_ZAP_DOMAIN, credentials_provider=provider)
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
    """The agent's control socket bound on ``listen``, a CURVE server with ``keys_dir``'s pair."""
    pair = None
    if keys_dir:
        from genie.keys import agent_pair

        pair = agent_pair(keys_dir, agent_id)
    return sockets.agent_socket(ctx, listen, agent_id, pair)


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


class _JobMemory:
    """Gives a dropped job's memory back, and keeps the hello's available memory current."""

    def __init__(self, core: AgentCore, say: Callable[[str], None]) -> None:
        self.core = core
        self.say = say
        self.job = ""
        self.read_at = 0.0

    def before_frames(self) -> None:
        """No job held: re-read the available memory the next Hello reports (rate-limited)."""
        now = time.monotonic()
        if self.core.job or now - self.read_at < FACTS_FRESH_S:
            return
        self.read_at = now
        facts = self.core.facts
        self.core.facts = msgspec.structs.replace(facts, memory_available=available_memory())

    def after_step(self) -> None:
        """A job was dropped since the last step: collect and trim the heaps."""
        if self.job and not self.core.job:
            self.say(release_memory())
            self.read_at = 0.0
        self.job = self.core.job


def _start_thread(work: Callable[[], None]) -> None:
    """The core's builder: run ``work`` on a daemon thread."""
    threading.Thread(target=work, name="genie-build", daemon=True).start()


class _Connections:
    """Which control connection (fd, generation) the holder speaks on, from monitor events."""

    def __init__(self, core: AgentCore, say: Callable[[str], None]) -> None:
        self.core = core
        self.say = say
        self.gen: dict[int, int] = {}  # fd -> accepts seen on it (bounded by the fd table)
        self.holder: tuple[int, int] | None = None

    def frame_from(self, peer: str, fd: int) -> None:
        """A frame from ``peer`` came in on ``fd``: remember it if ``peer`` holds the agent."""
        if fd >= 0 and self.core.controller is not None and peer == self.core.peer:
            self.holder = (fd, self.gen.get(fd, 0))

    def on_event(self, ev: sockets.SocketEvent) -> None:
        """Apply one monitor event."""
        kind, value = ev.kind, ev.value
        if kind == zmq.EVENT_ACCEPTED:
            self.gen[value] = self.gen.get(value, 0) + 1
        elif kind == zmq.EVENT_DISCONNECTED:
            if self.holder == (value, self.gen.get(value, 0)):
                self.holder = None
                self.core.holder_disconnected()
        elif kind == zmq.EVENT_ACCEPT_FAILED:
            self.say(
                f"control port: cannot accept a connection: {os.strerror(value)} (connections "
                f"that do not complete the handshake are dropped after "
                f"{sockets.AGENT_HANDSHAKE_S:g} s)"
            )
        else:
            why = _HANDSHAKE_WHY.get(value, f"code {value:#x}")
            self.say(f"auth: a control connection failed its handshake: {why}")


_HANDSHAKE_WHY: dict[int, str] = {
    zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC: "CURVE cryptographic error (the controller holds a "
    "wrong public key for this agent)",
    zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH: "security mechanism mismatch (one side runs with "
    "CURVE keys, the other without)",
}


def run_agent(
    listen: str,
    agent_id: str,
    data_addr: str | list[str],
    data_port: int = 0,
    heartbeat_s: float = HEARTBEAT_INTERVAL_S,
    log: Callable[[str], None] | None = None,
    ready: Callable[[], None] | None = None,
    keys_dir: str | None = None,
    testbed: str = "",
    counters_sysfs: str | None = None,
    missed_beats: int = MISSED_BEATS_LIMIT,
) -> int:
    """Run one agent until it is told to quit (or gets SIGTERM/SIGINT); return an exit code.

    ``keys_dir``: CURVE key directory (see ``genie.keys``); default ``$GENIE_KEYS``, else none.
    ``testbed``: the testbed this agent serves; Hellos naming another one are refused.
    ``counters_sysfs``: where the NIC counters reported with each Go are read (default
    ``$GENIE_COUNTERS_SYSFS``, else /sys; ``genie_agent.counters``). ``missed_beats``: heartbeat
    intervals of silence after which a controller is lost.
    """
    book = LogBook(log or agent_logger(agent_id).info)
    say = book
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
    monitor = sockets.monitor(ctl, sockets.AGENT_EVENTS)
    events: queue.Queue[Event] = queue.Queue()
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)

    def wake() -> None:
        with contextlib.suppress(OSError):  # a full pipe already wakes the loop
            wake_w.send(b"!")

    def post(ev: Event) -> None:
        events.put(ev)
        wake()

    reader = CounterReader(Roots.from_env(counters_sysfs), addrs=tuple(dp.addrs))
    core = AgentCore(
        agent_id,
        CountingDataPlane(dp, agent_id, reader, say),
        MonotonicClock(),
        post,
        facts=host_facts(),
        limits=Limits(),
        heartbeat_interval_s=heartbeat_s,
        missed_beats_limit=missed_beats,
        prober=probe_peers,
        testbed=testbed,
        builder=_start_thread,
    )
    conns = _Connections(core, say)
    memory = _JobMemory(core, say)
    stop = {"flag": False}

    def on_signal(_sig, _frm) -> None:
        stop["flag"] = True
        wake()

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(ValueError):
            signal.signal(sig, on_signal)
    poller = zmq.Poller()
    poller.register(ctl, zmq.POLLIN)
    poller.register(monitor, zmq.POLLIN)
    poller.register(wake_r.fileno(), zmq.POLLIN)
    data = ", ".join(f"{a}:{dp.port}" for a in dp.addrs)
    say(f"listening on {listen} (control), {data} (data)")
    if ready:
        ready()

    def send(msgs: list[Msg], peer: bytes | None = None) -> None:
        dest = peer if peer is not None else core.peer.encode("latin-1")
        if not dest:
            return
        for m in msgs:
            with contextlib.suppress(zmq.ZMQError):  # peer gone or queue full: drop
                ctl.send_multipart([dest, _encode_reply(m, say)], zmq.NOBLOCK)

    try:
        while not core.quit and not stop["flag"]:
            due = core.next_deadline()
            wait_ms = IDLE_WAKE_MS
            if due is not None:
                wait_ms = min(IDLE_WAKE_MS, max(0, (due - time.monotonic_ns()) // 1_000_000 + 1))
            for s, _ in poller.poll(timeout=wait_ms):
                if s is monitor:
                    _read_monitor(monitor, conns)
                elif s is ctl:
                    memory.before_frames()
                    _read_control(ctl, core, conns, send)
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
            for line in core.drain_log():
                say(line)
            memory.after_step()
            book.tick()
    finally:
        dp.close()
        sockets.close(ctl, monitor)
        if auth:
            auth.stop()
        ctx.term()
        wake_r.close()
        wake_w.close()
        book.flush()
        say("stopped")
    return 0


def _encode_reply(msg: Msg, say: Callable[[str], None]) -> bytes:
    """``msg`` as a frame; one too large for the wire is replaced by an Error(limit) saying so."""
    try:
        return encode(msg)
    except FrameTooLarge as exc:
        say(f"not sent: {exc}")
        err = Error(job=msg.job, epoch=msg.epoch, code="limit", message=str(exc))
        try:
            return encode(err)
        except FrameTooLarge:  # the job id itself is that large: no job to name
            return encode(Error(code="limit", message=str(exc)))


def _read_monitor(monitor: zmq.Socket, conns: _Connections) -> None:
    for ev in sockets.read_events(monitor):
        conns.on_event(ev)


def _read_control(
    ctl: zmq.Socket, core: AgentCore, conns: _Connections, send: Callable[..., None]
) -> None:
    """Handle up to 1000 queued control frames (then let the loop tick)."""
    for _ in range(1000):
        try:
            frames = ctl.recv_multipart(zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return
        if len(frames) < 2:
            continue
        peer = frames[0].bytes.decode("latin-1")
        try:  # before the frame is copied out of libzmq's buffer
            check_frame(len(frames[-1]))
        except FrameTooLarge as exc:
            send(core.refuse("limit", str(exc)), frames[0].bytes)
            continue
        try:
            fd = int(frames[-1].get(zmq.SRCFD))
        except (zmq.ZMQError, AttributeError, TypeError):
            fd = -1
        send(core.handle(frames[-1].bytes, peer), frames[0].bytes)
        conns.frame_from(peer, fd)
