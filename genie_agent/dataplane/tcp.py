"""The TCP data plane: a listener for the agent's life, persistent connections per job.

Connections. Every agent has one data listener for its whole life on each of its data addresses
(one per NIC, all on the same port). For a job, the lower global rank of each pair that talks
connects ``streams`` TCP connections to the higher rank's agent and introduces each with a
handshake (``genie_agent.dataplane.tcp_wire``). A connection leaves from its rank's NIC address and
goes to its peer rank's (``DataOptions.rank_addrs``; else the agents' data addresses) with a
source port fixed per flow (``tcp_wire.source_ports``), so an ECMP fabric hashing the 5-tuple
routes a job's flows alike every run. Pairs of ranks on this agent open no connection at all
when the job models intra-host steps (``DataOptions.intra == "model"``,
``genie_agent.dataplane.intra``). The listener's admission
thread (``genie_agent.dataplane.tcp_admission``: whole-handshake deadlines, bounded waiting, caps
per peer) hands a connection to the job whose token and expected pairs it matches; one with a
token this agent does not hold yet is parked briefly (its peer got the Prepare first); anything
else is closed. Connections are reused by every iteration and every program of the job.

Each local rank then runs in its own thread (``genie_agent.dataplane.tcp_exec``: one program for
warmup+iters iterations, or a whole op list, ``genie_agent.dataplane.tcp_oplist``) over the frame
machinery of ``genie_agent.dataplane.tcp_engine``. The wire formats, ``pattern_fill`` and the rank
executor are re-exported here under their old import paths.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from genie.errors import GenieError, TransportError
from genie.wire.messages import (
    DataOptions,
    Go,
    Limits,
    Prepare,
    Prepared,
    RankResult,
    Result,
)
from genie.wire.tokens import new_token, token_bytes
from genie_agent.dataplane.intra import LocalHub
from genie_agent.dataplane.pool import Budget
from genie_agent.dataplane.steps import pattern_fill
from genie_agent.dataplane.steps import set_realtime as _set_realtime
from genie_agent.dataplane.tcp_admission import Admission
from genie_agent.dataplane.tcp_engine import POLL_S
from genie_agent.dataplane.tcp_exec import RankExecutor
from genie_agent.dataplane.tcp_state import conditions, retransmits
from genie_agent.dataplane.tcp_wire import (
    HANDSHAKE,
    HANDSHAKE_MAGIC,
    HDR,
    LINGER_ABORT,
    Stream,
    source_ports,
    split_parts,
    tune,
)
from genie_agent.oplist import go_oplists
from genie_agent.plan import AgentPlan
from genie_agent.state import Event

__all__ = [
    "HANDSHAKE",
    "HANDSHAKE_MAGIC",
    "HDR",
    "POLL_S",
    "RankExecutor",
    "Stream",
    "TcpDataPlane",
    "_set_realtime",
    "new_token",
    "pattern_fill",
    "split_parts",
    "token_bytes",
]


class _Ranked(Protocol):
    rank: int  # the global rank a rank executor runs


_Exec = TypeVar("_Exec", bound=_Ranked)


def _all_streams(rank: int, peer: int, slots: list[Stream | None]) -> list[Stream]:
    """The streams of a rank pair, every one connected (TransportError if one is missing)."""
    out = [s for s in slots if s is not None]
    if len(out) != len(slots):
        raise TransportError(
            f"rank {rank}: {len(slots) - len(out)} of {len(slots)} streams to rank {peer} "
            "never connected"
        )
    return out


class TcpDataPlane:
    """The agent's TCP data plane: a listener for its lifetime, connections and workers per job."""

    def __init__(
        self,
        data_addr: str | Sequence[str],
        port: int = 0,
        log: Callable[[str], None] | None = None,
        memory_bound: int = Limits().max_agent_bytes,
    ):
        addrs = [data_addr] if isinstance(data_addr, str) else list(data_addr)
        self.listeners: list[socket.socket] = []
        try:
            for a in addrs:
                self.listeners.append(_listen(a, port))
                port = self.listeners[0].getsockname()[1]  # every NIC on the same port
        except TransportError:
            for ls in self.listeners:
                ls.close()
            raise
        self.listener = self.listeners[0]
        self.addr = addrs[0]
        self.addrs = addrs  # one per NIC; the first is the agent's data address
        self.port = port
        self.log = log or (lambda _m: None)
        self.memory_bound = memory_bound  # bytes of buffers a job may hold at once
        self._lock = threading.Condition()
        self._token = b""
        self._expected: set[tuple[int, int, int]] = set()
        self._got: dict[tuple[int, int, int], socket.socket] = {}
        self._abort = threading.Event()
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        self._retrans = -1  # the job's data sockets' retransmitted segments so far (-1: n/a)
        self._execs: dict[int, RankExecutor] = {}
        self._plan: AgentPlan | None = None
        self._hub: LocalHub | None = None
        self.admission = Admission(self.listeners, self._offer, self.log)

    def endpoint(self) -> tuple[str, int]:
        """(address, port) of the data listener."""
        return self.addr, self.port

    def _offer(self, token: bytes, key: tuple[int, int, int], sock: socket.socket, _peer) -> str:
        """Admission's question: take a handshaken connection, park it, or say why not."""
        with self._lock:
            if token == self._token and key in self._expected and key not in self._got:
                self._got[key] = sock
                self._lock.notify_all()
                return "taken"
            if token != self._token:
                return "park"  # another job's: this agent may not have its Prepare yet
        return "not expected" if key not in self._expected else "a duplicate"

    # ---- prepare --------------------------------------------------------------------------
    def prepare(self, plan: AgentPlan, prep: Prepare, post: Callable[[Event], None]) -> None:
        """Connect, accept and allocate in a background thread; post the outcome."""
        self._abort = threading.Event()
        opts = prep.options
        tok = token_bytes(opts.token)
        local = set(local_pairs(plan, opts))
        remote = [pair for pair in plan.incoming if pair not in local]
        expected = {(a, b, k) for (a, b) in remote for k in range(opts.streams)}
        with self._lock:
            self._token, self._expected, self._got = tok, expected, {}
        self.admission.rescan()  # connections parked for this job come in now
        self._plan = plan
        t = threading.Thread(
            target=self._prepare, args=(plan, prep, post), name="genie-prepare", daemon=True
        )
        self._threads = [t]
        t.start()

    def _prepare(self, plan: AgentPlan, prep: Prepare, post: Callable[[Event], None]) -> None:
        t0 = time.monotonic()
        opts = prep.options
        try:
            slots: dict[int, dict[int, list[Stream | None]]] = {r: {} for r in plan.ranks}
            deadline = t0 + opts.connect_timeout_s
            for (r, q, k), sock in self._connect_pairs(plan, prep, deadline).items():
                slots[r].setdefault(q, [None] * opts.streams)[k] = Stream(sock, q, k)
            for (a, b, k), sock in self._await_incoming(plan, opts, deadline, "data").items():
                tune(sock, opts)
                slots[b].setdefault(a, [None] * opts.streams)[k] = Stream(sock, a, k)
            streams = {
                r: {q: _all_streams(r, q, lst) for q, lst in per.items()}
                for r, per in slots.items()
            }
            peers_here: dict[int, set[int]] = {r: set() for r in plan.ranks}
            for a, b in local_pairs(plan, opts):
                peers_here[a].add(b)
                peers_here[b].add(a)
            self._hub = LocalHub()
            self._execs = {}
            budget = Budget(self.memory_bound)  # every rank's buffers of this job, together
            for r in plan.ranks:
                rplans = {p: plans[r] for p, plans in enumerate(plan.rank_plans) if r in plans}
                self._execs[r] = RankExecutor(
                    r,
                    streams[r],
                    rplans,
                    opts,
                    self._abort,
                    self._hub,
                    frozenset(peers_here[r]),
                    budget,
                )
            self._retrans = retransmits(self._socks) if opts.transport == "tcp" else -1
            msg = Prepared(
                job=prep.job,
                epoch=prep.epoch,
                ranks=list(plan.ranks),
                connections=len(self._socks),
                setup_s=time.monotonic() - t0,
                conditions=conditions(self._socks, self.addrs),
            )
            post(Event("prepared", prep.job, prep.epoch, msg))
        except (TransportError, OSError, ValueError) as exc:
            self._close_job()
            why = str(exc)
            if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
                why = f"out of file descriptors ({exc.strerror}); raise the agent's `ulimit -n`"
            post(Event("prepare_failed", prep.job, prep.epoch, error=f"{plan.agent}: {why}"))
        except Exception as exc:  # never die silently: the controller would wait it out
            self._close_job()
            why = f"{plan.agent}: {type(exc).__name__}: {exc}"
            post(Event("prepare_failed", prep.job, prep.epoch, error=why))

    def _connect_pairs(
        self, plan: AgentPlan, prep: Prepare, deadline: float
    ) -> dict[tuple[int, int, int], socket.socket]:
        """Connect and introduce every stream of this agent's outgoing rank pairs.

        Returns (my rank, peer rank, stream index) -> socket; the sockets are the job's.
        """
        opts = prep.options
        tok = token_bytes(opts.token)
        local = set(local_pairs(plan, opts))
        out = {}
        for r, q in plan.outgoing:
            if (r, q) in local:
                continue
            host, _, port = prep.endpoints[prep.placement[q]].rpartition(":")
            host = rank_addr(opts, q) or host.strip("[]")
            src = rank_addr(opts, r) or self.addr
            if src not in self.addrs:
                raise TransportError(
                    f"rank {r}'s NIC address {src} is not one of this agent's data addresses "
                    f"({', '.join(self.addrs)})"
                )
            for k in range(opts.streams):
                if self._abort.is_set():
                    raise TransportError("aborted during prepare")
                sock = self._connect(host, int(port), opts, deadline, src, (r, q, k))
                self._socks.append(sock)
                sock.sendall(HANDSHAKE.pack(HANDSHAKE_MAGIC, tok, r, q, k, opts.streams))
                out[(r, q, k)] = sock
        return out

    def _await_incoming(
        self, plan: AgentPlan, opts: DataOptions, deadline: float, what: str
    ) -> dict[tuple[int, int, int], socket.socket]:
        """Wait until every expected incoming stream has been accepted, or fail at ``deadline``.

        Returns (peer rank, my rank, stream index) -> socket; the sockets are the job's.
        """
        with self._lock:
            while len(self._got) < len(self._expected):
                left = deadline - time.monotonic()
                if left <= 0 or self._abort.is_set():
                    missing = sorted(self._expected - set(self._got))
                    raise TransportError(
                        f"{plan.agent}: {len(missing)} {what} connections did not arrive within "
                        f"{opts.connect_timeout_s:.3g} s (first: rank {missing[0][0]} -> "
                        f"{missing[0][1]})"
                    )
                self._lock.wait(min(left, POLL_S))
            got = dict(self._got)
        self._socks.extend(got.values())
        return got

    def _connect(
        self,
        host: str,
        port: int,
        opts: DataOptions,
        deadline: float,
        src: str,
        flow: tuple[int, int, int],
    ) -> socket.socket:
        """Connect from ``src`` (a fixed source port per flow where one is free) to host:port."""
        last: Exception | None = None
        sports = [*source_ports(*flow), 0]
        while time.monotonic() < deadline and not self._abort.is_set():
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            tune(sock, opts)
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                sock.bind((src, sports[0]))
                sock.connect((host, port))
                sock.settimeout(None)
                return sock
            except OSError as exc:
                sock.close()
                last = exc
                if exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL) and len(sports) > 1:
                    sports.pop(0)  # that port is taken here: the flow's next one
                    continue
                time.sleep(0.02)
        raise TransportError(f"cannot connect to data listener {host}:{port} from {src}: {last}")

    # ---- go -------------------------------------------------------------------------------
    def go(self, go: Go, start_local_ns: int, post: Callable[[Event], None]) -> None:
        """Run every local rank of program ``go.program`` in its own thread; post the result."""
        t = threading.Thread(
            target=self._go, args=(go, start_local_ns, post), name="genie-go", daemon=True
        )
        self._threads = [t]
        t.start()

    def _go(self, go: Go, start_local_ns: int, post: Callable[[Event], None]) -> None:
        try:
            oplists = go_oplists(go, self._plan)
        except GenieError as exc:
            post(Event("run_failed", go.job, go.epoch, error=str(exc)))
            return
        if oplists is not None:
            execs = [ex for ex in self._execs.values() if oplists.get(ex.rank)]
        else:
            execs = [ex for ex in self._execs.values() if go.program in ex.plans]

        def run(ex: RankExecutor) -> RankResult:
            if oplists is not None:
                return ex.run_ops(go, oplists[ex.rank], start_local_ns)
            return ex.run(go, start_local_ns)

        self._run_ranks(go, start_local_ns, execs, run, "genie-rank", post)

    def _run_ranks(
        self,
        go: Go,
        start_local_ns: int,
        execs: Sequence[_Exec],
        run: Callable[[_Exec], RankResult],
        name: str,
        post: Callable[[Event], None],
    ) -> None:
        """Run ``run(ex)`` for every rank executor in its own thread; post the job's outcome.

        The first error (one that is not another rank's abort) fails the run and aborts the
        other ranks; otherwise the ranks' results go out as one ``Result``.
        """
        results: dict[int, RankResult] = {}
        errors: list[str] = []

        def work(ex: _Exec) -> None:
            try:
                results[ex.rank] = run(ex)
            except TransportError as exc:
                errors.append(str(exc))
                self._abort.set()
            except Exception as exc:  # a bug must fail the run, not hang it
                errors.append(f"rank {ex.rank}: {type(exc).__name__}: {exc}")
                self._abort.set()

        threads = [
            threading.Thread(target=work, args=(ex,), name=f"{name}-{ex.rank}", daemon=True)
            for ex in execs
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            first = next((e for e in errors if "aborted" not in e), errors[0])
            post(Event("run_failed", go.job, go.epoch, error=first))
            return
        lateness = max(0, min((r.start[0] for r in results.values()), default=0) - start_local_ns)
        retrans = -1
        if self._retrans >= 0:
            now = retransmits(self._socks)
            retrans, self._retrans = (now - self._retrans if now >= 0 else -1), now
        msg = Result(
            job=go.job,
            epoch=go.epoch,
            program=go.program,
            warmup=go.warmup,
            ranks=[results[r] for r in sorted(results)],
            start_lateness_ns=lateness,
            retransmits=retrans,
        )
        post(Event("result", go.job, go.epoch, msg))

    # ---- release --------------------------------------------------------------------------
    def release(self) -> None:
        """Stop workers, close the job's connections (with a reset: no TIME_WAIT is left on a
        fixed source port), free its buffers."""
        self._abort.set()
        for s in self._socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RD)  # wakes readers; sends nothing
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=10)
        self._close_job()

    def _close_job(self) -> None:
        for ex in self._execs.values():
            ex.close()
        self._execs = {}
        if self._hub is not None:
            self._hub.close()
            self._hub = None
        for s in self._socks:
            with contextlib.suppress(OSError):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_ABORT)
            with contextlib.suppress(OSError):
                s.close()
        self._socks = []
        with self._lock:
            for s in self._got.values():
                with contextlib.suppress(OSError):
                    s.close()
            self._token, self._expected, self._got = b"", set(), {}
        self._plan = None

    def close(self) -> None:
        """Release everything, including the listeners."""
        self.release()
        self.admission.close()
        for ls in self.listeners:
            with contextlib.suppress(OSError):
                ls.close()


def _listen(addr: str, port: int) -> socket.socket:
    """A data listener on addr:port (TransportError if it cannot bind)."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    ls = socket.socket(family, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        ls.bind((addr, port))
    except OSError as exc:
        ls.close()
        raise TransportError(f"cannot listen for data on {addr}:{port}: {exc}") from None
    ls.listen(512)
    return ls


def local_pairs(plan: AgentPlan, opts: DataOptions) -> list[tuple[int, int]]:
    """Rank pairs both on this agent whose steps take the intra-host model (no connection)."""
    if opts.intra != "model" or opts.transport not in ("tcp", "rdma"):
        return []
    mine = set(plan.ranks)
    return [(a, b) for a, b in plan.outgoing if b in mine]


def rank_addr(opts: DataOptions, rank: int) -> str:
    """The NIC address the job names for ``rank`` ("" when none)."""
    return opts.rank_addrs[rank] if rank < len(opts.rank_addrs) else ""
