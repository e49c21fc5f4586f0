"""Admission of data connections: every connection not yet handed to a job, at a bounded cost.

The data port listens on lab networks, so anyone may connect to it, slowly, many times, or with
plausible handshakes. One thread runs a selector over the listener and every connection that is
not (yet) a job's:

- a connection has ``HANDSHAKE_TIMEOUT_S`` from its accept to deliver the whole 32-byte
  handshake (not per read: a byte every 4 s does not keep it alive); bad magic is closed at once;
- a complete handshake is offered to the data plane (``offer``), which takes it (the current
  job's token and an expected rank pair), parks it (a token this agent does not hold yet: the
  peer got its Prepare first), or refuses it;
- a parked connection stays watched: the peer closing it frees its slot at once, and ``PARK_S``
  passing closes it (one that already sends frames is left unwatched until then: its bytes
  stay in the kernel for the job); ``rescan`` (after a Prepare) offers every parked one again;
- at most ``PENDING_MAX`` connections wait here in all (fewer under a low ``ulimit -n``: half
  of what ``FD_RESERVE`` leaves, so strangers never take the descriptors a job needs) and half
  of that from one address; when full, the oldest one of the crowding address (else the oldest
  of all) is closed to make room, so strangers that hold slots never keep a prompt peer (whose
  handshake arrives with its connect) out;
- ``accept`` failing for want of file descriptors (EMFILE, ENFILE) closes the oldest waiting
  connections and pauses accepting for ``FD_BACKOFF_S``: the agent recovers, never spins.

Every refusal goes to ``log`` (the agent's rate-limited log book).
"""

from __future__ import annotations

import contextlib
import errno
import resource
import selectors
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from genie_agent.dataplane.tcp_wire import HANDSHAKE, HANDSHAKE_MAGIC

HANDSHAKE_TIMEOUT_S = 5.0  # from accept to the whole handshake
PARK_S = 15.0  # a connection for a job not seen yet waits this long for its Prepare
PENDING_MAX = 512  # connections waiting here (handshaking or parked), in all
FD_RESERVE = 64  # file descriptors kept for the agent itself and its jobs
FD_BACKOFF_S = 0.2
FD_FREE = 16  # connections closed to get file descriptors back after EMFILE
TICK_S = 0.5  # deadlines are checked at least this often

Key = tuple[int, int, int]  # (src rank, dst rank, stream)


def waiting_cap() -> int:
    """How many connections may wait here, given this process's file-descriptor limit."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return PENDING_MAX
    return max(8, min(PENDING_MAX, (soft - FD_RESERVE) // 2))


Offer = Callable[[bytes, Key, socket.socket, str], str]
"""offer(token, key, sock, peer) -> "taken", "park", or why the connection is refused."""


@dataclass(eq=False)
class Waiting:
    """A connection waiting here: still handshaking, or parked with a complete handshake."""

    sock: socket.socket
    peer: str
    since: float
    deadline: float
    buf: bytearray = field(default_factory=bytearray)
    token: bytes = b""
    key: Key = (0, 0, 0)

    @property
    def parked(self) -> bool:
        """True once the handshake is complete."""
        return len(self.buf) >= HANDSHAKE.size


class Admission:
    """The acceptor thread of a data listener (see the module docstring)."""

    def __init__(
        self,
        listeners: socket.socket | Sequence[socket.socket],
        offer: Offer,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.listeners = [listeners] if isinstance(listeners, socket.socket) else list(listeners)
        self.listener = self.listeners[0]
        self.offer = offer
        self.log = log or (lambda _m: None)
        self.sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        for ls in self.listeners:
            ls.setblocking(False)
            self.sel.register(ls, selectors.EVENT_READ, None)
        self.sel.register(self._wake_r, selectors.EVENT_READ, None)
        self.waiting: dict[socket.socket, Waiting] = {}
        self.pending_max = waiting_cap()
        self.per_peer_max = max(4, self.pending_max // 2)
        self._rescan = False
        self._closing = False
        self._paused_until = 0.0
        self.stats = {"accepted": 0, "refused": 0, "evicted": 0, "expired": 0, "fd_short": 0}
        self._thread = threading.Thread(target=self._loop, name="genie-accept", daemon=True)
        self._thread.start()

    # ---- other threads ------------------------------------------------------------------
    def rescan(self) -> None:
        """Offer every parked connection again (a job was set up); returns at once."""
        self._rescan = True
        self._wake()

    def close(self) -> None:
        """Stop the thread and close every waiting connection (not the listener)."""
        self._closing = True
        self._wake()
        self._thread.join(timeout=2)
        for w in list(self.waiting.values()):
            self._drop(w)
        with contextlib.suppress(OSError):
            self.sel.close()
        self._wake_r.close()
        self._wake_w.close()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"!")

    # ---- the thread ---------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._closing:
            now = time.monotonic()
            paused = now < self._paused_until
            timeout = TICK_S if not paused else max(0.0, self._paused_until - now)
            try:
                ready = self.sel.select(timeout)
            except (OSError, ValueError):
                if self._closing:
                    return
                time.sleep(0.01)
                continue
            for key, _ in ready:
                obj = key.fileobj
                if obj in self.listeners:
                    if time.monotonic() >= self._paused_until:
                        self._accept_some(obj)
                elif obj is self._wake_r:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                elif obj in self.waiting:
                    self._readable(self.waiting[obj])
            if self._rescan:
                self._rescan = False
                for w in [w for w in self.waiting.values() if w.parked]:
                    self._offer(w)
            self._expire(time.monotonic())

    def _accept_some(self, listener: socket.socket) -> None:
        for _ in range(64):  # then let deadlines and reads have their turn
            try:
                sock, addr = listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._short_of_fds(exc)
                return
            self.stats["accepted"] += 1
            peer = addr[0] if isinstance(addr, tuple) else str(addr)
            self._make_room(peer)
            now = time.monotonic()
            sock.setblocking(False)
            w = Waiting(sock=sock, peer=peer, since=now, deadline=now + HANDSHAKE_TIMEOUT_S)
            self.waiting[sock] = w
            try:
                self.sel.register(sock, selectors.EVENT_READ, None)
            except (OSError, ValueError):
                self._drop(w)
                continue
            self._readable(w)  # a prompt peer's handshake is usually here already

    def _short_of_fds(self, exc: OSError) -> None:
        self.stats["fd_short"] += 1
        victims = sorted(self.waiting.values(), key=lambda w: w.since)[:FD_FREE]
        for w in victims:
            self._drop(w)
        self._paused_until = time.monotonic() + FD_BACKOFF_S
        self.log(
            f"data: cannot accept connections: {exc.strerror or exc} (file descriptors "
            f"exhausted); closed the {len(victims)} oldest waiting, pausing {FD_BACKOFF_S:g} s"
        )

    def _make_room(self, peer: str) -> None:
        """Close the oldest waiting connection(s) when a new one from ``peer`` would pass a cap."""
        mine = [w for w in self.waiting.values() if w.peer == peer]
        if len(mine) >= self.per_peer_max:
            self._evict(min(mine, key=lambda w: w.since), f"{self.per_peer_max} from it wait")
        if len(self.waiting) >= self.pending_max:
            self._evict(
                min(self.waiting.values(), key=lambda w: w.since),
                f"{self.pending_max} connections wait",
            )

    def _evict(self, w: Waiting, why: str) -> None:
        self.stats["evicted"] += 1
        self.log(f"data: closed waiting connection from {w.peer}: {why} (oldest goes first)")
        self._drop(w)

    def _readable(self, w: Waiting) -> None:
        parked = w.parked
        try:
            if parked:  # look, do not take: frames after the handshake belong to the job
                chunk = w.sock.recv(1, socket.MSG_PEEK)
            else:
                chunk = w.sock.recv(HANDSHAKE.size - len(w.buf))
        except BlockingIOError:
            return
        except OSError as exc:
            self._refuse(w, f"{type(exc).__name__}: {exc}")
            return
        if not chunk:
            if parked:  # the peer gave up: free its slot
                self._refuse(w, "closed before a job with its token was set up here")
            else:
                self._refuse(w, "closed during handshake")
            return
        if parked:  # frames already: stop watching (no busy loop); the deadline still holds
            self._unregister(w.sock)
            return
        w.buf += chunk
        if len(w.buf) < HANDSHAKE.size:
            return
        magic, token, src, dst, stream, _n = HANDSHAKE.unpack(bytes(w.buf))
        if magic != HANDSHAKE_MAGIC:
            self._refuse(w, "bad handshake magic")
            return
        w.token, w.key = token, (src, dst, stream)
        w.deadline = time.monotonic() + PARK_S
        self._offer(w)

    def _offer(self, w: Waiting) -> None:
        self._unregister(w.sock)
        with contextlib.suppress(OSError):
            w.sock.setblocking(True)
        verdict = self.offer(w.token, w.key, w.sock, w.peer)
        if verdict == "taken":
            del self.waiting[w.sock]
            return
        with contextlib.suppress(OSError):
            w.sock.setblocking(False)
        if verdict == "park":
            try:
                self.sel.register(w.sock, selectors.EVENT_READ, None)
            except (OSError, ValueError):
                self._drop(w)
            return
        self._refuse(w, f"for rank pair {w.key[:2]}: {verdict}")

    def _expire(self, now: float) -> None:
        for w in [w for w in self.waiting.values() if now >= w.deadline]:
            self.stats["expired"] += 1
            if w.parked:
                self._refuse(w, f"no job with its token came within {PARK_S:g} s")
            else:
                self._refuse(w, f"no complete handshake within {HANDSHAKE_TIMEOUT_S:g} s")

    def _refuse(self, w: Waiting, why: str) -> None:
        self.stats["refused"] += 1
        self.log(f"data: refused connection from {w.peer}: {why}")
        self._drop(w)

    def _unregister(self, sock: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.sel.unregister(sock)

    def _drop(self, w: Waiting) -> None:
        self._unregister(w.sock)
        self.waiting.pop(w.sock, None)
        with contextlib.suppress(OSError):
            w.sock.close()
